"""Simulator figures and explorers: rho axes, overload drawn apart, titles computed from the data,
the assumed service model labelled, no winner named from one run."""

import re
import warnings

import numpy as np
from extras import need

need("plotly", "ipywidgets")

import plotly.graph_objects as go
import pytest

from asrsched.figures.sim import (
    fig_cdf,
    fig_drift,
    fig_relative_change,
    fig_run_length,
    fig_throughput,
    fig_tradeoff,
    pct,
    service_note,
)
from asrsched.figures.widgets import drift_explorer, policy_explorer
from asrsched.sim.overload import OverloadWarning
from asrsched.sim.sweep import point_records, run_sweep
from asrsched.sim.sweep_report import change_ci, run_length_effect, throughput_spread


@pytest.fixture(scope="module")
def sweep():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always", OverloadWarning)
        return run_sweep(
            None,
            ["fcfs", "sjf", "hrrn"],
            ["uniform"],
            [0, 1, 2],
            rhos=[0.5, 0.9, 1.3],
            n_requests=600,
            cache_dir=None,
            workers=1,
            progress=False,
        )


def _title(fig):
    return fig.layout.title.text, (fig.layout.title.subtitle.text or "")


def test_pct_never_prints_minus_zero():
    assert pct(-0.3) == "0 %" and pct(0.4) == "0 %" and pct(-12.4) == "-12 %" and pct(7.6) == "+8 %"
    assert pct(float("nan")) == "n/a"


def test_relative_change_has_a_rho_axis_ci_and_overload_drawn_apart(sweep):
    rc = change_ci(sweep)
    fig = fig_relative_change(rc, workload="uniform")
    title, sub = _title(fig)
    assert fig.layout.xaxis.title.text.startswith("load ρ")
    assert "assumed" in sub and "not measured here" in sub and "95 % ratio CI" in sub and "600 requests" in sub
    sjf = [t for t in fig.data if t.name == "sjf"][0]
    symbols = list(sjf.marker.symbol)
    assert symbols == ["circle", "circle", "circle-open"]  # rho 0.5, 0.9 stable; 1.3 overload
    assert sjf.error_y.array is not None and np.all(np.asarray(sjf.error_y.array) >= 0)
    assert "overload" in sjf.hovertext[2] and "req/s offered" in sjf.hovertext[0]
    assert any(getattr(s, "x0", None) == 1.0 and s.type == "line" for s in fig.layout.shapes)  # capacity line
    assert not re.search(r"\bbest\b|\bwins?\b", title)


def test_throughput_title_and_printout_share_one_number(sweep):
    fig = fig_throughput(sweep, workload="uniform")
    title, sub = _title(fig)
    top = throughput_spread(sweep).spread_pct.max()
    assert f"{top:.1f} %" in title and "no throughput loss" not in title and "same for every" not in title
    cap = float(sweep.capacity_rps.iloc[0])
    assert any(getattr(s, "y0", None) == pytest.approx(cap) for s in fig.layout.shapes)  # capacity marker
    assert f"{cap:.2f} req/s" in sub
    fcfs = [t for t in fig.data if t.name == "fcfs"][0]
    assert list(fcfs.marker.symbol).count("circle-open") == 1


def test_cdf_and_tradeoff_titles_name_no_winner():
    res = point_records("uniform", 8.0, ["fcfs", "sjf", "hrrn"], n_requests=400)
    fig = fig_cdf({p: r.records for p, r in res.items()}, subtitle=service_note("m (assumed)"))
    title, sub = _title(fig)
    med = np.median(res["sjf"].records.e2el)
    assert f"SJF {med:.2f} s" in title and "n = 400" in title and "lowest" not in title and "best" not in title
    assert "not measured here" in sub


