"""Plotly figures of the estimator study (house style, titles that state the finding).

All builders take the tables of :mod:`asrsched.abtest.study` (``summarize``,
``ablation_table``, ``switchback_table``, ``coverage_table``) or a
:class:`~asrsched.abtest.study.StudyResult`, and return a ``go.Figure``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from asrsched.abtest.study import ESTIMATOR_ORDER, StudyResult
from asrsched.figures.style import policy_color

__all__ = ["fig_overview", "fig_scenario", "fig_estimates", "fig_ablation", "fig_coverage", "fig_switchback",
           "LABELS", "estimator_color", "ordered_estimators"]

LABELS = {
    "naive": "naive",
    "group": "group",
    "switchback": "switchback",
    "qdq": "qDQ",
    "wdq": "wDQ",
    "mixed_dq": "mixed DQ",
    "mixed_dq_oracle": "mixed DQ (oracle α)",
}


def estimator_color(name: str) -> str:
    """The house colour of an estimator (the oracle mixed DQ gets its own dark shade)."""
    return "#8c2d04" if name == "mixed_dq_oracle" else policy_color(name)


def ordered_estimators(names) -> list:
    """Distinct estimator names in the study's display order (:data:`asrsched.abtest.study.ESTIMATOR_ORDER`)."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: ESTIMATOR_ORDER.index(n) if n in ESTIMATOR_ORDER else 99)


def fig_overview(summary: pd.DataFrame, include_oracle: bool = False) -> go.Figure:
    """RMSE of every estimator in every scenario (log scale); title: who wins how often."""
    s = summary if include_oracle else summary[summary.estimator != "mixed_dq_oracle"]
    scen = list(dict.fromkeys(s.scenario.astype(str)))
    fig = go.Figure()
    for name in ordered_estimators(s.estimator):
        g = s[s.estimator == name].set_index(s[s.estimator == name].scenario.astype(str))
        fig.add_bar(x=scen, y=[g.loc[x, "rmse"] if x in g.index else None for x in scen], name=LABELS.get(name, name),
                    marker_color=estimator_color(name))
    wins = s.loc[s.groupby("scenario", observed=True)["mse"].idxmin()].estimator.value_counts()
    won = ", ".join(f"{LABELS.get(k, k)} in {v}/{len(scen)}" for k, v in wins.items())
    fig.update_layout(barmode="group", title=f"Lowest RMSE: {won} scenarios",
                      xaxis_title="scenario", yaxis_title="RMSE of the GTE estimate (mean response time units)",
                      yaxis_type="log", legend_title="estimator")
    return fig


def fig_scenario(summary: pd.DataFrame, scenario: str) -> go.Figure:
    """|bias|, standard deviation and RMSE per estimator for one scenario (log scale)."""
    s = summary[(summary.scenario.astype(str) == scenario)].set_index("estimator")
    names = ordered_estimators(s.index)
    fig = go.Figure()
    for col, label, pat in (("bias", "|bias|", ""), ("sd", "standard deviation", "/"), ("rmse", "RMSE", "x")):
        fig.add_bar(x=[LABELS.get(n, n) for n in names], y=[abs(s.loc[n, col]) for n in names], name=label,
                    marker_color=[estimator_color(n) for n in names], marker_pattern_shape=pat,
                    marker_line_color="#222", marker_line_width=0.6)
    cand = [n for n in names if n != "mixed_dq_oracle"]
    best = min(cand, key=lambda n: s.loc[n, "mse"])
    nv = s.loc["naive"]
    fig.update_layout(
        barmode="group", yaxis_type="log", legend_title="bars (left to right)",
        title=(f"{scenario}: lowest RMSE {LABELS.get(best, best)} ({s.loc[best, 'rmse']:.3g}); "
               f"naive shrinks the effect by {100 * (1 - nv['mean'] / nv['truth']):.0f} %"),
        xaxis_title="estimator", yaxis_title="error (mean response time units)")
    return fig


def fig_estimates(res: StudyResult, scenario: str) -> go.Figure:
    """Every replication's estimate per estimator, with the truth (GTE) and the slope dW/dp at p."""
    e = res.estimates
    e = e[(e.scenario.astype(str) == scenario) & e.headline.astype(bool)]
    t = res.truth.set_index("scenario").loc[scenario]
    fig = go.Figure()
    for name in ordered_estimators(e.estimator):
        v = e[e.estimator == name]["estimate"]
        fig.add_box(y=v, name=LABELS.get(name, name), marker_color=estimator_color(name), boxpoints="all", jitter=0.4,
                    pointpos=0, line_width=1.5)
    fig.add_hline(y=t["gte"], line_color=policy_color("truth"), line_width=2.5,
                  annotation_text=f"truth GTE {t['gte']:.3g}", annotation_position="top left")
    if "slope" in t and np.isfinite(t.get("slope", np.nan)):
        fig.add_hline(y=t["slope"], line_color="#666", line_dash="dash",
                      annotation_text=f"dW/dp at p: {t['slope']:.3g} (what DQ targets)",
                      annotation_position="bottom left")
    fig.update_layout(showlegend=False, xaxis_title="estimator",
                      yaxis_title="estimated effect on mean response time",
                      title=f"{scenario}: {e.rep.nunique()} replications; truth {t['gte']:.3g}, naive near "
                            f"{e[e.estimator == 'naive'].estimate.mean():.3g}")
    return fig


