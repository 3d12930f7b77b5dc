"""Figures of the ASR-fleet A/B study (:mod:`asrsched.abtest.asr_fleet`; house style, titles that state the finding).

Builders take an :class:`~asrsched.abtest.asr_fleet.ASRStudyResult` or the tables of
:mod:`asrsched.abtest.asr_fleet_report` and return a ``go.Figure``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.abtest.asr_fleet import AB_STATS, ASRStudyResult
from asrsched.abtest.asr_fleet_report import sign_verdict, summary_table, tail_table, tied_with
from asrsched.core.labels import estimator_label, metric_label
from asrsched.figures.style import policy_color

__all__ = ["fig_truth", "fig_estimates", "fig_rmse", "fig_tail", "fig_ablation", "TAIL_CLIP"]


#: designs drawn apart from their estimator's house colour (the replica x block design uses the switchback estimator)
_DESIGN_COLORS = {"replica_block": "#CC79A7"}


def _color(design: str, estimator: str) -> str:
    return _DESIGN_COLORS.get(design, policy_color(estimator))


def _label(design: str, estimator: str) -> str:
    """What a (design, estimator) pair is called on an axis and in a title."""
    return {"replica": "replica design", "replica_block": "replica × block"}.get(design, estimator_label(estimator))


def _wl_subplots(workloads, **kw):
    return make_subplots(rows=1, cols=len(workloads), subplot_titles=list(workloads), **kw)


def fig_truth(res: ASRStudyResult, metric: str = "e2el", stat: str = "mean") -> go.Figure:
    """Ground truth: each setting's metric per workload (control vs treatment of both tests)."""
    t = res.truth[(res.truth.metric == metric) & (res.truth.stat == stat)]
    fig = go.Figure()
    seen = set()
    names, vals = [], []
    for r in t.itertuples():
        for arm in ("control", "treatment"):
            setting = getattr(r, arm)
            key = (r.workload, setting)
            if key in seen:
                continue
            seen.add(key)
            names.append((r.workload, setting))
            vals.append(getattr(r, f"value_{arm}"))
    df = pd.DataFrame(names, columns=["workload", "setting"]).assign(value=vals)
    for setting, g in df.groupby("setting", sort=False):
        router, policy = setting.split("|")
        fig.add_trace(
            go.Bar(
                x=g.workload,
                y=g.value,
                name=f"router {router}, {policy.upper()}",
                marker_color=policy_color(router if router != "random" or policy == "fcfs" else policy),
                marker_pattern_shape="" if policy == "fcfs" else "/",
            )
        )
    rt = t[t.factor == "routing"]
    st = t[t.factor == "scheduling"]
    parts = []
    if len(rt):
        parts.append(f"{rt.treatment.iloc[0].split('|')[0]} routing {rt.gte_pct.mean():+.0f} %")
    if len(st):
        parts.append(f"{st.treatment.iloc[0].split('|')[1].upper()} {st.gte_pct.mean():+.0f} %")
    fig.update_layout(
        barmode="group",
        title=f"Ground truth, {metric_label(metric, stat)}: " + ", ".join(parts) + " (mean over workloads)",
        yaxis_title=f"{metric_label(metric, stat)} (s)",
        xaxis_title="workload",
        height=460,
    )
    return fig


_DQ = ("qdq", "wdq", "mixed_dq")
TAIL_CLIP = 3.0  # fig_tail's axis: estimate / truth in [-3, 3]; a bar beyond says its value


