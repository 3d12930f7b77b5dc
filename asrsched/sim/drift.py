"""Workload drift (notebook 03): one drifting trace, every policy, the load and the latency of each phase.

A :class:`asrsched.core.workloads.Drift` schedule switches the duration source (e.g. LibriSpeech
clips, then long uniform uploads) part-way through a trace. :func:`drift_records` runs each policy
on the same drifting trace and tags every request with its phase; :func:`phase_loads` states each
phase's load ``rho`` against its own workload's capacity; :func:`phase_table` gives P50/P90 E2EL
and P50 TTFT per policy and phase.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel, as_service_model
from asrsched.core.workloads import make_trace
from asrsched.sim.capacity import measure_capacity, regime
from asrsched.sim.engine import simulate
from asrsched.sim.overload import one_overload_warning
from asrsched.sim.sweep import check_sweep_params

__all__ = ["drift_records", "phase_loads", "phase_table"]


def drift_records(
    drift,
    rate: float,
    policies: Sequence[str],
    *,
    n_requests: int = 6000,
    seed: int = 0,
    max_num_seqs: int = 32,
    service: ServiceModel | dict | str | None = None,
) -> dict[str, pd.DataFrame]:
    """Per-request records of each policy on one drifting trace, with the ``phase`` each request came from.

    A phase above capacity makes the queue grow; such runs warn once
    (:class:`~asrsched.sim.overload.OverloadWarning`). :func:`phase_loads` states each phase's ``rho``.
    """
    from asrsched.core.workloads import Drift

    if not isinstance(drift, Drift):
        raise ValueError(f"drift must be an asrsched.core.workloads.Drift schedule, got {type(drift).__name__}")
    check_sweep_params([rate], policies, [], [seed], n_requests, max_num_seqs)
    sm = as_service_model(service)
    tr = make_trace(drift, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa))
    phase = tr.extra["phase"].to_numpy() if "phase" in tr.extra else np.zeros(len(tr), int)
    out = {}
    with one_overload_warning(f"drift at {float(rate):g} req/s"):
        for p in policies:
            rec = simulate(tr, p, sm, max_num_seqs=max_num_seqs).records
            out[p] = rec.assign(phase=phase[rec["rid"].to_numpy()])
    return out


def phase_loads(
    drift,
    rate: float,
    *,
    service: ServiceModel | dict | str | None = None,
    max_num_seqs: int = 32,
    phase_names: Sequence[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Load ``rho`` of each phase of a drift schedule at ``rate``: rate / the phase workload's capacity.

    Columns ``phase, workload, capacity_rps, rho, regime``. A phase's workload must be a named
    duration source (its ``name``).
    """
    sm = as_service_model(service)
    rows = []
    for i, (_, src) in enumerate(drift.phases):
        name = getattr(src, "name", None)
        if not isinstance(name, str):
            raise ValueError(f"phase {i} has no workload name; phase_loads needs named duration sources")
        cap = measure_capacity(name, sm, max_num_seqs=max_num_seqs, cache_dir=cache_dir)
        r = cap.rho(float(rate))
        rows.append(
            {
                "phase": phase_names[i] if phase_names else i,
                "workload": name,
                "capacity_rps": cap.rate,
                "rho": r,
                "regime": regime(r),
            }
        )
    return pd.DataFrame(rows)


def phase_table(results: dict[str, pd.DataFrame], phase_names: Sequence[str] | None = None) -> pd.DataFrame:
    """P50/P90 E2EL and P50 TTFT (s) per policy and drift phase."""
    rows = []
    for pol, df in results.items():
        for ph, g in df.groupby("phase"):
            rows.append(
                {
                    "policy": pol,
                    "phase": phase_names[ph] if phase_names else ph,
                    "requests": len(g),
                    "mean_audio_s": g.duration.mean(),
                    "p50_e2el_s": g.e2el.median(),
                    "p90_e2el_s": g.e2el.quantile(0.9),
                    "p50_ttft_s": g.ttft.median(),
                }
            )
    return pd.DataFrame(rows)
