"""The latency frontier: every policy and parameter as a point of (P50 E2EL, P90 E2EL), per workload, load and estimate.

A practitioner's question is not "SJF or HRRN" but "how much of SJF's median gain can I have, at what
tail cost, for *my* traffic and *my* size estimate". :func:`run_frontier` answers it on the calibrated
simulator: for each service model, workload, load ρ (a fraction of the capacity measured under that
workload and estimate error, :func:`asrsched.sim.capacity.measure_capacity`) and estimate error
(:func:`asrsched.core.estimate_error.estimate_error`), ``seeds`` traces of ``n_requests`` requests,
each replayed under every policy of :func:`frontier_policies` (common random numbers: one trace per
seed for all policies). Per run: P50/P90/P99 E2EL and the longest queueing delay ("max wait") after the
warm-up. ρ >= 1 is an overload **transient**: its latencies grow with ``n_requests``, which every row
states.

The policies: FCFS, SJF, HRRN, the adaptive switch, γ-Boost (Yu & Scully 2024) at ``gamma_scales`` x
``1 / E[estimate]`` (and its partial-information version under the cell's estimate error) and Nudge / Nudge-M (Grosof et al. 2021; Charlet & Van Houdt 2024) with the
short/long threshold at ``nudge_quantiles`` of the workload's estimates and ``nudge_ms`` places.
:mod:`asrsched.sim.frontier_report` turns the runs into the table (changes against FCFS with 95 %
CIs), the Pareto set and the recommendation per cell.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from asrsched.core.estimate_error import estimate_error as as_estimate_error
from asrsched.core.gamma_boost import gamma_boost_name
from asrsched.core.nudge import nudge_name, nudge_threshold
from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, as_service_model
from asrsched.core.workloads import check_rhos, make_trace, workload_names
from asrsched.sim.capacity import measure_capacity
from asrsched.sim.engine import simulate
from asrsched.sim.parallel import map_tasks

__all__ = ["FrontierConfig", "frontier_policies", "run_frontier", "frontier_cell", "RUN_METRICS", "BASE_POLICIES"]

#: per run, after the warm-up: the metrics a frontier point carries (ms, as ``vllm bench serve`` names them)
RUN_METRICS = ("p50_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "mean_e2el_ms", "max_wait_ms")
#: the policies every cell runs, before the parameterised families
BASE_POLICIES = ("fcfs", "sjf", "hrrn", "adaptive")


@dataclass(frozen=True)
class FrontierConfig:
    """What :func:`run_frontier` sweeps (defaults: the full setting, committed in ``figures/02_policy_sweep/frontier``)."""

    workloads: tuple[str, ...] = ("librispeech", "uniform", "commonvoice_id", "mix", "drift")
    rhos: tuple[float, ...] = (0.7, 0.9, 0.95, 1.2)
    errors: tuple[str, ...] = ("perfect", "real", "degraded")
    seeds: int = 16
    n_requests: int = 4000
    warmup_frac: float = 0.1
    gamma_scales: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0)
    nudge_quantiles: tuple[float, ...] = (0.3, 0.5)
    nudge_ms: tuple[int, ...] = (1, 4, 16)
    #: service model name -> (its to_dict() form or None for the default A100 model, max_num_seqs)
    services: Mapping[str, tuple[dict | None, int]] = field(default_factory=lambda: {"a100": (None, 32)})

    def __post_init__(self) -> None:
        known = set(workload_names())
        bad = [w for w in self.workloads if w not in known]
        if bad or not self.workloads:
            raise ValueError(f"workloads: unknown {bad} (known: {sorted(known)})" if bad else "workloads: need one")
        check_rhos(self.rhos, "rhos")
        for e in self.errors:
            as_estimate_error(e)
        if int(self.seeds) < 2:
            raise ValueError(f"seeds: need at least 2 for a confidence interval, got {self.seeds!r}")
        if int(self.n_requests) < 200:
            raise ValueError(f"n_requests: need at least 200 requests per run, got {self.n_requests!r}")
        if not 0.0 <= float(self.warmup_frac) < 0.5:
            raise ValueError(f"warmup_frac: must lie in [0, 0.5), got {self.warmup_frac!r}")
        if any(not (g > 0 and math.isfinite(g)) for g in self.gamma_scales):
            raise ValueError(f"gamma_scales: need numbers > 0, got {self.gamma_scales!r}")
        if any(not 0 < q < 1 for q in self.nudge_quantiles):
            raise ValueError(f"nudge_quantiles: need quantiles in (0, 1), got {self.nudge_quantiles!r}")
        if any(int(m) < 1 for m in self.nudge_ms):
            raise ValueError(f"nudge_ms: need integers >= 1, got {self.nudge_ms!r}")
        if not self.services:
            raise ValueError("services: need at least one service model")
        for name, (sm, mns) in self.services.items():
            as_service_model(sm)
            if int(mns) < 1:
                raise ValueError(f"services[{name!r}]: max_num_seqs must be >= 1, got {mns!r}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["services"] = {k: [v[0], int(v[1])] for k, v in self.services.items()}
        return d


def _sig(x: float) -> float:
    return float(f"{x:.3g}")


def frontier_policies(cfg: FrontierConfig, service: ServiceModel, workload: str, error: str | None = None) -> list[str]:
    """Every policy name of one (service, workload, error): the base policies, γ-Boost and Nudge-M at the
    config's parameters, taken from a reference trace of the workload (seed 0, 4,000 requests), and, for an
    imperfect ``error``, γ-Boost with partial information under that error
    (:func:`asrsched.core.gamma_boost.partial_boost`) at the same γ."""
    tr = make_trace(workload, rate=1.0, n=4000, seed=0, kappa=dict(service.kappa))
    est = service.est_service(tr.duration, tr.language)
    names = list(BASE_POLICIES)
    gammas = [_sig(g / float(np.mean(est))) for g in cfg.gamma_scales]
    names += [gamma_boost_name(g) for g in gammas]
    if error is not None and str(error).lower() != "perfect":
        names += [gamma_boost_name(g, str(error).lower()) for g in gammas]
    for q in cfg.nudge_quantiles:
        thr = _sig(nudge_threshold(est, q))
        names += [nudge_name(thr, int(m)) for m in cfg.nudge_ms]
    return validate_policies(list(dict.fromkeys(names)))


def frontier_cell(
    *,
    service: dict | None,
    service_name: str,
    max_num_seqs: int,
    workload: str,
    rho: float,
    capacity_rps: float,
    error: str,
    seed: int,
    n_requests: int,
    warmup_frac: float,
    policies: list[str],
) -> list[dict]:
    """One trace under every policy: one row per policy (see :data:`RUN_METRICS`)."""
    sm = as_service_model(service)
    rate = float(rho) * float(capacity_rps)
    tr = make_trace(workload, rate=rate, n=int(n_requests), seed=int(seed), kappa=dict(sm.kappa), estimate_error=error)
    skip = int(math.floor(float(warmup_frac) * int(n_requests)))
    rows = []
    for p in validate_policies(policies):
        res = simulate(tr, p, sm, max_num_seqs=int(max_num_seqs), warn_overload=False, timeline_points=0)
        rec = res.records
        rec = rec[rec["rid"].to_numpy() >= skip]
        e2el = 1e3 * rec["e2el"].to_numpy(float)
        p50, p90, p99 = np.percentile(e2el, [50, 90, 99])
        rows.append(
            dict(
                service=service_name,
                workload=workload,
                rho=float(rho),
                rate=rate,
                capacity_rps=float(capacity_rps),
                error=error,
                seed=int(seed),
                policy=p,
                n_requests=int(n_requests),
                measured_requests=int(len(e2el)),
                regime="stable" if rho < 1 else "overload",
                overloaded=bool(res.overloaded),
                p50_e2el_ms=float(p50),
                p90_e2el_ms=float(p90),
                p99_e2el_ms=float(p99),
                mean_e2el_ms=float(e2el.mean()),
                max_wait_ms=1e3 * float(rec["queue_delay"].max()),
            )
        )
    return rows


def run_frontier(
    cfg: FrontierConfig, *, workers: int | None = None, progress: bool = True, cache_dir=None
) -> pd.DataFrame:
    """Every run of ``cfg``: one row per (service, workload, ρ, error, seed, policy); see the module docstring.

    ``cache_dir``: where measured capacities are kept (:func:`~asrsched.sim.capacity.measure_capacity`).
    """
    tasks = []
    for sname, (sdict, mns) in cfg.services.items():
        sm = as_service_model(sdict)
        for w in cfg.workloads:
            for err in cfg.errors:
                pols = frontier_policies(cfg, sm, w, err)
                cap = measure_capacity(w, sm, max_num_seqs=int(mns), estimate_error=err, cache_dir=cache_dir)
                for rho in cfg.rhos:
                    for s in range(int(cfg.seeds)):
                        tasks.append(
                            dict(
                                service=sdict,
                                service_name=sname,
                                max_num_seqs=int(mns),
                                workload=w,
                                rho=float(rho),
                                capacity_rps=float(cap.rate),
                                error=str(err),
                                seed=1000 + s,
                                n_requests=int(cfg.n_requests),
                                warmup_frac=float(cfg.warmup_frac),
                                policies=pols,
                            )
                        )
    rows: list[dict] = []
    for _, got in map_tasks(frontier_cell, tasks, workers=workers, progress=progress, desc="frontier"):
        rows.extend(got)
    df = pd.DataFrame(rows)
    return df.sort_values(["service", "workload", "error", "rho", "seed", "policy"], kind="stable").reset_index(
        drop=True
    )