def fig_estimates(
    res: ASRStudyResult,
    factor: str = "routing",
    metric: str = "e2el",
    stat: str = "mean",
    summary: pd.DataFrame | None = None,
) -> go.Figure:
    """Every experiment's estimate per design/estimator (one column per workload), truth as a dashed line.

    The DQ family gets its own row (its spread is often 10-100x the others'), so the
    design-based estimators stay readable.
    """
    s = summary if summary is not None else summary_table(res)
    e = res.estimates
    e = e[(e.factor == factor) & (e.metric == metric) & (e.stat == stat) & e["headline"].astype(bool)]
    wls = [w for w in res.config.workloads if w in set(e.workload)]
    has_dq = e.estimator.isin(_DQ).any()
    rows = 2 if has_dq and (~e.estimator.isin(_DQ)).any() else 1
    fig = make_subplots(
        rows=rows,
        cols=len(wls),
        shared_yaxes=True,
        vertical_spacing=0.12,
        subplot_titles=list(wls) + ([""] * len(wls) if rows == 2 else []),
    )
    shown = set()
    for j, w in enumerate(wls, start=1):
        ew = e[e.workload == w]
        tr = res.truth[
            (res.truth.workload == w)
            & (res.truth.factor == factor)
            & (res.truth.metric == metric)
            & (res.truth.stat == stat)
        ]
        cats: dict[int, list] = {1: [], 2: []}
        for (d, name), g in ew.groupby(["design", "estimator"], sort=False):
            row = 2 if rows == 2 and name in _DQ else 1
            lab = "replica" if d == "replica" else _label(d, name)
            cats[row].append(lab)
            fig.add_trace(
                go.Box(
                    x=[lab] * len(g),
                    y=g.estimate,
                    name=f"{estimator_label(name)} ({d})",
                    legendgroup=f"{name}{d}",
                    showlegend=(name, d) not in shown,
                    boxpoints="all",
                    jitter=0.4,
                    pointpos=0,
                    marker=dict(color=_color(d, name), size=5),
                    line=dict(color=_color(d, name)),
                ),
                row=row,
                col=j,
            )
            shown.add((name, d))
        for row in range(1, rows + 1):
            if len(tr) and cats[row]:
                fig.add_trace(
                    go.Scatter(
                        x=cats[row],
                        y=[float(tr.gte.iloc[0])] * len(cats[row]),
                        mode="lines",
                        name="truth (GTE)",
                        legendgroup="truth",
                        showlegend="truth" not in shown,
                        line=dict(color=policy_color("truth"), width=3, dash="dash"),
                    ),
                    row=row,
                    col=j,
                )
                shown.add("truth")
            fig.add_hline(y=0, line=dict(color="#888", dash="dot", width=1), row=row, col=j)
    fig.update_yaxes(title_text="estimated effect (s)", title_standoff=6, row=1, col=1)
    if rows == 2:
        fig.update_yaxes(title_text="DQ family (s)", title_standoff=6, row=2, col=1)
    fig.update_xaxes(tickangle=0, automargin=True)
    ss = s[(s.factor == factor) & (s.metric == metric) & (s.stat == stat)]
    title = f"{factor.capitalize()} A/B, {metric_label(metric, stat)}"
    if len(ss):
        title += ": " + _winner_phrase(ss, factor)
        nv = ss[ss.estimator == "naive"]
        if len(nv):
            verdicts = [sign_verdict(r) for _, r in nv.iterrows()]
            wrong = sum(v == "wrong sign" for v in verdicts)
            if wrong:
                title += f"; naive has the wrong sign on {wrong} of {len(nv)} workloads"
            else:
                med = float(nv.recovered_pct.median())
                title += f"; naive recovers {med:.{0 if abs(med) >= 10 else 1}f} % of the effect (median)"
    n = int(ss["reps"].min()) if len(ss) else 0
    fig.update_layout(
        title=dict(text=_wrap(title) + f"<br><sup>{n} experiments per estimator; dashed: ground truth</sup>"),
        height=580 if rows == 1 else 780,
        showlegend=True,
        margin=dict(t=110, l=80),
    )
    return fig


def _wrap(text: str, width: int = 95) -> str:
    """Break a long title into lines of at most ``width`` characters (plotly does not wrap titles)."""
    import textwrap

    text = text.replace(" %", "\u00a0%").replace(" x ", "\u00a0x\u00a0")  # a number keeps its unit on its line
    return "<br>".join(textwrap.wrap(text, width))


def _winner_phrase(ss: pd.DataFrame, factor: str) -> str:
    """Who has the lowest MSE per workload, naming an estimator only where its RMSE CI clears the others'."""
    wins, ties = [], 0
    for _, g in ss.groupby("workload", sort=False):
        if tied_with(g):
            ties += 1
        else:
            best = g.loc[g["mse"].idxmin()]
            wins.append(_label(best["design"], best["estimator"]))
    n = ss.workload.nunique()
    if not wins:
        return f"no estimator clearly best (overlapping RMSE CIs on all {n} workloads)"
    top = pd.Series(wins).value_counts()
    name = top.index[0]
    out = f"{name} has the lowest MSE, clear of the others' CIs, on {top.iloc[0]} of {n} workloads"
    return out + (f" (a statistical tie on {ties})" if ties else "")


