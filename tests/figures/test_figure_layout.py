"""The central layout pass (asrsched.figures.layout) and the check that exported text fits.

Unit tests of the pieces (1-2-5 log ticks, wrapping, subplot spacing), then the real check: figures
built by every figure module from small data are exported as SVG by the house exporter, rendered
in Debian's chromium, and no text may run off the canvas or overlap other text. A deliberately
broken figure shows the check can fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from extras import need

need("plotly")

import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from asrsched.figures import style
from asrsched.figures.layout import (
    apply_layout,
    apply_log_ticks,
    fit_axis_titles,
    log_ticks,
    space_subplots,
    text_width,
    wrap_category_ticks,
)
from asrsched.figures.layout_check import check_svgs

CHROMIUM = Path("/usr/bin/chromium")


# ------------------------------------------------------------------------------------------- units
def test_log_ticks_are_1_2_5_with_full_numbers():
    vals, text = log_ticks(0.3, 40)
    assert vals == [0.5, 1, 2, 5, 10, 20] and text == ["0.5", "1", "2", "5", "10", "20"]
    vals, text = log_ticks(0.004, 2500)  # six decades: 1-3
    assert text[:3] == ["0.01", "0.03", "0.1"] and "1000" in text and all("e" not in t for t in text)
    vals, text = log_ticks(1e-3, 1e9)  # many decades: powers of ten
    assert all(math.log10(v).is_integer() for v in vals)
    vals, _ = log_ticks(3.1, 3.9)  # less than one 1-2-5 step inside: the neighbours around it
    assert len(vals) >= 2 and min(vals) <= 3.1 and max(vals) >= 3.9
    with pytest.raises(ValueError, match="positive"):
        log_ticks(0, 10)


def test_log_axes_get_ticks_from_their_own_data_in_subplots():
    fig = make_subplots(rows=1, cols=2)
    fig.add_scatter(x=[0.2, 30], y=[1, 2], row=1, col=1)
    fig.add_scatter(x=[5, 5000], y=[1, 2], row=1, col=2)
    fig.update_xaxes(type="log")
    apply_log_ticks(fig)
    assert fig.layout.xaxis.ticktext == ("0.2", "0.5", "1", "2", "5", "10", "20")
    assert fig.layout.xaxis2.ticktext[0] == "5" and fig.layout.xaxis2.ticktext[-1] == "5000"
    # a figure with explicit ticks keeps them
    g = go.Figure(go.Scatter(x=[1, 100], y=[1, 2])).update_xaxes(type="log", tickvals=[1, 100])
    assert apply_log_ticks(g).layout.xaxis.tickvals == (1, 100)


def test_a_log_axis_narrower_than_one_step_is_widened_to_two_ticks_and_back_when_redrawn():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1.6, 2.4], error_y=dict(type="data", array=[0.1, 0.4])))
    fig.update_yaxes(type="log")
    apply_log_ticks(fig)
    lo, hi = (10**v for v in fig.layout.yaxis.range)
    shown = [v for v in fig.layout.yaxis.tickvals if lo <= v <= hi]
    assert shown == [1, 2, 5] and lo < 1 and hi > 5  # the error bar's end 2.8 is inside too
    # an explorer redraws with wider data: the range it set is given back to autorange
    fig.data[0].y = [0.3, 40]
    fig.data[0].error_y = None
    apply_log_ticks(fig)
    assert fig.layout.yaxis.autorange is True and fig.layout.yaxis.range is None
    assert fig.layout.yaxis.ticktext[0] == "0.5" and fig.layout.yaxis.ticktext[-1] == "20"


def test_axis_titles_longer_than_their_axis_wrap():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]))
    long = "relative bias of the estimated effect on the mean response time under Markovian interference"
    fig.update_layout(yaxis_title=long, xaxis_title="p")
    fit_axis_titles(fig, 900, 560)
    lines = fig.layout.yaxis.title.text.split("<br>")
    assert len(lines) >= 2 and " ".join(lines) == long
    assert all(text_width(s) <= 560 - 70 - 60 for s in lines)
    assert fig.layout.xaxis.title.text == "p"


def test_subplot_columns_make_room_for_inner_y_axis_titles_and_move_their_titles():
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.02, subplot_titles=["a", "b", "c"])
    for j in (1, 2, 3):
        fig.add_scatter(x=[1, 2], y=[1000, 2000], row=1, col=j)
        fig.update_yaxes(title_text=f"effect in panel {j} (s)", row=1, col=j)
    before = [fig.layout[f"xaxis{'' if j == 1 else j}"].domain for j in (1, 2, 3)]
    space_subplots(fig, 900, 560)
    after = [fig.layout[f"xaxis{'' if j == 1 else j}"].domain for j in (1, 2, 3)]
    pw = 900 - 70 - 30
    for a, b in zip(after[:-1], after[1:], strict=True):
        assert (b[0] - a[1]) * pw >= 60  # tick labels and a title fit between the panels
    assert after != before and after[0][0] == before[0][0] and abs(after[-1][1] - before[-1][1]) < 1e-9
    centres = sorted(a.x for a in fig.layout.annotations)
    assert centres == pytest.approx([(d[0] + d[1]) / 2 for d in after])


def test_long_category_labels_wrap_instead_of_rotating():
    cats = ["switchback (burn-in 2 s)", "group (replica)", "mixed DQ estimator", "naive"]
    fig = make_subplots(rows=1, cols=2)
    for j in (1, 2):
        fig.add_box(x=cats * 3, y=np.arange(12.0), row=1, col=j)
    wrap_category_ticks(fig, 900)
    assert fig.layout.xaxis.tickangle == 0 and list(fig.layout.xaxis.tickvals) == cats
    assert any("<br>" in t for t in fig.layout.xaxis.ticktext)
    assert [t.replace("<br>", " ") for t in fig.layout.xaxis.ticktext] == cats


def test_two_line_labels_too_wide_to_wrap_are_slanted_for_their_two_line_height():
    """Labels that are already two lines (notebook 06's 'librispeech<br>E2EL' ...) in narrow slots: the slant is
    the least that fits a box two lines tall (sized for one line, 75 degrees, neighbours overlapped in Chromium)."""
    import math

    from asrsched.figures.layout import _domain, _font, _margin, text_width

    cats = [f"{w}<br>{m}" for w in ("librispeech", "uniform", "drift") for m in ("E2EL", "TTFT")]
    fig = make_subplots(rows=1, cols=2)
    for j in (1, 2):
        fig.add_bar(x=cats, y=np.arange(6.0), row=1, col=j)
    wrap_category_ticks(fig, 900)
    a = -fig.layout.xaxis.tickangle
    a0, a1 = _domain(fig.layout.xaxis)
    slot = (a1 - a0) * (900 - _margin(fig, "l") - _margin(fig, "r")) / len(cats)
    size = _font(fig.layout.xaxis)
    w, h = 1.25 * max(text_width(c, size) for c in cats), 2 * 1.3 * size

    def fits(deg):
        return w * math.cos(math.radians(deg)) + h * math.sin(math.radians(deg)) <= slot * 0.9

    assert a == next((d for d in (30, 45, 60, 75, 90) if fits(d)), 90)
    assert not (w * math.cos(math.radians(75)) + h / 2 * math.sin(math.radians(75)) > slot * 0.9)  # one line: 75
    assert a == 90


def test_apply_layout_wraps_the_title_and_leaves_short_ones_alone():
    short = apply_layout(go.Figure(layout=dict(title="SJF halves P50 E2EL")))
    assert short.layout.title.text == "SJF halves P50 E2EL"
    long = apply_layout(
        go.Figure(
            layout=dict(
                title="Truth 0.123: naive 0.456, lowest RMSE mixed DQ "
                "(N=20, λ=0.8, Power-of-d 1→2, p=0.5, L=480, 6 replications)"
            )
        )
    )
    assert "<br>" in long.layout.title.text and long.layout.margin.t > 70


# ------------------------------------------------------------------------------------ the real check
def needs_browser(fn):
    """Slow (builds and renders every module's figures, about 3 min on 2 busy cores), needs chromium."""
    skip = pytest.mark.skipif(
        not CHROMIUM.exists() or style._chromium() is None, reason="Debian chromium not installed"
    )
    return pytest.mark.slow(skip(fn))


def _sim_figures() -> dict[str, go.Figure]:
    from asrsched.core.metrics import relative_change
    from asrsched.core.workloads import Drift, make_source
    from asrsched.figures import sim as F
    from asrsched.sim.drift import drift_records
    from asrsched.sim.sweep import point_records, run_sweep
    from asrsched.sim.sweep_report import tradeoff_study

    df = run_sweep([6, 19], ["fcfs", "sjf", "hrrn"], ["librispeech"], [0], n_requests=250, workers=1, progress=False)
    rc = relative_change(df)
    recs = point_records("librispeech", 19, ["fcfs", "sjf", "hrrn"], n_requests=250)
    trade = tradeoff_study("librispeech", rho=0.9, ratio_caps=[20, 50], seeds=[0, 1], n_requests=250, workers=1)
    drift = Drift([(0.0, make_source("librispeech")), (40.0, make_source("uniform"))], ramp_s=20.0)
    dr = drift_records(drift, 10, ["fcfs", "sjf"], n_requests=600, seed=0)
    return {
        "sim_relative_change": F.fig_relative_change(rc, workload="librispeech"),
        "sim_cdf": F.fig_cdf({p: r.records for p, r in recs.items()}),
        "sim_throughput": F.fig_throughput(df, workload="librispeech"),
        "sim_tradeoff": F.fig_tradeoff(trade, title_suffix=" (librispeech, ρ 0.9)"),
        "sim_drift": F.fig_drift(dr, window_s=20.0, phase_marks=[40.0]),
        "sim_occupancy": F.fig_occupancy({p: r.timeline for p, r in recs.items()}),
    }


def _abtest_figures() -> dict[str, go.Figure]:
    from asrsched.abtest.study import ablation_table, coverage_table, switchback_table
    from asrsched.figures import abtest as F
    from asrsched.figures.ab_widgets import small_study

    res, summary = small_study(reps=3, n_servers=6, n_requests=40_000, scenario="homogeneous")
    out = {
        "ab_overview": F.fig_overview(summary),
        "ab_scenario": F.fig_scenario(summary, "homogeneous"),
        "ab_estimates": F.fig_estimates(res, "homogeneous"),
        "ab_coverage": F.fig_coverage(coverage_table(summary)),
    }
    abl = ablation_table(res)
    if len(abl):
        out["ab_ablation"] = F.fig_ablation(abl, "homogeneous", int(abl.L.max()))
    sbt = switchback_table(res)
    if len(sbt):
        out["ab_switchback"] = F.fig_switchback(sbt)
    # the committed full study's figures, which notebook 05 exports (its search figure's subtitle ran off)
    from asrsched.abtest.full_run import load_full_run

    fr = load_full_run(Path(__file__).resolve().parents[2] / "figures" / "05_ab_estimators" / "full")
    out["ab_full_search"] = F.fig_search(fr.search)
    out["ab_full_wp"] = F.fig_wp(fr.wp_curve, fr.wp, fr.run["parameters"]["study"]["base"]["p"])
    # the committed mixed-DQ map, which notebook 05 draws
    from asrsched.abtest.study_report import load_mixed_map
    from asrsched.figures.mixed_map import fig_mixed_map

    out["ab_mixed_map"] = fig_mixed_map(
        load_mixed_map(Path(__file__).resolve().parents[2] / "figures" / "05_ab_estimators" / "mixed_map")
    )
    return out


def _fleet_figures() -> dict[str, go.Figure]:
    from study_params import TINY_ASR_STUDY

    from asrsched.abtest.asr_fleet import ASRStudyConfig
    from asrsched.abtest.asr_fleet_report import summary_table
    from asrsched.figures import ab_asr as F
    from asrsched.sim.parallel import run_study

    # the batch counts left at the study's defaults
    cfg = ASRStudyConfig(**{k: v for k, v in TINY_ASR_STUDY.items() if k not in ("n_batches", "alpha_batches")})
    res = run_study(cfg, workers=1, progress=False)
    s = summary_table(res)
    out = {
        "fleet_truth": F.fig_truth(res),
        "fleet_estimates_routing": F.fig_estimates(res, "routing", summary=s),
        "fleet_estimates_scheduling": F.fig_estimates(res, "scheduling", summary=s),
        "fleet_rmse": F.fig_rmse(s),
        "fleet_tail": F.fig_tail(s),
    }
    if getattr(res, "ablation", None) is not None and len(res.ablation):
        out["fleet_ablation"] = F.fig_ablation(res.ablation)
    # the committed plan study, which notebook 06 re-plans and draws
    from asrsched.abtest import plan_report as P
    from asrsched.app.plan_ab import load_plan
    from asrsched.figures.ab_plan import fig_plan

    pr = load_plan(Path(__file__).resolve().parents[2] / "figures" / "06_ab_asr_policies" / "plan")
    prec = P.precision_table(pr)
    laws = P.law_table(pr, prec)
    plan = P.plan_table(pr, laws=laws)
    out["fleet_plan_routing"] = fig_plan(prec, laws, plan, "routing")
    out["fleet_plan_scheduling"] = fig_plan(prec, laws, plan, "scheduling")
    return out


def _profiling_figures() -> dict[str, go.Figure]:
    from profile_tables import synthetic

    from asrsched.figures import profiling as F
    from asrsched.profiling.fit import fit_kappa

    rows = synthetic(n=30)
    kf = fit_kappa(rows[~rows["silence"].astype(bool)] if "silence" in rows else rows, n_boot=100, seed=0)
    return {"profile_kappa": F.fig_kappa(rows, kf)}


def _stress_figure() -> go.Figure:
    """Everything that used to clip: a long title, a long y title, a log axis, tight subplots, long categories."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.03, subplot_titles=["naive", "switchback", "mixed DQ"])
    cats = ["switchback (burn-in 2 s)", "group (replica)", "mixed DQ estimator"]
    for j in (1, 2):
        fig.add_box(x=cats * 4, y=np.linspace(-0.5, 0.7, 12), row=1, col=j, showlegend=False)
    fig.add_scatter(x=[0.3, 1, 3, 10, 40], y=[2, 3, 5, 9, 30], row=1, col=3, showlegend=False)
    fig.update_xaxes(type="log", row=1, col=3)
    for j in (1, 2, 3):
        fig.update_yaxes(title_text="estimated effect on mean response time (s)", row=1, col=j)
    fig.update_layout(
        title="Truth 0.123: naive 0.456, lowest RMSE mixed DQ (N=20, λ=0.8, Power-of-d 1→2, p=0.5, "
        "L=480) and every estimator's replications against the ground truth"
    )
    return fig


def _planted_figures() -> dict[str, go.Figure]:
    """Figures that hide data or cannot be read, each with one planted fault the check must name."""
    clipped = go.Figure(go.Bar(x=["naive", "DQ", "mixed DQ"], y=[0.8, -15.0, 1.2], name="estimate / truth"))
    clipped.update_yaxes(range=[-3, 3], title_text="mean estimate / true effect")
    one_tick = go.Figure(go.Scatter(x=[100, 200, 400], y=[5.01, 5.02, 5.03], mode="lines+markers"))
    one_tick.update_yaxes(range=[4.96, 5.04], dtick=1, title_text="P50 E2EL (s)")
    ratio = go.Figure(
        go.Scatter(x=[0.5, 0.95], y=[-20.0, -73.0], mode="markers", error_y=dict(type="data", array=[5.0, 74.0]))
    )
    ratio.update_yaxes(title_text="change vs FCFS (%)")
    for f, t in ((clipped, "A clipped bar"), (one_tick, "A single tick"), (ratio, "A symmetric interval on a ratio")):
        f.update_layout(title=t, xaxis_title="x")
    return {"planted_clipped_bar": clipped, "planted_single_tick": one_tick, "planted_change_below_100": ratio}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every figure exported as SVG through export_figure, then measured in chromium once."""
    need("playwright.sync_api")
    if not CHROMIUM.exists() or style._chromium() is None:
        pytest.skip("Debian chromium not installed")
    root = tmp_path_factory.mktemp("layout")
    figs: dict[str, go.Figure] = {}
    errors = {}
    for name, build in (
        ("sim", _sim_figures),
        ("abtest", _abtest_figures),
        ("ab_asr", _fleet_figures),
        ("profiling", _profiling_figures),
    ):
        try:
            figs.update(build())
        except Exception as e:  # a module whose inputs changed shape: reported, the others still checked
            errors[name] = f"{type(e).__name__}: {e}"
    figs["stress"] = _stress_figure()
    with style.export_session():
        for name, fig in figs.items():
            style.export_figure(fig, name, "layout", root=root, formats=("svg",))
    # the same stress figure without the layout pass, straight from plotly: the check must catch it
    raw = root / "raw"
    raw.mkdir()
    _stress_figure().write_image(raw / "stress_raw.svg", width=style.PRINT_WIDTH, height=style.PRINT_HEIGHT)
    # planted faults, exported as the main job exports (HTML beside the SVG: the data rules read it)
    with style.export_session():
        for name, fig in _planted_figures().items():
            style.export_figure(fig, name, "planted", root=root, formats=("html", "svg"))
    return {
        "figs": sorted(figs),
        "built": figs,
        "errors": errors,
        "problems": check_svgs([root / "layout", raw / "stress_raw.svg"]),
        "planted": {p.stem: v for p, v in check_svgs([root / "planted"]).items()},
    }


@needs_browser
def test_figures_of_every_module_were_built(checked):
    assert not checked["errors"], checked["errors"]
    for prefix in ("sim_", "ab_", "fleet_", "profile_"):
        assert any(n.startswith(prefix) for n in checked["figs"]), (prefix, checked["figs"])


@needs_browser
def test_no_text_runs_off_the_canvas_or_overlaps(checked):
    bad = {p.name: probs for p, probs in checked["problems"].items() if probs and p.name != "stress_raw.svg"}
    assert len(checked["problems"]) >= len(checked["figs"])
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


@needs_browser
def test_the_figures_of_every_module_pass_the_data_rules(checked):
    from asrsched.figures.data_check import data_problems

    bad = {}
    for name, fig in checked["built"].items():
        j = apply_layout(go.Figure(fig), style.PRINT_WIDTH, style.PRINT_HEIGHT).to_plotly_json()
        if probs := data_problems(j["data"], j["layout"]):
            bad[name] = probs
    assert not bad, bad


@needs_browser
def test_the_check_fails_on_planted_hidden_data_and_a_single_tick(checked):
    planted = checked["planted"]
    assert set(planted) == {"planted_clipped_bar", "planted_single_tick", "planted_change_below_100"}, planted
    clipped = planted["planted_clipped_bar"]
    assert len(clipped) == 1 and "outside the fixed y range [-3, 3]" in clipped[0] and "-15" in clipped[0], clipped
    one = planted["planted_single_tick"]
    assert len(one) == 1 and one[0].startswith("axis y has a single tick label ('5')"), one
    ratio = planted["planted_change_below_100"]
    assert len(ratio) == 1 and "interval reaches -147.0 %" in ratio[0], ratio


@needs_browser
def test_the_check_catches_a_figure_without_the_layout_pass(checked):
    raw = next(v for p, v in checked["problems"].items() if p.name == "stress_raw.svg")
    assert any("runs off" in p for p in raw), raw
    assert any("overlaps" in p for p in raw), raw


@needs_browser
def test_check_command_exit_status(tmp_path, checked):
    from asrsched.figures.layout_check import main

    good = tmp_path / "good"
    good.mkdir()
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]), layout=dict(title="SJF halves P50 E2EL"))
    style.export_figure(fig, "ok", "g", root=good, formats=("svg",))
    assert main([str(good)]) == 0
    bad = tmp_path / "bad"
    bad.mkdir()
    _stress_figure().write_image(bad / "raw.svg", width=900, height=560)
    assert main([str(bad)]) == 1
    assert main([str(tmp_path / "nothing.txt")]) == 2
