"""The figure check's data rules (asrsched.figures.data_check): clipped data must carry its value,
a relative change cannot fall below -100 %, a numeric axis needs two ticks. Unit cases here; the
same rules on exported files, rendered in Chromium, are in test_figure_layout.py."""

from __future__ import annotations

import numpy as np
from extras import need

need("plotly")

import plotly.graph_objects as go

from asrsched.figures.data_check import data_problems, decode_array, is_change_axis, tick_problems
from asrsched.figures.layout import apply_layout


def _problems(fig: go.Figure) -> list[str]:
    j = fig.to_plotly_json()
    return data_problems(j["data"], j["layout"])


def _clipped_bar(labelled: bool) -> go.Figure:
    y = np.array([0.8, -15.0, 1.2])
    shown = np.clip(y, -3, 3)
    bar = go.Bar(x=["naive", "DQ", "mixed DQ"], y=shown, name="ratio")
    if labelled:
        bar.update(text=["", "-15×", ""], textposition="inside")
    return go.Figure(bar).update_yaxes(range=[-3, 3], title_text="mean estimate / true effect")


def test_a_clipped_bar_without_a_label_is_reported_and_a_labelled_one_passes():
    # the shown value sits at the axis edge: only the clipping of the true value hides data, so the
    # check reads the error bars and the values; a bar drawn beyond the range is cut by plotly
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1.0, -15.0], name="ratio")).update_yaxes(range=[-3, 3])
    probs = _problems(fig)
    assert len(probs) == 1 and "outside the fixed y range [-3, 3]" in probs[0] and "-15" in probs[0], probs
    labelled = go.Figure(go.Bar(x=["a", "b"], y=[1.0, -15.0], text=["", "-15×"])).update_yaxes(range=[-3, 3])
    assert _problems(labelled) == []
    assert _problems(_clipped_bar(labelled=True)) == []
    # an autoranged axis clips nothing
    assert _problems(go.Figure(go.Bar(x=["a", "b"], y=[1.0, -15.0]))) == []


def test_an_error_bar_beyond_a_fixed_range_counts_as_clipped():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[0.5, 1.0], error_y=dict(type="data", array=[0.2, 5.0])))
    fig.update_yaxes(range=[0, 2])
    probs = _problems(fig)
    assert len(probs) == 1 and "point 1, -4" in probs[0], probs
    # a scatter's text is drawn only in a mode with text
    fig.update_traces(text=["", "6"])
    assert _problems(fig) != []
    fig.update_traces(mode="markers+text")
    assert _problems(fig) == []


def test_a_change_below_minus_100_percent_is_reported_on_change_axes_only():
    ci = go.Scatter(
        x=[0.5, 0.95],
        y=[-20.0, -73.0],
        error_y=dict(type="data", array=[5.0, 75.0], arrayminus=[5.0, 74.0], symmetric=False),
    )
    fig = go.Figure(ci).update_yaxes(title_text="change vs FCFS (%)")
    probs = _problems(fig)
    assert len(probs) == 1 and "interval reaches -147.0 %" in probs[0], probs
    assert _problems(go.Figure(ci).update_yaxes(title_text="P90 E2EL (s)")) == []
    # the ratio interval's end at -99 % passes; -100 % itself is the bound
    ok = go.Figure(
        go.Scatter(x=[1], y=[-73.0], error_y=dict(type="data", array=[10.0], arrayminus=[26.9], symmetric=False))
    )
    assert _problems(ok.update_yaxes(title_text="change vs FCFS (%)")) == []
    assert is_change_axis({"title": {"text": "P50 E2EL<br>change vs FCFS (%)"}})
    assert not is_change_axis({"title": {"text": "share of requests (%)"}})


def test_the_rules_read_plotlys_binary_arrays_and_survive_the_layout_pass():
    fig = apply_layout(_clipped_bar(labelled=False).update_traces(y=np.array([0.8, -15.0, 1.2])), 900, 560)
    j = fig.to_plotly_json()
    assert decode_array(j["data"][0]["y"]).tolist() == [0.8, -15.0, 1.2]
    assert any("outside the fixed y range" in p for p in data_problems(j["data"], j["layout"]))
    assert decode_array(["a", "b"]) is None


def test_single_tick_axes():
    assert tick_problems({"x": ["0", "50", "100"], "y": ["10"]}) == [
        "axis y has a single tick label ('10'): its scale cannot be read (widen the range or set the ticks)"
    ]
    assert tick_problems({"y": ["−5", "0", "5"], "x": ["FCFS"]}) == []  # one category is not a scale
    assert tick_problems({"y2": ["1k", "1k"]}) != []
    assert tick_problems({"y": ["0.5", "1", "2"]}) == []


def test_a_shared_axis_takes_the_range_of_the_axis_it_matches():
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, shared_yaxes=True)
    fig.add_bar(x=["a"], y=[1.0], row=1, col=1)
    fig.add_bar(x=["a"], y=[2.5], error_y=dict(type="data", array=[2.0]), row=1, col=2)  # whisker to 4.5
    fig.update_yaxes(range=[-3, 3], row=1, col=1)
    probs = _problems(fig)
    assert len(probs) == 1 and "outside the fixed y range [-3, 3]" in probs[0] and "4.5" in probs[0], probs
