"""Tables and the operator's recommendation of the ASR-fleet A/B study (:mod:`asrsched.abtest.asr_fleet`).

Every function takes an :class:`~asrsched.abtest.asr_fleet.ASRStudyResult` (what
:func:`~asrsched.abtest.asr_fleet.run_study` returns) or the :func:`summary_table` built
from it, and returns a DataFrame or markdown text:

* :func:`summary_table` -- per estimator: truth, bias, sd, RMSE, coverage;
* :func:`truth_table`, :func:`best_table`, :func:`tail_table`, :func:`burn_in_table`,
  :func:`ablation_table` -- the views the notebook shows;
* :func:`recommendation` -- plain-language advice for an operator, derived from the numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from asrsched.abtest.asr_fleet import ESTIMATOR_ORDER, ASRStudyConfig, ASRStudyResult, metric_label

__all__ = [
    "summary_table",
    "truth_table",
    "best_table",
    "tail_table",
    "burn_in_table",
    "ablation_table",
    "recommendation",
]


# ----------------------------------------------------------------------------- tables

_KEYS = ["workload", "factor", "metric", "stat"]


def summary_table(res: ASRStudyResult) -> pd.DataFrame:
    """Per workload x factor x design x estimator x metric x statistic: truth, bias, sd, RMSE, MSE, coverage.

    ``bias_pct``/``rmse_pct`` are relative to ``|truth|``; ``recovered_pct`` is the share of
    the true effect the estimator recovers on average (100 = unbiased). ``coverage`` is the
    share of replications whose 95 % batch-means CI holds the truth.
    """
    e = res.estimates
    e = e[e["headline"].astype(bool)]
    tt = res.truth.set_index(_KEYS)
    rows = []
    for (w, f, d, name, m, s), g in e.groupby(["workload", "factor", "design", "estimator", "metric", "stat"],
                                                sort=False):
        t = tt.loc[(w, f, m, s)]
        gte = float(t["gte"])
        v = g["estimate"].to_numpy(float)
        v = v[np.isfinite(v)]
        if not v.size:
            continue
        lo, hi = g["ci_lo"].to_numpy(float), g["ci_hi"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        r = {"workload": w, "factor": f, "design": d, "estimator": name, "metric": m, "stat": s,
             "truth": gte, "truth_se": float(t["gte_se"]), "mean": float(v.mean()), "bias": float(v.mean() - gte),
             "sd": float(v.std(ddof=1)) if v.size > 1 else np.nan,
             "mse": float(np.mean((v - gte) ** 2)), "reps": int(v.size),
             "coverage": float(np.mean((lo[ok] <= gte) & (gte <= hi[ok]))) if ok.any() else np.nan,
             "alpha": float(np.nanmean(g["alpha"].astype(float))) if g["alpha"].notna().any() else np.nan}
        r["rmse"] = math.sqrt(r["mse"])
        r["bias_se"] = r["sd"] / math.sqrt(v.size) if v.size > 1 else np.nan
        den = abs(gte) if abs(gte) > 0 else np.nan
        r["bias_pct"] = 100 * r["bias"] / den
        r["rmse_pct"] = 100 * r["rmse"] / den
        r["recovered_pct"] = 100 * r["mean"] / gte if gte != 0 else np.nan
        rows.append(r)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    out["_e"] = out["estimator"].map({n: i for i, n in enumerate(ESTIMATOR_ORDER)})
    out["_f"] = out["factor"].map({"routing": 0, "scheduling": 1})
    out["_m"] = out["metric"].map({"e2el": 0, "ttft": 1}) * 2 + out["stat"].map({"mean": 0, "p90": 1})
    out = out.sort_values(["_w", "_f", "_m", "_e"]).drop(columns=["_w", "_e", "_f", "_m"]).reset_index(drop=True)
    return out


def truth_table(res: ASRStudyResult) -> pd.DataFrame:
    """Ground truth per workload x factor x metric: control, treatment, GTE (s and %), its SE."""
    return res.truth.copy()


def best_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload x factor x metric x statistic: the lowest-MSE estimator, next to naive and the truth."""
    out = []
    for keys, g in summary.groupby(_KEYS, sort=False):
        b = g.loc[g["mse"].idxmin()]
        nv = g[g.estimator.isin(["naive"])]
        row = dict(zip(_KEYS, keys), truth=b["truth"], truth_se=b["truth_se"], best=f"{b.design}/{b.estimator}",
                   best_rmse=b["rmse"], best_bias=b["bias"], best_sd=b["sd"])
        if len(nv):
            row.update(naive_recovered_pct=float(nv["recovered_pct"].iloc[0]), naive_rmse=float(nv["rmse"].iloc[0]))
        for name in ("mixed_dq", "wdq", "qdq", "group", "switchback"):
            s = g[g.estimator == name]
            if len(s):
                row[f"{name}_rmse"] = float(s["rmse"].iloc[0])
        out.append(row)
    return pd.DataFrame(out)


