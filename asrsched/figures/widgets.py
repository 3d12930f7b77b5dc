"""Every interactive panel (ipywidgets + plotly FigureWidget) of the notebooks, in one place.

* :func:`policy_explorer`, :func:`drift_explorer` -- the single-server simulator (notebooks 02, 03);
* :func:`estimator_explorer` (with :func:`small_study`) -- the A/B estimator study on the
  supermarket model (notebook 05);
* :func:`kappa_explorer` -- kappa per language from a Whisper profile (notebook 01);
* :func:`serving_explorer` -- latency CDFs of a real serving experiment against the simulator (notebook 04);
* :func:`ab_explorer` -- the A/B study of routing and scheduling on the ASR fleet (notebook 06).

Each panel calls the same functions the batch path calls (:func:`asrsched.sim.sweep.point_records`,
:func:`asrsched.sim.parallel.run_study` of each study's configuration), so what a
slider shows is what papermill computes. Panels compute their first view once when built and
then only react to the user; under papermill nothing waits for input. Every control has a
``description`` (the browser tests find them by it). Each panel ends with an "export this view"
button (:func:`asrsched.figures.style.export_view_button`) that writes the figure as shown into
the run's folder.
"""

from __future__ import annotations

import math
import warnings

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from asrsched.abtest.asr_fleet import ASRStudyConfig
from asrsched.abtest.asr_fleet_report import summary_table
from asrsched.abtest.model import SystemConfig
from asrsched.abtest.study import StudyConfig
from asrsched.abtest.study import summary_table as estimator_summary
from asrsched.core.labels import estimator_label, router_label
from asrsched.core.metrics import latency_cdf, summarize
from asrsched.core.policies import policy_names
from asrsched.core.service import default_service_model
from asrsched.core.workloads import workload_names
from asrsched.figures.ab_asr import fig_estimates
from asrsched.figures.abtest import estimator_color, ordered_estimators
from asrsched.figures.profiling import DURATION_LABELS, TOKEN_LABELS, fig_kappa
from asrsched.figures.serving import fig_cdfs, load_levels
from asrsched.figures.sim import pct
from asrsched.figures.style import export_view_button, policy_color
from asrsched.profiling.fit import fit_kappa
from asrsched.profiling.measure import TOKEN_COLUMNS
from asrsched.sim.capacity import measure_capacity
from asrsched.sim.engine import OverloadWarning
from asrsched.sim.parallel import run_study
from asrsched.sim.sweep import point_records

_STYLE = {"description_width": "initial"}  # full labels, not "max_num…"

__all__ = ["policy_explorer", "drift_explorer", "kappa_explorer", "serving_explorer", "estimator_explorer", "small_study",
           "ab_explorer"]


def _table_html(rows: dict[str, dict]) -> str:
    head = ("<tr><th>policy</th><th>P50 E2EL (s)</th><th>P90 E2EL (s)</th><th>P50 TTFT (s)</th>"
            "<th>served (req/s)</th><th>n</th></tr>")
    body = "".join(
        f"<tr><td>{p}</td><td>{s['p50_e2el_ms'] / 1e3:.2f}</td><td>{s['p90_e2el_ms'] / 1e3:.2f}</td>"
        f"<td>{s['p50_ttft_ms'] / 1e3:.2f}</td><td>{s['request_throughput']:.2f}</td><td>{s['completed']}</td></tr>"
        for p, s in rows.items())
    return f"<table class='asrsched-table'>{head}{body}</table>"


def _overload_badge(rho: float, flagged: list[str], n_requests: int, served: float, offered: float) -> str:
    """HTML badge for a run at or above capacity (empty string when the run is stable)."""
    if rho < 1 and not flagged:
        return ""
    why = f"ρ = {rho:.2f} ≥ 1" if rho >= 1 else f"ρ = {rho:.2f}, but the queue grew ({', '.join(flagged)})"
    return (f"<div style='background:#D55E00;color:white;padding:4px 10px;border-radius:4px;display:inline-block'>"
            f"<b>OVERLOAD</b> ({why}): served {served:.2f} of {offered:g} req/s offered; the queue grows while "
            f"requests arrive, so these latencies are a finite-run transient of {n_requests} requests</div>")


