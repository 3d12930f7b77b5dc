"""Figures of the latency frontier (:mod:`asrsched.sim.frontier`, :mod:`asrsched.sim.frontier_report`).

:func:`fig_frontier`: one cell (service, workload, ρ, estimate error): every policy as a point of
(P50 E2EL change, P90 E2EL change) against FCFS in percent, with 95 % CI bars on both axes, the Pareto set
joined by a line and the two recommendations (P90 and P99 rules) ringed. Axes span every point and every
CI bar, so nothing is clipped. :func:`frontier_explorer`: dropdowns for service, workload, load and
estimate error over a frontier table; the figure and the recommendation move with them. :func:`fig_uploads`: the
long-upload study (:mod:`asrsched.sim.upload_study`), short requests' P90 against uploads' P50 per policy and sizing;
:func:`fig_upload_engine`: a real-engine long-upload run beside the simulator's predictions of it.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from asrsched.figures.panel import ExplorerFigure, Panel
from asrsched.figures.style import OKABE_ITO, policy_color, policy_family
from asrsched.sim.frontier_report import CELL, recommendations

__all__ = ["fig_frontier", "frontier_explorer", "cell_title", "draw_frontier", "fig_uploads", "fig_upload_engine"]


def cell_title(cell: dict, n_seeds: int, n_requests: int) -> str:
    """The figure title of one cell: its setting, the run length and, in overload, the transient label."""
    over = cell["rho"] >= 1
    return (
        f"{'OVERLOAD TRANSIENT — ' if over else ''}{cell['service']}, {cell['workload']}, ρ = {cell['rho']:.2f}, "
        f"{cell['error']} estimates: change vs FCFS ({n_seeds} seeds x {n_requests} requests)"
    )


def draw_frontier(fig: go.Figure, table: pd.DataFrame, cell: dict) -> None:
    """Draw one cell's frontier into ``fig`` (cleared first)."""
    g = table
    for k in CELL:
        g = g[g[k] == cell[k]]
    if g.empty:
        raise ValueError(f"cell: no rows for {cell} in the table")
    rec = recommendations(g)
    x, y = g["p50_e2el_ms_change_pct"].to_numpy(float), g["p90_e2el_ms_change_pct"].to_numpy(float)
    xl, xh = g["p50_e2el_ms_change_ci_low"].to_numpy(float), g["p50_e2el_ms_change_ci_high"].to_numpy(float)
    yl, yh = g["p90_e2el_ms_change_ci_low"].to_numpy(float), g["p90_e2el_ms_change_ci_high"].to_numpy(float)
    fig.data = []
    for fam in dict.fromkeys(policy_family(p) for p in g.policy):
        m = np.array([policy_family(p) == fam for p in g.policy])
        fig.add_scatter(
            x=x[m],
            y=y[m],
            mode="markers",
            name=fam,
            text=list(g.policy[m]),
            marker=dict(size=10, color=policy_color(fam)),
            error_x=dict(
                type="data", symmetric=False, array=np.nan_to_num(xh[m] - x[m]), arrayminus=np.nan_to_num(x[m] - xl[m])
            ),
            error_y=dict(
                type="data", symmetric=False, array=np.nan_to_num(yh[m] - y[m]), arrayminus=np.nan_to_num(y[m] - yl[m])
            ),
            hovertemplate="%{text}<br>P50 %{x:+.1f} %<br>P90 %{y:+.1f} %<extra></extra>",
        )
    par = g[g["pareto"].to_numpy(bool)].sort_values("p50_e2el_ms_change_pct")
    fig.add_scatter(
        x=par["p50_e2el_ms_change_pct"],
        y=par["p90_e2el_ms_change_pct"],
        mode="lines",
        name="Pareto set",
        line=dict(color="#444", dash="dot"),
        hoverinfo="skip",
    )
    for _, r in rec.iterrows():
        fig.add_scatter(
            x=[r["p50_e2el_ms_change_pct"]],
            y=[r["p90_e2el_ms_change_pct"]],
            mode="markers",
            name=f"recommended ({r['rule'].upper()} no worse): {r['policy']}",
            marker=dict(
                size=22, symbol="circle-open", line=dict(width=2), color="#d62728" if r["rule"] == "p90" else "#1f77b4"
            ),
        )
    lo = np.nanmin(np.concatenate([x, xl, y, yl, [0.0]]))
    hi = np.nanmax(np.concatenate([x, xh, y, yh, [0.0]]))
    pad = 0.05 * max(hi - lo, 1.0)
    n_seeds = int(g["n_seeds"].max()) if "n_seeds" in g else 0
    n_req = int(g["n_requests"].max()) if "n_requests" in g else 0
    fig.update_layout(
        title=cell_title(cell, n_seeds, n_req),
        xaxis=dict(
            title="P50 E2EL change vs FCFS (%)",
            range=[np.nanmin(np.r_[x, xl, 0.0]) - pad, np.nanmax(np.r_[x, xh, 0.0]) + pad],
        ),
        yaxis=dict(
            title="P90 E2EL change vs FCFS (%)",
            range=[np.nanmin(np.r_[y, yl, 0.0]) - pad, np.nanmax(np.r_[y, yh, 0.0]) + pad],
        ),
        height=520,
    )


