"""Figure builders and the explorer panel for the real-serving notebook (04).

Real runs are solid lines, the simulator's prediction of the same runs dashed, one
colour per policy (:func:`asrsched.figures.style.policy_color`). Loads are ``rho`` = arrival
rate / the engine's measured saturation throughput; a dotted line marks capacity (rho = 1)
and overloaded points (rho >= 1, finite-run transients) are drawn open. Titles state what the
data shows from the results table (:func:`asrsched.serving.experiment.results_table`): a policy
is named only where its difference from FCFS is significant (bootstrap CI excluding 0);
otherwise the title says there is no significant difference, or that the cells are too small
to tell, with n.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.core.labels import metric_label
from asrsched.core.metrics import latency_cdf
from asrsched.core.service import ServiceModel
from asrsched.figures.style import policy_color
from asrsched.sim.capacity import regime

__all__ = [
    "load_levels",
    "fig_cdfs",
    "fig_latency_vs_load",
    "fig_prediction",
    "fig_calibration",
    "verdict_text",
    "fig_step_times",
    "fig_study",
]

_NAMES = {"e2el": "E2EL", "ttft": "TTFT", "queue_delay": "queue delay"}
_MODE = {
    "sim": "predicted (the engine's fitted model)",
    "profile": "predicted (packaged profile)",
    "replay": "replayed (measured service)",
    "probe": "predicted (one-at-a-time probe, no batching)",
}
_SHORT = {
    "sim": "simulated",
    "profile": "simulated from the profile",
    "replay": "replayed",
    "probe": "simulated from the probe",
}


def load_levels(records: pd.DataFrame) -> list:
    """The load levels of a real-serving study's records, lowest load ``rho`` first."""
    return list(records.sort_values("rho")["level"].drop_duplicates())


_VERDICT_METRIC = {
    "e2el": "p50_e2el",
    "ttft": "p50_ttft",
    "p50_e2el_ms": "p50_e2el",
    "p90_e2el_ms": "p90_e2el",
    "p50_ttft_ms": "p50_ttft",
}


def verdict_text(results: pd.DataFrame | None, metric: str = "p50_e2el", rho: float | None = None) -> str:
    """What ``results`` (:func:`asrsched.serving.experiment.results_table`) say about ``metric`` vs FCFS,
    at load ``rho`` (None: every load): the significant changes with their CI, or that none is
    significant, or that the cells are too small for a verdict; always with n per cell."""
    if results is None or not len(results) or f"verdict_{metric}" not in results:
        return ""
    r = results if rho is None else results[np.isclose(results["rho"], rho)]
    r = r[r["policy"] != "fcfs"]
    if not len(r):
        return ""
    n = sorted(set(int(x) for x in r["n_requests"]))
    ns = f"n={n[0]}" if len(n) == 1 else f"n={n[0]}–{n[-1]}"
    lab = metric_label(metric)
    v = r[f"verdict_{metric}"].astype(str)
    sig = r[v.str.startswith("significant")]
    if len(sig):
        parts = [
            f"{x.policy.upper()} {getattr(x, f'd_{metric}_pct'):+.0f} % "
            f"[{getattr(x, f'd_{metric}_pct_ci_low'):+.0f}, {getattr(x, f'd_{metric}_pct_ci_high'):+.0f}]"
            + ("" if rho is not None else f" at ρ={x.rho:g}")
            for x in sig.itertuples()
        ]
        return f"{lab} vs FCFS, significant: {'; '.join(parts)} ({ns} per point)"
    if v.str.startswith("not assessed").all():
        return f"{lab}: too few requests for a verdict vs FCFS ({ns} per point)"
    return f"{lab}: no policy differs significantly from FCFS ({ns} per point)"