def policy_explorer(rate: float = 15.0, policy: str = "sjf", kappa: float = 3.3, max_num_seqs: int = 32,
                    workload: str = "librispeech", n_requests: int = 1500, seed: int = 0, service=None) -> W.VBox:
    """Sliders for rate, policy, kappa, ``max_num_seqs`` and workload over E2EL CDFs vs FCFS.

    The title and an overload badge state the load ``rho`` (rate / measured capacity,
    :func:`asrsched.sim.capacity.measure_capacity`) and the served rate; at ``rho >= 1`` (or when
    the simulator sees the queue grow) the badge says the numbers are a finite-run transient.
    """
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
    badge = W.HTML()

    def update(*_):
        sm = service or default_service_model()
        cap = measure_capacity(wl_w.value, sm, max_num_seqs=seqs_w.value, kappa=kappa_w.value, cache_dir=None)
        with warnings.catch_warnings(record=True) as caught:  # shown as the badge, not as stderr
            warnings.simplefilter("always", OverloadWarning)
            res = point_records(wl_w.value, rate_w.value, ["fcfs", pol_w.value], seed=seed, n_requests=n_requests,
                                max_num_seqs=seqs_w.value, service=service, kappa=kappa_w.value)
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
            fig.layout.title = (f"{'OVERLOAD — ' if over else ''}{wl_w.value} at {rate_w.value:g} req/s "
                                f"(ρ = {rho:.2f}, served {served:.2f} req/s): {pol_w.value.upper()} P50 E2EL "
                                f"{pct(100 * (b / a - 1))} vs FCFS (one run, n = {n_requests})")
        badge.value = _overload_badge(rho, flagged, n_requests, served, rate_w.value)
        table.value = _table_html(summ) + (f"<div>capacity {cap.rate:.2f} req/s (95 % CI {cap.ci_low:.2f}-"
                                           f"{cap.ci_high:.2f}), measured with an always-full queue</div>")

    for w in (rate_w, pol_w, kappa_w, seqs_w, wl_w):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([rate_w, pol_w, wl_w]), W.HBox([kappa_w, seqs_w]), badge, fig, table,
                   export_view_button(fig, "02_policy_sweep", name="policy_explorer")])


