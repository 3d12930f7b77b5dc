"""House plot style and the export helper: template, fixed colours, offline HTML, print-size PNG/SVG."""

import json
import re
import struct
import subprocess
import sys
import warnings

from extras import need

need("plotly")

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from asrsched.app.gallery import figure_layout
from asrsched.figures import style as plots
from asrsched.figures.style import (
    ESTIMATOR_COLORS,
    PNG_SCALE,
    POLICY_COLORS,
    PRINT_HEIGHT,
    PRINT_WIDTH,
    export_figure,
    export_session,
    export_table,
    fit_title,
    policy_color,
)


def needs_chromium(fn):
    """Slow (exports through a real browser), needs Debian chromium."""
    return pytest.mark.slow(pytest.mark.skipif(plots._chromium() is None, reason="Debian chromium not installed")(fn))


OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


def png_size(path):
    """Pixel size from the PNG header (IHDR), independent of any imaging library."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_png_header_reader_agrees_with_pil(tmp_path):
    PIL = need("PIL.Image")
    PIL.new("RGB", (37, 11)).save(tmp_path / "a.png")
    assert png_size(tmp_path / "a.png") == (37, 11)


@pytest.fixture
def house():
    """The notebooks' front-end setup (:func:`asrsched.figures.style.setup`), undone after the test."""
    plots.setup("off")
    yield
    plots.teardown()


