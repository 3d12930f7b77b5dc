"""The interactive panels (ipywidgets + plotly FigureWidget) of the A/B-test notebooks.

* :func:`estimator_explorer` (with :func:`small_study`) -- the A/B estimator study on the
  supermarket model (notebook 05);
* :func:`ab_explorer` -- the A/B study of routing and scheduling on the ASR fleet (notebook 06).

As in :mod:`asrsched.figures.widgets` (the serving notebooks' panels): each panel calls the same
function the batch path calls (:func:`asrsched.sim.parallel.run_study` of the study's configuration), so
what a slider shows is what papermill computes; a notebook passes in its parameters, so a panel's first
view is the study the tables above it describe (at the panel's smaller size); a panel computes its first
view once when built and then only reacts to the user; every control has a ``description``; each panel is
a :class:`asrsched.figures.panel.Panel` (an "export this view" button, a static image of its first view
in a saved or batch-executed notebook).
"""

from __future__ import annotations

import math

import ipywidgets as W

from asrsched.abtest.asr_fleet import ASRStudyConfig
from asrsched.abtest.asr_fleet_report import summary_table
from asrsched.abtest.model import SystemConfig
from asrsched.abtest.study import StudyConfig
from asrsched.abtest.study import summary_table as estimator_summary
from asrsched.core.labels import estimator_label, router_label
from asrsched.figures.ab_asr import fig_estimates
from asrsched.figures.abtest import estimator_color, ordered_estimators
from asrsched.figures.panel import ExplorerFigure, Panel, slider_range
from asrsched.figures.style import policy_color
from asrsched.sim.parallel import run_study

__all__ = ["estimator_explorer", "small_study", "ab_explorer"]


def small_study(
    lam: float = 0.8,
    d1: int = 1,
    d2: int = 2,
    p: float = 0.5,
    L: int = 0,
    n_servers: int = 20,
    reps: int = 6,
    n_requests: int = 100_000,
    scenario: str = "homogeneous",
    seed: int = 0,
    block_len: float | None = None,
    burn_in: float | None = None,
):
    """A one-scenario study sized for interaction (seconds). ``L=0`` means the default 30*N*lam;
    ``block_len`` and ``burn_in`` (the switchback design's) default to :class:`asrsched.abtest.study.StudyConfig`'s.

    Returns ``(StudyResult, summary DataFrame)``; raises ``ValueError`` on bad input.
    """
    Lx = None if not L else int(L)
    Lv = Lx or max(1, round(30 * n_servers * lam))
    base = SystemConfig(
        n_servers=int(n_servers),
        lam=float(lam),
        control=int(d1),
        treatment=int(d2),
        p=float(p),
        n_requests=max(int(n_requests), 100 * Lv),
        warmup_requests=10_000,
    )
    sc = StudyConfig(
        base=base,
        scenarios=(scenario,),
        reps=int(reps),
        L=Lx,
        L_factors=(1.0,),
        alpha_batches=50,
        truth_requests=max(400_000, 4 * base.n_requests),
        truth_seeds=1,
        slope_h=None,
        seed=seed,
        **{k: float(v) for k, v in (("block_len", block_len), ("burn_in", burn_in)) if v is not None},
    )
    res = run_study(sc, workers=1, progress=False)
    return res, estimator_summary(res)


