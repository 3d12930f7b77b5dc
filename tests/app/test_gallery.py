"""The figure gallery (figures/README.md) is generated from the exported files and the run records."""

import json
import os
import time

from extras import need

need("nbformat", "plotly")

import nbformat
import plotly.graph_objects as go
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from asrsched.app.gallery import figure_layout, record_runs, render_gallery, scan_figures, write_gallery
from asrsched.figures import style as plots
from asrsched.figures.style import export_figure, export_session, export_table, policy_color


def needs_chromium(fn):
    """Slow (exports through a real browser), needs Debian chromium."""
    return pytest.mark.slow(pytest.mark.skipif(plots._chromium() is None, reason="Debian chromium not installed")(fn))


def _fig(title, x="arrival rate (req/s)", y="P50 E2EL (s)"):
    fig = go.Figure([go.Scatter(x=[1, 2], y=[3, 1], name=p, line_color=policy_color(p)) for p in ("fcfs", "sjf")])
    return fig.update_layout(title=title, xaxis_title=x, yaxis_title=y)


def _executed_copy(path, stem, injected, start):
    """An executed notebook as papermill leaves it (parameters cell, injected cell, metadata)."""
    nb = new_notebook(
        cells=[
            new_code_cell("RATE = 10.0\nN_REQUESTS = 7000\nPOLICIES = ['fcfs', 'sjf']"),
            new_code_cell("\n".join(f"{k} = {v!r}" for k, v in injected.items())),
        ]
    )
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.cells[1].metadata["tags"] = ["injected-parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["papermill"] = {
        "parameters": injected,
        "start_time": start,
        "end_time": start,
        "exception": None,
        "input_path": f"notebooks/{stem}.ipynb",
    }
    nbformat.write(nb, path / f"{stem}.ipynb")


def test_figure_layout_reads_the_title_back_from_html(tmp_path):
    export_figure(_fig("HRRN caps the tail at +12 %"), "t", "99_x", root=tmp_path, formats=("html",))
    layout = figure_layout(tmp_path / "99_x" / "t.html")
    assert layout["title"]["text"] == "HRRN caps the tail at +12 %"
    assert layout["yaxis"]["title"]["text"] == "P50 E2EL (s)"
    (tmp_path / "bad.html").write_text("<html>no figure</html>")
    with pytest.raises(ValueError, match="not a plotly HTML export"):
        figure_layout(tmp_path / "bad.html")


@needs_chromium
def test_gallery_lists_figures_captions_sizes_parameters_and_stale_files(tmp_path):
    figs, runs = tmp_path / "figures", tmp_path / "run"
    runs.mkdir()
    with export_session():
        export_figure(_fig("Old figure from an earlier run"), "old_rate15", "03_drift", root=figs)
    old = time.time() - 3600
    for p in (figs / "03_drift").iterdir():
        os.utime(p, (old, old))
    start = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 60))
    with export_session():
        export_figure(
            _fig("SJF keeps the worst-window P90 lowest (23.1 s)", x="arrival time (s)"),
            "drift_gradual",
            "03_drift",
            root=figs,
        )
        export_figure(
            _fig(
                "A long title that states a finding about every policy at once and keeps going "
                "well past what fits on one printed line"
            ),
            "long",
            "03_drift",
            root=figs,
        )
    export_table(
        __import__("pandas").DataFrame({"policy": ["fcfs", "sjf"], "p90": [1.0, 2.0]}), "phase", "03_drift", root=figs
    )
    (figs / "05_nohtml").mkdir()
    (figs / "05_nohtml" / "lonely.svg").write_text('<svg width="900" height="560"></svg>')
    _executed_copy(runs, "03_drift", {"RATE": 9.0, "N_REQUESTS": 1200}, start)

    rec = record_runs(runs, figs)
    assert [p.parent.name for p in rec] == ["03_drift"]
    data = json.loads(rec[0].read_text())
    assert data["parameters"] == {"RATE": 9.0, "N_REQUESTS": 1200, "POLICIES": ["fcfs", "sjf"]}
    assert data["injected"] == ["N_REQUESTS", "RATE"] and data["status"] == "ok"

    scanned = scan_figures(figs)
    assert {i.name for i in scanned["03_drift"]} == {"old_rate15", "drift_gradual", "long"}
    info = next(i for i in scanned["03_drift"] if i.name == "drift_gradual")
    assert info.png_px == (2700, 1680) and info.svg_px == (900, 560) and info.html_offline
    assert info.caption == "SJF keeps the worst-window P90 lowest (23.1 s) (P50 E2EL (s) vs arrival time (s))"
    long = next(i for i in scanned["03_drift"] if i.name == "long")
    assert "<br>" not in long.title and long.title.endswith("past what fits on one printed line")

    readme = render_gallery(figs)
    assert "2700×1680 px" in readme and "scale 3" in readme and "bash scripts/main.sh" in readme
    assert "| `drift_gradual` | SJF keeps the worst-window P90 lowest (23.1 s)" in readme
    assert "[png](03_drift/drift_gradual.png)" in readme and "[html](03_drift/drift_gradual.html)" in readme
    assert "- **`RATE`** = `9.0`" in readme and "- `POLICIES` = `['fcfs', 'sjf']`" in readme
    assert "Stale (older than the last run" in readme and "`old_rate15`" in readme.split("Stale")[1]
    assert "| `old_rate15`" not in readme  # stale figures are not listed as made by the run
    assert "[`phase.csv`](03_drift/phase.csv) (2 rows × 2 columns)" in readme
    assert "## 05_nohtml" in readme and "No batch-run record" in readme and "**no HTML export**" in readme

    out = write_gallery(figs, root=tmp_path)
    assert out == figs / "README.md" and out.read_text() == readme.replace(
        "[`notebooks/03_drift.ipynb`](../notebooks/03_drift.ipynb).",
        "[`notebooks/03_drift.ipynb`](../notebooks/03_drift.ipynb) (not in this checkout).",
    ).replace(
        "[`notebooks/05_nohtml.ipynb`](../notebooks/05_nohtml.ipynb).",
        "[`notebooks/05_nohtml.ipynb`](../notebooks/05_nohtml.ipynb) (not in this checkout).",
    )


def test_write_gallery_defaults_to_the_current_directory(tmp_path, monkeypatch):
    """No arguments: ``./figures/README.md``; the notebooks it links to are the packaged ones."""
    monkeypatch.delenv("ASRSCHED_ROOT", raising=False)
    monkeypatch.delenv("ASRSCHED_FIGURES", raising=False)
    monkeypatch.chdir(tmp_path)
    export_table(__import__("pandas").DataFrame({"a": [1]}), "t", "03_workload_drift", root=tmp_path / "figures")
    out = write_gallery()
    assert out == tmp_path / "figures" / "README.md"
    assert "[`notebooks/03_workload_drift.ipynb`](../notebooks/03_workload_drift.ipynb)." in out.read_text()