def drift_explorer(rate: float = 9.0, ramp_s: float = 60.0, n_requests: int = 2500, seed: int = 0,
                   policies=("fcfs", "sjf", "hrrn", "adaptive"), max_num_seqs: int = 32, service=None) -> W.VBox:
    """Sliders for rate and ramp length over rolling P90 E2EL per policy under drift.

    The title states each phase's load ``rho`` (rate / that workload's measured capacity) and each
    policy's worst-window P90 (one run: no winner is named); a badge flags a phase at or above
    capacity, where latencies are a finite-run transient.
    """
    from asrsched.core.workloads import Drift, make_source

    rate_w = W.FloatSlider(value=rate, min=2, max=20, step=0.5, style=_STYLE, description="rate (req/s)", continuous_update=False)
    ramp_w = W.FloatSlider(value=ramp_s, min=0, max=240, step=10, style=_STYLE, description="ramp (s)", continuous_update=False)
    fig = go.FigureWidget()
    fig.update_layout(xaxis_title="arrival time (s)", yaxis_title="P90 E2EL (s)", yaxis_type="log", height=420)
    badge = W.HTML()

    def update(*_):
        sm = service or default_service_model()
        drift = Drift([(0.0, make_source("librispeech")), (n_requests / rate_w.value / 3, make_source("uniform"))],
                      ramp_s=ramp_w.value)
        rhos = {w: measure_capacity(w, sm, max_num_seqs=max_num_seqs, cache_dir=None).rho(rate_w.value)
                for w in ("librispeech", "uniform")}
        with warnings.catch_warnings(record=True) as caught:  # shown as the badge, not as stderr
            warnings.simplefilter("always", OverloadWarning)
            res = point_records(drift, rate_w.value, list(policies), seed=seed, n_requests=n_requests,
                                max_num_seqs=max_num_seqs, service=service)
        for w in caught:
            if not issubclass(w.category, OverloadWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        worst = {}
        with fig.batch_update():
            fig.data = []
            for p, r in res.items():
                d = r.records
                g = d.groupby((d.arrival // 20) * 20)["e2el"].quantile(0.9)
                worst[p] = float(g.max())
                fig.add_scatter(x=g.index, y=g.values, name=p, mode="lines", line=dict(color=policy_color(p)))
            fig.layout.title = (f"drift at {rate_w.value:g} req/s (ρ librispeech {rhos['librispeech']:.2f}, uniform "
                                f"{rhos['uniform']:.2f}), ramp {ramp_w.value:g} s; worst-window P90: "
                                + ", ".join(f"{p.upper()} {v:.1f} s" for p, v in worst.items()))
        served = np.mean([summarize(r.records)["request_throughput"] for r in res.values()])
        over = {w: x for w, x in rhos.items() if x >= 1}
        flagged = [p for p, r in res.items() if r.overloaded]
        badge.value = ("" if not over and not flagged else
                       "<div style='background:#D55E00;color:white;padding:4px 10px;border-radius:4px;"
                       "display:inline-block'><b>OVERLOAD</b> in part of the run ("
                       + (", ".join(f"{w} phase ρ = {x:.2f}" for w, x in over.items()) or "queue grew")
                       + f"): served {served:.2f} req/s on average; latencies there are a finite-run transient of "
                       f"{n_requests} requests</div>")

    rate_w.observe(update, names="value")
    ramp_w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([rate_w, ramp_w]), badge, fig,
                   export_view_button(fig, "03_workload_drift", name="drift_explorer")])


# ----------------------------------------------------------------------------- A/B estimator study (notebook 05)

def small_study(lam: float = 0.8, d1: int = 1, d2: int = 2, p: float = 0.5, L: int = 0, n_servers: int = 20,
                reps: int = 6, n_requests: int = 100_000, scenario: str = "homogeneous", seed: int = 0):
    """A one-scenario study sized for interaction (seconds). ``L=0`` means the default 30*N*lam.

    Returns ``(StudyResult, summary DataFrame)``; raises ``ValueError`` on bad input.
    """
    Lx = None if not L else int(L)
    Lv = Lx or max(1, round(30 * n_servers * lam))
    base = SystemConfig(n_servers=int(n_servers), lam=float(lam), control=int(d1), treatment=int(d2), p=float(p),
                        n_requests=max(int(n_requests), 100 * Lv), warmup_requests=10_000)
    sc = StudyConfig(base=base, scenarios=(scenario,), reps=int(reps), L=Lx, L_factors=(1.0,), alpha_batches=50,
                     truth_requests=max(400_000, 4 * base.n_requests), truth_seeds=1, slope_h=None, seed=seed)
    res = run_study(sc, workers=1, progress=False)
    return res, estimator_summary(res)


def estimator_explorer(lam: float = 0.8, d1: int = 1, d2: int = 2, p: float = 0.5, L: int = 0, n_servers: int = 20,
                       reps: int = 6, n_requests: int = 100_000, seed: int = 0) -> W.VBox:
    """Sliders (λ, Power-of-d of each arm, p, L, N) over every estimator's replications vs the truth.

    The title states the truth with its 95 % CI and the number of replications; it names the
    lowest-MSE estimator only when :func:`asrsched.abtest.study.lowest_mse` finds a winner
    (otherwise it says which estimators are statistically tied). The table carries 95 % CIs.
    """
    from asrsched.abtest.study import lowest_mse, paired_estimates

    lam_w = W.FloatSlider(value=lam, min=0.3, max=0.95, step=0.05, description="λ (per server)",
                          continuous_update=False)
    d1_w = W.IntSlider(value=d1, min=1, max=10, description="control: Power-of-d, d", continuous_update=False)
    d2_w = W.IntSlider(value=d2, min=1, max=10, description="treatment: Power-of-d, d", continuous_update=False)
    p_w = W.FloatSlider(value=p, min=0.1, max=0.9, step=0.05, description="p (treated)", continuous_update=False)
    L_w = W.IntSlider(value=L, min=0, max=4000, step=20, description="L (0 = 30·N·λ)", continuous_update=False)
    n_w = W.IntSlider(value=n_servers, min=2, max=50, description="N (servers)", continuous_update=False)
    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        w.style.description_width = "170px"
    fig = go.FigureWidget()
    fig.update_layout(height=500, xaxis_title="estimator", yaxis_title="estimated effect (time units)",
                      showlegend=False, margin=dict(t=120))
    table = W.HTML()

    def update(*_):
        try:
            res, s = small_study(lam_w.value, d1_w.value, d2_w.value, p_w.value, L_w.value, n_w.value, reps, n_requests,
                                 seed=seed)
        except ValueError as err:
            table.value = f"<b style='color:#b00'>{err}</b>"
            return
        e = res.estimates[res.estimates.headline.astype(bool)]
        gte, gte_se = float(res.truth.gte.iloc[0]), float(res.truth.gte_se.iloc[0])
        s2 = s[s.estimator != "mixed_dq_oracle"].copy()
        winners, _ = lowest_mse(paired_estimates(res, res.config.scenarios[0]), gte)
        won = estimator_label(winners[0] if len(winners) == 1 else "tie: " + ", ".join(winners))
        R = int(e.rep.nunique())
        with fig.batch_update():
            fig.data = []
            for name in ordered_estimators(e.estimator):
                fig.add_box(y=e[e.estimator == name].estimate, name=estimator_label(name),
                            marker_color=estimator_color(name), boxpoints="all", pointpos=0)
            fig.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=gte, y1=gte,
                                      line=dict(color=policy_color("truth"), width=2.5))]
            fig.layout.title = (f"Truth (GTE) {gte:.3g} ± {1.96 * gte_se:.2g}; lowest MSE: {won}<br>"
                                f"<sup>N = {n_w.value}, λ = {lam_w.value:g}, {router_label(int(d1_w.value), n_w.value)} → "
                                f"{router_label(int(d2_w.value), n_w.value)}, p = {p_w.value:g}; {R} replications per estimator"
                                "</sup>")
        s2["estimator"] = s2.estimator.map(estimator_label)
        s2["bias 95 % CI"] = [f"[{a:.3g}, {b:.3g}]" for a, b in zip(s2.bias_ci_lo, s2.bias_ci_hi)]
        s2["RMSE 95 % CI"] = [f"[{a:.3g}, {b:.3g}]" for a, b in zip(s2.rmse_ci_lo, s2.rmse_ci_hi)]
        cols = ["estimator", "mean", "bias", "bias 95 % CI", "sd", "rmse", "RMSE 95 % CI", "coverage", "reps"]
        table.value = s2[cols].rename(columns={"rmse": "RMSE"}).round(4).to_html(index=False,
                                                                                  classes="asrsched-table")

    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        w.observe(update, names="value")
    update()
    controls = W.VBox([W.HBox([lam_w, n_w]), W.HBox([d1_w, d2_w]), W.HBox([p_w, L_w])])
    return W.VBox([controls, fig, table, export_view_button(fig, "05_ab_estimators", name="estimator_explorer")])


