"""Tables and the operator's recommendation of the ASR-fleet A/B study (:mod:`asrsched.abtest.asr_fleet`).

Every function takes an :class:`~asrsched.abtest.asr_fleet.ASRStudyResult` (what
:func:`~asrsched.sim.parallel.run_study` returns for an ``ASRStudyConfig``) or the :func:`summary_table` built
from it, and returns a DataFrame or markdown text:

* :func:`summary_table` -- per estimator: truth, bias, sd, RMSE, coverage;
* :func:`truth_table`, :func:`best_table`, :func:`tail_table`, :func:`burn_in_table`,
  :func:`ablation_table` -- the views the notebook shows;
* :func:`recommendation` -- a plain-language reading for an operator, every statement derived
  from the numbers (no winner named where the RMSE CIs overlap: :func:`tied_with`; the naive
  estimator's sign judged from its CI: :func:`sign_verdict`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from asrsched.abtest.asr_fleet import ASRStudyConfig, ASRStudyResult
from asrsched.core.labels import ESTIMATOR_ORDER, metric_label
from asrsched.core.stats import percentile_ci
from asrsched.sim.parallel import task_seed

__all__ = [
    "summary_table",
    "truth_table",
    "best_table",
    "tail_table",
    "burn_in_table",
    "ablation_table",
    "recommendation",
    "tied_with",
    "sign_verdict",
]


# ----------------------------------------------------------------------------- tables

_KEYS = ["workload", "factor", "metric", "stat"]


N_BOOT = 2000  # bootstrap draws behind the CIs of sd and RMSE


def _cell_rng(*key) -> np.random.Generator:
    """A generator seeded from a table cell's key (CIs reproducible, independent between cells)."""
    return np.random.default_rng(task_seed(*key, digest_size=8))


def _boot_sd_rmse(v: np.ndarray, gte: float, gte_se: float, rng: np.random.Generator) -> tuple[float, ...]:
    """95 % percentile-bootstrap CIs of the sd and the RMSE of ``v`` around ``gte``.

    Each draw resamples the experiments with replacement and, for the RMSE, draws the truth
    from ``N(gte, gte_se)`` (the ground truth is itself an estimate over finite truth runs).
    """
    n = v.size
    if n < 2:
        return (np.nan,) * 4
    x = v[rng.integers(0, n, size=(N_BOOT, n))]
    sd = x.std(axis=1, ddof=1)
    g = gte + (gte_se if np.isfinite(gte_se) else 0.0) * rng.standard_normal(N_BOOT)
    rmse = np.sqrt(np.mean((x - g[:, None]) ** 2, axis=1))
    return (*percentile_ci(sd), *percentile_ci(rmse))