def test_tradeoff_has_ratio_cis_both_ways_and_names_coinciding_caps_together():
    from asrsched.figures.data_check import data_problems
    from asrsched.sim.sweep_report import tradeoff_study

    t = tradeoff_study("uniform", rho=0.9, ratio_caps=[20, 50, 200], seeds=range(3), n_requests=300, workers=1)
    assert list(t.label[:2]) == ["SJF", "HRRN"] and set(t.n_seeds) == {3}
    for m in ("p50_e2el_ms", "p90_e2el_ms"):  # ratio intervals around each change, never below -100 %
        assert (t[f"{m}_change_ci_low"] <= t[f"{m}_change_pct"]).all() and (t[f"{m}_change_ci_low"] > -100).all()
    fig = fig_tradeoff(t)
    shown = [tr for tr in fig.data if tr.name != "FCFS (the baseline)"]
    # every variant is on the figure, once: caps with the same changes share one marker named by all of them
    named = ", ".join(tr.name for tr in shown)
    assert all(str(c) in named for c in ("SJF", "HRRN", "20", "50", "200"))
    same = t[t.policy == "adaptive"].round({"p50_e2el_ms_change_pct": 1, "p90_e2el_ms_change_pct": 1})
    if same.duplicated(["p50_e2el_ms_change_pct", "p90_e2el_ms_change_pct"]).any():
        assert any("(same result)" in tr.name for tr in shown)
    for tr in shown:
        assert tr.error_x.arrayminus is not None and tr.error_y.array is not None and tr.name
    best = t.loc[t.p50_e2el_ms_change_pct.idxmin()]
    assert (
        f"largest P50 cut {best.label}" in fig.layout.title.text
        and "3 seeds, 95 % ratio CIs" in fig.layout.title.subtitle.text
    )
    j = fig.to_plotly_json()
    assert data_problems(j["data"], j["layout"]) == []
    with pytest.raises(ValueError, match="seeds: a trade-off CI needs at least two seeds"):
        tradeoff_study("uniform", seeds=[0])
    with pytest.raises(ValueError, match=r"ratio_caps: each cap must be a number > 0, got \[-1\]"):
        tradeoff_study("uniform", ratio_caps=[5, -1])


def test_drift_title_lists_every_policy():
    from asrsched.core.workloads import Drift, make_source
    from asrsched.sim.drift import drift_records

    drift = Drift([(0.0, make_source("librispeech")), (40.0, make_source("uniform"))])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        res = drift_records(drift, 6.0, ["fcfs", "sjf"], n_requests=600)
    title = fig_drift(res).layout.title.text
    assert "FCFS" in title and "SJF" in title and "keeps" not in title and "lowest" not in title


def test_run_length_figure_reports_both_ends():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        rl = run_length_effect(
            "uniform", rhos=[0.8, 1.3], n_list=[300, 1200], seeds=[0, 1], cache_dir=None, workers=1, progress=False
        )
    fig = fig_run_length(rl)
    title = fig.layout.title.text
    for r in (0.8, 1.3):
        g = rl[rl.rho == r].sort_values("n_requests")
        assert f"ρ={r:g}: {pct(g.p50_e2el_ms_change_pct.iloc[0])} at n=300" in title
    assert fig.layout.xaxis.type == "log" and {t.name for t in fig.data} == {"ρ = 0.8 (stable)", "ρ = 1.3 (overload)"}


def _fig(panel):
    return next(w for w in panel.children if isinstance(w, go.FigureWidget))


def _text(panel):
    """The explorer's title as one line (long titles are wrapped with <br> for display)."""
    return re.sub(r"\s*<br>\s*", " ", _fig(panel).layout.title.text)


def test_policy_explorer_shows_served_rate_and_overload_badge():
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverloadWarning)  # shown as the badge, never as a warning
        panel = policy_explorer(rate=11, policy="ljf", workload="uniform", n_requests=800)
    badge = panel.children[2]
    title = _text(panel)
    assert "OVERLOAD" in badge.value and "finite-run transient of 800 requests" in badge.value
    served = float(re.search(r"served ([\d.]+) req/s", title).group(1))
    assert served < 11 * 0.9 and "ρ = 1.2" in title
    rate_w = panel.children[0].children[0]
    rate_w.value = 4
    assert badge.value == "" and "OVERLOAD" not in _text(panel)
    assert "-0 %" not in _text(panel) and "n = 800" in _text(panel)


def test_drift_explorer_states_phase_loads_and_flags_overload():
    panel = drift_explorer(rate=10, n_requests=900, policies=("fcfs", "sjf"))
    title = _text(panel)
    assert "ρ librispeech 0.7" in title and "uniform 1.1" in title and "lowest" not in title
    assert "OVERLOAD" in panel.children[1].value and "uniform phase" in panel.children[1].value
    panel.children[0].children[0].value = 4
    assert panel.children[1].value == ""
