"""The interactive panels (ipywidgets + plotly FigureWidget) of the serving notebooks; the A/B studies' are in
:mod:`asrsched.figures.ab_widgets`.

* :func:`policy_explorer`, :func:`drift_explorer` -- the single-server simulator (notebooks 02, 03);
* :func:`kappa_explorer` -- kappa per language from a Whisper profile (notebook 01);
* :func:`serving_explorer` -- latency CDFs of a real serving experiment against the simulator (notebook 04).

Each panel calls the same functions the batch path calls (:func:`asrsched.sim.sweep.point_records`,
:func:`asrsched.sim.parallel.run_study` of each study's configuration), so what a
slider shows is what papermill computes. A notebook passes in its parameters (rate, kappa, service
model, workload, seed, ...), so a panel's first view is the run the tables above it describe. Panels
compute their first view once when built and then only react to the user; under papermill nothing
waits for input. Every control has a ``description`` (the browser tests find them by it). Each panel
is a :class:`asrsched.figures.panel.Panel`: it ends with an "export this view" button that writes the
figure as shown, and its state, into the run's folder, and a saved or batch-executed notebook keeps
a static image of its first view.
"""

from __future__ import annotations

import warnings

import ipywidgets as W
import numpy as np
import pandas as pd

from asrsched.core.metrics import latency_cdf, summarize
from asrsched.core.policies import policy_names
from asrsched.core.service import as_service_model
from asrsched.core.workloads import make_source, workload_names
from asrsched.figures.panel import ExplorerFigure, Panel, slider_range
from asrsched.figures.profiling import DURATION_LABELS, TOKEN_LABELS, fig_kappa
from asrsched.figures.serving import fig_cdfs, load_levels
from asrsched.figures.sim import pct
from asrsched.figures.style import policy_color
from asrsched.profiling.fit import fit_kappa
from asrsched.profiling.measure import TOKEN_COLUMNS
from asrsched.sim.capacity import measure_capacity
from asrsched.sim.drift import phase_loads
from asrsched.sim.overload import OverloadWarning
from asrsched.sim.sweep import point_records

#: ipywidgets style of every control: full labels, not "max_num…"
STYLE = {"description_width": "initial"}

__all__ = ["policy_explorer", "drift_explorer", "kappa_explorer", "serving_explorer", "STYLE"]


def _served_note(records: pd.DataFrame, summary: dict, rate: float) -> str:
    """What "served" means in the table, with this run's numbers: the served rate
    (:func:`asrsched.core.metrics.summarize`'s ``request_throughput``) is completed requests over the whole
    run, first arrival to last finish; below the offered rate it reflects this trace's own arrivals (a
    finite Poisson trace of n requests comes at the offered rate only within about 1/sqrt(n)) and the drain
    after the last arrival."""
    arr = records["arrival"].to_numpy(float)
    n, span = len(arr), float(np.ptp(arr))
    drain = summary["duration_s"] - span
    return (
        f"<div>served = completed / (last finish − first arrival), over the whole run (warm-up and drain "
        f"included): {summary['completed']} requests in {summary['duration_s']:.1f} s = "
        f"{summary['request_throughput']:.2f} req/s. This trace's {n} arrivals came over {span:.1f} s "
        f"({n / span:.2f} req/s: a Poisson trace's own rate scatters around the offered {rate:.4g} req/s by "
        f"about 1/√n = {100 / np.sqrt(n):.0f} %), then {drain:.1f} s of drain after the last arrival.</div>"
        if n > 1 and span > 0
        else ""
    )


def _table_html(rows: dict[str, dict]) -> str:
    head = (
        "<tr><th>policy</th><th>P50 E2EL (s)</th><th>P90 E2EL (s)</th><th>P50 TTFT (s)</th>"
        "<th>served (req/s)</th><th>n</th></tr>"
    )
    body = "".join(
        f"<tr><td>{p}</td><td>{s['p50_e2el_ms'] / 1e3:.2f}</td><td>{s['p90_e2el_ms'] / 1e3:.2f}</td>"
        f"<td>{s['p50_ttft_ms'] / 1e3:.2f}</td><td>{s['request_throughput']:.2f}</td><td>{s['completed']}</td></tr>"
        for p, s in rows.items()
    )
    return f"<table class='asrsched-table'>{head}{body}</table>"