def summary_table(res: ASRStudyResult) -> pd.DataFrame:
    """Per workload x factor x design x estimator x metric x statistic: truth, bias, sd, RMSE, MSE, coverage.

    ``bias_pct``/``rmse_pct`` are relative to ``|truth|``; ``recovered_pct`` is the share of
    the true effect the estimator recovers on average (100 = unbiased; negative = the average
    estimate has the wrong sign). ``coverage`` is the share of replications whose 95 %
    batch-means CI holds the truth.

    95 % CIs (``*_ci_lo``/``*_ci_hi``): ``mean`` -- t interval over the experiments; ``bias`` --
    t interval with the truth's standard error added in quadrature (``sqrt(sd^2/reps +
    truth_se^2)``); ``sd`` and ``rmse`` -- percentile bootstrap over the experiments
    (:data:`N_BOOT` draws, truth drawn from ``N(truth, truth_se)`` for the RMSE), seeded from
    the cell, so the table is reproducible.
    """
    e = res.estimates
    e = e[e["headline"].astype(bool)]
    tt = res.truth.set_index(_KEYS)
    rows = []
    for (w, f, d, name, m, s), g in e.groupby(
        ["workload", "factor", "design", "estimator", "metric", "stat"], sort=False
    ):
        t = tt.loc[(w, f, m, s)]
        gte = float(t["gte"])
        v = g["estimate"].to_numpy(float)
        v = v[np.isfinite(v)]
        if not v.size:
            continue
        lo, hi = g["ci_lo"].to_numpy(float), g["ci_hi"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        r = {
            "workload": w,
            "factor": f,
            "design": d,
            "estimator": name,
            "metric": m,
            "stat": s,
            "truth": gte,
            "truth_se": float(t["gte_se"]),
            "mean": float(v.mean()),
            "bias": float(v.mean() - gte),
            "sd": float(v.std(ddof=1)) if v.size > 1 else np.nan,
            "mse": float(np.mean((v - gte) ** 2)),
            "reps": int(v.size),
            "coverage": float(np.mean((lo[ok] <= gte) & (gte <= hi[ok]))) if ok.any() else np.nan,
            "alpha": float(np.nanmean(g["alpha"].astype(float))) if g["alpha"].notna().any() else np.nan,
        }
        r["rmse"] = math.sqrt(r["mse"])
        n = v.size
        tq = float(stats.t.ppf(0.975, n - 1)) if n > 1 else np.nan
        se_mean = r["sd"] / math.sqrt(n) if n > 1 else np.nan
        tse = r["truth_se"] if np.isfinite(r["truth_se"]) else 0.0
        r["bias_se"] = math.sqrt(se_mean**2 + tse**2) if n > 1 else np.nan
        r["mean_ci_lo"], r["mean_ci_hi"] = r["mean"] - tq * se_mean, r["mean"] + tq * se_mean
        r["bias_ci_lo"], r["bias_ci_hi"] = r["bias"] - tq * r["bias_se"], r["bias"] + tq * r["bias_se"]
        r["sd_ci_lo"], r["sd_ci_hi"], r["rmse_ci_lo"], r["rmse_ci_hi"] = _boot_sd_rmse(
            v, gte, r["truth_se"], _cell_rng(w, f, d, name, m, s)
        )
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


def tied_with(g: pd.DataFrame) -> list[str]:
    """``design/estimator`` of every row of ``g`` (one cell) whose RMSE CI overlaps the lowest-MSE row's.

    Empty: the lowest-MSE estimator is resolved (its RMSE CI lies below every other's).
    Overlapping 95 % CIs are treated as a statistical tie (a conservative rule: no winner is
    named unless the intervals separate).
    """
    b = g.loc[g["mse"].idxmin()]
    others = g.drop(index=b.name)
    hit = others[~(others["rmse_ci_lo"] > b["rmse_ci_hi"])]
    return [f"{r.design}/{r.estimator}" for r in hit.itertuples()]


def best_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload x factor x metric x statistic: the lowest-MSE estimator, next to naive and the truth.

    ``best`` is the lowest-MSE ``design/estimator``; ``resolved`` says whether its RMSE 95 % CI
    lies below every other estimator's (:func:`tied_with`); ``tied_with`` lists the others
    when not, and ``winner`` is ``best`` when resolved, else ``"tie"``. ``<estimator>_rmse`` columns
    give each estimator's RMSE; the switchback estimator on the replica_block design is
    ``replica_block_rmse``.
    """
    out = []
    for keys, g in summary.groupby(_KEYS, sort=False):
        b = g.loc[g["mse"].idxmin()]
        ties = tied_with(g)
        nv = g[g.estimator.isin(["naive"])]
        row = dict(
            zip(_KEYS, keys),
            truth=b["truth"],
            truth_se=b["truth_se"],
            best=f"{b.design}/{b.estimator}",
            best_rmse=b["rmse"],
            best_rmse_ci_lo=b["rmse_ci_lo"],
            best_rmse_ci_hi=b["rmse_ci_hi"],
            best_bias=b["bias"],
            best_sd=b["sd"],
            resolved=not ties,
            winner=f"{b.design}/{b.estimator}" if not ties else "tie",
            tied_with=", ".join(ties),
        )
        if len(nv):
            row.update(naive_recovered_pct=float(nv["recovered_pct"].iloc[0]), naive_rmse=float(nv["rmse"].iloc[0]))
        for name in ("mixed_dq", "wdq", "qdq", "group", "switchback"):
            sub = g[g.estimator == name]
            for design, col in (("replica_block", "replica_block_rmse"), (None, f"{name}_rmse")):
                here = sub[sub.design == design] if design else sub[sub.design != "replica_block"]
                if len(here):
                    row[col] = float(here["rmse"].iloc[0])
        out.append(row)
    return pd.DataFrame(out)


def sign_verdict(r) -> str:
    """How an estimator's average relates to the truth's sign, from the 95 % CIs (one summary row).

    ``"wrong sign"`` when the truth is resolved (``|truth| > 1.96 SE``) and the mean estimate's CI lies
    entirely on the other side of zero; ``"right sign"`` when it lies on the same side;
    ``"sign not resolved"`` when the CI holds zero; ``"truth not resolved"`` when the truth is
    within 1.96 SE of zero.
    """
    t, tse = float(r["truth"]), float(r["truth_se"]) if np.isfinite(r["truth_se"]) else 0.0
    if not abs(t) > 1.96 * tse or t == 0:
        return "truth not resolved"
    lo, hi = float(r["mean_ci_lo"]), float(r["mean_ci_hi"])
    if lo <= 0 <= hi:
        return "sign not resolved"
    return "right sign" if (lo > 0) == (t > 0) else "wrong sign"


def tail_table(summary: pd.DataFrame, res: ASRStudyResult | None = None) -> pd.DataFrame:
    """The DQ family (Bernoulli routing test) for mean vs P90: where Little's law stops helping.

    ``predicted_mixed_bias`` = ``(1 - alpha) x (mean truth - P90 truth)`` for the P90 rows: the
    part of mixed DQ's bias that comes from its queue-length term estimating the mean effect.
    With ``res``, ``corr_wq`` is the correlation of wDQ and qDQ across experiments (Little's law
    makes it ~1 for means; it is what lets the minimum-variance weight cancel noise without
    touching the signal) and ``sd_vs_wdq`` the estimator's sd over wDQ's.
    """
    s = summary[(summary.design == "bernoulli") & summary.estimator.isin(["naive", "qdq", "wdq", "mixed_dq"])]
    cols = [
        "workload",
        "metric",
        "stat",
        "estimator",
        "truth",
        "mean",
        "recovered_pct",
        "bias",
        "sd",
        "rmse",
        "coverage",
        "alpha",
    ]
    t = s[cols].copy()
    mean_truth = s[s.stat == "mean"].groupby(["workload", "metric"])["truth"].first()
    t["mean_effect"] = [mean_truth.get((w, m), np.nan) for w, m in zip(t.workload, t.metric)]
    t["predicted_mixed_bias"] = np.where(
        (t.stat == "p90") & (t.estimator == "mixed_dq"), (1 - t["alpha"]) * (t["mean_effect"] - t["truth"]), np.nan
    )
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
    """Switchback estimators at every burn-in (both tests; switchback and replica_block designs): bias, sd, RMSE,
    coverage."""
    e = res.estimates
    if "burn_in" not in e:
        return pd.DataFrame()
    e = e[e.estimator.eq("switchback") & e["burn_in"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, f, d, m, s, b), g in e.groupby(["workload", "factor", "design", "metric", "stat", "burn_in"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, f, m, s)])
        rows.append(
            {
                "workload": w,
                "factor": f,
                "design": d,
                "metric": m,
                "stat": s,
                "burn_in_s": b,
                "mean": v.mean(),
                "bias": v.mean() - gte,
                "sd": v.std(ddof=1),
                "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                "coverage": float(np.mean((g.ci_lo <= gte) & (gte <= g.ci_hi))),
            }
        )
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    out = out.sort_values(["_w", "factor", "design", "metric", "stat", "burn_in_s"])
    return out.drop(columns="_w").reset_index(drop=True)


def ablation_table(res: ASRStudyResult) -> pd.DataFrame:
    """Bias, sd and RMSE of qDQ, wDQ and mixed DQ at every horizon ``L`` (Bernoulli routing test)."""
    e = res.estimates
    e = e[e.estimator.isin(["qdq", "wdq", "mixed_dq"]) & e["L"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, m, s, name, L), g in e.groupby(["workload", "metric", "stat", "estimator", "L"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, "routing", m, s)])
        rows.append(
            {
                "workload": w,
                "metric": m,
                "stat": s,
                "estimator": name,
                "L": int(L),
                "L_factor": float(g["L_factor"].iloc[0]),
                "mean": v.mean(),
                "bias": v.mean() - gte,
                "sd": v.std(ddof=1),
                "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
            }
        )
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    return out.sort_values(["_w", "metric", "stat", "estimator", "L"]).drop(columns="_w").reset_index(drop=True)


# ----------------------------------------------------------------------------- recommendation


def _fmt_s(x: float) -> str:
    return f"{x * 1e3:+.0f} ms" if abs(x) < 1 else f"{x:+.2f} s"


def _abs_s(x: float) -> str:
    return _fmt_s(abs(x))[1:]


def _pct(x: float, sign: bool = False) -> str:
    """A percentage with enough digits that a small non-zero value never prints as "0" or "-0"."""
    if not np.isfinite(x):
        return "n/a"
    d = 0 if abs(x) >= 10 else 1 if abs(x) >= 0.1 else 2
    return f"{x:+.{d}f}" if sign else f"{x:.{d}f}"


def _how(design: str, estimator: str, cfg: ASRStudyConfig) -> str:
    """How an operator runs and analyses a (design, estimator) pair, in words."""
    if design == "switchback":
        return (
            f"a switchback test (the whole fleet alternates every {cfg.block_s:g} s, first "
            f"{cfg.burn_in_s:g} s of each block dropped)"
        )
    if design == "replica_block":
        return (
            f"a replica × block test (every {cfg.block_s:g} s a fresh random {int(round(cfg.p * cfg.n_replicas))} "
            f"of the {cfg.n_replicas} replicas take the treatment, first {cfg.burn_in_s:g} s of each block dropped)"
        )
    if design == "group":
        return "a replica-split test (each arm routes its requests over its own half of the fleet)"
    if design == "replica":
        return "replica-level randomisation (a random subset of replicas runs the new policy)"
    names = {"naive": "the naive difference of arm means", "qdq": "qDQ", "wdq": "wDQ", "mixed_dq": "mixed DQ"}
    return f"a request-level randomised test analysed with {names.get(estimator, estimator)}"


def _naive_words(nv: pd.DataFrame) -> str:
    """The naive estimator per workload: share of the effect recovered, and its sign verdict in words."""
    parts = []
    for r in nv.itertuples():
        v = sign_verdict(nv.loc[r.Index])
        pct = f"{_pct(r.recovered_pct)} % of the effect"
        if v == "wrong sign":
            parts.append(
                f"{r.workload}: the wrong sign ({_pct(r.recovered_pct)} %: the average naive estimate points "
                "the other way, its 95 % CI excludes zero)"
            )
        elif v == "sign not resolved":
            parts.append(f"{r.workload}: {pct}, sign not resolved (95 % CI holds zero)")
        else:
            parts.append(f"{r.workload}: {pct}")
    return "; ".join(parts)


def recommendation(res: ASRStudyResult, summary: pd.DataFrame | None = None) -> str:
    """A plain-language reading for an operator, every statement derived from the study's numbers (markdown).

    A design/estimator is named as best only where its RMSE 95 % CI lies below every other's
    (:func:`tied_with`); otherwise the text says which ones are tied.
    """
    s = summary if summary is not None else summary_table(res)
    cfg = res.config
    reps = int(s["reps"].min()) if len(s) else 0
    lines = []
    verdict = {}
    for factor in ("routing", "scheduling"):
        sf = s[s.factor == factor]
        if sf.empty:
            continue
        t = cfg.test(factor)
        fixed = f"every replica {t.policy.upper()}" if factor == "routing" else f"router {t.router}"
        lines.append(
            f"**{factor.capitalize()} test: {t.control} → {t.treatment} ({fixed}; {cfg.n_replicas} "
            f"replicas, load ρ = {cfg.rho:g} of capacity, {reps} experiments of {cfg.n_requests} requests per "
            f"design; 95 % CIs).**"
        )
        cells = []
        for (m, st), g in sf.groupby(["metric", "stat"], sort=False):
            tr = res.truth[(res.truth.factor == factor) & (res.truth.metric == m) & (res.truth.stat == st)]
            eff = ", ".join(
                f"{r.workload} {_fmt_s(r.gte)} ± {_abs_s(1.96 * r.gte_se)} ({_pct(r.gte_pct, True)} %)"
                for r in tr.itertuples()
            )
            winners = []
            for w, gw in g.groupby("workload", sort=False):
                b = gw.loc[gw["mse"].idxmin()]
                ties = tied_with(gw)
                winners.append((w, f"{b.design}/{b.estimator}", ties, b))
            res_w = [x for x in winners if not x[2]]
            line = f"- {metric_label(m, st)}: true effect {eff}."
            if res_w:
                count = pd.Series([x[1] for x in res_w]).value_counts()
                d, e = count.index[0].split("/")
                sel = [x[3] for x in res_w if x[1] == count.index[0]]
                rel = float(np.median([r["rmse_pct"] for r in sel]))
                cells.append((m, st, d, e, rel))
                line += (
                    f" Lowest MSE, clear of the others' CIs: **{e}** ({d} design) on {count.iloc[0]} of "
                    f"{len(winners)} workloads (RMSE "
                    + ", ".join(
                        f"{_abs_s(r['rmse'])} [{_abs_s(r['rmse_ci_lo'])}, {_abs_s(r['rmse_ci_hi'])}]" for r in sel
                    )
                    + f", median {_pct(rel)} % of the effect)."
                )
            tied = [x for x in winners if x[2]]
            if tied:
                line += (
                    " Statistical tie (overlapping RMSE CIs) on "
                    + "; ".join(f"{w}: {best} with {', '.join(ties)}" for w, best, ties, _ in tied)
                    + "."
                )
            nv = g[g.estimator == "naive"]
            if len(nv):
                line += " Naive request-level comparison: " + _naive_words(nv) + "."
            resolved_truth = [abs(r.gte) > 1.96 * r.gte_se for r in tr.itertuples() if np.isfinite(r.gte_se)]
            if resolved_truth and not any(resolved_truth):
                line += " The true effect is within noise of zero on every workload here."
            lines.append(line)
        verdict[factor] = cells
        if factor == "routing":
            lines.extend(_tail_lines(s))
    lines.append("")
    lines.append("**For an operator** (counted over the metric cells above):")
    for factor, what in (("routing", "a routing change"), ("scheduling", "a per-replica scheduling change")):
        if factor not in verdict:
            continue
        cells = verdict[factor]
        for stat, lab in (("mean", "mean latency"), ("p90", "P90 latency")):
            c = [x for x in cells if x[1] == stat]
            n_stat = int(s[(s.factor == factor) & (s.stat == stat)].groupby("metric").ngroups)
            if not n_stat:
                continue
            if not c:
                lines.append(
                    f"- For {what} judged on {lab}: no design/estimator is clearly best at this experiment "
                    f"length (overlapping RMSE CIs in every workload of the {n_stat} metric cells); more "
                    "or longer experiments would be needed to separate them."
                )
                continue
            top = pd.Series([f"{d}/{e}" for _, _, d, e, _ in c]).value_counts()
            d, e = top.index[0].split("/")
            rel = np.median([r for *_, r in c])
            lines.append(
                f"- For {what} judged on {lab}: {_how(d, e, cfg)} had the lowest error, clear of the others, "
                f"in {top.iloc[0]} of {n_stat} metric cells (median RMSE {rel:.0f} % of the effect)."
            )
        sn = s[(s.factor == factor) & (s.estimator == "naive")]
        if len(sn):
            biased = int(((sn.bias_ci_lo > 0) | (sn.bias_ci_hi < 0)).sum())
            wrong = int(sum(sign_verdict(r) == "wrong sign" for _, r in sn.iterrows()))
            lines.append(
                f"- The naive difference between request-level arms: bias CI excludes zero in {biased} of "
                f"{len(sn)} workload × metric cells, the wrong sign in {wrong}. (Both arms share the "
                "replicas, so each arm's routing changes the queues the other arm sees.)"
            )
        if factor == "scheduling":
            lines.append(
                f"- Request-level randomisation is not defined for a scheduling change (one queue orders both "
                f"arms); with {cfg.n_replicas} replicas the replica-level design has "
                f"{int(round(cfg.p * cfg.n_replicas))} treated units."
            )
    return "\n".join(lines)


def _tail_lines(s: pd.DataFrame) -> list[str]:
    """Mixed DQ on P90 against wDQ, from the tail table (routing test): spread, recovery, coverage."""
    tl = tail_table(s)
    mp = tl[(tl.stat == "p90") & (tl.estimator == "mixed_dq")]
    wp = tl[(tl.stat == "p90") & (tl.estimator == "wdq")]
    mm = tl[(tl.stat == "mean") & (tl.estimator == "mixed_dq")]
    if not (len(mp) and len(wp) and len(mm)):
        return []
    ratio = float(np.median(wp.sd.to_numpy() / mp.sd.to_numpy()))
    cov = 100 * float(mp.coverage.mean())
    ss = s[(s.design == "bernoulli") & (s.estimator == "mixed_dq") & (s.stat == "p90")]
    biased = int(((ss.bias_ci_lo > 0) | (ss.bias_ci_hi < 0)).sum())
    spread = f"{ratio:.1f}x less spread than wDQ" if ratio >= 1 else f"{1 / ratio:.1f}x more spread than wDQ"
    line = (
        f"- Tail metrics and Little's law. For means, wDQ and qDQ estimate the same quantity (median mixed-DQ "
        f"weight α = {np.nanmedian(mm.alpha):.2f}). For P90, qDQ still estimates the *mean* effect; mixed DQ on "
        f"P90 (median α = {np.nanmedian(mp.alpha):.2f}) is {spread}, recovers "
        f"{_pct(float(np.median(mp.recovered_pct)))} % of the P90 effect (median over cells), its bias CI excludes zero in "
        f"{biased} of {len(ss)} cells, and its 95 % interval holds the truth in {cov:.0f} % of experiments."
    )
    return [line]