def tail_table(summary: pd.DataFrame, res: ASRStudyResult | None = None) -> pd.DataFrame:
    """The DQ family (Bernoulli routing test) for mean vs P90: where Little's law stops helping.

    ``predicted_mixed_bias`` = ``(1 - alpha) x (mean truth - P90 truth)`` for the P90 rows: the
    part of mixed DQ's bias that comes from its queue-length term estimating the mean effect.
    With ``res``, ``corr_wq`` is the correlation of wDQ and qDQ across experiments (Little's law
    makes it ~1 for means; it is what lets the minimum-variance weight cancel noise without
    touching the signal) and ``sd_vs_wdq`` the estimator's sd over wDQ's.
    """
    s = summary[(summary.design == "bernoulli") & summary.estimator.isin(["naive", "qdq", "wdq", "mixed_dq"])]
    cols = ["workload", "metric", "stat", "estimator", "truth", "mean", "recovered_pct", "bias", "sd", "rmse",
            "coverage", "alpha"]
    t = s[cols].copy()
    mean_truth = s[s.stat == "mean"].groupby(["workload", "metric"])["truth"].first()
    t["mean_effect"] = [mean_truth.get((w, m), np.nan) for w, m in zip(t.workload, t.metric)]
    t["predicted_mixed_bias"] = np.where((t.stat == "p90") & (t.estimator == "mixed_dq"),
                                         (1 - t["alpha"]) * (t["mean_effect"] - t["truth"]), np.nan)
    wsd = s[s.estimator == "wdq"].set_index(["workload", "metric", "stat"])["sd"]
    t["sd_vs_wdq"] = [r.sd / wsd.get((r.workload, r.metric, r.stat), np.nan) for r in t.itertuples()]
    if res is not None:
        e = res.estimates
        e = e[(e.design == "bernoulli") & e.headline.astype(bool) & e.estimator.isin(["wdq", "qdq"])]
        corr = {}
        for k, g in e.groupby(["workload", "metric", "stat"]):
            p = g.pivot_table(index="rep", columns="estimator", values="estimate")
            corr[k] = float(np.corrcoef(p["wdq"], p["qdq"])[0, 1]) if len(p) > 2 else np.nan
        t["corr_wq"] = [corr.get((r.workload, r.metric, r.stat), np.nan) for r in t.itertuples()]
    return t.reset_index(drop=True)