def fig_cdfs(
    records: pd.DataFrame,
    sim: pd.DataFrame | None = None,
    metric: str = "e2el",
    mode: str = "sim",
    levels: list | None = None,
    results: pd.DataFrame | None = None,
) -> go.Figure:
    """Latency CDFs, one panel per load level, real (solid) and simulated (dashed) per policy.

    The title reports the verdicts of ``results`` at the highest level shown (no winner is named
    unless its difference from FCFS is significant); without ``results`` it is neutral."""
    if metric not in _NAMES:
        raise ValueError(f"metric must be one of {', '.join(_NAMES)}; got {metric!r}")
    levels = levels or load_levels(records)

    def _sub(lv):
        g = records[records.level == lv]
        over = " overloaded" if regime(float(g["rho"].iloc[0])) == "overload" else ""
        return f"{lv} ({g['rate'].iloc[0]:.2f} req/s{over})"

    fig = make_subplots(rows=1, cols=len(levels), shared_yaxes=True, subplot_titles=[_sub(lv) for lv in levels])
    s = None
    if sim is not None and len(sim):
        s = sim[sim["mode"] == mode] if "mode" in sim else sim
    for j, lv in enumerate(levels, start=1):
        for pol, g in records[records.level == lv].groupby("policy", sort=False):
            x, y = latency_cdf(g[metric].to_numpy(float), points=300)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=pol,
                    legendgroup=pol,
                    showlegend=j == 1,
                    mode="lines",
                    line=dict(color=policy_color(pol), width=2.5, shape="hv"),
                ),
                row=1,
                col=j,
            )
            if s is not None and metric in s:
                gs = s[(s.level == lv) & (s.policy == pol)]
                x, y = latency_cdf(gs[metric].to_numpy(float), points=300)
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=y,
                        name=f"{pol}, {_SHORT.get(mode, mode)}",
                        legendgroup=pol,
                        showlegend=j == 1,
                        mode="lines",
                        line=dict(color=policy_color(pol), width=1.8, dash="dash", shape="hv"),
                    ),
                    row=1,
                    col=j,
                )
        fig.update_xaxes(title_text=f"{_NAMES[metric]} (s)", row=1, col=j)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    top = levels[-1]
    g = records[records.level == top]
    n = int(g.groupby("policy").size().min()) if len(g) else 0
    v = verdict_text(results, _VERDICT_METRIC.get(metric, ""), float(g["rho"].iloc[0])) if len(g) else ""
    title = (
        f"{_NAMES[metric]} at {top}: {v}"
        if v
        else f"{_NAMES[metric]} CDFs on the real server at {top} (n={n} per policy)"
    )
    if s is not None:
        title += f"; dashed: {_SHORT.get(mode, mode)}"
    fig.update_layout(title=title, height=470, legend=dict(orientation="h", y=-0.2))
    return fig