def _overload_badge(rho: float, flagged: list[str], n_requests: int, served: float, offered: float) -> str:
    """HTML badge for a run at or above capacity (empty string when the run is stable)."""
    if rho < 1 and not flagged:
        return ""
    why = f"ρ = {rho:.2f} ≥ 1" if rho >= 1 else f"ρ = {rho:.2f}, but the queue grew ({', '.join(flagged)})"
    return (
        f"<div style='background:#D55E00;color:white;padding:4px 10px;border-radius:4px;display:inline-block'>"
        f"<b>OVERLOAD</b> ({why}): served {served:.2f} of {offered:.4g} req/s offered; the queue grows while "
        f"requests arrive, so these latencies are a finite-run transient of {n_requests} requests</div>"
    )


def policy_explorer(
    rate: float = 15.0,
    policy: str = "sjf",
    kappa: float | None = None,
    max_num_seqs: int = 32,
    workload: str = "librispeech",
    n_requests: int = 1500,
    seed: int = 0,
    service=None,
) -> Panel:
    """Sliders for rate, policy, kappa, ``max_num_seqs`` and workload over E2EL CDFs vs FCFS.

    The title and an overload badge state the load ``rho`` (rate / measured capacity,
    :func:`asrsched.sim.capacity.measure_capacity`) and the served rate; at ``rho >= 1`` (or when
    the simulator sees the queue grow) the badge says the numbers are a finite-run transient. Below
    the table, what "served" means and why it can fall short of the offered rate in a stable run.

    ``kappa`` (tokens/s, for every language, as notebook 02's ``KAPPA``) starts the kappa slider;
    ``None`` starts it at ``service``'s kappa for the workload's language, i.e. the profile's own run.
    """
    sm0 = as_service_model(service)
    lang = getattr(make_source(workload), "language", None)
    k0 = float(kappa) if kappa is not None else float(sm0.kappa.get(lang, next(iter(sm0.kappa.values()))))
    rate_w = W.FloatSlider(
        **slider_range(1, 25, rate), step=1, style=STYLE, description="rate (req/s)", continuous_update=False
    )
    pol_w = W.Dropdown(
        options=[p for p in policy_names() if p != "fcfs"], value=policy, style=STYLE, description="policy"
    )
    kappa_w = W.FloatSlider(
        **slider_range(1.0, 8.0, k0), step=0.1, style=STYLE, description="kappa (tok/s)", continuous_update=False
    )
    seqs_w = W.IntSlider(
        **slider_range(1, 128, max_num_seqs), step=1, style=STYLE, description="max_num_seqs", continuous_update=False
    )
    wl_w = W.Dropdown(
        options=[w for w in workload_names() if w != "drift"], value=workload, style=STYLE, description="workload"
    )
    fig = ExplorerFigure()
    fig.update_layout(xaxis_title="E2EL (s)", yaxis_title="fraction of requests", xaxis_type="log", height=420)
    table = W.HTML()
    badge = W.HTML()

    def update(*_):
        cap = measure_capacity(wl_w.value, sm0, max_num_seqs=seqs_w.value, kappa=kappa_w.value, cache_dir=None)
        with warnings.catch_warnings(record=True) as caught:  # shown as the badge, not as stderr
            warnings.simplefilter("always", OverloadWarning)
            res = point_records(
                wl_w.value,
                rate_w.value,
                ["fcfs", pol_w.value],
                seed=seed,
                n_requests=n_requests,
                max_num_seqs=seqs_w.value,
                service=sm0,
                kappa=kappa_w.value,
            )
        for w in caught:
            if not issubclass(w.category, OverloadWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        summ = {p: summarize(r.records) for p, r in res.items()}
        rho = cap.rho(rate_w.value)
        flagged = [p for p, r in res.items() if r.overloaded]
        over = rho >= 1 or bool(flagged)
        served = summ[pol_w.value]["request_throughput"]
        with fig.batch_update():
            fig.data = []
            for p, r in res.items():
                x, y = latency_cdf(r.records["e2el"].to_numpy(), points=300)
                fig.add_scatter(x=x, y=y, name=p, mode="lines", line=dict(color=policy_color(p), width=2.5))
            a, b = summ["fcfs"]["p50_e2el_ms"], summ[pol_w.value]["p50_e2el_ms"]
            fig.layout.title = (
                f"{'OVERLOAD — ' if over else ''}{wl_w.value} at {rate_w.value:.4g} req/s "
                f"(ρ = {rho:.2f}, served {served:.2f} req/s): {pol_w.value.upper()} P50 E2EL "
                f"{pct(100 * (b / a - 1))} vs FCFS (one run, n = {n_requests})"
            )
        badge.value = _overload_badge(rho, flagged, n_requests, served, rate_w.value)
        table.value = (
            _table_html(summ) + f"<div>capacity {cap.rate:.2f} req/s (95 % CI {cap.ci_low:.2f}-"
            f"{cap.ci_high:.2f}), measured with an always-full queue; ρ = offered rate / capacity</div>"
            + _served_note(res[pol_w.value].records, summ[pol_w.value], rate_w.value)
        )

    controls = (rate_w, pol_w, wl_w, kappa_w, seqs_w)
    for w in controls:
        w.observe(update, names="value")
    update()
    return Panel(
        [W.HBox([rate_w, pol_w, wl_w]), W.HBox([kappa_w, seqs_w]), badge, fig, table],
        fig=fig,
        name="policy_explorer",
        notebook="02_policy_sweep",
        controls=controls,
    )


def drift_explorer(
    rate: float = 9.0,
    ramp_s: float = 60.0,
    n_requests: int = 2500,
    seed: int = 0,
    policies=("fcfs", "sjf", "hrrn", "adaptive"),
    max_num_seqs: int = 32,
    service=None,
    phases=None,
    window_s: float = 20.0,
) -> Panel:
    """Sliders for rate and ramp length over rolling P90 E2EL (windows of ``window_s`` s) per policy under drift.

    ``phases`` is notebook 03's ``PHASES`` (``[[start_s, workload], ...]``); ``None`` is LibriSpeech,
    then the uniform split from a third of the run on. The title states each workload's load ``rho``
    (:func:`asrsched.sim.drift.phase_loads`: rate / that workload's measured capacity) and each
    policy's worst-window P90 (one run: no winner is named); a badge flags a phase at or above
    capacity, where latencies are a finite-run transient.
    """
    from asrsched.core.workloads import Drift

    sm = as_service_model(service)
    rate_w = W.FloatSlider(
        **slider_range(2, 20, rate), step=0.5, style=STYLE, description="rate (req/s)", continuous_update=False
    )
    ramp_w = W.FloatSlider(
        **slider_range(0, 240, ramp_s), step=10, style=STYLE, description="ramp (s)", continuous_update=False
    )
    fig = ExplorerFigure()
    fig.update_layout(xaxis_title="arrival time (s)", yaxis_title="P90 E2EL (s)", yaxis_type="log", height=420)
    badge = W.HTML()

    def update(*_):
        ph = phases if phases is not None else [(0.0, "librispeech"), (n_requests / rate_w.value / 3, "uniform")]
        drift = Drift([(float(t), make_source(w)) for t, w in ph], ramp_s=ramp_w.value)
        loads = phase_loads(drift, rate_w.value, service=sm, max_num_seqs=max_num_seqs)
        rhos = loads.groupby("workload", sort=False).rho.first().to_dict()
        with warnings.catch_warnings(record=True) as caught:  # shown as the badge, not as stderr
            warnings.simplefilter("always", OverloadWarning)
            res = point_records(
                drift,
                rate_w.value,
                list(policies),
                seed=seed,
                n_requests=n_requests,
                max_num_seqs=max_num_seqs,
                service=sm,
            )
        for w in caught:
            if not issubclass(w.category, OverloadWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        worst = {}
        with fig.batch_update():
            fig.data = []
            for p, r in res.items():
                d = r.records
                g = d.groupby((d.arrival // window_s) * window_s)["e2el"].quantile(0.9)
                worst[p] = float(g.max())
                fig.add_scatter(x=g.index, y=g.values, name=p, mode="lines", line=dict(color=policy_color(p)))
            fig.layout.title = (
                f"drift at {rate_w.value:g} req/s (ρ "
                + ", ".join(f"{w} {x:.2f}" for w, x in rhos.items())
                + f"), ramp {ramp_w.value:g} s; worst-window P90: "
                + ", ".join(f"{p.upper()} {v:.1f} s" for p, v in worst.items())
            )
        served = np.mean([summarize(r.records)["request_throughput"] for r in res.values()])
        over = {w: x for w, x in rhos.items() if x >= 1}
        flagged = [p for p, r in res.items() if r.overloaded]
        badge.value = (
            ""
            if not over and not flagged
            else "<div style='background:#D55E00;color:white;padding:4px 10px;border-radius:4px;"
            "display:inline-block'><b>OVERLOAD</b> in part of the run ("
            + (", ".join(f"{w} phase ρ = {x:.2f}" for w, x in over.items()) or "queue grew")
            + f"): served {served:.2f} req/s on average; latencies there are a finite-run transient of "
            f"{n_requests} requests</div>"
        )

    rate_w.observe(update, names="value")
    ramp_w.observe(update, names="value")
    update()
    return Panel(
        [W.HBox([rate_w, ramp_w]), badge, fig],
        fig=fig,
        name="drift_explorer",
        notebook="03_workload_drift",
        controls=(rate_w, ramp_w),
    )


# ----------------------------------------------------------------------------- A/B estimator study (notebook 05)


def kappa_explorer(
    rows: pd.DataFrame,
    *,
    held: pd.DataFrame | None = None,
    tokens: str = "decode_steps",
    duration: str = "audio_s",
    include_silence: bool = False,
    n_boot: int = 500,
    seed: int = 0,
    **fit_kw,
) -> Panel:
    """Dropdowns for the token definition and the duration used, a checkbox for the silence clips,
    over :func:`fig_kappa` computed by the same :func:`~asrsched.profiling.fit.fit_kappa` as the batch path.

    ``held``: the held-back rows of ``rows`` (notebook 01's ``run.held``), left out of the fit and drawn
    as open circles, as the batch path does; with the run's ``tokens``, ``duration``, ``n_boot``, ``seed``
    and other :func:`~asrsched.profiling.fit.fit_kappa` arguments (``fit_kw``, e.g. notebook 01's outlier
    threshold) the first view is the run's own fit. Computes its first view when built, then only reacts
    to the user (never blocks papermill).
    """
    tok_w = W.Dropdown(options=[(TOKEN_LABELS[t], t) for t in TOKEN_COLUMNS], value=tokens, description="tokens")
    durs = [c for c in DURATION_LABELS if c in rows and rows[c].notna().any()]
    dur_w = W.Dropdown(options=[(DURATION_LABELS[c], c) for c in durs], value=duration, description="duration")
    sil_w = W.Checkbox(value=include_silence, description="include clips with silence")
    fig = ExplorerFigure()
    msg = W.HTML()

    fit_rows = rows.drop(index=held.index, errors="ignore") if held is not None else rows

    def update(*_):
        d = fit_rows if sil_w.value else fit_rows[~fit_rows["silence"].astype(bool)]
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kf = fit_kappa(d, tokens=tok_w.value, duration=dur_w.value, n_boot=n_boot, seed=seed, **fit_kw)
        except ValueError as e:
            msg.value = f"<b>{e}</b>"
            return
        new = fig_kappa(d, kf, held=held)
        with fig.batch_update():
            fig.data = []
            fig.layout = new.layout
            for tr in new.data:
                fig.add_trace(tr)
        msg.value = "<br>".join(f"{k}: {v}" for k, v in kf.skipped.items())

    for w in (tok_w, dur_w, sil_w):
        w.observe(update, names="value")
    update()
    return Panel(
        [W.HBox([tok_w, dur_w, sil_w]), fig, msg],
        fig=fig,
        name="kappa_explorer",
        notebook="01_profile_whisper",
        controls=(tok_w, dur_w, sil_w),
    )


def serving_explorer(
    records: pd.DataFrame, sim: pd.DataFrame | None = None, results: pd.DataFrame | None = None
) -> Panel:
    """Pick a load level, a latency and a simulation mode; redraws :func:`fig_cdfs` for that choice.

    Shows what the batch path measured (no new runs): under papermill it builds one
    view and waits for nothing. A line above the plot gives the level's offered rate, the
    served rate per policy (:func:`asrsched.core.metrics.summarize`'s ``request_throughput``: completed
    requests / time from first send to last finish) and an
    overload badge at rho >= 1; the title reports ``results``' verdicts vs FCFS (with n).
    """
    levels = load_levels(records)
    lvl_w = W.Dropdown(options=levels, value=levels[-1], description="load level")
    met_w = W.Dropdown(
        options=[("E2EL", "e2el"), ("TTFT", "ttft"), ("queue delay", "queue_delay")],
        value="e2el",
        description="latency",
    )
    have = list(pd.unique(sim["mode"])) if sim is not None and "mode" in sim else (["sim"] if sim is not None else [])
    modes = [("none", "none")] + [
        ({"sim": "prediction", "profile": "profile", "replay": "replay"}.get(m, m), m) for m in have
    ]
    mode_w = W.Dropdown(options=modes, value=modes[1][1] if len(modes) > 1 else "none", description="simulator")
    fig = ExplorerFigure()
    fig.update_layout(height=440)
    status = W.HTML()

    def _status(lv):
        g = records[records.level == lv]
        rho, rate = float(g["rho"].iloc[0]), float(g["rate"].iloc[0])
        served = []
        for pol, gp in g.groupby("policy", sort=False):
            x = summarize(gp).get("request_throughput", float("nan"))
            served.append(f"{pol} {x:.2f} req/s (n={len(gp)})" if np.isfinite(x) else f"{pol} –")
        badge = (
            ' <b style="background:#D55E00;color:white;padding:1px 6px;border-radius:3px">overloaded: '
            "ρ ≥ 1, finite-run transient</b>"
            if rho >= 1
            else ""
        )
        return f"ρ = {rho:g}: offered {rate:.2f} req/s; served {', '.join(served)}{badge}"

    def update(*_):
        metric = met_w.value
        status.value = _status(lvl_w.value)
        src = records if metric in records else records.assign(**{metric: np.nan})
        f = fig_cdfs(
            src,
            None if mode_w.value == "none" else sim,
            metric=metric,
            mode=mode_w.value if mode_w.value != "none" else "sim",
            levels=[lvl_w.value],
            results=results,
        )
        with fig.batch_update():
            fig.data = []
            for tr in f.data:
                fig.add_trace(tr)
            fig.layout.title = f.layout.title.text
            fig.layout.xaxis.title = f.layout.xaxis.title.text
            fig.layout.yaxis.title = "fraction of requests"

    for w in (lvl_w, met_w, mode_w):
        w.observe(update, names="value")
    update()
    return Panel(
        [W.HBox([lvl_w, met_w, mode_w]), status, fig],
        fig=fig,
        name="serving_explorer",
        notebook="04_real_serving",
        controls=(lvl_w, met_w, mode_w),
    )