def fig_rmse(summary: pd.DataFrame, factor: str = "routing") -> go.Figure:
    """RMSE relative to the absolute truth per design/estimator, grouped by metric, one panel per workload."""
    s = summary[summary.factor == factor].copy()
    s["cell"] = s.metric.map(metric_label) + "<br>" + s.stat.map({"mean": "mean", "p90": "P90"})
    wls = list(dict.fromkeys(s.workload))
    fig = _wl_subplots(wls, shared_yaxes=True)
    for j, w in enumerate(wls, start=1):
        sw = s[s.workload == w]
        for (d, name), g in sw.groupby(["design", "estimator"], sort=False):
            den = g.truth.abs().replace(0, np.nan)
            err = (
                dict(
                    type="data",
                    symmetric=False,
                    array=(100 * g.rmse_ci_hi / den - g.rmse_pct).clip(lower=0),
                    arrayminus=(g.rmse_pct - 100 * g.rmse_ci_lo / den).clip(lower=0),
                    thickness=1.2,
                    width=2,
                )
                if "rmse_ci_hi" in g
                else None
            )
            fig.add_trace(
                go.Bar(
                    x=g.cell,
                    y=g.rmse_pct,
                    name=f"{estimator_label(name)} ({d})",
                    legendgroup=f"{name}{d}",
                    showlegend=j == 1,
                    marker_color=_color(d, name),
                    error_y=err,
                    marker_pattern_shape="/" if d in ("group", "replica") else "",
                ),
                row=1,
                col=j,
            )
    fig.update_yaxes(type="log", tickvals=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000])
    fig.update_yaxes(title_text="RMSE (% of |true effect|)", row=1, col=1)
    wins, n = [], 0
    for _, g in s.groupby(["workload", "cell"], sort=False):
        n += 1
        if "rmse_ci_hi" in g and not tied_with(g):
            best = g.loc[g["mse"].idxmin()]
            wins.append(_label(best["design"], best["estimator"]))
    if wins:
        top = pd.Series(wins).value_counts()
        title = (
            f"{factor.capitalize()} A/B: {top.index[0]} has the lowest error, clear of "
            f"the others' CIs, in {top.iloc[0]} of {n} workload × metric cells ({n - len(wins)} ties)"
        )
    else:
        title = f"{factor.capitalize()} A/B: no estimator clearly best (overlapping RMSE CIs in all {n} cells)"
    fig.update_layout(
        barmode="group",
        height=540,
        margin=dict(t=110),
        title=dict(text=_wrap(title) + "<br><sup>bars: RMSE; whiskers: 95 % bootstrap CI</sup>"),
    )
    return fig


