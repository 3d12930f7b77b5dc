"""Real runs against the simulator: :func:`simulate_run` replays a real run in the simulator,
:func:`comparison_table` sets real and simulated latency and throughput side by side with the error."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from asrsched.core.metrics import summarize
from asrsched.core.service import ServiceModel

__all__ = ["simulate_run", "replay_model", "comparison_table", "TABLE_METRICS", "REPLAY_STEP_S"]

#: the decoder step a replay counts service time in when the calibration fitted no decode cost (s)
REPLAY_STEP_S = 1e-3

TABLE_METRICS = ("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms", "p90_ttft_ms", "request_throughput")


def simulate_run(records: pd.DataFrame, policy: str, service: ServiceModel, *, slots: int = 1,
                 tokens: str = "kappa") -> pd.DataFrame:
    """The simulator's prediction of one real run: same arrivals (send times) and clip durations."""
    from asrsched.serving.loadgen import records_to_trace
    from asrsched.sim.engine import simulate

    tr = records_to_trace(records, service, tokens=tokens)
    res = simulate(tr, policy, service, max_num_seqs=int(slots), warn_overload=False)
    out = res.records.copy()
    out["rid"] = tr.extra["real_rid"].to_numpy()[out["rid"].to_numpy()]
    return out


def replay_model(service: ServiceModel) -> ServiceModel:
    """The model a replay (``simulate_run(..., tokens="service")``) runs on: ``service`` itself, or, when its
    calibration fitted no decode cost (a few probe requests on a busy machine can give ``0``), the same model
    with a decode step of :data:`REPLAY_STEP_S`. A replay serves each request for its measured service time,
    counted in decoder steps; the step is only the unit, so the replay does not depend on the fit."""
    if service.decode_s_per_token > 0:
        return service
    return dataclasses.replace(service, decode_s_per_token=REPLAY_STEP_S)


def comparison_table(real: pd.DataFrame, sim: pd.DataFrame, keys: Sequence[str] = ("rho", "rate", "policy"),
                     metrics: Sequence[str] = TABLE_METRICS) -> pd.DataFrame:
    """One row per run: the real metrics ``<m>``, and per simulation mode (``sim["mode"]``:
    ``sim`` / ``profile`` = a-priori predictions, ``replay`` = measured service times) ``<mode>_<m>`` and
    ``<mode>_<m>_err_pct`` (simulated minus real, in % of real); ``completed``, ``failed``, and
    ``mean_service_ms`` (mean server-side service time of the run's requests: the same clips
    take longer when other jobs load the machine)."""
    rows = []
    keys = [k for k in keys if k in real]
    if "mode" not in sim:
        sim = sim.assign(mode="sim")
    modes = list(pd.unique(sim["mode"]))
    for key, g in real.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        s = summarize(g)
        row = dict(zip(keys, key)) | {"completed": s.get("completed", 0), "failed": s.get("failed", 0)}
        for m in metrics:
            row[m] = s.get(m, math.nan)
        # how fast the machine served during this run (a drift indicator on a shared machine)
        row["mean_service_ms"] = 1e3 * float(g["service_s"].mean()) if "service_s" in g else math.nan
        for mode in modes:
            sel = np.array(sim["mode"] == mode, dtype=bool)
            for k, v in zip(keys, key):
                sel &= np.array(sim[k] == v, dtype=bool)
            ss = summarize(sim[sel]) if sel.any() else {}
            for m in metrics:
                row[f"{mode}_{m}"] = ss.get(m, math.nan)
                row[f"{mode}_{m}_err_pct"] = 100.0 * (row[f"{mode}_{m}"] / row[m] - 1.0) if row[m] else math.nan
        rows.append(row)
    return pd.DataFrame(rows)
