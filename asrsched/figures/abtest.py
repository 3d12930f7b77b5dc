"""Plotly figures of the estimator study (house style; titles computed from the data or neutral).

All builders take the tables of :mod:`asrsched.abtest.study` (``summary_table``, ``claims_table``,
``ablation_table``, ``switchback_table``, ``coverage_table``, ``wp_table``, ``search_table``)
or a :class:`~asrsched.abtest.study.StudyResult`, and return a ``go.Figure``. A title names a
winner only when :func:`asrsched.abtest.study.lowest_mse` finds one (a statistical tie is
named as a tie); every figure states its number of replications, and error bars are 95 % CIs.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.abtest.study import ESTIMATOR_ORDER, StudyResult
from asrsched.core.labels import estimator_label, router_label
from asrsched.figures.style import policy_color

__all__ = [
    "fig_overview",
    "fig_scenario",
    "fig_estimates",
    "fig_ablation",
    "fig_coverage",
    "fig_switchback",
    "fig_wp",
    "fig_search",
    "estimator_color",
    "ordered_estimators",
    "wrap",
]

_EXTRA_COLORS = {"mixed_dq_oracle": "#8c2d04", "qtdq": "#56B4E9", "mixed_dq_qt": "#7a3b8f"}


def estimator_color(name: str) -> str:
    """The house colour of an estimator (the oracle and the time-integral variants get their own)."""
    return _EXTRA_COLORS.get(name) or policy_color(name)


def ordered_estimators(names) -> list:
    """Distinct estimator names in the study's display order (:data:`asrsched.core.labels.ESTIMATOR_ORDER`)."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: ESTIMATOR_ORDER.index(n) if n in ESTIMATOR_ORDER else 99)


def wrap(text: str, width: int = 80) -> str:
    """Wrap a title at ``width`` characters with ``<br>`` (plotly titles do not wrap by themselves)."""
    return "<br>".join(textwrap.wrap(str(text), width)) or str(text)


