"""Interactive panel of the estimator study: sliders for lam, d1, d2, p, L and N.

The panel runs a small study (:func:`asrsched.abtest.study.run_study`, in-process, one
scenario) with the slider values, i.e. the same code path as the notebook's batch
study, and redraws every replication's estimate against the ground truth. It computes
its first view once when built and afterwards only reacts to the user, so under
papermill nothing blocks and no result changes.
"""

from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from asrsched.figures.style import policy_color
from asrsched.figures.abtest import LABELS, _color, _ordered
from asrsched.abtest.model import SystemConfig
from asrsched.abtest.study import StudyConfig, run_study, summarize

__all__ = ["estimator_explorer", "small_study"]


def small_study(lam: float = 0.8, d1: int = 1, d2: int = 2, p: float = 0.5, L: int = 0, n_servers: int = 20,
                reps: int = 6, n_jobs: int = 100_000, scenario: str = "homogeneous", seed: int = 0):
    """A one-scenario study sized for interaction (seconds). ``L=0`` means the default 30*N*lam.

    Returns ``(StudyResult, summary DataFrame)``; raises ``ValueError`` on bad input.
    """
    Lx = None if not L else int(L)
    Lv = Lx or max(1, round(30 * n_servers * lam))
    base = SystemConfig(n_servers=int(n_servers), lam=float(lam), control=int(d1), treatment=int(d2), p=float(p),
                        n_jobs=max(int(n_jobs), 100 * Lv), warmup_jobs=10_000)
    sc = StudyConfig(base=base, scenarios=(scenario,), reps=int(reps), L=Lx, L_factors=(1.0,), alpha_batches=50,
                     truth_jobs=max(400_000, 4 * base.n_jobs), truth_seeds=1, slope_h=None, seed=seed)
    res = run_study(sc, n_jobs=1, progress=False)
    return res, summarize(res)


def estimator_explorer(lam: float = 0.8, d1: int = 1, d2: int = 2, p: float = 0.5, L: int = 0, n_servers: int = 20,
                       reps: int = 6, n_jobs: int = 100_000, seed: int = 0) -> W.VBox:
    """Sliders (lam, d1, d2, p, L, N) over every estimator's replications vs the truth."""
    lam_w = W.FloatSlider(value=lam, min=0.3, max=0.95, step=0.05, description="lam (per server)",
                          continuous_update=False)
    d1_w = W.IntSlider(value=d1, min=1, max=10, description="d1 (control)", continuous_update=False)
    d2_w = W.IntSlider(value=d2, min=1, max=10, description="d2 (treatment)", continuous_update=False)
    p_w = W.FloatSlider(value=p, min=0.1, max=0.9, step=0.05, description="p (treated)", continuous_update=False)
    L_w = W.IntSlider(value=L, min=0, max=4000, step=20, description="L (0 = 30·N·lam)", continuous_update=False)
    n_w = W.IntSlider(value=n_servers, min=2, max=50, description="N (servers)", continuous_update=False)
    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        w.style.description_width = "120px"
    fig = go.FigureWidget()
    fig.update_layout(height=460, xaxis_title="estimator", yaxis_title="estimated effect on mean response time",
                      showlegend=False)
    table = W.HTML()

    def update(*_):
        try:
            res, s = small_study(lam_w.value, d1_w.value, d2_w.value, p_w.value, L_w.value, n_w.value, reps, n_jobs,
                                 seed=seed)
        except ValueError as err:
            table.value = f"<b style='color:#b00'>{err}</b>"
            return
        e = res.estimates[res.estimates.headline.astype(bool)]
        gte = float(res.truth.gte.iloc[0])
        with fig.batch_update():
            fig.data = []
            for name in _ordered(e.estimator):
                fig.add_box(y=e[e.estimator == name].estimate, name=LABELS.get(name, name),
                            marker_color=_color(name), boxpoints="all", pointpos=0)
            fig.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=gte, y1=gte,
                                      line=dict(color=policy_color("truth"), width=2.5))]
            s2 = s[s.estimator != "mixed_dq_oracle"]
            best = s2.loc[s2.mse.idxmin(), "estimator"]
            nv = s2.set_index("estimator").loc["naive"]
            fig.layout.title = (f"Truth {gte:.3g}: naive {nv['mean']:.3g}, lowest RMSE {LABELS.get(best, best)} "
                                f"(N={n_w.value}, lam={lam_w.value:g}, d {d1_w.value}->{d2_w.value}, p={p_w.value:g})")
        cols = ["estimator", "mean", "bias", "sd", "rmse", "coverage"]
        table.value = s2[cols].round(4).to_html(index=False, classes="asrsched-table")

    for w in (lam_w, d1_w, d2_w, p_w, L_w, n_w):
        w.observe(update, names="value")
    update()
    controls = W.VBox([W.HBox([lam_w, n_w]), W.HBox([d1_w, d2_w]), W.HBox([p_w, L_w])])
    return W.VBox([controls, fig, table])