# ----------------------------------------------------------------------------- A/B study on the ASR fleet (notebook 06)

def ab_explorer(cfg: ASRStudyConfig | None = None, *, workload: str = "librispeech", reps: int = 4,
                n_requests: int = 8000, workers: int = 1):
    """Sliders for fleet size, load, p and L over a small study of the routing and scheduling tests.

    Each change re-runs :func:`asrsched.sim.parallel.run_study` (the batch path) on one workload with ``reps``
    replications and shows every estimate against the truth. The first view is computed once
    when the panel is built; nothing waits for input (safe under papermill).
    """
    base = (cfg or ASRStudyConfig()).replace(workloads=(workload,), reps=reps, truth_seeds=reps,
                                             n_requests=n_requests, L_factors=(1.0,))
    n_w = W.IntSlider(value=base.n_replicas, min=2, max=12, step=1, description="replicas", continuous_update=False)
    rho_w = W.FloatSlider(value=base.rho, min=0.5, max=0.98, step=0.01, description="load ρ", continuous_update=False)
    p_w = W.FloatSlider(value=base.p, min=0.1, max=0.9, step=0.05, description="p", continuous_update=False)
    L_w = W.IntSlider(value=0, min=0, max=5000, step=50, description="L (0 = 30 s)", continuous_update=False)
    f_w = W.Dropdown(options=["routing", "scheduling"], value="routing", description="test")
    m_w = W.Dropdown(options=[("mean E2EL", ("e2el", "mean")), ("P90 E2EL", ("e2el", "p90")),
                              ("mean TTFT", ("ttft", "mean")), ("P90 TTFT", ("ttft", "p90"))],
                     value=("e2el", "mean"), description="metric")
    fig = go.FigureWidget()
    fig.update_layout(height=460, yaxis_title="estimated effect (s)")
    table = W.HTML()
    msg = W.HTML()
    state = {}

    def compute(*_):
        try:
            c = base.replace(n_replicas=int(n_w.value), rho=float(rho_w.value), p=float(p_w.value),
                             L=int(L_w.value) if L_w.value > 0 else None)
            total_rate = c.total_rate(workload)  # enough requests for 5 switchback blocks and a 2 L horizon
            span = c.warmup_s + max(5 * c.block_s, 2 * c.L_for(total_rate) / total_rate + 2 * c.n_batches / total_rate)
            c = c.replace(n_requests=max(int(n_requests), int(math.ceil(total_rate * span))))
            msg.value = f"<i>simulating {c.reps} experiments x {len(c.designs())} designs of {c.n_requests} requests</i>"
            state["res"] = run_study(c, workers=workers, progress=False)
            state["sum"] = summary_table(state["res"])
            msg.value = ""
        except ValueError as e:
            msg.value = f"<b style='color:#D55E00'>{e}</b>"
            return
        draw()

    def draw(*_):
        if "res" not in state:
            return
        metric, stat = m_w.value
        f = fig_estimates(state["res"], f_w.value, metric, stat, summary=state["sum"])
        with fig.batch_update():
            fig.data = []
            fig.add_traces(list(f.data))
            fig.layout = f.layout  # the whole layout (subplots: axes, domains, annotations), its height included:
            # two rows of panels need it, or their axis titles run into each other
        s = state["sum"]
        s = s[(s.factor == f_w.value) & (s.metric == metric) & (s.stat == stat)]
        table.value = s[["design", "estimator", "reps", "truth", "mean", "bias", "bias_ci_lo", "bias_ci_hi", "sd",
                         "rmse", "rmse_ci_lo", "rmse_ci_hi"]].round(4).to_html(index=False)

    for w in (n_w, rho_w, p_w, L_w):
        w.observe(compute, names="value")
    for w in (f_w, m_w):
        w.observe(draw, names="value")
    compute()
    return W.VBox([W.HBox([n_w, rho_w, p_w]), W.HBox([L_w, f_w, m_w]), msg, fig, table,
                   export_view_button(fig, "06_ab_asr_policies", name="ab_explorer")])


