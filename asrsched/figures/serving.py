"""Figure builders and the explorer panel for the real-serving notebook (04).

Real runs are solid lines, the simulator's prediction of the same runs dashed, one
colour per policy (:func:`asrsched.figures.style.policy_color`); titles state what the data
shows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.core.metrics import latency_cdf
from asrsched.core.service import ServiceModel
from asrsched.figures.style import policy_color

__all__ = ["load_levels", "fig_cdfs", "fig_latency_vs_load", "fig_prediction", "fig_calibration",
           "headline_change"]

_NAMES = {"e2el": "E2EL", "ttft": "TTFT", "queue_delay": "queue delay"}
_MODE = {"sim": "predicted (probe-calibrated)", "profile": "predicted (packaged profile)",
         "replay": "replayed (measured service)"}
_SHORT = {"sim": "simulated", "profile": "simulated from the profile", "replay": "replayed"}


def load_levels(records: pd.DataFrame) -> list:
    return list(records.sort_values("load")["level"].drop_duplicates())


def headline_change(table: pd.DataFrame, metric: str = "p50_e2el_ms", policy: str = "sjf") -> tuple[float, float]:
    """(load, % change of ``metric`` vs FCFS) for ``policy`` at the highest load level; NaN if absent."""
    t = table[table["load"] == table["load"].max()].set_index("policy")
    if "fcfs" not in t.index or policy not in t.index:
        return float("nan"), float("nan")
    return float(t["load"].iloc[0]), 100.0 * (float(t.loc[policy, metric]) / float(t.loc["fcfs", metric]) - 1.0)


def fig_cdfs(records: pd.DataFrame, sim: pd.DataFrame | None = None, metric: str = "e2el", mode: str = "sim",
             levels: list | None = None) -> go.Figure:
    """Latency CDFs, one panel per load level, real (solid) and simulated (dashed) per policy."""
    if metric not in _NAMES:
        raise ValueError(f"metric must be one of {', '.join(_NAMES)}; got {metric!r}")
    levels = levels or load_levels(records)
    fig = make_subplots(rows=1, cols=len(levels), shared_yaxes=True,
                        subplot_titles=[f"{lv} ({records.loc[records.level == lv, 'rate'].iloc[0]:.2f} req/s)"
                                        for lv in levels])
    s = None
    if sim is not None and len(sim):
        s = sim[sim["mode"] == mode] if "mode" in sim else sim
    for j, lv in enumerate(levels, start=1):
        for pol, g in records[records.level == lv].groupby("policy", sort=False):
            x, y = latency_cdf(g[metric].to_numpy(float), points=300)
            fig.add_trace(go.Scatter(x=x, y=y, name=pol, legendgroup=pol, showlegend=j == 1, mode="lines",
                                     line=dict(color=policy_color(pol), width=2.5, shape="hv")), row=1, col=j)
            if s is not None and metric in s:
                gs = s[(s.level == lv) & (s.policy == pol)]
                x, y = latency_cdf(gs[metric].to_numpy(float), points=300)
                fig.add_trace(go.Scatter(x=x, y=y, name=f"{pol}, {_SHORT.get(mode, mode)}", legendgroup=pol,
                                         showlegend=j == 1, mode="lines",
                                         line=dict(color=policy_color(pol), width=1.8, dash="dash", shape="hv")),
                              row=1, col=j)
        fig.update_xaxes(title_text=f"{_NAMES[metric]} (s)", row=1, col=j)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    top = levels[-1]
    g = records[records.level == top]
    p50 = g.groupby("policy")[metric].median()
    if "fcfs" in p50 and len(p50) > 1:
        best = p50.drop("fcfs").idxmin()
        title = (f"{_NAMES[metric]} at {top} capacity: {best.upper()} median "
                 f"{100 * (p50[best] / p50['fcfs'] - 1):+.0f} % vs FCFS (real server; dashed: {_SHORT.get(mode, mode)})")
    else:
        title = f"{_NAMES[metric]} CDFs on the real server (dashed: simulator)"
    fig.update_layout(title=title, height=470, legend=dict(orientation="h", y=-0.2))
    return fig


def fig_latency_vs_load(table: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"),
                        mode: str = "sim") -> go.Figure:
    """P50/P90 E2EL and TTFT (s) against load, per policy: real (solid) and simulated (dashed)."""
    label = {"p50_e2el_ms": "P50 E2EL", "p90_e2el_ms": "P90 E2EL", "p50_ttft_ms": "P50 TTFT",
             "p90_ttft_ms": "P90 TTFT"}
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[label.get(m, m) for m in metrics],
                        horizontal_spacing=0.07)
    for j, m in enumerate(metrics, start=1):
        for pol, g in table.sort_values("load").groupby("policy", sort=False):
            fig.add_trace(go.Scatter(x=g["load"], y=g[m] / 1e3, name=pol, legendgroup=pol, showlegend=j == 1,
                                     mode="lines+markers", line=dict(color=policy_color(pol), width=2.5)),
                          row=1, col=j)
            if f"{mode}_{m}" in g:
                fig.add_trace(go.Scatter(x=g["load"], y=g[f"{mode}_{m}"] / 1e3, name=f"{pol} (simulated)",
                                         legendgroup=pol, showlegend=j == 1, mode="lines+markers",
                                         marker=dict(symbol="x"),
                                         line=dict(color=policy_color(pol), width=1.5, dash="dash")), row=1, col=j)
        fig.update_xaxes(title_text="offered load (x capacity)", row=1, col=j)
    fig.update_yaxes(title_text="latency (s)", row=1, col=1)
    load, ch = headline_change(table, metrics[0])
    title = (f"Latency grows with load; at {load:g}x capacity SJF's {label.get(metrics[0])} is {ch:+.0f} % vs FCFS"
             if np.isfinite(ch) else "Latency against load on the real server (dashed: simulator)")
    fig.update_layout(title=title, height=460, legend=dict(orientation="h", y=-0.22))
    return fig


def fig_prediction(table: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"),
                   modes=("sim", "profile", "replay")) -> go.Figure:
    """Simulated against measured latency (s) for every run and metric; the diagonal is a perfect prediction."""
    symbols = {"p50_e2el_ms": "circle", "p90_e2el_ms": "diamond", "p50_ttft_ms": "triangle-up",
               "p90_ttft_ms": "square"}
    modes = [m for m in modes if f"{m}_{metrics[0]}" in table]
    fig = make_subplots(rows=1, cols=len(modes), subplot_titles=[_MODE.get(m, m) for m in modes],
                        shared_yaxes=True)
    lo, hi = np.inf, 0.0
    errs = {}
    for j, mode in enumerate(modes, start=1):
        allerr = []
        for m in metrics:
            for pol, g in table.groupby("policy", sort=False):
                x, y = g[m] / 1e3, g[f"{mode}_{m}"] / 1e3
                lo, hi = min(lo, x.min(), y.min()), max(hi, x.max(), y.max())
                fig.add_trace(go.Scatter(
                    x=x, y=y, mode="markers", name=f"{pol} {m.split('_')[0].upper()} {m.split('_')[1].upper()}",
                    legendgroup=f"{pol}{m}", showlegend=j == 1,
                    marker=dict(color=policy_color(pol), symbol=symbols.get(m, "circle"), size=10,
                                line=dict(color="white", width=1)),
                    text=[f"{x:g}x" for x in g["load"]], hovertemplate="%{text}: real %{x:.2f} s, sim %{y:.2f} s"),
                    row=1, col=j)
            allerr.extend(np.abs(table[f"{mode}_{m}_err_pct"].to_numpy(float)).tolist())
        errs[mode] = float(np.nanmedian(allerr)) if allerr else float("nan")
    for j in range(1, len(modes) + 1):
        fig.add_trace(go.Scatter(x=[lo * 0.8, hi * 1.2], y=[lo * 0.8, hi * 1.2], mode="lines", showlegend=False,
                                 line=dict(color="#888", dash="dot")), row=1, col=j)
        fig.update_xaxes(title_text="measured on the real server (s)", type="log", row=1, col=j)
        fig.update_yaxes(type="log", row=1, col=j)
    fig.update_yaxes(title_text="simulated (s)", row=1, col=1)
    names = {"sim": "probe", "profile": "profile", "replay": "replay"}
    parts = ", ".join(f"{v:.0f} % {names.get(k, k)}" for k, v in errs.items())
    fig.update_layout(title=f"Simulator vs real: median |error| {parts}",
                      height=480, legend=dict(orientation="h", y=-0.25, font=dict(size=11)))
    return fig


def fig_calibration(probe_server: pd.DataFrame, service: ServiceModel) -> go.Figure:
    """Measured service time of the probe requests against audio duration, with the calibrated model."""
    d = probe_server
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d["duration"], y=d["finish"] - d["admit"], mode="markers", name="measured",
                             marker=dict(size=10, color="#000"),
                             text=[f"{int(t)} decoder steps" for t in d["tokens"].fillna(0)],
                             hovertemplate="%{x:.1f} s audio: %{y:.2f} s (%{text})"))
    xs = np.linspace(max(0.5, float(d["duration"].min()) * 0.8), float(d["duration"].max()) * 1.1, 200)
    lang = str(d["language"].iloc[0]) if len(d) else "en"
    lang = lang if lang in service.kappa else next(iter(service.kappa))
    fig.add_trace(go.Scatter(x=xs, y=service.service_time(xs, lang), mode="lines", name="calibrated model",
                             line=dict(color="#D55E00", width=2.5)))
    mape = service.fit.get("mape", float("nan"))
    fig.update_layout(title=f"Calibration: service = {service.encode_s_per_window:.2f} s/window + "
                            f"{1e3 * service.decode_s_per_token:.1f} ms x {service.kappa_for(lang):.1f} steps/s "
                            f"(fit error {100 * mape:.0f} %)",
                      xaxis_title="audio duration (s)", yaxis_title="service time (s)", height=440)
    return fig