def fig_frontier(table: pd.DataFrame, cell: dict) -> go.Figure:
    """One cell's frontier (``cell``: service, workload, rho, error) as a static figure."""
    fig = go.Figure()
    draw_frontier(fig, table, cell)
    return fig


def frontier_explorer(table: pd.DataFrame, notebook: str = "02_policy_sweep") -> Panel:
    """Dropdowns for service, workload, load and estimate error over ``table`` (:func:`frontier_table`)."""
    opts = {k: sorted(set(table[k])) for k in CELL}
    start = {k: opts[k][0] for k in CELL}
    for k, want in (("workload", "librispeech"), ("rho", 0.9), ("error", "real"), ("service", "cpu")):
        if want in opts[k]:
            start[k] = want
    ws = {k: W.Dropdown(options=opts[k], value=start[k], description=k) for k in CELL}
    fig = ExplorerFigure()
    out = W.HTML()

    def update(*_):
        cell = {k: ws[k].value for k in CELL}
        with fig.batch_update():
            draw_frontier(fig, table, cell)
        sub = table
        for k in CELL:
            sub = sub[sub[k] == cell[k]]
        rows = recommendations(sub)
        out.value = "<br>".join(
            f"<b>{r['rule'].upper()} rule</b>: {r['policy']}: P50 {r['p50_e2el_ms_change_pct']:+.1f} % "
            f"[{r['p50_e2el_ms_change_ci_low']:+.1f}, {r['p50_e2el_ms_change_ci_high']:+.1f}], P90 "
            f"{r['p90_e2el_ms_change_pct']:+.1f} %, P99 {r['p99_e2el_ms_change_pct']:+.1f} % "
            f"({r['n_qualified']} of {r['n_policies']} policies qualify)"
            for _, r in rows.iterrows()
        )

    controls = tuple(ws.values())
    for w in controls:
        w.observe(update, names="value")
    update()
    return Panel(
        [W.HBox(list(controls)), fig, out], fig=fig, name="frontier_explorer", notebook=notebook, controls=controls
    )


_SIZING_SYMBOL = {"chunk": "circle", "upload": "square", "remaining": "diamond"}