def _log_axis(fig: go.Figure, values, axis: str = "yaxis", **kw) -> None:
    """A log axis when ``values`` has a positive number; its 1-2-5 ticks (and, for data narrower than one
    step, its range) come from the layout pass (:func:`asrsched.figures.layout.apply_log_ticks`)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], float)
    if v.size == 0:
        return
    fig.update_layout(**{axis: dict(type="log", **kw)})


def _reps(summary: pd.DataFrame) -> str:
    r = summary["reps"].dropna().astype(int)
    return f"n = {r.min()}" if r.min() == r.max() else f"n = {r.min()}–{r.max()}"


def _winner_text(claims: pd.DataFrame | None, scenario: str | None = None) -> str | None:
    if claims is None or "lowest_mse" not in claims:
        return None
    c = claims.copy()
    c["scenario"] = c["scenario"].astype(str)
    if scenario is not None:
        row = c[c.scenario == scenario]
        return None if row.empty else estimator_label(row.iloc[0].lowest_mse)
    return ", ".join(f"{estimator_label(k)} in {v}" for k, v in c.lowest_mse.value_counts().items())


def fig_overview(summary: pd.DataFrame, claims: pd.DataFrame | None = None, include_oracle: bool = False) -> go.Figure:
    """RMSE of every estimator in every scenario (log scale, 95 % bootstrap CIs).

    The title counts lowest-MSE outcomes from ``claims`` (ties counted as ties); without it
    the title is neutral.
    """
    s = summary if include_oracle else summary[summary.estimator != "mixed_dq_oracle"]
    scen = list(dict.fromkeys(s.scenario.astype(str)))
    fig = go.Figure()
    for name in ordered_estimators(s.estimator):
        g = s[s.estimator == name].set_index(s[s.estimator == name].scenario.astype(str))
        y = [g.loc[x, "rmse"] if x in g.index else None for x in scen]
        err = None
        if "rmse_ci_lo" in g:
            err = dict(
                type="data",
                symmetric=False,
                thickness=1.2,
                width=2,
                array=[g.loc[x, "rmse_ci_hi"] - g.loc[x, "rmse"] if x in g.index else None for x in scen],
                arrayminus=[g.loc[x, "rmse"] - g.loc[x, "rmse_ci_lo"] if x in g.index else None for x in scen],
            )
        fig.add_bar(x=scen, y=y, name=estimator_label(name), marker_color=estimator_color(name), error_y=err)
    won = _winner_text(claims)
    title = f"RMSE per estimator and scenario ({_reps(s)} replications each)"
    sub = f"lowest MSE: {won} scenarios" if won else "error bars: 95 % bootstrap CI"
    fig.update_layout(
        barmode="group",
        title=wrap(title, 70) + f"<br><sup>{sub}</sup>",
        xaxis_title="scenario",
        yaxis_title="RMSE (time units)",
        legend_title="estimator",
        margin=dict(t=90),
    )
    _log_axis(fig, list(s.rmse) + list(s.get("rmse_ci_hi", [])) + list(s.get("rmse_ci_lo", [])))
    return fig


def fig_scenario(summary: pd.DataFrame, scenario: str, claims: pd.DataFrame | None = None) -> go.Figure:
    """Absolute bias, standard deviation and RMSE per estimator for one scenario (log scale)."""
    s = summary[(summary.scenario.astype(str) == scenario)].set_index("estimator")
    names = ordered_estimators(s.index)
    fig = go.Figure()
    for col, lab, pat in (("bias", "|bias|", ""), ("sd", "standard deviation", "/"), ("rmse", "RMSE", "x")):
        fig.add_bar(
            x=[estimator_label(n) for n in names],
            y=[abs(s.loc[n, col]) for n in names],
            name=lab,
            marker_color=[estimator_color(n) for n in names],
            marker_pattern_shape=pat,
            marker_line_color="#222",
            marker_line_width=0.6,
        )
    nv = s.loc["naive"]
    share = nv["mean"] / nv["truth"] if nv["truth"] != 0 else np.nan
    h = 1.96 * nv["bias_se"] / abs(nv["truth"]) if nv["truth"] != 0 else np.nan
    won = _winner_text(claims, scenario)
    sub = (
        f"naive reports {100 * share:.0f} % ± {100 * h:.2g} % of the true effect; {_reps(s.reset_index())} replications"
    )
    title = f"{scenario}: error of each estimator" + (f"; lowest MSE: {won}" if won else "")
    fig.update_layout(
        barmode="group",
        legend_title="bars (left to right)",
        title=wrap(title, 70) + f"<br><sup>{sub}</sup>",
        xaxis_title="estimator",
        yaxis_title="error (time units)",
        margin=dict(t=110),
    )
    _log_axis(fig, list(s.bias.abs()) + list(s.sd) + list(s.rmse))
    return fig


def fig_estimates(res: StudyResult, scenario: str) -> go.Figure:
    """Every replication's estimate per estimator, with the truth (GTE) and the slope dW/dp at p."""
    e = res.estimates
    e = e[(e.scenario.astype(str) == scenario) & e.headline.astype(bool)]
    t = res.truth.set_index(res.truth.scenario.astype(str)).loc[scenario]
    fig = go.Figure()
    for name in ordered_estimators(e.estimator):
        v = e[e.estimator == name]["estimate"]
        fig.add_box(
            y=v,
            name=estimator_label(name),
            marker_color=estimator_color(name),
            boxpoints="all",
            jitter=0.4,
            pointpos=0,
            line_width=1.5,
        )
    fig.add_hline(
        y=t["gte"],
        line_color=policy_color("truth"),
        line_width=2.5,
        annotation_text=f"truth GTE {t['gte']:.3g} ± {1.96 * t['gte_se']:.2g}",
        annotation_position="top left",
    )
    if "slope" in t and np.isfinite(t.get("slope", np.nan)):
        fig.add_hline(
            y=t["slope"],
            line_color="#666",
            line_dash="dash",
            annotation_text=f"dW/dp at p: {t['slope']:.3g} ± {1.96 * t['slope_se']:.2g} (what DQ targets)",
            annotation_position="bottom left",
        )
    fig.update_layout(
        showlegend=False,
        xaxis_title="estimator",
        yaxis_title="estimated effect (time units)",
        title=wrap(
            f"{scenario}: every replication's estimate ({e.rep.nunique()} replications "
            "per estimator) against the truth",
            70,
        ),
        margin=dict(t=100),
    )
    return fig


