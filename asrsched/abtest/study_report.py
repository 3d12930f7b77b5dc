"""The estimator study's scoring: per-scenario bias, sd, RMSE and coverage, the ablations, the
lowest-MSE estimator with bootstrap CIs, and each claim of the paper with a verdict
(:func:`claims_table`, :func:`claims_markdown`). Every function reads a
:class:`~asrsched.abtest.study.StudyResult` (or its tables); nothing here simulates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import optimal_alpha
from asrsched.core.labels import ESTIMATOR_LABELS, ESTIMATOR_ORDER, estimator_label
from asrsched.core.stats import gain_bound, percentile_ci

if TYPE_CHECKING:
    from asrsched.abtest.study import StudyResult

__all__ = [
    "summary_table",
    "ablation_table",
    "claims_table",
    "coverage_table",
    "switchback_table",
    "ESTIMATOR_ORDER",
    "claims_markdown",
    "ESTIMATOR_LABELS",
    "lowest_mse",
    "paired_estimates",
    "MSE_CANDIDATES",
    "verdict",
    "MIXED_MAP_DIR",
    "MIXED_MAP_FILE",
    "load_mixed_map",
    "mixed_map_cells",
    "mixed_map_statement",
    "MIXED_MAP_COLUMNS",
]

#: the committed mixed-DQ map (:mod:`asrsched.abtest.mixed_map`), relative to the checkout, and its table's file
MIXED_MAP_DIR = "figures/05_ab_estimators/mixed_map"
MIXED_MAP_FILE = "map.csv"


def _headline(res: StudyResult) -> pd.DataFrame:
    e = res.estimates
    return e[e["headline"].astype(bool)].copy()


def _oracle_rows(h: pd.DataFrame) -> pd.DataFrame:
    """Mixed DQ with alpha from the across-replication (co)variance of wDQ and qDQ (not deployable)."""
    out = []
    for s, g in h.groupby("scenario", observed=True):
        w = g[g.estimator == "wdq"].set_index("rep")["estimate"]
        q = g[g.estimator == "qdq"].set_index("rep")["estimate"]
        w, q = w.align(q, join="inner")
        if len(w) < 3:
            continue
        a = optimal_alpha(w.values, q.values)
        for rep, v in (a * w + (1 - a) * q).items():
            out.append({"scenario": s, "rep": rep, "estimator": "mixed_dq_oracle", "estimate": v, "alpha": a})
    return pd.DataFrame(out)


def _boot_rmse_ci(v: np.ndarray, truth: float, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap percentile CI of the RMSE of the replications ``v`` around ``truth``."""
    if v.size < 3:
        return float("nan"), float("nan")
    e2 = (v - truth) ** 2
    return percentile_ci(np.sqrt(e2[np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))].mean(axis=1)))


def summary_table(res: StudyResult) -> pd.DataFrame:
    """Per scenario and estimator: truth, mean, bias, sd, RMSE, MSE, sd ratio to naive, CI coverage.

    ``bias_ci_lo/hi``: 95 % CI of the bias (replication spread and the truth's SE);
    ``rmse_ci_lo/hi``: 95 % bootstrap CI of the RMSE over the replications.
    ``mixed_dq_oracle`` (alpha from the replications' covariance, not available in one
    experiment) is added as a reference ceiling for the variance reduction.
    """
    h = _headline(res)
    h = pd.concat([h, _oracle_rows(h)], ignore_index=True)
    tt = res.truth.set_index("scenario")
    rows = []
    for (s, name), g in h.groupby(["scenario", "estimator"], observed=True, sort=False):
        gte = float(tt.loc[s, "gte"])
        v = g["estimate"].to_numpy(float)
        r = {
            "scenario": s,
            "estimator": name,
            "truth": gte,
            "truth_se": float(tt.loc[s, "gte_se"]),
            "mean": v.mean(),
            "bias": v.mean() - gte,
            "sd": v.std(ddof=1),
            "rmse": np.sqrt(np.mean((v - gte) ** 2)),
            "mse": np.mean((v - gte) ** 2),
            "reps": len(v),
        }
        r["bias_se"] = r["sd"] / np.sqrt(len(v))
        h95 = 1.96 * float(np.hypot(r["bias_se"], r["truth_se"]))
        r["bias_ci_lo"], r["bias_ci_hi"] = r["bias"] - h95, r["bias"] + h95
        r["rmse_ci_lo"], r["rmse_ci_hi"] = _boot_rmse_ci(v, gte)
        if "ci_lo" in g and g["ci_lo"].notna().any():
            lo, hi = g["ci_lo"].to_numpy(float), g["ci_hi"].to_numpy(float)
            r["coverage"] = float(np.mean((lo <= gte) & (gte <= hi)))
            r["coverage_of_mean"] = float(np.mean((lo <= v.mean()) & (v.mean() <= hi)))
            r["se_ratio"] = float(np.nanmean(g["se"].to_numpy(float)) / r["sd"]) if r["sd"] > 0 else np.nan
        if g["alpha"].notna().any():
            r["alpha_mean"] = float(np.nanmean(g["alpha"].astype(float)))
            r["alpha_sd"] = float(np.nanstd(g["alpha"].astype(float)))
        rows.append(r)
    out = pd.DataFrame(rows)
    nsd = out[out.estimator == "naive"].set_index("scenario")["sd"]
    out["sd_vs_naive"] = out["sd"] / out["scenario"].map(nsd).astype(float)
    order = {n: i for i, n in enumerate(ESTIMATOR_ORDER)}
    out["_o"] = out["estimator"].map(order).fillna(99)
    out["_s"] = out["scenario"].map({s: i for i, s in enumerate(res.config.scenarios)})
    return out.sort_values(["_s", "_o"]).drop(columns=["_o", "_s"]).reset_index(drop=True)


