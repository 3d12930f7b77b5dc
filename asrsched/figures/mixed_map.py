"""The mixed-DQ map as a figure: mixed DQ's sd gain over the better and the worse DQ against the service law,
per horizon unit and alpha, with 95 % bootstrap CIs and the study's claimed 2–5× as a band.

Reads :func:`asrsched.abtest.mixed_map.map_table` (or the committed ``map.csv``,
:func:`asrsched.abtest.study_report.load_mixed_map`); the title counts the cells where the claim holds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.figures.abtest import estimator_color, wrap
from asrsched.figures.style import OKABE_ITO

__all__ = ["fig_mixed_map", "ALPHA_LABELS"]

#: legend names of the ways mixed DQ's weight is set
ALPHA_LABELS = {"batch": "α from batch means", "job": "α from per-job Q, arm-centred", "oracle": "oracle α (reference)"}
_ALPHA_COLORS = {"batch": OKABE_ITO[1], "job": OKABE_ITO[2], "oracle": estimator_color("mixed_dq_oracle")}
_ALPHA_SYMBOLS = {"batch": "circle", "job": "diamond", "oracle": "x-thin-open"}


def fig_mixed_map(table: pd.DataFrame, L_factor: float = 1.0, subtitle: str | None = None) -> go.Figure:
    """Gain over the better DQ (top row) and over the worse DQ (bottom row) against the service law (x, by SCV),
    one column per horizon unit, one series per alpha, at ``L_factor`` x the default L; log y axis with
    the 2–5× band and a line at 1 (no gain). A table whose ``law`` column names workloads (the ASR fleet's map,
    :mod:`asrsched.abtest.asr_mixed_map`, no SCV) puts them on x as they come and takes its ``subtitle``."""
    t = table[np.isclose(table.L_factor, L_factor)]
    if t.empty:
        raise ValueError(f"L_factor: the map has no cells at {L_factor!r} (it has {sorted(table.L_factor.unique())})")
    laws = list(dict.fromkeys(t.sort_values("scv", kind="stable").law))
    scv = t.groupby("law").scv.first()
    xlab = {law: f"{law}<br>SCV {scv[law]:.2g}" if np.isfinite(scv[law]) else str(law) for law in laws}
    units = list(dict.fromkeys(t.unit))
    fig = make_subplots(
        rows=2,
        cols=len(units),
        shared_yaxes=True,
        shared_xaxes=True,
        vertical_spacing=0.1,
        horizontal_spacing=0.05,
        subplot_titles=[f"{w} DQ, horizon in {u}" for w in ("over the better", "over the worse") for u in units],
    )
    alphas = [a for a in ALPHA_LABELS if a in set(t.alpha)]
    off = {a: (i - (len(alphas) - 1) / 2) * 0.15 for i, a in enumerate(alphas)}
    for r, g in enumerate(("gain_better", "gain_worse"), start=1):
        for c, u in enumerate(units, start=1):
            for a in alphas:
                d = t[(t.unit == u) & (t.alpha == a)].set_index("law").reindex(laws)
                fig.add_scatter(
                    x=[laws.index(law) + off[a] for law in laws],
                    y=d[g],
                    mode="markers",
                    marker=dict(color=_ALPHA_COLORS[a], symbol=_ALPHA_SYMBOLS[a], size=9),
                    name=ALPHA_LABELS[a],
                    legendgroup=a,
                    showlegend=r == 1 and c == 1,
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=d[f"{g}_ci_hi"] - d[g],
                        arrayminus=d[g] - d[f"{g}_ci_lo"],
                        thickness=1.2,
                        width=3,
                    ),
                    customdata=np.stack([d.index, d[f"{g}_ci_lo"], d[f"{g}_ci_hi"], d.reps], axis=-1),
                    hovertemplate="%{customdata[0]}: %{y:.2f}× [%{customdata[1]:.2f}, %{customdata[2]:.2f}], "
                    "n = %{customdata[3]}<extra>" + ALPHA_LABELS[a] + "</extra>",
                    row=r,
                    col=c,
                )
            fig.add_hrect(y0=2, y1=5, fillcolor="#999", opacity=0.15, line_width=0, row=r, col=c)
            fig.add_hline(y=1, line=dict(color="#555", dash="dot", width=1), row=r, col=c)
    own = t[t.alpha != "oracle"]
    n_hold = int((own.verdict == "holds").sum())
    reps = f"{int(t.reps.min())}–{int(t.reps.max())}" if t.reps.nunique() > 1 else str(int(t.reps.min()))
    title = f"Mixed DQ's sd gain over DQ: the 2–5× claim holds in {n_hold} of {len(own)} in-experiment cells"
    sub = subtitle or (
        f"L = {L_factor:g} × 30·N·λ jobs or τ = L/(N·λ); n = {reps} replications per law; x: law (SCV); "
        "bars: 95 % bootstrap CIs; band: 2–5×"
    )
    fig.update_layout(
        title=wrap(title, 80) + "<br><sup>" + wrap(sub, 110) + "</sup>",
        height=720,
        margin=dict(t=120, b=130),
        legend=dict(orientation="h", y=-0.3, yanchor="top", x=0),
    )
    lo = float(np.nanmin(t[["gain_better_ci_lo", "gain_worse_ci_lo"]].to_numpy(float)))
    hi = float(np.nanmax(t[["gain_better_ci_hi", "gain_worse_ci_hi"]].to_numpy(float)))
    fig.update_yaxes(type="log", range=[np.log10(min(lo, 0.8) * 0.9), np.log10(max(hi, 5.5) * 1.1)])
    fig.update_yaxes(title_text="sd gain (×)", col=1)
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(laws))), ticktext=[xlab[x] for x in laws])
    return fig