def fig_ablation(abl: pd.DataFrame, scenario: str, L_default: int) -> go.Figure:
    """Absolute bias (solid) and standard deviation (dotted) of the DQ family against the horizon L."""
    a = abl[abl.scenario.astype(str) == scenario]
    fig = go.Figure()
    for name in [n for n in ("qdq", "wdq", "mixed_dq", "qtdq", "mixed_dq_qt") if n in set(a.estimator)]:
        g = a[a.estimator == name].sort_values("L")
        fig.add_scatter(
            x=g.L,
            y=g.bias.abs(),
            name=f"{estimator_label(name)} |bias|",
            mode="lines+markers",
            line=dict(color=estimator_color(name), width=2.5),
        )
        fig.add_scatter(
            x=g.L,
            y=g.sd,
            name=f"{estimator_label(name)} sd",
            mode="lines+markers",
            line=dict(color=estimator_color(name), width=2, dash="dot"),
            marker_symbol="diamond",
        )
    vals = list(a.bias.abs()) + list(a.sd)
    lo = np.nanmin(vals) if len(a) else 0.01
    hi = np.nanmax(vals) if len(a) else 1.0
    fig.add_scatter(
        x=[L_default, L_default],
        y=[lo, hi],
        mode="lines",
        name=f"default L = {L_default}",
        line=dict(color="#444", dash="dash", width=1.5),
    )
    n = f"{int(a.reps.min())} replications per point" if "reps" in a and len(a) else ""
    fig.update_layout(
        title=wrap(f"{scenario}: |bias| and sd of the DQ family against the horizon L", 70)
        + (f"<br><sup>{n}</sup>" if n else ""),
        xaxis_title="truncation horizon L (jobs)",
        yaxis_title="|bias| or sd (time units)",
        margin=dict(t=100),
    )
    _log_axis(fig, list(a.L), "xaxis")
    _log_axis(fig, vals)
    return fig


def fig_coverage(cov: pd.DataFrame) -> go.Figure:
    """Coverage of the nominal 95 % batch-means CIs of the truth, per estimator and scenario."""
    fig = go.Figure()
    scen = list(dict.fromkeys(cov.scenario.astype(str)))
    for name in ordered_estimators(cov.estimator):
        g = cov[cov.estimator == name].set_index(cov[cov.estimator == name].scenario.astype(str))
        fig.add_bar(
            x=scen,
            y=[g.loc[x, "coverage"] if x in g.index else None for x in scen],
            name=estimator_label(name),
            marker_color=estimator_color(name),
        )
    fig.add_hline(y=0.95, line_dash="dash", line_color="#444", annotation_text="nominal 95 %")
    med = cov.groupby("estimator").coverage.median()
    med = med.reindex(ordered_estimators(med.index))
    sub = "median over scenarios: " + ", ".join(f"{estimator_label(k)} {v:.0%}" for k, v in med.items())
    fig.update_layout(
        barmode="group",
        yaxis_range=[0, 1.05],
        xaxis_title="scenario",
        yaxis_title="fraction of CIs containing the truth",
        legend_title="estimator",
        margin=dict(t=120),
        title=wrap(f"Coverage of the truth by the 95 % batch-means CIs ({_reps(cov)} CIs per bar)", 70)
        + "<br><sup>"
        + wrap(sub, 110)
        + "</sup>",
    )
    return fig