def ablation_table(res: StudyResult) -> pd.DataFrame:
    """Bias, sd and RMSE of qDQ, wDQ and mixed DQ at every L (per scenario)."""
    e = res.estimates
    e = e[e.estimator.isin(["qdq", "wdq", "mixed_dq", "qtdq", "mixed_dq_qt"])]
    tt = res.truth.set_index("scenario")["gte"]
    rows = []
    for (s, name, L), g in e.groupby(["scenario", "estimator", "L"], observed=True):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[s])
        rows.append(
            {
                "scenario": s,
                "estimator": name,
                "L": int(L),
                "L_factor": L / res.config.L_default,
                "mean": v.mean(),
                "bias": v.mean() - gte,
                "bias_se": v.std(ddof=1) / np.sqrt(len(v)),
                "sd": v.std(ddof=1),
                "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                "reps": len(v),
            }
        )
    return pd.DataFrame(rows)


def switchback_table(res: StudyResult) -> pd.DataFrame:
    """Every switchback design run (block length x burn-in) per scenario: bias, sd, RMSE, coverage."""
    e = res.estimates
    e = e[e.estimator == "switchback"]
    tt = res.truth.set_index("scenario")["gte"]
    rows = []
    for (s, b, burn), g in e.groupby(["scenario", "block_len", "burn_in"], observed=True):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[s])
        rows.append(
            {
                "scenario": s,
                "block_len": b,
                "burn_in": burn,
                "mean": v.mean(),
                "bias": v.mean() - gte,
                "sd": v.std(ddof=1),
                "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                "coverage": float(np.mean((g.ci_lo <= gte) & (gte <= g.ci_hi))),
                "reps": len(v),
            }
        )
    return pd.DataFrame(rows)


