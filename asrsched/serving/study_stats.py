"""Statistics of the real-engine study (notebook 04): per-cell bootstrap CIs and verdicts vs FCFS.

:func:`cell_statistics` resamples the requests of one load level jointly for every policy (they
served the same planned requests: a paired design) and gives P50/P90 E2EL and P50 TTFT with 95 %
CIs, each policy's difference from the baseline with its CI, and a verdict (significant when that
CI excludes 0). :func:`results_table` lays them out as ``real_engine_results.csv``
(:data:`RESULT_COLUMNS` first) with the simulator's prediction of each cell beside it.
Used by :mod:`asrsched.serving.experiment`, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from asrsched.core.metrics import summarize
from asrsched.sim.capacity import regime

__all__ = ["RESULT_COLUMNS", "MIN_N_VERDICT", "cell_statistics", "results_table", "sim_error_summary"]

#: the columns ``real_engine_results.csv`` starts with (more follow: CIs, differences, verdicts)
RESULT_COLUMNS = (
    "engine",
    "policy",
    "rho",
    "n_requests",
    "p50_e2el_s",
    "p50_ci_low",
    "p50_ci_high",
    "p90_e2el_s",
    "p50_ttft_s",
    "sim_p50_e2el_s",
    "sim_p90_e2el_s",
    "sim_p50_ttft_s",
)

_STAT_METRICS = (("p50_e2el", "e2el", 0.5), ("p90_e2el", "e2el", 0.9), ("p50_ttft", "ttft", 0.5))


def _quantile(x: np.ndarray, q: float) -> np.ndarray:
    """Quantile along the last axis; failed requests are +inf (worse than any latency), and then
    the order statistic itself is used (no interpolation with an infinite neighbour)."""
    method = "inverted_cdf" if np.isinf(x).any() else "linear"
    return np.quantile(x, q, axis=-1, method=method)


def _verdict(lo: float, hi: float) -> str:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "undetermined (failed requests)"
    if hi < 0:
        return "significant: lower"
    if lo > 0:
        return "significant: higher"
    return "not significant"


#: fewer requests per cell than this and no verdict is given: a bootstrap of a percentile from a
#: handful of values is too coarse (and too narrow) to call a difference significant
MIN_N_VERDICT = 30


def cell_statistics(
    records: pd.DataFrame,
    *,
    keys: Sequence[str] = ("engine", "rho"),
    baseline: str = "fcfs",
    n_boot: int = 2000,
    ci: float = 0.95,
    seed: int = 0,
    min_n_verdict: int = MIN_N_VERDICT,
) -> pd.DataFrame:
    """Per (``keys``, policy): P50/P90 E2EL and P50 TTFT (s) with paired bootstrap CIs, and each
    policy's difference from ``baseline`` with its CI and a verdict.

    Within a group (an engine at a load level) every policy served the same planned requests
    (``rid``), so the bootstrap resamples request ids once per replicate for all policies
    (a paired design: the clip mix is held fixed, and the CI of a difference is much narrower
    than two independent CIs would suggest). A failed request counts as an infinitely long one.
    Columns per metric ``m`` in ``p50_e2el, p90_e2el, p50_ttft``: ``m_s, m_ci_low, m_ci_high``,
    ``d_m_s`` (policy minus baseline) with ``d_m_ci_low, d_m_ci_high``, ``d_m_pct`` (relative,
    with ``d_m_pct_ci_low/high``) and ``verdict_m``: ``significant: lower/higher`` when the CI of
    the difference excludes 0, else ``not significant``; with fewer than ``min_n_verdict`` requests
    in the cell, ``not assessed (n < min_n_verdict)``. Also ``n_requests, completed, failed``.

    The CIs cover the sampling of requests only: the run-to-run drift of a shared machine is not in
    them (every policy runs the same requests back to back to keep that drift small).
    """
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if int(n_boot) < 100:
        raise ValueError(f"n_boot must be an integer >= 100, got {n_boot!r}")
    keys = [k for k in keys if k in records]
    rng = np.random.default_rng(seed)
    a = (1 - ci) / 2
    out = []
    for key, g in records.groupby(keys, sort=True) if keys else [((), records)]:
        key = key if isinstance(key, tuple) else (key,)
        mats = {}
        for col in ("e2el", "ttft"):
            w = g.set_index(["rid", "policy"])[col].unstack("policy").sort_index()
            mats[col] = w.to_numpy(float)
            pols = list(w.columns)
        n = mats["e2el"].shape[0]
        for col in mats:
            mats[col] = np.where(np.isfinite(mats[col]), mats[col], np.inf)
        idx = rng.integers(0, n, size=(int(n_boot), n))
        est, boot = {}, {}
        for name, col, q in _STAT_METRICS:
            x = mats[col]
            est[name] = {p: float(_quantile(x[:, j], q)) for j, p in enumerate(pols)}
            boot[name] = {p: _quantile(x[:, j][idx], q) for j, p in enumerate(pols)}
        for pol in pols:
            gp = g[g["policy"] == pol]
            row = dict(zip(keys, key)) | {
                "policy": pol,
                "n_requests": int(len(gp)),
                "completed": int(np.isfinite(gp["finish"].to_numpy(float)).sum()),
                "failed": int((~np.isfinite(gp["finish"].to_numpy(float))).sum()),
            }
            for name, _, _ in _STAT_METRICS:
                b = boot[name][pol]
                lo, hi = np.quantile(b, [a, 1 - a]) if np.isfinite(b).all() else (np.nan, np.nan)
                row |= {f"{name}_s": est[name][pol], f"{name}_ci_low": float(lo), f"{name}_ci_high": float(hi)}
                if baseline in pols and pol != baseline:
                    bb = boot[name][baseline]
                    with np.errstate(invalid="ignore", divide="ignore"):
                        d, r = b - bb, b / bb - 1
                    ok = np.isfinite(d).all() and np.isfinite(r).all()
                    dlo, dhi = np.quantile(d, [a, 1 - a]) if ok else (np.nan, np.nan)
                    rlo, rhi = np.quantile(r, [a, 1 - a]) if ok else (np.nan, np.nan)
                    e0 = est[name][baseline]
                    row |= {
                        f"d_{name}_s": est[name][pol] - e0,
                        f"d_{name}_ci_low": float(dlo),
                        f"d_{name}_ci_high": float(dhi),
                        f"d_{name}_pct": 100 * (est[name][pol] / e0 - 1) if e0 and np.isfinite(e0) else np.nan,
                        f"d_{name}_pct_ci_low": 100 * float(rlo),
                        f"d_{name}_pct_ci_high": 100 * float(rhi),
                        f"verdict_{name}": (
                            _verdict(float(dlo), float(dhi))
                            if n >= int(min_n_verdict)
                            else f"not assessed (n < {int(min_n_verdict)})"
                        ),
                    }
                elif pol == baseline:
                    row |= {f"verdict_{name}": "baseline"}
            out.append(row)
    return pd.DataFrame(out)


def results_table(
    records: pd.DataFrame,
    sim: pd.DataFrame | None = None,
    *,
    n_boot: int = 2000,
    ci: float = 0.95,
    seed: int = 0,
    baseline: str = "fcfs",
) -> pd.DataFrame:
    """``real_engine_results.csv``: :data:`RESULT_COLUMNS` first, then the CIs, differences and verdicts of
    :func:`cell_statistics`, the regime (``stable`` below rho = 1, ``overload`` at or above: finite-run
    transients whose latencies grow with the run length) and the arrival rate.

    ``records`` need ``engine, rho, rate, policy, rid, e2el, ttft, finish``; ``sim`` (mode ``"sim"``:
    the a-priori prediction from the engine's fitted service model) gives ``sim_*``.
    """
    rec = records if "engine" in records else records.assign(engine="cpu-server")
    st = cell_statistics(rec, keys=("engine", "rho"), n_boot=n_boot, ci=ci, seed=seed, baseline=baseline)
    st = st.rename(
        columns={"p50_e2el_s": "p50_e2el_s", "p50_e2el_ci_low": "p50_ci_low", "p50_e2el_ci_high": "p50_ci_high"}
    )
    for c in ("sim_p50_e2el_s", "sim_p90_e2el_s", "sim_p50_ttft_s"):
        st[c] = np.nan
    if sim is not None and len(sim):
        s = sim[sim["mode"] == "sim"] if "mode" in sim else sim
        s = s if "engine" in s else s.assign(engine="cpu-server")
        for i, r in st.iterrows():
            g = s[(s["engine"] == r["engine"]) & (s["rho"] == r["rho"]) & (s["policy"] == r["policy"])]
            if len(g):
                sm = summarize(g)
                st.loc[i, ["sim_p50_e2el_s", "sim_p90_e2el_s", "sim_p50_ttft_s"]] = [
                    sm.get("p50_e2el_ms", np.nan) / 1e3,
                    sm.get("p90_e2el_ms", np.nan) / 1e3,
                    sm.get("p50_ttft_ms", np.nan) / 1e3,
                ]
    rates = rec.groupby(["engine", "rho"])["rate"].first()
    st["rate_rps"] = [float(rates.get((e, x), np.nan)) for e, x in zip(st["engine"], st["rho"])]
    st["regime"] = regime(st["rho"].to_numpy(float))
    for c in ("p50_e2el", "p90_e2el", "p50_ttft"):
        st[f"sim_{c}_err_pct"] = 100 * (st[f"sim_{c}_s"] / st[f"{c}_s"] - 1)
    first = list(RESULT_COLUMNS)
    return st[first + [c for c in st.columns if c not in first]].sort_values(
        ["engine", "rho", "policy"], ignore_index=True
    )


def sim_error_summary(
    results: pd.DataFrame,
    metrics: Sequence[str] = ("p50_e2el", "p90_e2el", "p50_ttft"),
    by: Sequence[str] = ("engine",),
) -> pd.DataFrame:
    """The simulator's error against the real runs over the cells of :func:`results_table`: per group
    of ``by`` (and ``all``) and metric, the median of ``|sim - real| / real`` in % (the median absolute
    percentage error), the mean (MAPE), its P25/P75 and max, and the number of cells; per regime too (``stable`` rows, then ``overload``)."""
    rows = []
    groups = [("all", results)] + [
        (k if isinstance(k, str) else "/".join(map(str, k)), g)
        for k, g in results.groupby(list(by) if len(by) > 1 else by[0])
    ]
    for name, g in groups:
        for reg in ("all", "stable", "overload"):
            gg = g if reg == "all" else g[g["regime"] == reg]
            for m in metrics:
                e = np.abs(gg[f"sim_{m}_err_pct"].to_numpy(float))
                e = e[np.isfinite(e)]
                rows.append(
                    {
                        "group": name,
                        "regime": reg,
                        "metric": m,
                        "cells": int(len(e)),
                        "median_abs_err_pct": float(np.median(e)) if len(e) else np.nan,
                        "mean_abs_err_pct": float(np.mean(e)) if len(e) else np.nan,
                        "p25_abs_err_pct": float(np.percentile(e, 25)) if len(e) else np.nan,
                        "p75_abs_err_pct": float(np.percentile(e, 75)) if len(e) else np.nan,
                        "max_abs_err_pct": float(e.max()) if len(e) else np.nan,
                    }
                )
    return pd.DataFrame(rows)