def fig_uploads(table: pd.DataFrame) -> go.Figure:
    """The long-upload study's table (:func:`asrsched.sim.upload_study.upload_table`): one panel per load, each
    policy/mode/sizing a point of (short requests' P90 E2EL, uploads' P50 E2EL) in seconds, means over seeds; the
    colour is the policy, the symbol the sizing, filled for vLLM's chunks submitted together (``chunks``) and open
    for a streamed upload's chunks one after another (``streamed``); ``sequence``, the CPU server's one job, is a
    cross. Axes span every point."""
    from plotly.subplots import make_subplots

    rhos = sorted(table.rho.unique())
    fig = make_subplots(rows=1, cols=len(rhos), subplot_titles=[f"ρ = {r:.2f}" for r in rhos], shared_yaxes=True)
    kinds: dict[str, str] = {}  # legend: one entry per policy (colour) and per sizing and mode (symbol)
    for j, rho in enumerate(rhos, start=1):
        g = table[table.rho == rho]
        for _, r in g.iterrows():
            sym = "x" if r["mode"] == "sequence" else _SIZING_SYMBOL.get(r["sizing"], "circle")
            sym += "-open" if r["mode"] == "streamed" else ""
            kind = "one job" if r["mode"] == "sequence" else f"{r['sizing']} sizing"
            kinds[kind + (" · streamed" if r["mode"] == "streamed" else "")] = sym
            fig.add_scatter(
                x=[r["short_p90_e2el_ms"] / 1e3],
                y=[r["upload_p50_e2el_ms"] / 1e3],
                mode="markers",
                showlegend=False,
                marker=dict(size=11, symbol=sym, color=policy_color(policy_family(r["base_policy"]))),
                hovertemplate=f"{r['policy']}<br>short P90 %{{x:.2f}} s<br>upload P50 %{{y:.1f}} s<extra></extra>",
                row=1,
                col=j,
            )
        fig.update_xaxes(title_text="short requests' P90 E2EL (s)", row=1, col=j, rangemode="tozero")
    for p in dict.fromkeys(table["base_policy"]):
        fig.add_scatter(
            x=[None], y=[None], mode="markers", name=str(p), marker=dict(size=11, color=policy_color(policy_family(p)))
        )
    for kind, sym in kinds.items():
        fig.add_scatter(x=[None], y=[None], mode="markers", name=kind, marker=dict(size=11, symbol=sym, color="grey"))
    fig.update_yaxes(title_text="uploads' P50 E2EL (s)", row=1, col=1, rangemode="tozero")
    fig.update_layout(title="Short requests beside 1–10-minute uploads: policy and chunk sizing (means over seeds)")
    return fig


_MODE_MARKER = {"chunks": ("square-open", OKABE_ITO[1]), "streamed": ("diamond-open", OKABE_ITO[2])}


def fig_upload_engine(results: pd.DataFrame, pred: pd.DataFrame, title: str) -> go.Figure:
    """A real-engine long-upload run (``results.csv`` of :mod:`asrsched.serving.upload_engine_study`) beside the
    simulator's predictions of it (:func:`~asrsched.serving.upload_engine_study.resimulate`, one row per cell and
    upload mode): per cell, the short requests' P50 and P90 E2EL measured (dots, 95 % CI bars) and predicted under
    each mode (open symbols). Axes start at zero and span every point and bar."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["short requests' P50 E2EL", "short requests' P90 E2EL"])
    for j, q in enumerate(("p50", "p90"), start=1):
        m = f"short_{q}_e2el_s"
        fig.add_scatter(
            x=results["cell"],
            y=results[m],
            error_y=dict(
                type="data",
                symmetric=False,
                array=results[f"{m}_ci_high"] - results[m],
                arrayminus=results[m] - results[f"{m}_ci_low"],
            ),
            mode="markers",
            name="measured (95 % CI)",
            legendgroup="measured",
            showlegend=j == 1,
            marker=dict(size=10, color="black"),
            row=1,
            col=j,
        )
        for mode, g in pred.groupby("sim_mode", sort=True):
            sym, colour = _MODE_MARKER.get(str(mode), ("circle-open", "grey"))
            fig.add_scatter(
                x=g["cell"],
                y=g[f"sim_{m}"],
                mode="markers",
                name=f"simulator, {mode}",
                legendgroup=str(mode),
                showlegend=j == 1,
                marker=dict(size=11, symbol=sym, color=colour),  # the same colour in both panels
                row=1,
                col=j,
            )
        fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=j)
    fig.update_layout(title=title)
    return fig
