"""Metrics with the names users know from ``vllm bench serve``.

Per run (:func:`summarize`): ``completed``, ``request_throughput`` (req/s),
``rtfx`` (seconds of audio transcribed per second of wall time), and for each of
``ttft``, ``e2el`` and ``queue_delay`` the ``mean_*_ms``, ``median_*_ms`` and
``p50/p90/p99_*_ms``; starvation indicators ``max_queue_delay_ms`` and
``long10_slowdown`` (mean E2EL / audio duration over the longest 10 % of requests).

Across runs: :func:`relative_change` against a baseline policy (FCFS by default),
in percent, as the study reports it.

>>> import pandas as pd
>>> df = pd.DataFrame({"arrival": [0.0, 1.0], "duration": [2.0, 4.0], "admit": [0.0, 1.5],
...                    "first_token": [0.1, 1.6], "finish": [1.0, 3.0]})
>>> s = summarize(df)
>>> s["completed"], s["mean_e2el_ms"], s["request_throughput"]
(2, 1500.0, 0.6666666666666666)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = ["summarize", "relative_change", "percentile_table", "latency_cdf", "METRICS", "PERCENTILES"]

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "e2el", "queue_delay")


def _derive(df: pd.DataFrame) -> pd.DataFrame:
    if "e2el" not in df and {"finish", "arrival"} <= set(df):
        df = df.assign(e2el=df["finish"] - df["arrival"])
    if "ttft" not in df and {"first_token", "arrival"} <= set(df):
        df = df.assign(ttft=df["first_token"] - df["arrival"])
    if "queue_delay" not in df and {"admit", "arrival"} <= set(df):
        df = df.assign(queue_delay=df["admit"] - df["arrival"])
    return df


def summarize(records: pd.DataFrame, percentiles: Sequence[int] = PERCENTILES) -> dict:
    """One run's metrics (see module docstring). Failed requests (NaN finish) are counted, not averaged."""
    df = _derive(records)
    ok = df[np.isfinite(df["finish"].to_numpy(float))] if "finish" in df else df
    out: dict = {"completed": int(len(ok)), "failed": int(len(df) - len(ok))}
    if len(ok):
        span = float(ok["finish"].max() - df["arrival"].min())
        out["duration_s"] = span
        out["request_throughput"] = len(ok) / span if span > 0 else np.nan
        out["rtfx"] = float(ok["duration"].sum()) / span if span > 0 and "duration" in ok else np.nan
    for m in METRICS:
        if m not in ok:
            continue
        v = ok[m].to_numpy(float)
        v = v[np.isfinite(v)]
        if not len(v):
            continue
        out[f"mean_{m}_ms"] = 1e3 * float(v.mean())
        out[f"median_{m}_ms"] = 1e3 * float(np.median(v))
        for p in percentiles:
            out[f"p{p}_{m}_ms"] = 1e3 * float(np.percentile(v, p))
    if "queue_delay" in ok and len(ok):
        out["max_queue_delay_ms"] = 1e3 * float(ok["queue_delay"].max())
    if "duration" in ok and "e2el" in ok and len(ok) >= 10:
        cut = ok["duration"].quantile(0.9)
        long = ok[ok["duration"] >= cut]
        out["long10_slowdown"] = float((long["e2el"] / long["duration"]).mean())
    return out


def relative_change(
    table: pd.DataFrame,
    metrics: Iterable[str] = ("p50_e2el_ms", "p90_e2el_ms", "mean_ttft_ms", "p50_ttft_ms"),
    *,
    baseline: str = "fcfs",
    policy_col: str = "policy",
    by: Sequence[str] = ("workload", "rate"),
) -> pd.DataFrame:
    """Percent change of ``metrics`` against the ``baseline`` policy within each ``by`` group.

    Multiple seeds per cell are averaged first. Returns one row per (``by``..., policy)
    with ``<metric>_change_pct`` columns (negative = better for latencies).
    """
    by = [c for c in by if c in table]
    metrics = [m for m in metrics if m in table]
    if baseline not in set(table[policy_col]):
        raise ValueError(f"baseline policy {baseline!r} is not in the table (has {sorted(set(table[policy_col]))})")
    mean = table.groupby([*by, policy_col], as_index=False)[metrics].mean()
    base = mean[mean[policy_col] == baseline].drop(columns=policy_col)
    merged = (
        mean.merge(base, on=by, suffixes=("", "_base"))
        if by
        else mean.assign(**{f"{m}_base": float(base[m].iloc[0]) for m in metrics})
    )
    for m in metrics:
        merged[f"{m}_change_pct"] = 100.0 * (merged[m] / merged[f"{m}_base"] - 1.0)
    return merged.drop(columns=[f"{m}_base" for m in metrics])


def percentile_table(records_by_policy: dict[str, pd.DataFrame], metric: str = "e2el") -> pd.DataFrame:
    """P50/P90/P99 (ms) of ``metric`` per policy, from per-request records."""
    rows = []
    for pol, df in records_by_policy.items():
        v = _derive(df)[metric].to_numpy(float)
        v = v[np.isfinite(v)]
        rows.append({"policy": pol, **{f"p{p}_{metric}_ms": 1e3 * float(np.percentile(v, p)) for p in PERCENTILES}})
    return pd.DataFrame(rows)


def latency_cdf(values: np.ndarray, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF of ``values`` thinned to at most ``points`` (x sorted, y in (0, 1])."""
    v = np.sort(np.asarray(values, float)[np.isfinite(values)])
    if not len(v):
        return v, v
    y = np.arange(1, len(v) + 1) / len(v)
    if len(v) > points:
        idx = np.unique(np.linspace(0, len(v) - 1, points).astype(int))
        v, y = v[idx], y[idx]
    return v, y