def kappa_explorer(rows: pd.DataFrame, *, tokens: str = "decode_steps", duration: str = "audio_s",
                   include_silence: bool = False, n_boot: int = 500, seed: int = 0):
    """Dropdowns for the token definition and the duration used, a checkbox for the silence clips,
    over :func:`fig_kappa` computed by the same :func:`~asrsched.profiling.fit.fit_kappa` as the batch path.

    Computes its first view when built, then only reacts to the user (never blocks papermill).
    """
    tok_w = W.Dropdown(options=[(TOKEN_LABELS[t], t) for t in TOKEN_COLUMNS], value=tokens, description="tokens")
    durs = [c for c in DURATION_LABELS if c in rows and rows[c].notna().any()]
    dur_w = W.Dropdown(options=[(DURATION_LABELS[c], c) for c in durs], value=duration, description="duration")
    sil_w = W.Checkbox(value=include_silence, description="include clips with silence")
    fig = go.FigureWidget()
    msg = W.HTML()

    def update(*_):
        d = rows if sil_w.value else rows[~rows["silence"].astype(bool)]
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kf = fit_kappa(d, tokens=tok_w.value, duration=dur_w.value, n_boot=n_boot, seed=seed)
        except ValueError as e:
            msg.value = f"<b>{e}</b>"
            return
        new = fig_kappa(d, kf)
        with fig.batch_update():
            fig.data = []
            fig.layout = new.layout
            for tr in new.data:
                fig.add_trace(tr)
        msg.value = "<br>".join(f"{k}: {v}" for k, v in kf.skipped.items())

    for w in (tok_w, dur_w, sil_w):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([tok_w, dur_w, sil_w]), fig, msg,
                   export_view_button(fig, "01_profile_whisper", name="kappa_explorer")])