def coverage_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Coverage of the 95 % batch-means CI (of the truth, and of the estimator's own mean)."""
    c = summary.dropna(subset=["coverage"])
    return c[["scenario", "estimator", "coverage", "coverage_of_mean", "se_ratio", "reps"]].reset_index(drop=True)


def paired_estimates(res: StudyResult, scenario) -> pd.DataFrame:
    """Headline estimates of one scenario, one row per replication, one column per estimator."""
    h = _headline(res)
    h = h[h.scenario.astype(str) == str(scenario)]
    h = pd.concat([h, _oracle_rows(h)], ignore_index=True) if len(h) else h
    return h.pivot_table(index="rep", columns="estimator", values="estimate")


#: the candidates of "lowest MSE" (the oracle mixed DQ is not deployable)
MSE_CANDIDATES = ("naive", "group", "switchback", "qdq", "wdq", "mixed_dq")


def lowest_mse(
    paired: pd.DataFrame, truth: float, n_boot: int = 1000, seed: int = 0, candidates=MSE_CANDIDATES
) -> tuple[list[str], dict[str, float]]:
    """Who has the lowest MSE, with the statistical tie made explicit.

    Replications are resampled jointly (``n_boot`` times); ``share[e]`` is the fraction of
    resamples in which ``e`` has the lowest MSE. Returns ``([winner], share)`` when one
    estimator wins in at least 95 % of them, else ``(tied, share)`` with every estimator that
    wins in at least 2.5 % (a statistical tie: no single winner is named).
    """
    cand = [c for c in candidates if c in paired]
    X = paired[cand].dropna().to_numpy(float)
    e2 = (X - truth) ** 2
    idx = np.random.default_rng(seed).integers(0, len(X), (n_boot, len(X)))
    wins = np.argmin(e2[idx].mean(axis=1), axis=1)
    share = {c: float(np.mean(wins == i)) for i, c in enumerate(cand)}
    best = max(share, key=share.get)
    if share[best] >= 0.95:
        return [best], share
    return [c for c in cand if share[c] >= 0.025], share


def verdict(lo: float, hi: float, a: float, b: float) -> str:
    """``holds`` if the CI [lo, hi] lies inside [a, b], ``fails`` if outside, else ``inconclusive``."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive"
    if a <= lo and hi <= b:
        return "holds"
    if hi < a or lo > b:
        return "fails"
    return "inconclusive"


def claims_table(
    summary: pd.DataFrame,
    res: StudyResult | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    mixed_map: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The study's four claims, checked per scenario from the numbers, with 95 % CIs and verdicts.

    * naive biased low: the naive estimate shrinks the effect toward zero
      (``|mean| < |GTE|``, same sign) by more than 3 standard errors; ``naive_share`` = mean
      naive / GTE with its CI;
    * DQ sd 50-500x naive: ``sd(qDQ)/sd(naive)`` and ``sd(wDQ)/sd(naive)``;
    * mixed DQ 2-5x lower sd than DQ: ``min(sd qDQ, sd wDQ) / sd(mixed)``; ``wq_corr`` is the
      correlation of wDQ and qDQ over replications and ``gain_bound`` the largest sd gain any
      fixed alpha can give from their covariance (the condition under which the claim can hold);
    * mixed DQ lowest MSE among naive, group, switchback, qDQ, wDQ, mixed DQ
      (:func:`lowest_mse`: a statistical tie is reported as such).

    With ``res`` the CIs come from a paired bootstrap over replications and each claim gets a
    verdict ``holds`` / ``fails`` / ``inconclusive`` (its CI straddles the claimed range);
    without it the point values only. With ``mixed_map`` (:func:`load_mixed_map`) the column
    ``mixed_2_5x_holds_under`` names the map's cells (law, horizon unit, alpha) where the 2-5x claim holds
    at the default L (:func:`mixed_map_cells`).
    """
    rows = []
    for s, g in summary.groupby("scenario", sort=False, observed=True):
        g = g.set_index("estimator")
        nv = g.loc["naive"]
        shrink = np.sign(nv["mean"]) == np.sign(nv["truth"]) and abs(nv["mean"]) < abs(nv["truth"])
        biased_low = bool(shrink and abs(nv["bias"]) > 3 * max(nv["bias_se"], nv["truth_se"]))
        rq, rw = g.loc["qdq", "sd"] / nv["sd"], g.loc["wdq", "sd"] / nv["sd"]
        red = min(g.loc["qdq", "sd"], g.loc["wdq", "sd"]) / g.loc["mixed_dq", "sd"]
        cand = [e for e in MSE_CANDIDATES if e in g.index]
        best = min(cand, key=lambda e: g.loc[e, "mse"])
        row = {
            "scenario": s,
            "naive_shrink_pct": 100 * (1 - nv["mean"] / nv["truth"]) if nv["truth"] != 0 else np.nan,
            "naive_biased_low": biased_low,
            "qdq_sd_x_naive": rq,
            "wdq_sd_x_naive": rw,
            "dq_sd_50_500x": bool(50 <= rq <= 500 and 50 <= rw <= 500),
            "mixed_sd_reduction": red,
            "mixed_2_5x_lower": bool(2 <= red <= 5),
            "oracle_sd_reduction": (
                min(g.loc["qdq", "sd"], g.loc["wdq", "sd"]) / g.loc["mixed_dq_oracle", "sd"]
                if "mixed_dq_oracle" in g.index
                else np.nan
            ),
            "lowest_mse": best,
            "mixed_lowest_mse": best == "mixed_dq",
        }
        if res is not None:
            P = paired_estimates(res, s)
            truth = float(nv["truth"])
            X = P.dropna(subset=["naive", "qdq", "wdq", "mixed_dq"])
            R = len(X)
            idx = np.random.default_rng(seed).integers(0, R, (n_boot, R))

            B = {c: X[c].to_numpy(float)[idx] for c in ("naive", "qdq", "wdq", "mixed_dq")}  # (n_boot, R)
            sdb = {c: b.std(axis=1, ddof=1) for c, b in B.items()}
            dq_min = np.minimum(sdb["qdq"], sdb["wdq"])

            with np.errstate(divide="ignore", invalid="ignore"):
                sh = percentile_ci(B["naive"].mean(axis=1) / truth)
                dq_n = percentile_ci(dq_min / sdb["naive"])
                mixr = percentile_ci(dq_min / sdb["mixed_dq"])
            cv = np.cov(X["wdq"], X["qdq"], ddof=1)
            winners, share = lowest_mse(P, truth, n_boot, seed)
            row.update(
                {
                    "naive_share": float(nv["mean"] / truth),
                    "naive_share_ci_lo": sh[0],
                    "naive_share_ci_hi": sh[1],
                    "dq_sd_x_naive_min": min(rq, rw),
                    "dq_sd_x_naive_ci_lo": dq_n[0],
                    "dq_sd_x_naive_ci_hi": dq_n[1],
                    "mixed_sd_reduction_ci_lo": mixr[0],
                    "mixed_sd_reduction_ci_hi": mixr[1],
                    "wq_corr": float(cv[0, 1] / np.sqrt(cv[0, 0] * cv[1, 1])),
                    "gain_bound": gain_bound(cv),
                    "lowest_mse": winners[0] if len(winners) == 1 else "tie: " + ", ".join(winners),
                    "lowest_mse_share": share.get("mixed_dq", 0.0),
                    "verdict_naive_low": "holds"
                    if biased_low and sh[1] < 1
                    else ("fails" if sh[0] >= 1 or sh[1] <= 0 else "inconclusive"),
                    "verdict_dq_50_500x": verdict(dq_n[0], dq_n[1], 50, 500),
                    "verdict_mixed_2_5x": verdict(mixr[0], mixr[1], 2, 5),
                    "verdict_mixed_lowest_mse": (
                        "holds" if winners == ["mixed_dq"] else "fails" if "mixed_dq" not in winners else "inconclusive"
                    ),
                    "reps": R,
                }
            )
            row["mixed_lowest_mse"] = winners == ["mixed_dq"]
        if mixed_map is not None:
            row["mixed_2_5x_holds_under"] = ", ".join(mixed_map_cells(mixed_map, "holds")) or "none"
        rows.append(row)
    return pd.DataFrame(rows)


def _where(claims: pd.DataFrame, col: str, value: str) -> str:
    names = [str(s) for s in claims.loc[claims[col] == value, "scenario"]]
    return ", ".join(names) if names else "none"


def claims_markdown(
    claims: pd.DataFrame,
    summary: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    wp: pd.DataFrame | None = None,
    mixed_map: pd.DataFrame | None = None,
) -> str:
    """A plain-language reading of :func:`claims_table` (Markdown), every number computed from the tables.

    With the verdict columns (``claims_table(summary, res)``) each claim lists the scenarios where it
    holds, fails or is inconclusive (95 % CI straddles the claimed range) and the computed condition
    that separates them; ``wp`` (:func:`wp_table`) adds the curvature reading of DQ's bias and
    ``mixed_map`` (:func:`load_mixed_map`) the conditions under which the mixed-DQ claim holds
    (:func:`mixed_map_statement`).
    """
    n = len(claims)
    lines = []
    ci = "naive_share_ci_lo" in claims
    reps = int(claims["reps"].max()) if "reps" in claims else int(summary["reps"].max())
    lines.append(
        f"Each verdict uses {reps} replications per scenario; ranges are over scenarios; "
        "brackets are 95 % bootstrap CIs over replications."
    )
    lo, hi = claims.naive_shrink_pct.min(), claims.naive_shrink_pct.max()
    if ci:
        lines.append(
            f"- **Naive biased low** — holds in: {_where(claims, 'verdict_naive_low', 'holds')}; fails in: "
            f"{_where(claims, 'verdict_naive_low', 'fails')}; inconclusive: "
            f"{_where(claims, 'verdict_naive_low', 'inconclusive')}. Naive reports "
            + "; ".join(
                f"{r.scenario} {100 * r.naive_share:.0f} % [{100 * r.naive_share_ci_lo:.0f}, "
                f"{100 * r.naive_share_ci_hi:.0f}]"
                for r in claims.itertuples()
            )
            + " of the true effect. Condition: the arms share the servers, so the better policy also "
            "shortens the queues the control jobs see."
        )
    else:
        k = int(claims.naive_biased_low.sum())
        lines.append(
            f"- **Naive biased low**: holds in {k}/{n} scenarios; it reports {100 - hi:.0f}-{100 - lo:.0f} % "
            "of the true effect."
        )
    r = pd.concat([claims.qdq_sd_x_naive, claims.wdq_sd_x_naive])
    if ci:
        lines.append(
            f"- **DQ sd 50–500× naive** (the smaller of qDQ's and wDQ's sd over naive's) — holds in: "
            f"{_where(claims, 'verdict_dq_50_500x', 'holds')}; fails in: "
            f"{_where(claims, 'verdict_dq_50_500x', 'fails')}; inconclusive: "
            f"{_where(claims, 'verdict_dq_50_500x', 'inconclusive')}. Ratios: "
            + "; ".join(
                f"{r.scenario} {r.dq_sd_x_naive_min:.0f}× [{r.dq_sd_x_naive_ci_lo:.0f}, {r.dq_sd_x_naive_ci_hi:.0f}]"
                for r in claims.itertuples()
            )
            + "."
        )
    else:
        lines.append(
            f"- **DQ sd 50–500× naive**: qDQ/wDQ sd is {r.min():.0f}–{r.max():.0f}× the naive sd; inside "
            f"50–500× in {int(claims.dq_sd_50_500x.sum())}/{n} scenarios."
        )
    if ci:
        lines.append(
            f"- **Mixed DQ 2–5× lower sd than the better DQ** — holds in: "
            f"{_where(claims, 'verdict_mixed_2_5x', 'holds')}; fails in: "
            f"{_where(claims, 'verdict_mixed_2_5x', 'fails')}; inconclusive: "
            f"{_where(claims, 'verdict_mixed_2_5x', 'inconclusive')}. Reduction: "
            + "; ".join(
                f"{r.scenario} {r.mixed_sd_reduction:.2f}× [{r.mixed_sd_reduction_ci_lo:.2f}, "
                f"{r.mixed_sd_reduction_ci_hi:.2f}]"
                for r in claims.itertuples()
            )
            + f". Condition: a fixed-α mix of two estimators can lower the sd by at most "
            f"`gain_bound` = √(min(V_w, V_q)·(V_w+V_q−2C)/(V_w·V_q−C²)); here wDQ and qDQ are "
            f"{claims.wq_corr.min():.3f}–{claims.wq_corr.max():.3f} correlated across replications, so "
            f"the bound is {claims.gain_bound.min():.2f}–{claims.gain_bound.max():.2f}×: the claim "
            "needs a bound of at least 2, i.e. two DQ estimates that are much less correlated or of "
            "very different variance."
        )
    else:
        lines.append(
            f"- **Mixed DQ 2–5× lower sd than DQ**: the reduction is {claims.mixed_sd_reduction.min():.2f}–"
            f"{claims.mixed_sd_reduction.max():.2f}×; inside 2–5× in {int(claims.mixed_2_5x_lower.sum())}/{n} "
            "scenarios."
        )
    if "oracle_sd_reduction" in claims and claims.oracle_sd_reduction.notna().any():
        lines.append(
            f"  With α from the replications' covariance (an oracle, not deployable) the reduction is "
            f"{claims.oracle_sd_reduction.min():.2f}–{claims.oracle_sd_reduction.max():.2f}×."
        )
    if mixed_map is not None:
        lines.append("  " + mixed_map_statement(mixed_map))
    winners = claims.lowest_mse.value_counts()
    if ci:
        lines.append(
            f"- **Mixed DQ lowest MSE everywhere** — holds in: "
            f"{_where(claims, 'verdict_mixed_lowest_mse', 'holds')}; fails in: "
            f"{_where(claims, 'verdict_mixed_lowest_mse', 'fails')}; inconclusive (a statistical tie that "
            f"includes mixed DQ): {_where(claims, 'verdict_mixed_lowest_mse', 'inconclusive')}. Lowest MSE "
            "per scenario (a tie is named when no estimator wins in 95 % of bootstrap resamples): "
            + "; ".join(f"{r.scenario} {estimator_label(r.lowest_mse)}" for r in claims.itertuples())
            + "."
        )
    else:
        lines.append(
            f"- **Mixed DQ lowest MSE everywhere**: holds in {int(claims.mixed_lowest_mse.sum())}/{n} "
            "scenarios; lowest MSE: " + ", ".join(f"{estimator_label(w)} ({c})" for w, c in winners.items()) + "."
        )
    if wp is not None and len(wp):
        parts = []
        for r in wp.itertuples():
            t = f"{r.scenario}: chord (GTE) {r.chord:.3f} ± {1.96 * r.chord_se:.3f}, tangent dW/dp {r.tangent:.3f}"
            if np.isfinite(r.tangent_se):
                t += f" ± {1.96 * r.tangent_se:.3f}"
            if hasattr(r, "wdq_mean"):
                t += f", wDQ mean {r.wdq_mean:.3f} ± {1.96 * r.wdq_mean_se:.3f}"
            parts.append(t)
        big = wp.loc[wp.curvature_share.abs().idxmax()]
        small = wp.loc[wp.curvature_share.abs().idxmin()]
        lines.append(
            "- **Why DQ is biased here.** DQ estimates the tangent slope dW/dp of the mixed system at p; the "
            "GTE is the chord from p = 0 to p = 1. They agree only where W(p) is straight. The share of the "
            f"effect the tangent misses is largest in {big.scenario} ({100 * big.curvature_share:.0f} %) and "
            f"smallest in {small.scenario} ({100 * small.curvature_share:.0f} %). " + "; ".join(parts) + "."
        )
    elif truth is not None and "slope" in truth:
        t = truth.set_index("scenario")
        w = summary[summary.estimator == "wdq"].set_index("scenario")
        parts = [
            f"{s}: GTE {t.loc[s, 'gte']:.2f}, dW/dp {t.loc[s, 'slope']:.2f}, wDQ {w.loc[s, 'mean']:.2f}"
            for s in t.index
            if s in w.index and np.isfinite(t.loc[s, "slope"])
        ]
        lines.append(
            "- DQ targets the slope dW/dp of the mixed system at p, which equals the GTE only when W(p) is "
            "linear: " + "; ".join(parts) + "."
        )
    cov = summary.dropna(subset=["coverage"])
    cm = cov.groupby("estimator").agg(
        cov_truth=("coverage", "median"), cov_mean=("coverage_of_mean", "median"), se_ratio=("se_ratio", "median")
    )
    lines.append(
        f"- 95 % batch-means CIs, median over scenarios, {reps} replications each (coverage of the truth / "
        "of the estimator's own mean / mean SE over empirical sd): "
        + "; ".join(
            f"{estimator_label(e)} {r.cov_truth:.0%} / {r.cov_mean:.0%} / {r.se_ratio:.2f}" for e, r in cm.iterrows()
        )
        + "."
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the committed mixed-DQ map

#: the columns :func:`load_mixed_map` needs (written by :func:`asrsched.abtest.mixed_map.map_table`)
MIXED_MAP_COLUMNS = (
    "law",
    "scv",
    "unit",
    "L_factor",
    "alpha",
    "gain_better",
    "gain_better_ci_lo",
    "gain_better_ci_hi",
    "gain_worse",
    "gain_worse_ci_lo",
    "gain_worse_ci_hi",
    "verdict",
    "verdict_worse",
    "vs_batch_ci_lo",
    "vs_batch_ci_hi",
    "reps",
)


def load_mixed_map(folder=MIXED_MAP_DIR) -> pd.DataFrame:
    """The mixed-DQ map's table, ``map.csv`` in ``folder`` (:data:`MIXED_MAP_DIR`, relative to the checkout).

    Raises ``FileNotFoundError`` naming the file when it is missing and ``ValueError`` naming it when a
    column is missing (written by ``python -m asrsched.abtest.mixed_map --out <folder>``).
    """
    from pathlib import Path

    path = Path(folder) / MIXED_MAP_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no mixed-DQ map here; write one with `python -m asrsched.abtest.mixed_map --out {folder}` "
            "(the ASR fleet's: asrsched.abtest.asr_mixed_map)"
        )
    t = pd.read_csv(path)
    missing = [c for c in MIXED_MAP_COLUMNS if c not in t]
    if missing:
        raise ValueError(f"{path}: not a mixed-DQ map table (missing columns {', '.join(missing)})")
    return t


def mixed_map_cells(table: pd.DataFrame, which: str, L_factor: float = 1.0, col: str = "verdict") -> list[str]:
    """The cells ``law·unit·alpha`` of the map at ``L_factor`` whose ``col`` is ``which`` (in-experiment alphas)."""
    t = table[(np.isclose(table.L_factor, L_factor)) & (table.alpha != "oracle") & (table[col] == which)]
    return [f"{r.law}·{r.unit}·α {r.alpha}" for r in t.itertuples()]


def mixed_map_statement(table: pd.DataFrame, L_factor: float = 1.0) -> str:
    """Where the claim "mixed DQ has 2–5× lower sd than DQ" holds in the map (Markdown, computed from ``table``).

    At ``L_factor`` x the default L, per verdict the cells (service law, horizon unit, in-experiment alpha)
    with the gain over the better DQ and its CI; then the same over the worse DQ, the verdicts at the other
    horizons, the oracle alpha's range and which in-experiment alpha gives the lower sd at each L.
    """
    if not len(table):
        return "The mixed-DQ map is empty."
    at = table[np.isclose(table.L_factor, L_factor)]
    own = at[at.alpha != "oracle"]
    reps = (
        f"{int(table.reps.min())}–{int(table.reps.max())}" if table.reps.nunique() > 1 else str(int(table.reps.min()))
    )

    def cells(t: pd.DataFrame, v: str, g: str = "gain_better") -> str:
        sel = t[t["verdict" if g == "gain_better" else "verdict_worse"] == v]
        if not len(sel):
            return "none"
        return "; ".join(
            f"{r.law} (SCV {r.scv:g}) · {r.unit} · α {r.alpha} {getattr(r, g):.2f}× "
            f"[{getattr(r, g + '_ci_lo'):.2f}, {getattr(r, g + '_ci_hi'):.2f}]"
            for r in sel.itertuples()
        )

    failing = own[own.verdict == "fails"]
    fails = ", ".join(
        f"{law} ({len(g)} of {len(own[own.law == law])})" for law, g in failing.groupby("law", sort=False)
    )
    out = [
        f"**Where the 2–5× claim holds (mixed-DQ map, {reps} replications per service law, L = {L_factor:g} × "
        f"30·N·λ jobs or τ = L/(N·λ) time units):** holds under {cells(own, 'holds')}; inconclusive under "
        f"{cells(own, 'inconclusive')}; fails in the other cells (per law, failing of all): {fails or 'none'}.",
        f"Over the *worse* DQ it holds under {cells(own, 'holds', 'gain_worse')}.",
    ]
    other = []
    for f, g in table[table.alpha != "oracle"].groupby("L_factor"):
        if np.isclose(f, L_factor):
            continue
        h = g[g.verdict == "holds"]
        names = ", ".join(f"{r.law}·{r.unit}·α {r.alpha}" for r in h.itertuples())
        other.append(f"L = {f:g} × default: holds in {len(h)} of {len(g)} cells" + (f" ({names})" if names else ""))
    if other:
        out.append("At the other horizons: " + "; ".join(other) + ".")
    orc = at[at.alpha == "oracle"]
    if len(orc):
        out.append(
            f"With the oracle α the gain over the better DQ is {orc.gain_better.min():.2f}–"
            f"{orc.gain_better.max():.2f}× across the laws and units (reference, not deployable)."
        )
    job = table[table.alpha == "job"]
    if len(job):
        parts = []
        for f, g in job.groupby("L_factor"):
            better, worse = int((g.vs_batch_ci_lo > 1).sum()), int((g.vs_batch_ci_hi < 1).sum())
            parts.append(
                f"L = {f:g} ×: per-job α lower sd in {better}, batch α lower in {worse}, tied in "
                f"{len(g) - better - worse} of {len(g)}"
            )
        sd = {a: table[table.alpha == a].alpha_sd for a in ("batch", "job")}
        out.append(
            "Which in-experiment α wins (95 % CI of the sd ratio): " + "; ".join(parts) + f". The weight's sd over "
            f"replications: batch {sd['batch'].min():.2f}–{sd['batch'].max():.2f}, per-job "
            f"{sd['job'].min():.2f}–{sd['job'].max():.2f}."
        )
    return " ".join(out)