def fig_tail(summary: pd.DataFrame) -> go.Figure:
    """Share of the true effect that wDQ, qDQ and mixed DQ recover, for means vs P90 (Bernoulli routing test).

    Bars: mean estimate / truth (1 = unbiased); error bars: the standard error of that mean over the
    experiments (sd / sqrt(reps)), relative to the truth. The axis stops at +-3 (:data:`TAIL_CLIP`), or further
    when an uncut bar's whisker reaches beyond it (a whisker is never cut): a bar beyond it ends at the axis
    without a whisker, says its value on the bar ("-15×") and in its hover, and the subtitle counts the bars
    cut.
    """
    t = tail_table(summary)
    t = t[t.estimator.isin(["qdq", "wdq", "mixed_dq"])].copy()
    t["cell"] = t.workload + "<br>" + t.metric.map(metric_label)
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["mean (Little's law holds)", "P90 (no Little's law)"], shared_yaxes=True
    )
    n_cut = 0
    reach = 0.0  # the farthest whisker end of an uncut bar (both panels share the axis): the axis shows it whole
    for j, st in enumerate(AB_STATS, start=1):
        ts = t[t.stat == st]
        for name, g in ts.groupby("estimator", sort=False):
            den = g.truth.abs().replace(0, np.nan)
            rec = g["mean"] / g.truth
            cut = rec.abs() > TAIL_CLIP
            n_cut += int(cut.sum())
            se = (g.sd / den / np.sqrt(_reps(summary))).where(~cut, 0.0)
            if (~cut).any():
                reach = max(reach, float(np.nanmax((rec.abs() + se.fillna(0))[~cut])))
            fig.add_trace(
                go.Bar(
                    x=g.cell,
                    y=rec.clip(-TAIL_CLIP, TAIL_CLIP),
                    text=[f"{v:+.0f}×" if c else "" for v, c in zip(rec, cut)],
                    textposition="inside",
                    insidetextanchor="end",
                    textangle=-90,  # along the cut bar: legible at 11 px in a bar a dozen px wide
                    textfont=dict(size=11),
                    customdata=rec,
                    hovertemplate=f"{estimator_label(name)}: %{{customdata:.2f}} x the true effect<extra>%{{x}}</extra>",
                    name=estimator_label(name),
                    legendgroup=name,
                    showlegend=j == 1,
                    marker_color=policy_color(name),
                    error_y=dict(
                        type="data",
                        array=se,
                        visible=True,
                        thickness=1.2,
                        width=3,
                    ),
                ),
                row=1,
                col=j,
            )
        fig.add_hline(y=1, line=dict(color=policy_color("truth"), dash="dash", width=2), row=1, col=j)
        fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=1, col=j)
    lim = max(TAIL_CLIP, reach) * 1.07
    fig.update_yaxes(range=[-lim, lim], title_text="mean estimate / true effect (1 = unbiased)", row=1, col=1)
    mp = t[(t.stat == "p90") & (t.estimator == "mixed_dq")]
    wp = t[(t.stat == "p90") & (t.estimator == "wdq")]
    title = "Mixed DQ on P90"
    if len(mp) and len(wp):
        ratio = float(np.median(wp.sd.to_numpy() / mp.sd.to_numpy()))
        spread = f"{ratio:.1f}x less spread than wDQ" if ratio >= 1 else f"{1 / ratio:.1f}x more spread than wDQ"
        title += (
            f": {spread}, recovers {100 * np.median(mp['mean'] / mp.truth):.0f} % of the effect (median); CI "
            f"coverage {100 * mp.coverage.mean():.0f} %"
        )
    fig.update_layout(
        barmode="group",
        title=dict(
            text=_wrap(title) + f"<br><sup>{_reps(summary)} experiments; "
            "whiskers: standard error of the mean estimate"
            + (f"; {n_cut} bar(s) beyond ±{TAIL_CLIP:g} cut at the axis, their value on the bar" if n_cut else "")
            + "</sup>"
        ),
        height=540,
        margin=dict(t=110),
    )
    return fig


def _reps(summary: pd.DataFrame) -> int:
    return int(summary["reps"].max()) if len(summary) else 0


def fig_ablation(ab: pd.DataFrame, metric: str = "e2el", stat: str = "mean") -> go.Figure:
    """RMSE of qDQ, wDQ and mixed DQ against the horizon L (one panel per workload)."""
    a = ab[(ab.metric == metric) & (ab.stat == stat)]
    wls = list(dict.fromkeys(a.workload))
    fig = _wl_subplots(wls, shared_yaxes=True)
    for j, w in enumerate(wls, start=1):
        for name, g in a[a.workload == w].groupby("estimator", sort=False):
            fig.add_trace(
                go.Scatter(
                    x=g.L_factor,
                    y=g.rmse,
                    mode="lines+markers",
                    name=estimator_label(name),
                    legendgroup=name,
                    showlegend=j == 1,
                    line=dict(color=policy_color(name), width=2.5),
                ),
                row=1,
                col=j,
            )
        fig.update_xaxes(title_text="L / default L", type="log", row=1, col=j)
    fig.update_yaxes(type="log", tickvals=[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100])
    fig.update_yaxes(title_text=f"RMSE of the {metric_label(metric, stat)} effect (s)", row=1, col=1)
    best = a.loc[a.groupby(["workload", "estimator"], sort=False)["rmse"].idxmin()]
    title = f"DQ horizon, {metric_label(metric, stat)}: best L / default " + ", ".join(
        f"{w} {g.loc[g.rmse.idxmin(), 'L_factor']:g}" for w, g in best.groupby("workload", sort=False)
    )
    fig.update_layout(title=title, height=480)
    return fig