def fig_latency_vs_load(
    table: pd.DataFrame,
    metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"),
    mode: str = "sim",
    results: pd.DataFrame | None = None,
) -> go.Figure:
    """P50/P90 E2EL and TTFT (s) against load rho, per policy: real (solid, bootstrap 95 % CI bars when
    ``results`` is given) and simulated (dashed). A dotted line marks capacity (rho = 1, the measured
    saturation throughput); overloaded points (rho >= 1) are open. The title reports ``results``'
    verdicts vs FCFS on the first metric (neutral without ``results``)."""
    ci_cols = {
        "p50_e2el_ms": ("p50_ci_low", "p50_ci_high"),
        "p90_e2el_ms": ("p90_e2el_ci_low", "p90_e2el_ci_high"),
        "p50_ttft_ms": ("p50_ttft_ci_low", "p50_ttft_ci_high"),
    }
    fig = make_subplots(
        rows=1, cols=len(metrics), subplot_titles=[metric_label(m) for m in metrics], horizontal_spacing=0.07
    )
    res = results.set_index(["policy", "rho"]) if results is not None and len(results) else None
    for j, m in enumerate(metrics, start=1):
        for pol, g in table.sort_values("rho").groupby("policy", sort=False):
            c = policy_color(pol)
            over = regime(g["rho"].to_numpy(float)) == "overload"
            err = None
            if res is not None and m in ci_cols and all(x in res for x in ci_cols[m]):
                lo = np.array([res[ci_cols[m][0]].get((pol, x), np.nan) for x in g["rho"]], float)
                hi = np.array([res[ci_cols[m][1]].get((pol, x), np.nan) for x in g["rho"]], float)
                y = g[m].to_numpy(float) / 1e3
                err = dict(
                    type="data",
                    symmetric=False,
                    array=np.clip(hi - y, 0, None),
                    arrayminus=np.clip(y - lo, 0, None),
                    color=c,
                    thickness=1.2,
                    width=4,
                )
            fig.add_trace(
                go.Scatter(
                    x=g["rho"],
                    y=g[m] / 1e3,
                    name=pol,
                    legendgroup=pol,
                    showlegend=j == 1,
                    mode="lines+markers",
                    line=dict(color=c, width=2.5),
                    error_y=err,
                    marker=dict(size=9, color=np.where(over, "white", c).tolist(), line=dict(color=c, width=2)),
                    customdata=np.c_[g["rate"], g["completed"]] if "rate" in g else None,
                    hovertemplate="ρ=%{x:g} (%{customdata[0]:.2f} req/s, n=%{customdata[1]}): %{y:.2f} s"
                    if "rate" in g
                    else None,
                ),
                row=1,
                col=j,
            )
            if f"{mode}_{m}" in g:
                fig.add_trace(
                    go.Scatter(
                        x=g["rho"],
                        y=g[f"{mode}_{m}"] / 1e3,
                        name=f"{pol} (simulated)",
                        legendgroup=pol,
                        showlegend=j == 1,
                        mode="lines+markers",
                        marker=dict(symbol="x"),
                        line=dict(color=c, width=1.5, dash="dash"),
                    ),
                    row=1,
                    col=j,
                )
        fig.add_vline(x=1.0, line=dict(color="#888", dash="dot"), row=1, col=j)
        fig.update_xaxes(title_text="load ρ (× capacity)", row=1, col=j)
    fig.add_annotation(
        x=1.0,
        y=0.98,
        xref="x",
        yref="y domain",
        text=" capacity (ρ = 1)",
        showarrow=False,
        xanchor="left",
        yanchor="top",
        font=dict(size=11, color="#666"),
    )
    fig.update_yaxes(title_text="latency (s)", row=1, col=1)
    v = verdict_text(results, _VERDICT_METRIC.get(metrics[0], ""))
    n = int(table["completed"].min() + table["failed"].min()) if {"completed", "failed"} <= set(table) else None
    title = v or f"Latency against load on the real server (n={n} per point; dashed: simulator; open: ρ ≥ 1)"
    fig.update_layout(title=title, height=480, legend=dict(orientation="h", y=-0.22))
    return fig


def fig_prediction(
    table: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"), modes=("sim", "profile", "replay")
) -> go.Figure:
    """Simulated against measured latency (s) for every run and metric; the diagonal is a perfect prediction."""
    symbols = {"p50_e2el_ms": "circle", "p90_e2el_ms": "diamond", "p50_ttft_ms": "triangle-up", "p90_ttft_ms": "square"}
    modes = [m for m in modes if f"{m}_{metrics[0]}" in table]
    fig = make_subplots(rows=1, cols=len(modes), subplot_titles=[_MODE.get(m, m) for m in modes], shared_yaxes=True)
    lo, hi = np.inf, 0.0
    errs = {}
    for j, mode in enumerate(modes, start=1):
        allerr = []
        for m in metrics:
            for pol, g in table.groupby("policy", sort=False):
                x, y = g[m] / 1e3, g[f"{mode}_{m}"] / 1e3
                lo, hi = min(lo, x.min(), y.min()), max(hi, x.max(), y.max())
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=y,
                        mode="markers",
                        name=f"{pol} {m.split('_')[0].upper()} {m.split('_')[1].upper()}",
                        legendgroup=f"{pol}{m}",
                        showlegend=j == 1,
                        marker=dict(
                            color=policy_color(pol),
                            symbol=symbols.get(m, "circle"),
                            size=10,
                            line=dict(color="white", width=1),
                        ),
                        text=[f"{x:g}x" for x in g["rho"]],
                        hovertemplate="%{text}: real %{x:.2f} s, sim %{y:.2f} s",
                    ),
                    row=1,
                    col=j,
                )
            allerr.extend(np.abs(table[f"{mode}_{m}_err_pct"].to_numpy(float)).tolist())
        errs[mode] = float(np.nanmedian(allerr)) if allerr else float("nan")
    for j in range(1, len(modes) + 1):
        fig.add_trace(
            go.Scatter(
                x=[lo * 0.8, hi * 1.2],
                y=[lo * 0.8, hi * 1.2],
                mode="lines",
                showlegend=False,
                line=dict(color="#888", dash="dot"),
            ),
            row=1,
            col=j,
        )
        fig.update_xaxes(title_text="measured on the real server (s)", type="log", row=1, col=j)
        fig.update_yaxes(type="log", row=1, col=j)
    fig.update_yaxes(title_text="simulated (s)", row=1, col=1)
    names = {"sim": "probe", "profile": "profile", "replay": "replay"}
    parts = ", ".join(f"{v:.0f} % {names.get(k, k)}" for k, v in errs.items())
    fig.update_layout(
        title=f"Simulator vs real: median |error| {parts} ({len(table)} runs × {len(metrics)} metrics)",
        height=480,
        legend=dict(orientation="h", y=-0.25, font=dict(size=11)),
    )
    return fig