def estimator_explorer(
    lam: float = 0.8,
    d1: int = 1,
    d2: int = 2,
    p: float = 0.5,
    L: int = 0,
    n_servers: int = 20,
    reps: int = 6,
    n_requests: int = 100_000,
    seed: int = 0,
    scenario: str = "homogeneous",
    block_len: float | None = None,
    burn_in: float | None = None,
) -> Panel:
    """Sliders (λ, Power-of-d of each arm, p, L, N) over every estimator's replications vs the truth.

    A small :func:`small_study` of one ``scenario``; notebook 05 passes its parameters (``LAM``, ``D1``,
    ``D2``, ``P``, ``L``, ``N_SERVERS``, its first scenario, ``BLOCK_LEN``, ``BURN_IN``, ``SEED``).
    The title states the scenario, the truth with its 95 % CI and the number of replications; it names the
    lowest-MSE estimator only when :func:`asrsched.abtest.study.lowest_mse` finds a winner
    (otherwise it says which estimators are statistically tied). The table carries 95 % CIs.
    """
    from asrsched.abtest.study import lowest_mse, paired_estimates

    lam_w = W.FloatSlider(
        **slider_range(0.3, 0.95, lam), step=0.05, description="λ (per server)", continuous_update=False
    )
    d1_w = W.IntSlider(**slider_range(1, 10, d1), description="control: Power-of-d, d", continuous_update=False)
    d2_w = W.IntSlider(**slider_range(1, 10, d2), description="treatment: Power-of-d, d", continuous_update=False)
    p_w = W.FloatSlider(**slider_range(0.1, 0.9, p), step=0.05, description="p (treated)", continuous_update=False)
    L_w = W.IntSlider(**slider_range(0, 4000, L or 0), step=20, description="L (0 = 30·N·λ)", continuous_update=False)
    n_w = W.IntSlider(**slider_range(2, 50, n_servers), description="N (servers)", continuous_update=False)
    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        # two sliders a row in a ~970 px output: 170 px of label, a track of about 220 px, the readout
        w.style.description_width = "170px"
        w.layout.width = "460px"
    fig = ExplorerFigure()
    fig.update_layout(
        height=500,
        xaxis_title="estimator",
        yaxis_title="estimated effect (time units)",
        showlegend=False,
        margin=dict(t=120),
    )
    table = W.HTML()

    def update(*_):
        try:
            res, s = small_study(
                lam_w.value,
                d1_w.value,
                d2_w.value,
                p_w.value,
                L_w.value,
                n_w.value,
                reps,
                n_requests,
                scenario=scenario,
                seed=seed,
                block_len=block_len,
                burn_in=burn_in,
            )
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
                fig.add_box(
                    y=e[e.estimator == name].estimate,
                    name=estimator_label(name),
                    marker_color=estimator_color(name),
                    boxpoints="all",
                    pointpos=0,
                )
            fig.layout.shapes = [
                dict(
                    type="line",
                    xref="paper",
                    x0=0,
                    x1=1,
                    yref="y",
                    y0=gte,
                    y1=gte,
                    line=dict(color=policy_color("truth"), width=2.5),
                )
            ]
            fig.layout.title = (
                f"Truth (GTE) {gte:.3g} ± {1.96 * gte_se:.2g}; lowest MSE: {won}<br>"
                f"<sup>{scenario}: N = {n_w.value}, λ = {lam_w.value:g}, {router_label(int(d1_w.value), n_w.value)} → "
                f"{router_label(int(d2_w.value), n_w.value)}, p = {p_w.value:g}; {R} replications per estimator"
                "</sup>"
            )
        s2["estimator"] = s2.estimator.map(estimator_label)
        s2["bias 95 % CI"] = [f"[{a:.3g}, {b:.3g}]" for a, b in zip(s2.bias_ci_lo, s2.bias_ci_hi)]
        s2["RMSE 95 % CI"] = [f"[{a:.3g}, {b:.3g}]" for a, b in zip(s2.rmse_ci_lo, s2.rmse_ci_hi)]
        cols = ["estimator", "mean", "bias", "bias 95 % CI", "sd", "rmse", "RMSE 95 % CI", "coverage", "reps"]
        table.value = s2[cols].rename(columns={"rmse": "RMSE"}).round(4).to_html(index=False, classes="asrsched-table")

    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        w.observe(update, names="value")
    update()
    rows = W.VBox([W.HBox([lam_w, n_w]), W.HBox([d1_w, d2_w]), W.HBox([p_w, L_w])])
    return Panel(
        [rows, fig, table],
        fig=fig,
        name="estimator_explorer",
        notebook="05_ab_estimators",
        controls=(lam_w, n_w, d1_w, d2_w, p_w, L_w),
    )