def fig_switchback(sbt: pd.DataFrame, scenario: str = "switchback") -> go.Figure:
    """Switchback absolute bias and sd against block length, with and without burn-in."""
    s = sbt[sbt.scenario.astype(str) == scenario].copy()
    s["burn_frac"] = (s.burn_in / s.block_len).round(2)
    fig = go.Figure()
    for bf, g in s.groupby("burn_frac"):
        g = g.sort_values("block_len")
        lab = "no burn-in" if bf == 0 else f"burn-in {bf:.0%} of block"
        fig.add_scatter(
            x=g.block_len,
            y=g.bias.abs(),
            name=f"|bias|, {lab}",
            mode="lines+markers",
            line=dict(color=policy_color("switchback"), width=2.5, dash="solid" if bf == 0 else "dash"),
        )
        fig.add_scatter(
            x=g.block_len,
            y=g.sd,
            name=f"sd, {lab}",
            mode="lines+markers",
            line=dict(color="#555", width=2, dash="solid" if bf == 0 else "dash"),
        )
    n = f"{int(s.reps.min())} replications per point" if "reps" in s and len(s) else ""
    fig.update_layout(
        title=wrap("Switchback designs: |bias| and sd against the block length", 70)
        + (f"<br><sup>{n}</sup>" if n else ""),
        xaxis_title="block length (time units)",
        yaxis_title="|bias| or sd (time units)",
        margin=dict(t=100),
    )
    _log_axis(fig, list(s.block_len), "xaxis")
    _log_axis(fig, list(s.bias.abs()) + list(s.sd))
    return fig


def fig_wp(curve: pd.DataFrame, wp: pd.DataFrame, p: float = 0.5, cols: int = 4) -> go.Figure:
    """W(p) per scenario: the chord from p = 0 to 1 (slope = GTE) and the tangent at ``p`` (what DQ estimates).

    Points: mean response time of the mixed system with a fraction p of jobs on the
    treatment policy (95 % CI bars); solid line: the chord; dashed: the tangent with slope
    dW/dp at p; dotted: a line of slope = mean wDQ estimate, where ``wp`` has it.
    """
    scen = list(dict.fromkeys(curve.scenario.astype(str)))
    rows = math.ceil(len(scen) / cols)
    w = wp.set_index(wp.scenario.astype(str))
    fig = make_subplots(
        rows=rows, cols=min(cols, len(scen)), subplot_titles=scen, horizontal_spacing=0.07, vertical_spacing=0.16
    )
    for i, s in enumerate(scen):
        r, c = i // cols + 1, i % cols + 1
        g = curve[curve.scenario.astype(str) == s].sort_values("p")
        first = i == 0
        fig.add_scatter(
            x=g.p,
            y=g.mean_w,
            mode="markers",
            marker=dict(color="#222", size=7),
            error_y=dict(array=1.96 * g.se_w, thickness=1.2, width=3),
            name="W(p), 95 % CI",
            legendgroup="w",
            showlegend=first,
            row=r,
            col=c,
        )
        if s not in w.index:
            continue
        t = w.loc[s]
        w0, w1 = float(g.mean_w.iloc[0]), float(g.mean_w.iloc[-1])
        fig.add_scatter(
            x=[0, 1],
            y=[w0, w1],
            mode="lines",
            line=dict(color=policy_color("truth"), width=2.5),
            name="chord: slope = GTE",
            legendgroup="c",
            showlegend=first,
            row=r,
            col=c,
        )
        wm = float(np.interp(p, g.p, g.mean_w))
        xs = np.array([max(0.0, p - 0.35), min(1.0, p + 0.35)])
        fig.add_scatter(
            x=xs,
            y=wm + t.tangent * (xs - p),
            mode="lines",
            line=dict(color="#444", dash="dash", width=2),
            name=f"tangent at p = {p:g}: slope dW/dp",
            legendgroup="t",
            showlegend=first,
            row=r,
            col=c,
        )
        if "wdq_mean" in t and np.isfinite(t.get("wdq_mean", np.nan)):
            fig.add_scatter(
                x=xs,
                y=wm + t.wdq_mean * (xs - p),
                mode="lines",
                line=dict(color=estimator_color("wdq"), dash="dot", width=2),
                name="slope = mean wDQ estimate",
                legendgroup="d",
                showlegend=first,
                row=r,
                col=c,
            )
    big = wp.loc[wp.curvature_share.abs().idxmax()] if len(wp) else None
    sub = (
        (
            f"the tangent misses {100 * big.curvature_share:.0f} % of the GTE in {big.scenario} (largest); "
            f"n = {int(curve.n_requests.min()):,} jobs per point"
        )
        if big is not None
        else ""
    )
    fig.update_layout(
        title=wrap("W(p): mean response time of the mixed system against the treatment fraction p", 80)
        + f"<br><sup>{sub}</sup>",
        height=330 * rows + 190,
        margin=dict(t=100, b=120),
        legend=dict(orientation="h", y=-0.1 - 0.1 / rows, yanchor="top", x=0),
    )
    fig.update_xaxes(title_text="p", row=rows)
    fig.update_yaxes(title_text="W (time units)", col=1)
    return fig