def burn_in_table(res: ASRStudyResult) -> pd.DataFrame:
    """Switchback estimators at every burn-in (both tests): bias, sd, RMSE, coverage."""
    e = res.estimates
    if "burn_in" not in e:
        return pd.DataFrame()
    e = e[e.estimator.eq("switchback") & e["burn_in"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, f, m, s, b), g in e.groupby(["workload", "factor", "metric", "stat", "burn_in"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, f, m, s)])
        rows.append({"workload": w, "factor": f, "metric": m, "stat": s, "burn_in_s": b, "mean": v.mean(),
                     "bias": v.mean() - gte, "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                     "coverage": float(np.mean((g.ci_lo <= gte) & (gte <= g.ci_hi)))})
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    return out.sort_values(["_w", "factor", "metric", "stat", "burn_in_s"]).drop(columns="_w").reset_index(drop=True)


def ablation_table(res: ASRStudyResult) -> pd.DataFrame:
    """Bias, sd and RMSE of qDQ, wDQ and mixed DQ at every horizon ``L`` (Bernoulli routing test)."""
    e = res.estimates
    e = e[e.estimator.isin(["qdq", "wdq", "mixed_dq"]) & e["L"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, m, s, name, L), g in e.groupby(["workload", "metric", "stat", "estimator", "L"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, "routing", m, s)])
        rows.append({"workload": w, "metric": m, "stat": s, "estimator": name, "L": int(L),
                     "L_factor": float(g["L_factor"].iloc[0]), "mean": v.mean(), "bias": v.mean() - gte,
                     "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2)))})
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    return out.sort_values(["_w", "metric", "stat", "estimator", "L"]).drop(columns="_w").reset_index(drop=True)


# ----------------------------------------------------------------------------- recommendation

def _fmt_s(x: float) -> str:
    return f"{x * 1e3:+.0f} ms" if abs(x) < 1 else f"{x:+.2f} s"


def _abs_s(x: float) -> str:
    return _fmt_s(abs(x))[1:]


def _how(design: str, estimator: str, cfg: ASRStudyConfig) -> str:
    """How an operator runs and analyses a (design, estimator) pair, in words."""
    if design == "switchback":
        return (f"a switchback test (the whole fleet alternates every {cfg.block_s:g} s, first "
                f"{cfg.burn_in_s:g} s of each block dropped)")
    if design == "group":
        return "a replica-split test (each arm routes its requests over its own half of the fleet)"
    if design == "replica":
        return "replica-level randomisation (a random subset of replicas runs the new policy)"
    names = {"naive": "the naive difference of arm means", "qdq": "qDQ", "wdq": "wDQ", "mixed_dq": "mixed DQ"}
    return f"a request-level randomised test analysed with {names.get(estimator, estimator)}"


def recommendation(res: ASRStudyResult, summary: pd.DataFrame | None = None) -> str:
    """A plain-language recommendation for an operator, derived from the study's numbers (markdown)."""
    s = summary if summary is not None else summary_table(res)
    cfg = res.config
    lines = []
    verdict = {}
    for factor in ("routing", "scheduling"):
        sf = s[s.factor == factor]
        if sf.empty:
            continue
        t = cfg.test(factor)
        fixed = f"every replica {t.policy.upper()}" if factor == "routing" else f"router {t.router}"
        lines.append(f"**{factor.capitalize()} test: {t.control} → {t.treatment} ({fixed}; {cfg.n_replicas} "
                     f"replicas, load {cfg.load:g}, {cfg.reps} experiments of {cfg.n_requests} requests per "
                     f"design).**")
        cells = []
        for (m, st), g in sf.groupby(["metric", "stat"], sort=False):
            tr = res.truth[(res.truth.factor == factor) & (res.truth.metric == m) & (res.truth.stat == st)]
            eff = ", ".join(f"{r.workload} {_fmt_s(r.gte)} ({r.gte_pct:+.0f} %)" for r in tr.itertuples())
            wins = g.loc[g.groupby("workload", sort=False)["mse"].idxmin()]
            count = (wins.design + "/" + wins.estimator).value_counts()
            d, e = count.index[0].split("/")
            sel = g[(g.design == d) & (g.estimator == e)]
            rel = float(np.median(sel["rmse_pct"]))
            cells.append((m, st, d, e, rel))
            line = (f"- {metric_label(m, st)}: true effect {eff}. Lowest MSE: **{e}** ({d} design) on {count.iloc[0]} of "
                    f"{g.workload.nunique()} workloads (RMSE " + ", ".join(_abs_s(r.rmse) for r in sel.itertuples())
                    + f", {rel:.0f} % of the effect).")
            nv = g[g.estimator == "naive"]
            if len(nv):
                line += (" The naive request-level comparison recovers "
                         + ", ".join(f"{r.recovered_pct:.0f} %" for r in nv.itertuples()) + " of the true effect"
                         + (" (negative: the wrong sign)" if (nv.recovered_pct < 0).any() else "") + ".")
            if not any(abs(r.gte) > 3 * r.gte_se for r in tr.itertuples() if np.isfinite(r.gte_se)):
                line += " The true effect is within noise of zero: no design can detect it here."
            elif rel > 50:
                line += " Even the best design's error exceeds half the effect at this experiment length."
            lines.append(line)
        verdict[factor] = cells
        if factor == "routing":
            tl = tail_table(s)
            mp = tl[(tl.stat == "p90") & (tl.estimator == "mixed_dq")]
            wp = tl[(tl.stat == "p90") & (tl.estimator == "wdq")]
            mm = tl[(tl.stat == "mean") & (tl.estimator == "mixed_dq")]
            if len(mp) and len(wp) and len(mm):
                lines.append(
                    f"- Tail metrics break Little's law. For means, wDQ and qDQ estimate the same quantity, so mixed "
                    f"DQ's weight (median α = {np.nanmedian(mm.alpha):.2f}) only trades noise. For P90, qDQ still "
                    f"estimates the *mean* effect; the minimum-variance weight (median α = "
                    f"{np.nanmedian(mp.alpha):.2f}) then cancels the fluctuation the two share, and the signal with "
                    f"it: mixed DQ on P90 is {np.median(wp.sd.to_numpy() / mp.sd.to_numpy()):.0f}x less spread "
                    f"than wDQ but recovers {np.median(mp.recovered_pct):.0f} % of the P90 effect (median), and its "
                    f"95 % interval holds the truth in {100 * mp.coverage.mean():.0f} % of experiments "
                    "— precise and wrong.")
    lines.append("")
    lines.append("**For an operator:**")
    for factor, what in (("routing", "a routing change"), ("scheduling", "a per-replica scheduling change")):
        cells = verdict.get(factor)
        if not cells:
            continue
        for stat, lab in (("mean", "mean latency"), ("p90", "P90 latency")):
            c = [x for x in cells if x[1] == stat]
            if not c:
                continue
            top = pd.Series([f"{d}/{e}" for _, _, d, e, _ in c]).value_counts()
            d, e = top.index[0].split("/")
            rel = np.median([r for *_, r in c])
            line = (f"- For {what} judged on {lab}: run {_how(d, e, cfg)} — the lowest error in {top.iloc[0]} of "
                    f"{len(c)} metric cells (median RMSE {rel:.0f} % of the effect).")
            if factor == "routing" and stat == "mean":
                line += (" Do not read the naive difference between request-level arms: both arms share the "
                         "replicas, so each arm's routing changes the queues the other arm sees.")
            if factor == "scheduling" and stat == "mean":
                line += (" Request-level randomisation is not available for it (one queue orders both arms), and "
                         f"with {cfg.n_replicas} replicas the replica-level design has only "
                         f"{int(round(cfg.p * cfg.n_replicas))} treated units.")
            lines.append(line)
    return "\n".join(lines)
