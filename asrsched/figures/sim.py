"""Figure builders for the simulator notebooks (policy sweep, workload drift).

Each returns a plotly figure in the house style (:mod:`asrsched.figures.style`), with a
title that states what the data shows, axis titles with units and one fixed
colour per policy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.core.metrics import latency_cdf
from asrsched.figures.style import policy_color

__all__ = ["fig_relative_change", "fig_cdf", "fig_throughput", "fig_tradeoff", "fig_drift", "fig_occupancy"]

_LABEL = {"p50_e2el_ms": "P50 E2EL", "p90_e2el_ms": "P90 E2EL", "mean_ttft_ms": "mean TTFT",
          "p50_ttft_ms": "P50 TTFT", "p99_e2el_ms": "P99 E2EL"}


def fig_relative_change(rc: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"),
                        workload: str = "librispeech") -> go.Figure:
    """Percent change vs FCFS against arrival rate, one panel per metric."""
    d = rc[(rc.workload == workload) & (rc.policy != "fcfs")]
    fig = make_subplots(rows=1, cols=len(metrics), shared_yaxes=False,
                        subplot_titles=[_LABEL.get(m, m) for m in metrics])
    for j, m in enumerate(metrics, start=1):
        for pol, g in d.groupby("policy", sort=False):
            fig.add_trace(go.Scatter(x=g.rate, y=g[f"{m}_change_pct"], name=pol, legendgroup=pol,
                                     showlegend=j == 1, mode="lines+markers",
                                     line=dict(color=policy_color(pol))), row=1, col=j)
        fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=1, col=j)
        fig.update_xaxes(title_text="arrival rate (req/s)", row=1, col=j)
    fig.update_yaxes(title_text="change vs FCFS (%)", row=1, col=1)
    best = d.groupby("policy")[f"{metrics[0]}_change_pct"].min()
    lead = ", ".join(f"{p.upper()} {v:+.0f} %" for p, v in best.items())
    fig.update_layout(title=f"{workload}: best {_LABEL.get(metrics[0], metrics[0])} change vs FCFS — {lead}",
                      height=460)
    return fig


def fig_cdf(results: Mapping[str, pd.DataFrame], metric: str = "e2el", title: str | None = None) -> go.Figure:
    """Empirical CDFs of a latency (s) per policy."""
    fig = go.Figure()
    p50 = {}
    for pol, df in results.items():
        x, y = latency_cdf(df[metric].to_numpy(float), points=400)
        p50[pol] = float(np.median(df[metric]))
        fig.add_trace(go.Scatter(x=x, y=y, name=pol, mode="lines", line=dict(color=policy_color(pol), width=2.5)))
    best = min(p50, key=p50.get) if p50 else ""
    name = metric.upper()
    fig.update_layout(
        title=title or f"{name} CDF: {best.upper()} has the lowest median ({p50.get(best, float('nan')):.2f} s)",
        xaxis_title=f"{name} (s)", yaxis_title="fraction of requests", xaxis_type="log")
    return fig


def fig_throughput(df: pd.DataFrame, workload: str | None = None) -> go.Figure:
    """Request throughput against offered rate per policy (all policies should coincide)."""
    d = df if workload is None else df[df.workload == workload]
    g = d.groupby(["policy", "rate"], as_index=False)["request_throughput"].mean()
    fig = go.Figure()
    for pol, gg in g.groupby("policy", sort=False):
        fig.add_trace(go.Scatter(x=gg.rate, y=gg.request_throughput, name=pol, mode="lines+markers",
                                 line=dict(color=policy_color(pol))))
    top = g.groupby("rate").request_throughput
    spread = float(((top.max() - top.min()) / top.mean()).max() * 100)
    fig.add_trace(go.Scatter(x=g.rate.unique(), y=g.rate.unique(), name="offered", mode="lines",
                             line=dict(color="#aaa", dash="dash")))
    fig.update_layout(title=f"Throughput is the same for every policy (max spread {spread:.1f} %)"
                      + (f" — {workload}" if workload else ""),
                      xaxis_title="arrival rate (req/s)", yaxis_title="request throughput (req/s)")
    return fig


def fig_tradeoff(df: pd.DataFrame, label_col: str = "label", title_suffix: str = "") -> go.Figure:
    """P50 against P90 E2EL (s) per policy variant: lower-left is better on both.

    The title names the variants on the Pareto front (none better on both metrics).
    """
    fig = go.Figure()
    x = df["p50_e2el_ms"].to_numpy(float) / 1e3
    y = df["p90_e2el_ms"].to_numpy(float) / 1e3
    labels = [r.get(label_col, r["policy"]) for _, r in df.iterrows()]
    front = [labels[i] for i in range(len(df))
             if not any((x[j] <= x[i] and y[j] <= y[i]) and (x[j] < x[i] or y[j] < y[i]) for j in range(len(df)))]
    for i, (_, r) in enumerate(df.iterrows()):
        fig.add_trace(go.Scatter(x=[x[i]], y=[y[i]], mode="markers+text", text=[labels[i]],
                                 textposition="middle right" if i % 2 == 0 else "middle left", name=labels[i],
                                 marker=dict(size=13, color=policy_color(r["policy"]),
                                             line=dict(width=2, color="#222") if labels[i] in front else None)))
    pad_x = 0.25 * (x.max() - x.min() + 1e-9)
    fig.update_xaxes(range=[x.min() - pad_x, x.max() + pad_x])
    score = np.maximum(x / x.min(), y / y.min())  # worst relative gap to the best P50 and the best P90
    k = int(np.argmin(score))
    fig.update_layout(title=f"{labels[k]} balances P50 ({x[k]:.1f} s) and P90 ({y[k]:.1f} s) best{title_suffix}",
                      xaxis_title="P50 E2EL (s)", yaxis_title="P90 E2EL (s)", showlegend=False)
    return fig


def fig_drift(results: Mapping[str, pd.DataFrame], window_s: float = 30.0, q: float = 0.9,
              phase_marks: list[float] | None = None) -> go.Figure:
    """Rolling P50 and P``q`` E2EL (s) by arrival time per policy, over the mean audio duration."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    worst = {}
    for pol, df in results.items():
        d = df.sort_values("arrival")
        b = (d.arrival // window_s) * window_s
        g = d.groupby(b)["e2el"]
        p50, pq = g.median(), g.quantile(q)
        worst[pol] = float(pq.max())
        fig.add_trace(go.Scatter(x=p50.index, y=p50.values, name=f"{pol} P50", legendgroup=pol,
                                 line=dict(color=policy_color(pol), width=2.5)), row=1, col=1)
        fig.add_trace(go.Scatter(x=pq.index, y=pq.values, name=f"{pol} P{int(q * 100)}", legendgroup=pol,
                                 line=dict(color=policy_color(pol), dash="dot")), row=1, col=1)
    any_df = next(iter(results.values()))
    d = any_df.sort_values("arrival")
    mdur = d.groupby((d.arrival // window_s) * window_s)["duration"].mean()
    fig.add_trace(go.Bar(x=mdur.index, y=mdur.values, name="mean audio duration", marker_color="#bbb"),
                  row=2, col=1)
    for t in phase_marks or []:
        fig.add_vline(x=t, line=dict(color="#666", dash="dash"))
    best = min(worst, key=worst.get)
    fig.update_yaxes(title_text="E2EL (s)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="audio (s)", row=2, col=1)
    fig.update_xaxes(title_text="arrival time (s)", row=2, col=1)
    fig.update_layout(title=f"Under drift, {best.upper()} keeps the worst-window P{int(q * 100)} lowest "
                      f"({worst[best]:.1f} s)", height=620)
    return fig


def fig_occupancy(timelines: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Queue depth (waiting requests) over time per policy."""
    fig = go.Figure()
    for pol, tl in timelines.items():
        fig.add_trace(go.Scatter(x=tl.time, y=tl.waiting, name=pol, mode="lines",
                                 line=dict(color=policy_color(pol))))
    peaks = {pol: int(tl.waiting.max()) if len(tl) else 0 for pol, tl in timelines.items()}
    lo, hi = min(peaks, key=peaks.get), max(peaks, key=peaks.get)
    fig.update_layout(title=f"Peak queue: {lo.upper()} {peaks[lo]} vs {hi.upper()} {peaks[hi]} waiting requests",
                      xaxis_title="time (s)", yaxis_title="waiting requests")
    return fig