def fig_search(search: pd.DataFrame) -> go.Figure:
    """Mixed DQ's sd gain over the better single DQ across the search grid, with 95 % bootstrap CIs.

    One panel per horizon factor, x = per-server load λ, one line per (policy pair, cost
    definition); the shaded band is the study's claimed 2–5×.
    """
    search = search.assign(L_factor=search.L_factor.round(2))  # nominal factor (L itself is rounded to jobs)
    facs = sorted(search.L_factor.unique())
    fig = make_subplots(
        rows=1,
        cols=len(facs),
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[f"L = {f:g} × 30·N·λ" for f in facs],
    )
    dash = {"q": "solid", "qt": "dot"}
    pairs = list(dict.fromkeys(zip(search.control, search.treatment)))
    palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    for j, f in enumerate(facs):
        for k, (c, t) in enumerate(pairs):
            for cost in sorted(search.cost.unique()):
                g = search[
                    (search.L_factor == f) & (search.control == c) & (search.treatment == t) & (search.cost == cost)
                ].sort_values("lam")
                if g.empty:
                    continue
                fig.add_scatter(
                    x=g.lam,
                    y=g.gain,
                    mode="lines+markers",
                    line=dict(color=palette[k % 6], dash=dash.get(cost, "dash")),
                    legendgroup=f"{c}{t}{cost}",
                    showlegend=j == 0,
                    name=f"{router_label(c)} → {router_label(t)}, {'time-integral' if cost == 'qt' else 'at arrivals'}",
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=g.gain_ci_hi - g.gain,
                        arrayminus=g.gain - g.gain_ci_lo,
                        thickness=1,
                        width=2,
                    ),
                    row=1,
                    col=j + 1,
                )
        fig.add_hrect(y0=2, y1=5, fillcolor="#999", opacity=0.15, line_width=0, row=1, col=j + 1)
    top = search.iloc[0]
    sub = (
        f"largest: {top.gain:.2f}× [{top.gain_ci_lo:.2f}, {top.gain_ci_hi:.2f}] at λ = {top.lam:g}, "
        f"{router_label(top.control)} → {router_label(top.treatment)}, L = {int(top.L)}, "
        f"{'time-integral' if top.cost == 'qt' else 'at-arrival'} queue length; "
        f"n = {int(search.reps.min())} replications per point; band: the study's 2–5×"
    )
    fig.update_layout(
        title=wrap("Mixed DQ's sd gain over the better single DQ (min(sd wDQ, sd qDQ) / sd mixed DQ)", 80)
        + "<br><sup>"
        + wrap(sub, 110)
        + "</sup>",
        height=620,
        margin=dict(t=150, b=190),
        legend=dict(orientation="h", y=-0.3, yanchor="top", x=0),
    )
    fig.update_xaxes(title_text="λ (per-server load)")
    fig.update_yaxes(title_text="sd gain (×)", col=1)
    return fig
