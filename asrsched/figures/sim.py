"""Figure builders for the simulator notebooks (policy sweep, workload drift).

Each returns a plotly figure in the house style (:mod:`asrsched.figures.style`), one fixed colour
per policy, axis titles with units, and a title computed from the data it shows, or neutral: no
winner is named where the numbers do not separate the policies.

Loads are drawn as ``rho`` (arrival rate / measured capacity, :mod:`asrsched.sim.capacity`), with
the rate in the hover; an axis in req/s carries a capacity marker. Points at or above capacity
(``regime == "overload"``) are drawn with open markers and dotted lines in a shaded band: they
are finite-run transients of ``n_requests`` requests, not steady states. The subtitle names the
service model that drives the numbers (the default one is assumed, not measured).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.core.labels import metric_label
from asrsched.core.metrics import latency_cdf
from asrsched.figures.style import policy_color

__all__ = [
    "fig_relative_change",
    "fig_cdf",
    "fig_throughput",
    "fig_tradeoff",
    "fig_drift",
    "fig_occupancy",
    "fig_run_length",
    "service_note",
    "pct",
]

_OVERLOAD_FILL = "rgba(213, 94, 0, 0.07)"


def pct(v: float, digits: int = 0) -> str:
    """A signed percentage without ``-0``: ``pct(-0.3) == "0 %"``, ``pct(-12.4) == "-12 %"``."""
    if v is None or not np.isfinite(v):
        return "n/a"
    r = round(float(v), digits)
    if r == 0:
        return f"{0:.{digits}f} %"
    return f"{r:+.{digits}f} %"


def service_note(name: str | None) -> str:
    """Subtitle naming the service model; an assumed model is labelled as not measured here."""
    if not name:
        return ""
    if "assumed" in str(name):
        return f"service model {name}: default_service_model(), an A100 model not measured here"
    return f"service model: {name}"


_SUB_FONT = 13
_SUB_CHARS = 120  # characters per subtitle line at print width (900 px) in the 13 px font


def _titled(fig: go.Figure, title: str, subtitle: str = "") -> go.Figure:
    """Set title and subtitle; wrap the subtitle and give the top margin room for its lines.

    The title itself is wrapped at export (:func:`asrsched.figures.layout.fit_title`), which grows
    the margin from the value set here.
    """
    if not subtitle:
        fig.update_layout(title=dict(text=title))
        return fig
    lines = [w for part in str(subtitle).split("<br>") for w in (textwrap.wrap(part, _SUB_CHARS) or [""])]
    extra = 24 if any(getattr(a, "text", None) for a in fig.layout.annotations or ()) else 0  # subplot titles
    fig.update_layout(
        title=dict(
            text=title,
            subtitle=dict(text="<br>".join(lines), font=dict(size=_SUB_FONT)),
            yref="container",
            y=1,
            yanchor="top",
            pad=dict(t=14),
        ),
        margin_t=60 + len(lines) * int(_SUB_FONT * 1.4) + extra,
    )
    return fig


def _overload_band(fig: go.Figure, x0: float, x1: float, row=None, col=None) -> None:
    kw = dict(row=row, col=col) if row is not None else {}
    fig.add_vrect(x0=x0, x1=x1, fillcolor=_OVERLOAD_FILL, line_width=0, layer="below", **kw)
    fig.add_vline(x=1.0, line=dict(color="#D55E00", dash="dash", width=1.5), **kw)


def fig_relative_change(
    rc: pd.DataFrame, metrics=("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms"), workload: str = "librispeech"
) -> go.Figure:
    """Percent change vs FCFS against load ``rho``, one panel per metric, with 95 % CIs.

    ``rc`` is :func:`asrsched.sim.sweep_report.change_ci` output (``rho``, ``regime`` and CI columns;
    rate, served rate and number of seeds in the hover). Stable points are filled with solid
    lines; overload points (shaded band right of the capacity line ``rho = 1``) are open, on
    dotted lines. Without a ``rho`` column the x axis is the arrival rate.
    """
    d = rc[(rc.workload == workload) & (rc.policy != "fcfs")]
    if d.empty:
        raise ValueError(f"no rows for workload {workload!r} (has {sorted(set(rc.workload))})")
    has_rho = "rho" in d
    xcol = "rho" if has_rho else "rate"
    fig = make_subplots(
        rows=1, cols=len(metrics), shared_yaxes=False, subplot_titles=[metric_label(m) for m in metrics]
    )
    regime = d["regime"] if "regime" in d else pd.Series("stable", index=d.index)
    for j, m in enumerate(metrics, start=1):
        for pol, g in d.groupby("policy", sort=False):
            g = g.sort_values(xcol)
            y = g[f"{m}_change_pct"]
            lo, hi = g.get(f"{m}_change_ci_low"), g.get(f"{m}_change_ci_high")
            err = None
            if lo is not None and hi is not None and np.isfinite(hi.to_numpy(float)).any():
                err = dict(
                    type="data", array=(hi - y).to_numpy(), arrayminus=(y - lo).to_numpy(), thickness=1.2, width=3
                )
            over = (regime.loc[g.index] == "overload").to_numpy()
            hover = [
                f"{pol}<br>ρ = {r.get('rho', np.nan):.2f} ({r.rate:.2f} req/s offered"
                + (f", {r.request_throughput:.2f} served" if "request_throughput" in r else "")
                + ")"
                + f"<br>{metric_label(m)} {pct(r[f'{m}_change_pct'], 1)} vs FCFS"
                + (f"<br>{int(r.n_seeds)} seeds x {int(r.n_requests)} requests" if "n_seeds" in r else "")
                + ("<br><b>overload: finite-run transient</b>" if o else "")
                for (_, r), o in zip(g.iterrows(), over)
            ]
            fig.add_trace(
                go.Scatter(
                    x=g[xcol],
                    y=y,
                    name=pol,
                    legendgroup=pol,
                    showlegend=j == 1,
                    mode="lines+markers",
                    error_y=err,
                    hovertext=hover,
                    hoverinfo="text",
                    line=dict(color=policy_color(pol)),
                    marker=dict(
                        symbol=["circle-open" if o else "circle" for o in over], size=8, color=policy_color(pol)
                    ),
                ),
                row=1,
                col=j,
            )
        fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=1, col=j)
        fig.update_xaxes(title_text="load ρ (rate / capacity)" if has_rho else "arrival rate (req/s)", row=1, col=j)
        if has_rho and (regime == "overload").any():
            _overload_band(fig, 1.0, float(d.rho.max()) * 1.03, row=1, col=j)
    fig.update_yaxes(title_text="change vs FCFS (%)", row=1, col=1)
    bits = []
    if "capacity_rps" in d:
        bits.append(f"capacity {float(d.capacity_rps.iloc[0]):.2f} req/s")
    if "n_seeds" in d:
        ns = sorted(set(d.n_seeds.astype(int)))
        bits.append(f"geometric mean over {ns[0]}" + (f"-{ns[-1]}" if len(ns) > 1 else "") + " seeds, 95 % ratio CI")
    if "n_requests" in d:
        bits.append(f"{int(d.n_requests.iloc[0])} requests per run")
    if (regime == "overload").any():
        bits.append("open markers: ρ ≥ 1, finite-run transients")
    sub = "; ".join(bits)
    if "service" in d:
        sub = (sub + "<br>" if sub else "") + service_note(str(d.service.iloc[0]))
    _titled(
        fig,
        f"{workload}: latency change vs FCFS against load"
        if has_rho
        else f"{workload}: latency change vs FCFS against arrival rate",
        sub,
    )
    fig.update_layout(height=480)
    return fig


def fig_cdf(
    results: Mapping[str, pd.DataFrame], metric: str = "e2el", title: str | None = None, subtitle: str = ""
) -> go.Figure:
    """Empirical CDFs of a latency (s) per policy; the title lists every policy's median and n.

    No policy is named best: one run gives no interval for the gap between two medians.
    """
    fig = go.Figure()
    p50, n = {}, {}
    for pol, df in results.items():
        v = df[metric].to_numpy(float)
        v = v[np.isfinite(v)]
        x, y = latency_cdf(v, points=400)
        p50[pol] = float(np.median(v)) if len(v) else float("nan")
        n[pol] = len(v)
        fig.add_trace(go.Scatter(x=x, y=y, name=pol, mode="lines", line=dict(color=policy_color(pol), width=2.5)))
    name = metric.upper()
    ns = sorted(set(n.values()))
    auto = (
        f"{name} CDF, medians: "
        + ", ".join(f"{p.upper()} {m:.2f} s" for p, m in p50.items())
        + f" (n = {ns[0] if len(ns) == 1 else f'{ns[0]}-{ns[-1]}'} requests each)"
    )
    _titled(fig, title or auto, subtitle)
    fig.update_layout(xaxis_title=f"{name} (s)", yaxis_title="fraction of requests", xaxis_type="log")
    return fig


def fig_throughput(df: pd.DataFrame, workload: str | None = None) -> go.Figure:
    """Served request throughput against offered rate per policy, with the measured capacity marked.

    ``df`` is :func:`asrsched.sim.sweep.run_sweep` output; the served rate is averaged over the
    seeds every policy ran.
    The title gives the largest spread between policies (:func:`asrsched.sim.sweep_report.throughput_spread`,
    the same number the notebook prints) and where it occurs.
    """
    from asrsched.sim.sweep_report import common_seeds, throughput_spread

    d = df if workload is None else df[df.workload == workload]
    if d.empty:
        raise ValueError(f"no rows for workload {workload!r}")
    d = common_seeds(d)
    g = d.groupby(["policy", "rate"], as_index=False, sort=False).agg(
        request_throughput=("request_throughput", "mean"),
        **({"rho": ("rho", "first"), "regime": ("regime", "first")} if "regime" in d else {}),
    )
    fig = go.Figure()
    for pol, gg in g.groupby("policy", sort=False):
        gg = gg.sort_values("rate")
        over = (gg.regime == "overload").to_numpy() if "regime" in gg else np.zeros(len(gg), bool)
        hover = [
            f"{pol}: {r.request_throughput:.2f} req/s served at {r.rate:.2f} offered"
            + (f" (ρ = {r.rho:.2f})" if "rho" in r else "")
            + (" — overload" if o else "")
            for (_, r), o in zip(gg.iterrows(), over)
        ]
        fig.add_trace(
            go.Scatter(
                x=gg.rate,
                y=gg.request_throughput,
                name=pol,
                mode="lines+markers",
                hovertext=hover,
                hoverinfo="text",
                line=dict(color=policy_color(pol)),
                marker=dict(size=8, color=policy_color(pol), symbol=["circle-open" if o else "circle" for o in over]),
            )
        )
    xs = np.sort(g.rate.unique())
    fig.add_trace(go.Scatter(x=xs, y=xs, name="offered", mode="lines", line=dict(color="#aaa", dash="dash")))
    sub = []
    if "capacity_rps" in d:
        cap = float(d.capacity_rps.iloc[0])
        fig.add_hline(y=cap, line=dict(color="#D55E00", dash="dash", width=1.5))
        fig.add_vline(x=cap, line=dict(color="#D55E00", dash="dash", width=1.5))
        if xs.max() > cap:
            fig.add_vrect(x0=cap, x1=float(xs.max()) * 1.02, fillcolor=_OVERLOAD_FILL, line_width=0, layer="below")
        sub.append(f"dashed: measured capacity {cap:.2f} req/s; open markers: overload (ρ ≥ 1)")
    if "n_requests" in d:
        sub.append(f"{int(d.n_requests.iloc[0])} requests per run, mean over seeds")
    sp = throughput_spread(d)
    top = sp.loc[sp.spread_pct.idxmax()]
    title = (
        f"Served rate vs offered{' — ' + workload if workload else ''}: policies differ by at most "
        f"{top.spread_pct:.1f} % ({top.lowest.upper()} lowest at {top.rate:.1f} req/s)"
    )
    if top.spread_pct == 0:
        title = f"Served rate vs offered{' — ' + workload if workload else ''}: identical for every policy"
    if "service" in d:
        sub.append(service_note(str(d.service.iloc[0])))
    _titled(fig, title, "<br>".join(sub))
    fig.update_layout(xaxis_title="offered arrival rate (req/s)", yaxis_title="served request throughput (req/s)")
    return fig


_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "triangle-down", "cross", "x", "star", "hexagon", "pentagon")


def _ci_text(v: float, lo: float, hi: float) -> str:
    return f"{pct(v, 1)} [{pct(lo, 1)}, {pct(hi, 1)}]" if np.isfinite(lo) and np.isfinite(hi) else pct(v, 1)


def fig_tradeoff(df: pd.DataFrame, title_suffix: str = "", subtitle: str = "") -> go.Figure:
    """P50 against P90 E2EL change vs FCFS (%) per policy variant, with 95 % ratio CIs both ways.

    ``df`` is :func:`asrsched.sim.sweep_report.tradeoff_study` output (``label``, ``policy``, the two
    metrics' ``_change_pct`` and ``_change_ci_low/_high``, ``n_seeds``); FCFS is the origin. Lower-left
    is better on both. Variants whose changes agree within 0.05 percentage points on both axes (caps
    that order the queue alike) are one marker named by all their labels in the legend (labels written on
    the points would collide where variants nearly coincide; each variant has its own symbol). The title names the variant with the largest P50 cut and the one with the lowest
    P90 change, each with its CI (a CI that overlaps another's is no win over it).
    """
    need = ["label", "policy", "p50_e2el_ms_change_pct", "p90_e2el_ms_change_pct"]
    missing = [c for c in need if c not in df]
    if missing or df.empty:
        raise ValueError(f"fig_tradeoff needs tradeoff_study rows with {need}; missing {missing or 'rows'}")
    d = df.reset_index(drop=True)
    x, y = d.p50_e2el_ms_change_pct.to_numpy(float), d.p90_e2el_ms_change_pct.to_numpy(float)
    xl, xh = (
        d.get(f"p50_e2el_ms_change_ci_{k}", pd.Series(np.nan, index=d.index)).to_numpy(float) for k in ("low", "high")
    )
    yl, yh = (
        d.get(f"p90_e2el_ms_change_ci_{k}", pd.Series(np.nan, index=d.index)).to_numpy(float) for k in ("low", "high")
    )
    groups: list[list[int]] = []
    for i in range(len(d)):
        g = next((g for g in groups if abs(x[g[0]] - x[i]) < 0.05 and abs(y[g[0]] - y[i]) < 0.05), None)
        (g.append(i) if g is not None else groups.append([i]))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[0],
            y=[0],
            mode="markers",
            name="FCFS (the baseline)",
            marker=dict(size=12, color=policy_color("fcfs"), symbol="circle-open", line=dict(width=2)),
            hovertext=["FCFS: the baseline of every change"],
            hoverinfo="text",
        )
    )
    for k, g in enumerate(groups):
        i = g[0]
        label = ", ".join(str(d.label[j]) for j in g)
        if len(g) > 1 and all(d.policy[j] == "adaptive" for j in g):
            label = "adaptive cap=" + ", ".join(str(d.label[j]).split("=")[-1] for j in g)
        err = lambda lo, hi, v: (  # noqa: E731
            dict(type="data", array=[hi - v], arrayminus=[v - lo], thickness=1.2, width=4)
            if np.isfinite(lo) and np.isfinite(hi)
            else None
        )
        fig.add_trace(
            go.Scatter(
                x=[x[i]],
                y=[y[i]],
                mode="markers",
                name=label + (" (same result)" if len(g) > 1 else ""),
                error_x=err(xl[i], xh[i], x[i]),
                error_y=err(yl[i], yh[i], y[i]),
                hovertext=[
                    f"{label}<br>P50 E2EL {_ci_text(x[i], xl[i], xh[i])} vs FCFS<br>"
                    f"P90 E2EL {_ci_text(y[i], yl[i], yh[i])} vs FCFS"
                ],
                hoverinfo="text",
                marker=dict(size=12, color=policy_color(str(d.policy[i])), symbol=_SYMBOLS[k % len(_SYMBOLS)]),
            )
        )
    best = int(np.nanargmin(x))
    low = int(np.nanargmin(y))
    title = (
        f"P50 vs P90 E2EL change vs FCFS{title_suffix}: largest P50 cut {d.label[best]} "
        f"{_ci_text(x[best], xl[best], xh[best])}; lowest P90 {d.label[low]} {_ci_text(y[low], yl[low], yh[low])}"
    )
    n = sorted(set(d.n_seeds.astype(int))) if "n_seeds" in d else []
    sub = (f"{n[0]} seeds, 95 % ratio CIs; lower-left is better on both" if n else "lower-left is better on both") + (
        f"<br>{subtitle}" if subtitle else ""
    )
    _titled(fig, title, sub)
    fig.add_hline(y=0, line=dict(color="#888", dash="dot"))
    fig.add_vline(x=0, line=dict(color="#888", dash="dot"))
    fig.update_layout(
        xaxis_title="P50 E2EL change vs FCFS (%)", yaxis_title="P90 E2EL change vs FCFS (%)", showlegend=True
    )
    return fig


def fig_drift(
    results: Mapping[str, pd.DataFrame],
    window_s: float = 30.0,
    q: float = 0.9,
    phase_marks: list[float] | None = None,
    subtitle: str = "",
) -> go.Figure:
    """Rolling P50 and P``q`` E2EL (s) by arrival time per policy, over the mean audio duration.

    The title lists each policy's worst-window P``q`` (one run: no winner is named).
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    worst = {}
    for pol, df in results.items():
        d = df.sort_values("arrival")
        b = (d.arrival // window_s) * window_s
        g = d.groupby(b)["e2el"]
        p50, pq = g.median(), g.quantile(q)
        worst[pol] = float(pq.max())
        fig.add_trace(
            go.Scatter(
                x=p50.index,
                y=p50.values,
                name=f"{pol} P50",
                legendgroup=pol,
                line=dict(color=policy_color(pol), width=2.5),
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=pq.index,
                y=pq.values,
                name=f"{pol} P{int(q * 100)}",
                legendgroup=pol,
                line=dict(color=policy_color(pol), dash="dot"),
            ),
            row=1,
            col=1,
        )
    any_df = next(iter(results.values()))
    d = any_df.sort_values("arrival")
    mdur = d.groupby((d.arrival // window_s) * window_s)["duration"].mean()
    fig.add_trace(go.Bar(x=mdur.index, y=mdur.values, name="mean audio duration", marker_color="#bbb"), row=2, col=1)
    for t in phase_marks or []:
        fig.add_vline(x=t, line=dict(color="#666", dash="dash"))
    fig.update_yaxes(title_text="E2EL (s)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="audio (s)", row=2, col=1)
    fig.update_xaxes(title_text="arrival time (s)", row=2, col=1)
    _titled(
        fig,
        f"Rolling E2EL under drift ({window_s:g} s windows); worst-window P{int(q * 100)}: "
        + ", ".join(f"{p.upper()} {v:.1f} s" for p, v in worst.items()),
        subtitle,
    )
    fig.update_layout(height=620)
    return fig


def fig_occupancy(timelines: Mapping[str, pd.DataFrame], subtitle: str = "") -> go.Figure:
    """Queue depth (waiting requests) over time per policy."""
    fig = go.Figure()
    for pol, tl in timelines.items():
        fig.add_trace(go.Scatter(x=tl.time, y=tl.waiting, name=pol, mode="lines", line=dict(color=policy_color(pol))))
    peaks = {pol: int(tl.waiting.max()) if len(tl) else 0 for pol, tl in timelines.items()}
    _titled(fig, "Peak queue (waiting requests): " + ", ".join(f"{p.upper()} {v}" for p, v in peaks.items()), subtitle)
    fig.update_layout(xaxis_title="time (s)", yaxis_title="waiting requests")
    return fig


def fig_run_length(rl: pd.DataFrame, metric: str = "p50_e2el_ms", subtitle: str = "") -> go.Figure:
    """Change vs FCFS (mean over seeds, 95 % CI) against the run length ``n_requests``, one line per load.

    ``rl`` is :func:`asrsched.sim.sweep_report.run_length_effect` output. The title gives, per load, the
    change at the shortest and at the longest run.
    """
    fig = go.Figure()
    col = f"{metric}_change_pct"
    parts = []
    for r, g in rl.groupby("rho", sort=True):
        g = g.sort_values("n_requests")
        over = (g.regime == "overload").any() if "regime" in g else r >= 1
        y = g[col]
        err = dict(
            type="data",
            array=(g[f"{metric}_change_ci_high"] - y).to_numpy(),
            arrayminus=(y - g[f"{metric}_change_ci_low"]).to_numpy(),
            thickness=1.2,
            width=3,
        )
        colour = "#D55E00" if over else "#0072B2"
        label = f"ρ = {r:g} ({'overload' if over else 'stable'})"
        fig.add_trace(
            go.Scatter(
                x=g.n_requests,
                y=y,
                error_y=err,
                name=label,
                mode="lines+markers",
                line=dict(color=colour, dash="dot" if over else "solid"),
                marker=dict(size=9, symbol="circle-open" if over else "circle", color=colour),
            )
        )
        parts.append(
            f"ρ={r:g}: {pct(y.iloc[0])} at n={int(g.n_requests.iloc[0])} → {pct(y.iloc[-1])} at "
            f"n={int(g.n_requests.iloc[-1])}"
        )
    fig.add_hline(y=0, line=dict(color="#888", dash="dot"))
    pol = str(rl.policy.iloc[0]).upper() if "policy" in rl and len(rl) else ""
    ns = sorted(set(rl.n_seeds.astype(int))) if "n_seeds" in rl else []
    sub = (f"{pol} vs FCFS, {rl.workload.iloc[0]}; geometric mean over {ns[0]} seeds, 95 % ratio CI" if ns else "") + (
        "<br>" + subtitle if subtitle else ""
    )
    _titled(fig, f"{pol} {metric_label(metric)} change vs run length: " + "; ".join(parts), sub)
    fig.update_layout(xaxis_title="requests per run (n_requests)", yaxis_title="change vs FCFS (%)", xaxis_type="log")
    return fig