# ----------------------------------------------------------------------------- A/B study on the ASR fleet (notebook 06)


def ab_explorer(
    cfg: ASRStudyConfig | None = None,
    *,
    workload: str = "librispeech",
    reps: int = 4,
    n_requests: int = 8000,
    workers: int = 1,
) -> Panel:
    """Sliders for fleet size, load, p and L over a small study of the routing and scheduling tests.

    Each change re-runs :func:`asrsched.sim.parallel.run_study` (the batch path) on one workload with ``reps``
    replications and shows every estimate against the truth. The sliders start at ``cfg``'s fleet size,
    load, p and DQ horizon ``L`` (notebook 06's study), its truth uses up to ``cfg.truth_seeds`` traces. The
    first view is computed once when the panel is built; nothing waits for input (safe under papermill).
    """
    cfg = cfg or ASRStudyConfig()
    base = cfg.replace(
        workloads=(workload,),
        reps=reps,
        truth_seeds=min(cfg.truth_seeds, reps),
        n_requests=n_requests,
        L_factors=(1.0,),
    )
    n_w = W.IntSlider(**slider_range(2, 12, base.n_replicas), description="replicas", continuous_update=False)
    rho_w = W.FloatSlider(**slider_range(0.5, 0.98, base.rho), step=0.01, description="load ρ", continuous_update=False)
    p_w = W.FloatSlider(**slider_range(0.1, 0.9, base.p), step=0.05, description="p", continuous_update=False)
    L_w = W.IntSlider(
        **slider_range(0, 5000, base.L or 0), step=50, description="L (0 = 30 s)", continuous_update=False
    )
    f_w = W.Dropdown(options=["routing", "scheduling"], value="routing", description="test")
    m_w = W.Dropdown(
        options=[
            ("mean E2EL", ("e2el", "mean")),
            ("P90 E2EL", ("e2el", "p90")),
            ("mean TTFT", ("ttft", "mean")),
            ("P90 TTFT", ("ttft", "p90")),
        ],
        value=("e2el", "mean"),
        description="metric",
    )
    fig = ExplorerFigure()
    fig.update_layout(height=460, yaxis_title="estimated effect (s)")
    table = W.HTML()
    msg = W.HTML()
    state = {}

    def compute(*_):
        try:
            c = base.replace(
                n_replicas=int(n_w.value),
                rho=float(rho_w.value),
                p=float(p_w.value),
                L=int(L_w.value) if L_w.value > 0 else None,
            )
            total_rate = c.total_rate(workload)  # enough requests for 5 switchback blocks and a 2 L horizon
            span = c.warmup_s + max(5 * c.block_s, 2 * c.L_for(total_rate) / total_rate + 2 * c.n_batches / total_rate)
            c = c.replace(n_requests=max(int(n_requests), int(math.ceil(total_rate * span))))
            msg.value = (
                f"<i>simulating {c.reps} experiments x {len(c.designs())} designs of {c.n_requests} requests</i>"
            )
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
        table.value = (
            s[
                [
                    "design",
                    "estimator",
                    "reps",
                    "truth",
                    "mean",
                    "bias",
                    "bias_ci_lo",
                    "bias_ci_hi",
                    "sd",
                    "rmse",
                    "rmse_ci_lo",
                    "rmse_ci_hi",
                ]
            ]
            .round(4)
            .to_html(index=False)
        )

    for w in (n_w, rho_w, p_w, L_w):
        w.observe(compute, names="value")
    for w in (f_w, m_w):
        w.observe(draw, names="value")
    compute()
    return Panel(
        [W.HBox([n_w, rho_w, p_w]), W.HBox([L_w, f_w, m_w]), msg, fig, table],
        fig=fig,
        name="ab_explorer",
        notebook="06_ab_asr_policies",
        controls=(n_w, rho_w, p_w, L_w, f_w, m_w),
    )
