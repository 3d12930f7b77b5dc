"""Real runs against the simulator: :func:`records_to_trace` turns a real run into the simulator's trace,
:func:`simulate_run` replays it in the simulator, :func:`comparison_table` sets real and simulated latency
and throughput side by side with the error."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from asrsched.core.metrics import summarize
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import Trace

__all__ = ["records_to_trace", "simulate_run", "replay_model", "comparison_table", "TABLE_METRICS", "REPLAY_STEP_S"]

#: the decoder step a replay counts service time in when the calibration fitted no decode cost (s)
REPLAY_STEP_S = 1e-3

TABLE_METRICS = ("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms", "p90_ttft_ms", "request_throughput")


def records_to_trace(
    records: pd.DataFrame, service=None, *, tokens: str = "kappa", fallback: str | None = None
) -> Trace:
    """The trace a simulator needs to replay a real run: the same arrivals (actual send times) and
    durations. ``tokens`` sets each request's true size:

    * ``"kappa"``: ``round(kappa x duration)`` from ``service`` (a prediction: what is known in advance);
    * ``"measured"``: the run's recorded ``tokens`` (decoder steps; NaN falls back to kappa);
    * ``"service"``: the decoder steps that make ``service``'s time model give each request's
      measured ``service_s`` (``(service_s - windows x encode) / step``): the simulator then
      serves every request exactly as long as the real server did, which tests the queueing
      and ordering alone (NaN falls back to kappa).

    kappa is :meth:`~asrsched.core.service.ServiceModel.est_tokens` of each request's language: a
    language ``service`` has no kappa for raises ``ValueError`` naming it (a replay with the wrong
    model predicts nothing), unless ``fallback`` names a language of ``service`` whose kappa stands
    in, e.g. a profile measured on English alone replaying a run in another language, on purpose.
    """
    if tokens not in ("kappa", "measured", "service"):
        raise ValueError(f"tokens must be 'kappa', 'measured' or 'service', got {tokens!r}")
    df = records.sort_values("arrival", kind="stable")
    arr = df["arrival"].to_numpy(float)
    if not np.all(np.isfinite(arr)):
        arr = np.where(np.isfinite(arr), arr, df["scheduled"].to_numpy(float))
    dur = df["duration"].to_numpy(float)
    lang = df["language"].astype(str).to_numpy(object)
    if service is None:
        from asrsched.core.service import default_service_model

        service = default_service_model()
    tok = np.broadcast_to(service.est_tokens(dur, lang, fallback=fallback), dur.shape)
    if tokens == "measured":
        m = df["tokens"].to_numpy(float)
        tok = np.where(np.isfinite(m), m, tok)
    elif tokens == "service":
        if "service_s" not in df or service.decode_s_per_token <= 0:
            raise ValueError(
                "tokens='service' needs a service_s column and a service model with decode_s_per_token > 0"
            )
        enc = np.asarray(service.windows(dur), float) * service.encode_s_per_window
        m = (df["service_s"].to_numpy(float) - enc) / service.decode_s_per_token
        tok = np.where(np.isfinite(m), m, tok)
    extra = pd.DataFrame({"real_rid": df["rid"].to_numpy()})
    return Trace(
        arr,
        dur,
        lang,
        np.maximum(1, np.rint(tok)).astype(np.int64),
        extra=extra,
        meta={"workload": "replayed run", "tokens": tokens},
    )


def simulate_run(
    records: pd.DataFrame, policy: str, service: ServiceModel, *, slots: int = 1, tokens: str = "kappa"
) -> pd.DataFrame:
    """The simulator's prediction of one real run: same arrivals (send times) and clip durations."""
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


def comparison_table(
    real: pd.DataFrame,
    sim: pd.DataFrame,
    keys: Sequence[str] = ("rho", "rate", "policy"),
    metrics: Sequence[str] = TABLE_METRICS,
) -> pd.DataFrame:
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
