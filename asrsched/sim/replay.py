"""Replay a deployment's own traffic: what each policy would do to it, with confidence intervals.

Input (:func:`read_requests`): the middleware's request log (JSON lines,
:mod:`asrsched.vllm_plugin.request_log`) or any CSV with an arrival time and an audio duration per request,
optionally a language and a priority. Column names: ``arrival_unix_s`` or ``arrival_s`` (seconds; only
differences matter), ``audio_duration_s`` or ``duration_s``, ``language``, ``priority``, and the log's other
fields. A request log's lines (written as requests end) are put in arrival order; a CSV must come sorted. Everything is checked before any simulation, and an error names the rows: unsorted or repeated arrival
times, a missing or negative duration, an unknown column, a language the service model has no kappa for, a
load the model cannot serve.

:func:`replay_policies` then runs every policy on that one trace (common random numbers) in the calibrated simulator:
the service model (a profile, or one fitted from the same deployment's vLLM step log,
:mod:`asrsched.serving.vllm_steps`) gives the service times, the estimate error
(:mod:`asrsched.core.estimate_error`, default ``"real"``) draws the tokens each request decodes. Per policy:
P50/P90/P99 E2EL and P50 TTFT with 95 % CIs from a block bootstrap over time (whole ``block_s`` windows of
arrivals resampled, so the queue's memory stays inside a block), the capacity the model has for these
requests (:func:`asrsched.sim.capacity.trace_capacity`) and the load ρ the log implies. The log's priority is
read and carried, not yet simulated (priority classes come with their own policies).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.core.estimate_error import estimate_error as as_estimate_error
from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel
from asrsched.core.stats import percentile_ci
from asrsched.core.workloads import Trace, true_tokens
from asrsched.sim.capacity import trace_capacity
from asrsched.sim.engine import simulate

__all__ = [
    "read_requests",
    "requests_trace",
    "replay_policies",
    "REPLAY_METRICS",
    "LOG_ARRIVAL_COLUMNS",
    "LOG_DURATION_COLUMNS",
]

LOG_ARRIVAL_COLUMNS = ("arrival_unix_s", "arrival_s")
LOG_DURATION_COLUMNS = ("audio_duration_s", "duration_s")
_OPTIONAL = {"language", "priority", "speech_duration_s", "n_chunks", "status", "e2el_s", "path"}
#: what :func:`replay_policies` reports per policy, in ms (``vllm bench serve`` names)
REPLAY_METRICS = {
    "p50_e2el_ms": ("e2el", 50),
    "p90_e2el_ms": ("e2el", 90),
    "p99_e2el_ms": ("e2el", 99),
    "p50_ttft_ms": ("ttft", 50),
}


def _rows(mask: np.ndarray, offset: int = 2) -> str:
    """Row numbers as a reader of the file counts them (the header is line 1), at most eight."""
    idx = np.flatnonzero(mask) + offset
    head = ", ".join(str(i) for i in idx[:8])
    return head + (f" and {len(idx) - 8} more" if len(idx) > 8 else "")


def read_requests(path) -> pd.DataFrame:
    """The requests of a request log (``.jsonl``) or a CSV, checked: columns ``arrival_s`` (from 0),
    ``duration_s``, ``language`` (``None`` where absent), ``priority`` (``None`` where absent)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"LOG: {p} not found")
    if p.suffix == ".json" or ".jsonl" in p.name:  # a log, or one of its rotated files (requests.jsonl.1)
        df = pd.read_json(p, lines=True)
        offset = 1  # JSON lines: no header
        if "arrival_unix_s" in df:  # the middleware writes a line when a request ends: put them in arrival order
            df = df.sort_values("arrival_unix_s", kind="stable").reset_index(drop=True)
    else:
        df = pd.read_csv(p)
        offset = 2
    if df.empty:
        raise ValueError(f"LOG: {p} holds no requests")
    arr = [c for c in LOG_ARRIVAL_COLUMNS if c in df]
    dur = [c for c in LOG_DURATION_COLUMNS if c in df]
    unknown = sorted(set(df.columns) - set(LOG_ARRIVAL_COLUMNS) - set(LOG_DURATION_COLUMNS) - _OPTIONAL)
    if unknown:
        raise ValueError(
            f"LOG: unknown column(s) {unknown}; a request needs {' or '.join(LOG_ARRIVAL_COLUMNS)} and "
            f"{' or '.join(LOG_DURATION_COLUMNS)}, optionally {sorted(_OPTIONAL)}"
        )
    if len(arr) != 1 or len(dur) != 1:
        raise ValueError(
            f"LOG: need exactly one arrival column ({' or '.join(LOG_ARRIVAL_COLUMNS)}) and one duration column "
            f"({' or '.join(LOG_DURATION_COLUMNS)}); got {list(df.columns)}"
        )
    a = pd.to_numeric(df[arr[0]], errors="coerce").to_numpy(float)
    d = pd.to_numeric(df[dur[0]], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(a)
    if bad.any():
        raise ValueError(f"LOG: {arr[0]} missing or not a number in row(s) {_rows(bad, offset)}")
    back = np.r_[False, np.diff(a) < 0]
    if back.any():
        raise ValueError(f"LOG: arrival times not sorted: row(s) {_rows(back, offset)} arrive before the row above")
    same = np.r_[False, np.diff(a) == 0]
    if same.any():
        raise ValueError(f"LOG: duplicate arrival times in row(s) {_rows(same, offset)} (the same as the row above)")
    bad = ~np.isfinite(d)
    if bad.any():
        raise ValueError(f"LOG: {dur[0]} missing or not a number in row(s) {_rows(bad, offset)}")
    bad = d <= 0
    if bad.any():
        raise ValueError(f"LOG: {dur[0]} must be > 0 s; row(s) {_rows(bad, offset)} have {d[bad][:3].tolist()}")
    out = pd.DataFrame({"arrival_s": a - a[0], "duration_s": d})
    for c in ("language", "priority"):
        out[c] = df[c].where(df[c].notna(), None).to_numpy(object) if c in df else None
    return out


def requests_trace(req: pd.DataFrame, service: ServiceModel, *, estimate_error="real", seed: int = 0) -> Trace:
    """The requests as a :class:`~asrsched.core.workloads.Trace`: English (or the service model's first language)
    where the log has none, tokens drawn with ``estimate_error``; an unknown language names its rows."""
    default = "en" if "en" in service.kappa else next(iter(service.kappa))
    lang = np.array([str(x) if x is not None else default for x in req["language"]], dtype=object)
    known = np.isin(lang, list(service.kappa))
    if not known.all():
        raise ValueError(
            f"LOG: language(s) {sorted(set(lang[~known]))} in row(s) {_rows(~known)} have no kappa in the service "
            f"model {service.name!r} (it has {', '.join(service.kappa)})"
        )
    dur = req["duration_s"].to_numpy(float)
    kappa = np.array([service.kappa_for(x) for x in lang])
    tok = true_tokens(
        np.random.default_rng(seed), dur, kappa, estimate_error=as_estimate_error(estimate_error), language=lang
    )
    return Trace(req["arrival_s"].to_numpy(float), dur, lang, tok, meta={"source": "replay_policies", "seed": seed})


def _block_ci(arrival, values, q: float, block_s: float, n_boot: int, rng) -> tuple[float, float]:
    """The 95 % percentile interval of the ``q``-th percentile of ``values`` over resamples of whole
    ``block_s`` windows of arrival time (the requests in arrival order)."""
    blocks = np.floor((arrival - arrival[0]) / block_s).astype(np.int64)
    _, starts = np.unique(blocks, return_index=True)
    groups = np.split(values, starts[1:])
    k = len(groups)
    if k < 2:
        return float("nan"), float("nan")
    draws = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, k, k)
        draws[b] = np.percentile(np.concatenate([groups[i] for i in pick]), q)
    return percentile_ci(draws)