def serving_explorer(records: pd.DataFrame, sim: pd.DataFrame | None = None, results: pd.DataFrame | None = None):
    """Pick a load level, a latency and a simulation mode; redraws :func:`fig_cdfs` for that choice.

    Shows what the batch path measured (no new runs): under papermill it builds one
    view and waits for nothing. A line above the plot gives the level's offered rate, the
    served rate per policy (completed requests / time from first send to last finish) and an
    overload badge at rho >= 1; the title reports ``results``' verdicts vs FCFS (with n).
    """
    levels = load_levels(records)
    lvl_w = W.Dropdown(options=levels, value=levels[-1], description="load level")
    met_w = W.Dropdown(options=[("E2EL", "e2el"), ("TTFT", "ttft"), ("queue delay", "queue_delay")], value="e2el",
                       description="latency")
    have = list(pd.unique(sim["mode"])) if sim is not None and "mode" in sim else (["sim"] if sim is not None else [])
    modes = [("none", "none")] + [({"sim": "prediction", "profile": "profile", "replay": "replay"}.get(m, m), m)
                                  for m in have]
    mode_w = W.Dropdown(options=modes, value=modes[1][1] if len(modes) > 1 else "none", description="simulator")
    fig = go.FigureWidget()
    fig.update_layout(height=440)
    status = W.HTML()

    def _status(lv):
        g = records[records.level == lv]
        rho, rate = float(g["rho"].iloc[0]), float(g["rate"].iloc[0])
        served = []
        for pol, gp in g.groupby("policy", sort=False):
            fin = gp["finish"].to_numpy(float)
            ok = np.isfinite(fin)
            span = float(np.nanmax(fin) - np.nanmin(gp["arrival"].to_numpy(float))) if ok.any() else float("nan")
            served.append(f"{pol} {ok.sum() / span:.2f} req/s (n={len(gp)})" if span > 0 else f"{pol} –")
        badge = (' <b style="background:#D55E00;color:white;padding:1px 6px;border-radius:3px">overloaded: '
                 'ρ ≥ 1, finite-run transient</b>' if rho >= 1 else "")
        return f"ρ = {rho:g}: offered {rate:.2f} req/s; served {', '.join(served)}{badge}"

    def update(*_):
        metric = met_w.value
        status.value = _status(lvl_w.value)
        src = records if metric in records else records.assign(**{metric: np.nan})
        f = fig_cdfs(src, None if mode_w.value == "none" else sim, metric=metric,
                     mode=mode_w.value if mode_w.value != "none" else "sim", levels=[lvl_w.value], results=results)
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
    return W.VBox([W.HBox([lvl_w, met_w, mode_w]), status, fig,
                   export_view_button(fig, "04_real_serving", name="serving_explorer")])