def test_importing_the_style_changes_nothing_and_setup_is_undone_by_teardown():
    code = """
import pandas as pd, plotly.graph_objects as go, plotly.io as pio, tqdm.auto, warnings, contextlib, io
from plotly.basewidget import BaseFigureWidget
width = lambda: (pd.get_option("display.max_colwidth"), pd.get_option("display.max_columns"))
before = (pio.templates.default, go.Figure.show, go.Figure._repr_mimebundle_, BaseFigureWidget.get_state,
          warnings.showwarning, tqdm.auto.tqdm, width())
from asrsched.figures import style
assert "asrsched" in pio.templates  # registered by name, not made the default
now = lambda: (pio.templates.default, go.Figure.show, go.Figure._repr_mimebundle_, BaseFigureWidget.get_state,
               warnings.showwarning, tqdm.auto.tqdm, width())
assert now() == before, now()
assert style.setup("text") == "text"
after = now()
assert after[0] == style.HOUSE_TEMPLATE and all(a is not b for a, b in zip(after, before)), after
assert after[-1] == (None, None) != before[-1], after[-1]  # tables whole: no cell cut to "...", no column elided
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    warnings.warn("the queue grew", UserWarning)  # any cell's warning: one stdout line, no stderr box
assert out.getvalue() == "⚠ UserWarning: the queue grew\\n" and err.getvalue() == "", (out.getvalue(), err.getvalue())
long = pd.DataFrame({"claim": ["SJF cuts the median E2EL by about 73 % on LibriSpeech at rho 0.95, " * 2]})
assert long.claim[0].strip() in long.to_html()
style.setup("text")  # again: nothing is wrapped twice
assert now() == after
style.teardown()
assert now() == before, now()
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def test_an_export_is_in_the_house_style_without_setup(tmp_path):
    assert "asrsched" not in pio.templates.default.split("+")  # no setup in this test
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    html = export_figure(fig, "plain", "99_demo", root=tmp_path, formats=("html",))["html"].read_text()
    assert "DejaVu Sans" in html and plots.OKABE_ITO[1] in html  # the house font and colourway
    assert "DejaVu Sans" not in json.dumps(fig.layout.template.to_plotly_json())  # the caller's figure untouched


def test_template_registered_and_default(house):
    assert "asrsched" in pio.templates
    assert "asrsched" in pio.templates.default.split("+")
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    full = fig.full_figure_for_development(warn=False)
    assert full.layout.font.family.startswith("DejaVu Sans")
    assert full.layout.font.size >= 14 and full.layout.title.font.size > full.layout.font.size
    assert full.layout.xaxis.showline and full.layout.plot_bgcolor == "white"
    # the first trace without an explicit colour takes the house colourway, not plotly's default blue
    assert full.data[0].line.color.upper() == plots.OKABE_ITO[0].upper()


def test_a_figure_shown_inline_is_laid_out_and_never_wider_than_its_export(house, monkeypatch):
    import json

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # what JupyterLab's kernel uses
    wide = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(width=1200, height=700, title="t " * 80))
    shown = json.loads(json.dumps(wide._repr_mimebundle_()["application/vnd.plotly.v1+json"]))["layout"]
    assert shown["width"] == plots.PRINT_WIDTH and shown["height"] == 700
    assert "<br>" in shown["title"]["text"]  # the layout pass wrapped the long title
    assert wide.layout.width == 1200 and "<br>" not in wide.layout.title.text  # the caller's figure is untouched


def test_every_policy_and_estimator_has_one_fixed_distinct_colour():
    from asrsched.abtest.estimators import ESTIMATORS
    from asrsched.core.policies import POLICY_FAMILIES, policy_names

    members = {p for p in policy_names() if p.startswith(tuple(POLICY_FAMILIES))}  # registered by name on use
    assert set(policy_names()) - members <= set(POLICY_COLORS), set(policy_names()) - members - set(POLICY_COLORS)
    assert policy_color("gamma_boost_0.5") == POLICY_COLORS["gamma_boost"] != policy_color("gamma_boost_0.5_real")
    assert policy_color("nudge_m4_1") == policy_color("nudge_0.8") == POLICY_COLORS["nudge"]
    assert set(ESTIMATORS) <= set(ESTIMATOR_COLORS), set(ESTIMATORS) - set(ESTIMATOR_COLORS)
    for table in (POLICY_COLORS, ESTIMATOR_COLORS):
        assert len(set(table.values())) == len(table), f"two entries share a colour: {table}"
        assert set(c.upper() for c in table.values()) <= OKABE_ITO | {"#999999"}  # colour-blind safe
    for name, colour in POLICY_COLORS.items():
        assert policy_color(name) == policy_color(name.upper()) == colour
    # names outside the tables get a stable colour from the same palette
    assert policy_color("lifo") == policy_color("LIFO") and policy_color("lifo").upper() in OKABE_ITO


def test_batch_figures_and_interactive_panel_use_the_same_policy_colours():
    """The simulator figure builders (batch path) and the explorer widget (browser) colour by policy."""
    from asrsched.figures.sim import fig_cdf, fig_occupancy
    from asrsched.figures.widgets import policy_explorer
    from asrsched.sim.sweep import point_records

    res = point_records("librispeech", 12, ["fcfs", "sjf", "hrrn", "adaptive"], n_requests=150)
    figs = [fig_cdf({p: r.records for p, r in res.items()}), fig_occupancy({p: r.timeline for p, r in res.items()})]
    panel = policy_explorer(rate=12, policy="hrrn", n_requests=150)
    figs.append(next(w for w in panel.children if isinstance(w, go.FigureWidget)))
    seen = set()
    for fig in figs:
        for tr in fig.data:
            if tr.name in POLICY_COLORS:
                assert tr.line.color == POLICY_COLORS[tr.name], (type(fig).__name__, tr.name, tr.line.color)
                seen.add(tr.name)
    assert seen == {"fcfs", "sjf", "hrrn", "adaptive"}


def test_fit_title_wraps_long_titles_only_in_the_exported_copy():
    long = (
        "LibriSpeech at 21 req/s: SJF cuts P50 E2EL by 90 % but its P90 grows by 68 %, "
        "while HRRN keeps the tail within 10 % of FCFS"
    )
    fig = go.Figure(layout=dict(title=long))
    wrapped = fit_title(go.Figure(fig))
    lines = wrapped.layout.title.text.split("<br>")
    assert len(lines) >= 2 and " ".join(lines) == long
    assert all(len(line) * 0.58 * 18 <= PRINT_WIDTH for line in lines)
    assert max(map(len, lines)) - min(map(len, lines)) < 15  # balanced, no one-word orphan line
    assert wrapped.layout.title.yanchor == "top" and wrapped.layout.title.yref == "container"
    assert wrapped.layout.margin.t > 70
    assert fig.layout.title.text == long  # the caller's figure is untouched
    short = fit_title(go.Figure(layout=dict(title="SJF halves P50 E2EL")))
    assert short.layout.title.text == "SJF halves P50 E2EL" and short.layout.margin.t is None


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    if plots._chromium() is None:
        pytest.skip("Debian chromium not installed")
    root = tmp_path_factory.mktemp("figs")
    fig = go.Figure(
        [go.Scatter(x=[1, 5, 10], y=[0.2, 0.5, 0.9], name=p, line_color=policy_color(p)) for p in ("fcfs", "sjf")]
    )
    fig.update_layout(
        title="SJF answers sooner at every rate", xaxis_title="arrival rate (req/s)", yaxis_title="P50 E2EL (s)"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with export_session():
            paths = export_figure(fig, "demo", "99_demo", root=root)
            paths2 = export_figure(fig, "demo_pdf", "99_demo", root=root, formats=("pdf",))
    return paths, paths2, caught


@needs_chromium
def test_export_writes_offline_html_print_png_and_svg(exported):
    paths, paths2, caught = exported
    assert set(paths) == {"html", "png", "svg"} and all(p.parent.name == "99_demo" for p in paths.values())
    html = paths["html"].read_text()
    assert 'src="https://cdn.plot.ly' not in html and "cdn" not in html.split("Plotly.newPlot")[0]  # nothing fetched
    # the library: once per folder, beside the figures, not 4.8 MB in every file
    assert '<script charset="utf-8" src="plotly.min.js"></script>' in html and len(html) < 200_000
    js = paths["html"].parent / "plotly.min.js"
    assert re.search(r"plotly\.js v\d+\.\d+\.\d+", js.read_text()[:2000]) and js.stat().st_size > 3_000_000
    layout = figure_layout(paths["html"])
    assert layout["title"]["text"] == "SJF answers sooner at every rate"
    assert layout["xaxis"]["title"]["text"] == "arrival rate (req/s)"
    assert png_size(paths["png"]) == (PRINT_WIDTH * PNG_SCALE, PRINT_HEIGHT * PNG_SCALE) == (2700, 1680)
    svg = paths["svg"].read_text()
    assert re.search(rf'<svg[^>]*width="{PRINT_WIDTH}"[^>]*height="{PRINT_HEIGHT}"', svg)
    r, g, b = (int(POLICY_COLORS["sjf"][i : i + 2], 16) for i in (1, 3, 5))
    assert "SJF answers sooner" in svg and f"stroke: rgb({r}, {g}, {b})" in svg
    assert paths2["pdf"].read_bytes()[:5] == b"%PDF-"
    assert not [w for w in caught if "kopts" in str(w.message)], [str(w.message) for w in caught]


def test_missing_chromium_gives_a_clear_error_and_keeps_the_html(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "_chromium", lambda: None)
    fig = go.Figure(go.Bar(x=["a"], y=[1]), layout=dict(title="t"))
    with pytest.raises(RuntimeError, match=r"needs Debian's chromium: apt-get install chromium"):
        export_figure(fig, "nochrome", "99_demo", root=tmp_path)
    assert (tmp_path / "99_demo" / "nochrome.html").stat().st_size > 1_000
    assert not (tmp_path / "99_demo" / "nochrome.png").exists()


def test_html_inlines_plotly_js_on_request(tmp_path, monkeypatch):
    fig = go.Figure(go.Bar(x=["a"], y=[1]), layout=dict(title="t"))
    monkeypatch.setenv(plots.PLOTLYJS_ENV, "inline")
    p = export_figure(fig, "alone", "99_demo", root=tmp_path, formats=("html",))["html"]
    assert "<script src=" not in p.read_text() and p.stat().st_size > 3_000_000
    assert not (tmp_path / "99_demo" / "plotly.min.js").exists()
    monkeypatch.setenv(plots.PLOTLYJS_ENV, "cdn")
    with pytest.raises(ValueError, match=r"\$ASRSCHED_HTML_PLOTLYJS: 'cdn' is not one of 'shared', 'inline'"):
        export_figure(fig, "x", "99_demo", root=tmp_path / "bad", formats=("html",))
    assert not (tmp_path / "bad").exists()


def test_bad_export_arguments_fail_before_writing(tmp_path):
    fig = go.Figure()
    with pytest.raises(ValueError, match=r"formats: unknown \['jpg'\]; allowed: html, png, svg, pdf"):
        export_figure(fig, "x", "99_demo", root=tmp_path, formats=("html", "jpg"))
    with pytest.raises(ValueError, match="name must be a plain file-name stem"):
        export_figure(fig, "../x", "99_demo", root=tmp_path)
    with pytest.raises(ValueError, match="notebook must be a plain file-name stem"):
        export_table(__import__("pandas").DataFrame({"a": [1]}), "t", "a/b", root=tmp_path)
    assert not list(tmp_path.rglob("*.*"))


def test_export_table_keeps_named_index_levels(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"workload": ["l", "l", "u"], "rate": [1, 2, 1], "policy": ["sjf"] * 3, "v": [1.0, 2.0, 3.0]})
    piv = df.pivot_table(index=["workload", "rate"], columns="policy", values="v")
    back = pd.read_csv(export_table(piv, "piv", "99_demo", root=tmp_path))
    assert list(back.columns) == ["workload", "rate", "sjf"] and back.sjf.tolist() == [1.0, 2.0, 3.0]
    plain = pd.read_csv(export_table(df, "plain", "99_demo", root=tmp_path))
    assert list(plain.columns) == list(df.columns)


def test_figurewidget_in_a_panel_reports_its_current_figure(house):
    """A frontend restoring widget state after the cell ran (Voila) gets the figure as it is now."""
    import ipywidgets as W

    fig = go.FigureWidget()
    fig.update_layout(xaxis_type="log", xaxis_title="E2EL (s)")
    panel = W.VBox([W.IntSlider(description="k"), fig])  # noqa: F841 - shown as a panel, never by itself
    with fig.batch_update():
        fig.data = []
        fig.add_scatter(x=[1, 2, 3], y=[0.1, 0.5, 1.0], name="sjf", line_color=policy_color("sjf"))
        fig.layout.title = "SJF first"
    state = fig.get_state()
    assert state["_widget_layout"]["title"]["text"] == "SJF first"
    assert state["_widget_layout"]["xaxis"]["type"] == "log"
    assert [t["name"] for t in state["_widget_data"]] == ["sjf"]
    assert set(fig.get_state("_py2js_relayout")) == {"_py2js_relayout"}  # single keys as before


class _RecordingComm:
    """Stands in for the kernel's comm of one widget: records what the widget sends (the real comm is in
    the Voila browser test, tests/app/test_browser.py, which restores these widgets in a dashboard)."""

    comm_id = "recorded"
    kernel = object()  # ipywidgets sends only through a comm that has a kernel

    def __init__(self):
        self.sent = []

    def send(self, data=None, metadata=None, buffers=None):
        self.sent.append(data)

    def close(self, *args, **kwargs):
        pass

    def on_msg(self, *args, **kwargs):
        pass


def test_a_state_request_is_answered_by_one_update_with_the_whole_current_state(house):
    """jupyter-widgets restores a model from the first ``update`` that answers its ``request_state``: the
    refresh of the figure must not go out first on its own (it drew "Failed to load model class
    'undefined'" in Voila dashboards on a busy machine)."""
    import ipywidgets as W

    fig = go.FigureWidget()
    panel = W.VBox([W.IntSlider(description="k"), fig])  # noqa: F841 - shown as a panel, never by itself
    with fig.batch_update():
        fig.add_scatter(x=[1, 2, 3], y=[0.1, 0.5, 1.0], name="sjf")
        fig.layout.title = "SJF first"
    fig.comm = comm = _RecordingComm()
    fig._handle_msg({"content": {"data": {"method": "request_state"}}})
    updates = [m for m in comm.sent if m.get("method") == "update"]
    assert len(updates) == 1, [sorted(m.get("state", {})) for m in updates]
    state = updates[0]["state"]
    assert state["_model_name"] and state["_model_module"] == fig._model_module
    assert state["_widget_layout"]["title"]["text"] == "SJF first"
    assert [t["name"] for t in state["_widget_data"]] == ["sjf"]