def replay_policies(
    req: pd.DataFrame,
    service: ServiceModel,
    policies=("fcfs", "sjf", "hrrn"),
    *,
    max_num_seqs: int = 32,
    estimate_error="real",
    block_s: float = 60.0,
    n_boot: int = 1000,
    seed: int = 0,
    warmup_frac: float = 0.0,
) -> tuple[pd.DataFrame, dict]:
    """Every policy on the requests ``req`` (:func:`read_requests`): one row per policy with
    :data:`REPLAY_METRICS` and their 95 % block-bootstrap CIs; and ``{"rate_rps", "capacity_rps", "rho",
    "n_requests", "span_s", "blocks"}``. A load at or above capacity is an error, raised before any policy runs."""
    pols = validate_policies(list(policies))
    if not (block_s > 0 and math.isfinite(block_s)):
        raise ValueError(f"block_s: need a block length > 0 s, got {block_s!r}")
    if int(n_boot) < 100:
        raise ValueError(f"n_boot: need at least 100 bootstrap draws, got {n_boot!r}")
    tr = requests_trace(req, service, estimate_error=estimate_error, seed=seed)
    n = len(tr)
    span = float(tr.arrival[-1] - tr.arrival[0])
    if n < 3 * int(max_num_seqs) + 11 or span <= 0:
        raise ValueError(f"LOG: {n} requests over {span:.1f} s are too few to replay with max_num_seqs={max_num_seqs}")
    rate = (n - 1) / span
    cap = trace_capacity(tr, service, max_num_seqs=int(max_num_seqs), burst=True)
    rho = rate / cap
    if rho >= 1:
        raise ValueError(
            f"LOG: the log's rate {rate:.3g} req/s is {rho:.2f} of the capacity {cap:.3g} req/s the service model "
            f"{service.name!r} has for these requests with max_num_seqs={max_num_seqs}: it cannot serve this traffic "
            "(use the model of a faster engine or more sequences)"
        )
    rng = np.random.default_rng(seed + 1)
    skip = int(math.floor(float(warmup_frac) * n))
    rows = []
    for p in pols:
        rec = simulate(tr, p, service, max_num_seqs=int(max_num_seqs), warn_overload=False, timeline_points=0).records
        rec = rec.sort_values("rid")
        rec = rec[rec["rid"].to_numpy() >= skip]
        arrival = rec["arrival"].to_numpy(float)
        row: dict[str, object] = {"policy": p}
        for m, (col, q) in REPLAY_METRICS.items():
            v = 1e3 * rec[col].to_numpy(float)
            row[m] = float(np.percentile(v, q))
            row[f"{m}_ci_low"], row[f"{m}_ci_high"] = _block_ci(arrival, v, q, block_s, int(n_boot), rng)
        rows.append(row)
    info = {
        "rate_rps": float(rate),
        "capacity_rps": float(cap),
        "rho": float(rho),
        "n_requests": n,
        "span_s": span,
        "blocks": int(np.ceil(span / block_s)),
        "service": service.name,
        "max_num_seqs": int(max_num_seqs),
        "estimate_error": as_estimate_error(estimate_error).spec(),
    }
    return pd.DataFrame(rows), info