def fig_calibration(probe_server: pd.DataFrame, service: ServiceModel, *, language: str | None = None) -> go.Figure:
    """Measured service time of the probe requests against audio duration, with the calibrated model.

    The model's line is its size estimate (:meth:`~asrsched.core.service.ServiceModel.est_service`) in
    ``language`` (default: the probe's first request's); a language ``service`` has no kappa for
    raises ``ValueError`` naming it (no fallback: the line would be another language's)."""
    d = probe_server
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=d["duration"],
            y=d["finish"] - d["admit"],
            mode="markers",
            name="measured",
            marker=dict(size=10, color="#000"),
            text=[f"{int(t)} decoder steps" for t in d["tokens"].fillna(0)],
            hovertemplate="%{x:.1f} s audio: %{y:.2f} s (%{text})",
        )
    )
    xs = np.linspace(max(0.5, float(d["duration"].min()) * 0.8), float(d["duration"].max()) * 1.1, 200)
    lang = language or (str(d["language"].iloc[0]) if len(d) else "en")
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=service.est_service(xs, lang),
            mode="lines",
            name="calibrated model",
            line=dict(color="#D55E00", width=2.5),
        )
    )
    mape = service.fit.get("mape", float("nan"))
    fig.update_layout(
        title=f"Calibration: service = {service.encode_s_per_window:.2f} s/window + "
        f"{1e3 * service.decode_s_per_token:.1f} ms x {service.kappa_for(lang):.1f} steps/s "
        f"(fit error {100 * mape:.0f} %, n={len(d)})",
        xaxis_title="audio duration (s)",
        yaxis_title="service time (s)",
        height=440,
    )
    return fig


def fig_step_times(steps: pd.DataFrame, service: ServiceModel) -> go.Figure:
    """A batching engine's measured step time against the batch size (median and P10-P90 per size,
    decode-only steps and steps that also ran the encoder), with the fitted step model
    (:func:`asrsched.serving.vllm_steps.fit_step_model`) as lines. ``steps``: the step log
    (:func:`~asrsched.serving.vllm_steps.read_step_log`) or its :func:`~asrsched.serving.vllm_steps.step_time_table`."""
    from asrsched.serving.vllm_steps import step_time_table

    t = steps if "median_step_s" in steps else step_time_table(steps)
    fig = go.Figure()
    for enc, color, label in ((0, "#0072B2", "decode only"), (1, "#D55E00", "with 1 encoder run")):
        g = t[t["encoder"] == enc]
        if g.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=g["n_seqs"],
                y=1e3 * g["median_step_s"],
                mode="markers",
                name=f"{label} (median)",
                marker=dict(size=10, color=color),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=1e3 * (g["p90_step_s"] - g["median_step_s"]),
                    arrayminus=1e3 * (g["median_step_s"] - g["p10_step_s"]),
                    color=color,
                ),
                text=[f"{int(n)} steps" for n in g["steps"]],
                hovertemplate="batch %{x}: %{y:.1f} ms (%{text}; bars P10-P90)",
            )
        )
        b = np.arange(1, int(t["n_seqs"].max()) + 1)
        fig.add_trace(
            go.Scatter(
                x=b,
                y=1e3 * (service.step_s(b) + enc * service.encode_s_per_window),
                mode="lines",
                name=f"{label} (fit)",
                line=dict(color=color, width=2, dash="dot"),
            )
        )
    f = service.fit
    fig.update_layout(
        title=f"Engine step time vs batch size: {1e3 * f.get('base_s', float('nan')):.1f} ms + "
        f"{1e3 * f.get('per_seq_s', float('nan')):.1f} ms per sequence + "
        f"{1e3 * service.encode_s_per_window:.0f} ms per encoder run "
        f"(n={f.get('n_steps', int(t['steps'].sum()))} steps, median error {100 * f.get('median_abs_rel_err', float('nan')):.0f} %)",
        xaxis_title="sequences in the step",
        yaxis_title="step time (ms, log scale)",
        height=440,
    )
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(type="log")
    return fig