def fig_ablation(abl: pd.DataFrame, scenario: str, L_default: int) -> go.Figure:
    """Bias (solid) and standard deviation (dotted) of the DQ family against the horizon L."""
    a = abl[abl.scenario.astype(str) == scenario]
    fig = go.Figure()
    for name in ("qdq", "wdq", "mixed_dq"):
        g = a[a.estimator == name].sort_values("L")
        fig.add_scatter(x=g.L, y=g.bias.abs(), name=f"{LABELS[name]} |bias|", mode="lines+markers",
                        line=dict(color=estimator_color(name), width=2.5))
        fig.add_scatter(x=g.L, y=g.sd, name=f"{LABELS[name]} sd", mode="lines+markers",
                        line=dict(color=estimator_color(name), width=2, dash="dot"), marker_symbol="diamond")
    lo = np.nanmin([a.bias.abs().min(), a.sd.min()]) if len(a) else 0.01
    hi = np.nanmax([a.bias.abs().max(), a.sd.max()]) if len(a) else 1.0
    fig.add_scatter(x=[L_default, L_default], y=[lo, hi], mode="lines", name=f"default L = {L_default}",
                    line=dict(color="#444", dash="dash", width=1.5))
    best = a.loc[a.rmse.idxmin()] if len(a) else None
    title = f"{scenario}: bias falls and sd grows with L"
    if best is not None:
        title += f"; lowest RMSE {LABELS[best.estimator]} at L={int(best.L)}"
    fig.update_layout(title=title, xaxis_type="log", yaxis_type="log",
                      xaxis_title="truncation horizon L (jobs)", yaxis_title="|bias| or sd (time units)")
    return fig


def fig_coverage(cov: pd.DataFrame) -> go.Figure:
    """Coverage of the nominal 95 % batch-means CIs of the truth, per estimator and scenario."""
    fig = go.Figure()
    scen = list(dict.fromkeys(cov.scenario.astype(str)))
    for name in ordered_estimators(cov.estimator):
        g = cov[cov.estimator == name].set_index(cov[cov.estimator == name].scenario.astype(str))
        fig.add_bar(x=scen, y=[g.loc[x, "coverage"] if x in g.index else None for x in scen],
                    name=LABELS.get(name, name), marker_color=estimator_color(name))
    fig.add_hline(y=0.95, line_dash="dash", line_color="#444", annotation_text="nominal 95 %")
    med = cov.groupby("estimator").coverage.median()
    med = med.reindex(ordered_estimators(med.index))
    fig.update_layout(barmode="group", yaxis_range=[0, 1.05], xaxis_title="scenario",
                      yaxis_title="fraction of CIs containing the truth", legend_title="estimator",
                      title="95 % CIs: coverage of the truth follows the bias<br><sup>median over scenarios: "
                            + ", ".join(f"{LABELS.get(k, k)} {v:.0%}" for k, v in med.items()) + "</sup>")
    return fig


def fig_switchback(sbt: pd.DataFrame, scenario: str = "switchback") -> go.Figure:
    """Switchback bias and sd against block length, with and without burn-in."""
    s = sbt[sbt.scenario.astype(str) == scenario].copy()
    s["burn_frac"] = (s.burn_in / s.block_len).round(2)
    fig = go.Figure()
    for bf, g in s.groupby("burn_frac"):
        g = g.sort_values("block_len")
        lab = "no burn-in" if bf == 0 else f"burn-in {bf:.0%} of block"
        fig.add_scatter(x=g.block_len, y=g.bias.abs(), name=f"|bias|, {lab}", mode="lines+markers",
                        line=dict(color=policy_color("switchback"), width=2.5, dash="solid" if bf == 0 else "dash"))
        fig.add_scatter(x=g.block_len, y=g.sd, name=f"sd, {lab}", mode="lines+markers",
                        line=dict(color="#555", width=2, dash="solid" if bf == 0 else "dash"))
    best = s.loc[s.rmse.idxmin()] if len(s) else None
    title = "Switchback: carry-over bias shrinks with longer blocks and burn-in"
    if best is not None:
        title += f"; best block {best.block_len:g} (burn-in {best.burn_in:g})"
    ticks = sorted(s.block_len.unique())
    fig.update_layout(title=title, xaxis_type="log", yaxis_type="log", xaxis_title="block length (time units)",
                      yaxis_title="|bias| or sd (time units)",
                      xaxis=dict(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks]))
    return fig
