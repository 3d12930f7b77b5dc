"""Figures of the A/B planner (:mod:`asrsched.abtest.planner`, :mod:`asrsched.abtest.plan_report`).

:func:`fig_plan`: left, each estimator's sd (% of the control's mean E2EL) against the experiment
length on log-log axes, with its bootstrap CI and the fitted sd law; right, its power curve for the
operator's effect, with the target power and each usable estimator's required length marked. A power
curve is drawn only where the estimator's own CI keeps the false-positive rate within twice the level
(elsewhere its "detections" are noise); dashed curves belong to estimators that are not usable
(biased, wrong sign).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.abtest.plan_report import design_label, false_positive_rate, power_at
from asrsched.core.labels import estimator_label

__all__ = ["fig_plan"]

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


def _name(r) -> str:
    return f"{design_label(r['design'], r['block_s'])} / {estimator_label(r['estimator'])}"


def fig_plan(prec: pd.DataFrame, laws: pd.DataFrame, plan: pd.DataFrame, factor: str = "routing") -> go.Figure:
    """sd law and power curves per design and estimator of one test (``factor``: ``"routing"`` or
    ``"scheduling"``; ``plan.attrs`` carries effect, power and level)."""
    if factor not in set(plan.factor):
        raise ValueError(f"factor: {factor!r} not in the plan ({sorted(set(plan.factor))})")
    a = plan.attrs
    keep = plan.factor.to_numpy() == factor
    laws, plan, prec = laws[keep], plan[keep], prec[prec.factor == factor]
    effect, power, level = a.get("effect", 0.1), a.get("power", 0.8), a.get("level", 0.05)
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=(
            "sd of estimate (% of control E2EL)",
            f"power, {100 * effect:.0f} % change, level {level:g}",
        ),
    )
    lo_x = float(prec.length_s.min()) / 60
    req = plan.required_s.to_numpy(float)
    hi_x = float(max(prec.length_s.max(), np.max(req[np.isfinite(req)], initial=0.0))) / 60
    grid = np.geomspace(lo_x, 2 * hi_x, 200)
    for i, (law, row) in enumerate(zip(laws.to_dict("records"), plan.to_dict("records"))):
        color = _PALETTE[i % len(_PALETTE)]
        name = _name(law)
        g = prec[
            (prec.factor == law["factor"])
            & (prec.design == law["design"])
            & (prec.block_s == law["block_s"])
            & (prec.estimator == law["estimator"])
        ]
        m = g.control_mean.to_numpy(float)
        y = 100 * g.sd.to_numpy(float) / m
        fig.add_trace(
            go.Scatter(
                x=g.length_s / 60,
                y=y,
                mode="markers",
                name=name,
                legendgroup=name,
                marker=dict(color=color, size=8),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=100 * g.sd_ci_hi.to_numpy(float) / m - y,
                    arrayminus=y - 100 * g.sd_ci_lo.to_numpy(float) / m,
                ),
                hovertemplate=f"{name}<br>%{{x:.1f}} min: sd %{{y:.2f}} %<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=100 * law["sd_a"] * (grid * 60) ** law["sd_exponent"] / law["control_mean"],
                mode="lines",
                line=dict(color=color, dash="dot", width=1),
                name=f"{name}: sd ~ T^{law['sd_exponent']:.2f}",
                legendgroup=name,
                showlegend=False,
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
        usable = row["status"].startswith("ok") or row["status"] == "extrapolated"
        pw = power_at(law, grid * 60, effect, level)
        pw[false_positive_rate(law, grid * 60, level) > 2 * level] = np.nan  # an invalid test has no power to show
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=pw,
                mode="lines",
                line=dict(color=color, dash="solid" if usable else "dash", width=2 if row["recommended"] else 1.2),
                name=f"{name} ({row['status']})",
                legendgroup=name,
                showlegend=False,
                hovertemplate=f"{name}<br>%{{x:.1f}} min: power %{{y:.2f}}<extra></extra>",
            ),
            row=1,
            col=2,
        )
        if usable and np.isfinite(row["required_s"]):
            fig.add_trace(
                go.Scatter(
                    x=[row["required_s"] / 60],
                    y=[power],
                    mode="markers",
                    marker=dict(color=color, size=11, symbol="star" if row["recommended"] else "circle-open"),
                    name=f"{name}: {row['required_s'] / 60:.0f} min",
                    legendgroup=name,
                    showlegend=False,
                ),
                row=1,
                col=2,
            )
    fig.add_hline(y=power, line=dict(color="grey", dash="dash", width=1), row=1, col=2)
    fig.update_xaxes(type="log", title_text="experiment length (min)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="experiment length (min)", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], title_text="power", row=1, col=2)
    rec = plan[plan.recommended]
    found = (
        "; ".join(
            f"{r.setting} / {estimator_label(r.estimator)} in {r.required_s / 60:.0f} min" for r in rec.itertuples()
        )
        or "no design reaches it without a bias beyond the limit"
    )
    fig.update_layout(
        title=dict(
            text=f"{factor.capitalize()} test, {100 * effect:.0f} % change at power {power:g}: shortest valid "
            f"unbiased experiment {found}"
        ),
        legend=dict(orientation="h", y=-0.25),
        height=620,
    )
    return fig