def fig_study(results: pd.DataFrame, metric: str = "p50_e2el") -> go.Figure:
    """The real-engine study (``real_engine_results.csv``): one panel per engine, ``metric`` against rho per
    policy with its bootstrap 95 % CI (filled markers; open where rho >= 1: overload, a finite-run transient),
    and the simulator's prediction for the same cell (crosses, dotted)."""
    engines = list(pd.unique(results["engine"]))
    fig = make_subplots(rows=1, cols=len(engines), subplot_titles=engines, horizontal_spacing=0.08)
    lo_c, hi_c = ("p50_ci_low", "p50_ci_high") if metric == "p50_e2el" else (f"{metric}_ci_low", f"{metric}_ci_high")
    for k, eng in enumerate(engines, start=1):
        g = results[results["engine"] == eng]
        for pol, gp in g.groupby("policy", sort=False):
            gp = gp.sort_values("rho")
            c = policy_color(pol)
            y = gp[f"{metric}_s"].to_numpy(float)
            err = (
                dict(
                    type="data",
                    symmetric=False,
                    array=gp[hi_c].to_numpy(float) - y,
                    arrayminus=y - gp[lo_c].to_numpy(float),
                    color=c,
                )
                if {lo_c, hi_c} <= set(gp)
                else None
            )
            fig.add_trace(
                go.Scatter(
                    x=gp["rho"],
                    y=y,
                    mode="lines+markers",
                    name=pol,
                    legendgroup=pol,
                    showlegend=k == 1,
                    line=dict(color=c, width=2),
                    error_y=err,
                    marker=dict(
                        size=9,
                        color=[c if r == "stable" else "white" for r in regime(gp["rho"].to_numpy(float))],
                        line=dict(color=c, width=2),
                    ),
                    customdata=gp["n_requests"],
                    hovertemplate=f"{pol} ρ=%{{x:g}}: %{{y:.2f}} s (n=%{{customdata}})",
                ),
                row=1,
                col=k,
            )
            if f"sim_{metric}_s" in gp:
                fig.add_trace(
                    go.Scatter(
                        x=gp["rho"],
                        y=gp[f"sim_{metric}_s"],
                        mode="lines+markers",
                        name=f"{pol} (simulator)",
                        legendgroup=pol,
                        showlegend=k == 1,
                        line=dict(color=c, width=1, dash="dot"),
                        marker=dict(symbol="x", size=8, color=c),
                        hovertemplate=f"simulator, {pol} ρ=%{{x:g}}: %{{y:.2f}} s",
                    ),
                    row=1,
                    col=k,
                )
        fig.add_vline(x=1.0, line=dict(color="#888", dash="dash", width=1), row=1, col=k)
        fig.update_xaxes(title_text="ρ (arrival rate / measured saturation throughput)", row=1, col=k)
    n = sorted(set(int(x) for x in results["n_requests"]))
    fig.update_yaxes(title_text=f"{metric_label(metric)} (s)", type="log", row=1, col=1)
    for k in range(2, len(engines) + 1):
        fig.update_yaxes(type="log", row=1, col=k)
    fig.update_layout(
        title=f"Real engines: {metric_label(metric)} by policy and load, 95 % CIs "
        f"(n={n[0] if len(n) == 1 else f'{n[0]}–{n[-1]}'} per point; open markers: overload)",
        height=460,
    )
    return fig
