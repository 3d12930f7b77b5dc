"""Interactive panels (ipywidgets + plotly FigureWidget) for the simulator notebooks.

Each panel calls the same functions the batch path calls (:func:`asrsched.sim.sweep.point_records`),
so what a slider shows is what papermill computes. Panels compute their first view
once when built and then only react to the user; under papermill nothing waits for
input. Every control has a ``description`` (the browser tests find them by it).
"""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from asrsched.core.metrics import latency_cdf, summarize
from asrsched.figures.style import policy_color
from asrsched.core.policies import policy_names
from asrsched.sim.sweep import point_records
from asrsched.core.workloads import workload_names

_STYLE = {"description_width": "initial"}  # full labels, not "max_num…"

__all__ = ["policy_explorer", "drift_explorer"]


def _table_html(rows: dict[str, dict]) -> str:
    head = "<tr><th>policy</th><th>P50 E2EL (s)</th><th>P90 E2EL (s)</th><th>P50 TTFT (s)</th><th>req/s</th></tr>"
    body = "".join(
        f"<tr><td>{p}</td><td>{s['p50_e2el_ms'] / 1e3:.2f}</td><td>{s['p90_e2el_ms'] / 1e3:.2f}</td>"
        f"<td>{s['p50_ttft_ms'] / 1e3:.2f}</td><td>{s['request_throughput']:.2f}</td></tr>"
        for p, s in rows.items())
    return f"<table class='asrsched-table'>{head}{body}</table>"


def policy_explorer(rate: float = 15.0, policy: str = "sjf", kappa: float = 3.3, max_num_seqs: int = 32,
                    workload: str = "librispeech", n_requests: int = 1500, seed: int = 0, service=None) -> W.VBox:
    """Sliders for rate, policy, kappa, ``max_num_seqs`` and workload over E2EL CDFs vs FCFS."""
    rate_w = W.FloatSlider(value=rate, min=1, max=25, step=1, style=_STYLE, description="rate (req/s)", continuous_update=False)
    pol_w = W.Dropdown(options=[p for p in policy_names() if p != "fcfs"], value=policy, style=_STYLE, description="policy")
    kappa_w = W.FloatSlider(value=kappa, min=1.0, max=8.0, step=0.1, style=_STYLE, description="kappa (tok/s)",
                            continuous_update=False)
    seqs_w = W.IntSlider(value=max_num_seqs, min=1, max=128, step=1, style=_STYLE, description="max_num_seqs",
                         continuous_update=False)
    wl_w = W.Dropdown(options=[w for w in workload_names() if w != "drift"], value=workload, style=_STYLE, description="workload")
    fig = go.FigureWidget()
    fig.update_layout(xaxis_title="E2EL (s)", yaxis_title="fraction of requests", xaxis_type="log", height=420)
    table = W.HTML()

    def update(*_):
        res = point_records(wl_w.value, rate_w.value, ["fcfs", pol_w.value], seed=seed, n_requests=n_requests,
                            max_num_seqs=seqs_w.value, service=service, kappa=kappa_w.value)
        summ = {p: summarize(r.records) for p, r in res.items()}
        with fig.batch_update():
            fig.data = []
            for p, r in res.items():
                x, y = latency_cdf(r.records["e2el"].to_numpy(), points=300)
                fig.add_scatter(x=x, y=y, name=p, mode="lines", line=dict(color=policy_color(p), width=2.5))
            a, b = summ["fcfs"]["p50_e2el_ms"], summ[pol_w.value]["p50_e2el_ms"]
            fig.layout.title = (f"{wl_w.value} at {rate_w.value:g} req/s: {pol_w.value.upper()} P50 E2EL "
                                f"{100 * (b / a - 1):+.0f} % vs FCFS")
        table.value = _table_html(summ)

    for w in (rate_w, pol_w, kappa_w, seqs_w, wl_w):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([rate_w, pol_w, wl_w]), W.HBox([kappa_w, seqs_w]), fig, table])


def drift_explorer(rate: float = 9.0, ramp_s: float = 60.0, n_requests: int = 2500, seed: int = 0,
                   policies=("fcfs", "sjf", "hrrn", "adaptive"), max_num_seqs: int = 32, service=None) -> W.VBox:
    """Sliders for rate and ramp length over rolling P90 E2EL per policy under drift."""
    from asrsched.core.workloads import Drift, make_source

    rate_w = W.FloatSlider(value=rate, min=2, max=20, step=0.5, style=_STYLE, description="rate (req/s)", continuous_update=False)
    ramp_w = W.FloatSlider(value=ramp_s, min=0, max=240, step=10, style=_STYLE, description="ramp (s)", continuous_update=False)
    fig = go.FigureWidget()
    fig.update_layout(xaxis_title="arrival time (s)", yaxis_title="P90 E2EL (s)", yaxis_type="log", height=420)

    def update(*_):
        drift = Drift([(0.0, make_source("librispeech")), (n_requests / rate_w.value / 3, make_source("uniform"))],
                      ramp_s=ramp_w.value)
        res = point_records(drift, rate_w.value, list(policies), seed=seed, n_requests=n_requests,
                            max_num_seqs=max_num_seqs, service=service)
        worst = {}
        with fig.batch_update():
            fig.data = []
            for p, r in res.items():
                d = r.records
                g = d.groupby((d.arrival // 20) * 20)["e2el"].quantile(0.9)
                worst[p] = float(g.max())
                fig.add_scatter(x=g.index, y=g.values, name=p, mode="lines", line=dict(color=policy_color(p)))
            best = min(worst, key=worst.get)
            fig.layout.title = (f"drift at {rate_w.value:g} req/s, ramp {ramp_w.value:g} s: "
                                f"{best.upper()} has the lowest worst-window P90 ({worst[best]:.1f} s)")

    rate_w.observe(update, names="value")
    ramp_w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([rate_w, ramp_w]), fig])
