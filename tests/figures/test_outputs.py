"""Where outputs go: one git-ignored runs/ folder per project, one folder per notebook run with run.json.

The headless check: papermill, started in the notebook's own folder of a checkout, leaves no new
file under notebooks/ and writes run.json under runs/.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from extras import need

need("nbformat")

import nbformat
import pandas as pd
import pytest

from asrsched.figures import outputs
from asrsched.figures.style import export_dir, export_table

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_env(monkeypatch):
    for k in (outputs.ROOT_ENV, outputs.RUNS_ENV, outputs.FIGURES_ENV, "JPY_SESSION_NAME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(outputs, "_RUN_DIRS", {})
    return monkeypatch


def fake_checkout(root: Path) -> Path:
    """A folder that looks like an asrsched checkout (the markers project_root looks for)."""
    (root / "asrsched").mkdir(parents=True)
    (root / "asrsched" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'asrsched'\n")
    (root / "notebooks").mkdir()
    return root


def test_project_root_walks_up_to_the_checkout(tmp_path, clean_env):
    proj = fake_checkout(tmp_path / "proj")
    clean_env.chdir(proj / "notebooks")
    assert outputs.project_root() == proj.resolve()
    assert outputs.runs_root() == proj.resolve() / "runs"
    clean_env.chdir(tmp_path)  # outside any checkout: ./runs
    assert outputs.project_root() is None and outputs.runs_root() == tmp_path.resolve() / "runs"
    clean_env.setenv(outputs.ROOT_ENV, str(proj))
    assert outputs.runs_root() == proj.resolve() / "runs"
    clean_env.setenv(outputs.RUNS_ENV, str(tmp_path / "elsewhere"))
    assert outputs.runs_root() == (tmp_path / "elsewhere").resolve()


def test_notebook_folder_parameters_mean_the_same_place_from_any_directory(tmp_path, clean_env):
    proj = fake_checkout(tmp_path / "proj")
    seen = set()
    for cwd in (proj, proj / "notebooks"):
        clean_env.chdir(cwd)
        seen.add(outputs.runs_path("../runs/sweep-cache"))
        seen.add(outputs.runs_path("runs/sweep-cache"))
        seen.add(outputs.runs_path("sweep-cache"))
    assert seen == {proj.resolve() / "runs" / "sweep-cache"}
    assert outputs.runs_path(None) is None and outputs.runs_path("") is None
    assert outputs.runs_path(tmp_path / "abs") == tmp_path / "abs"


def test_run_folder_per_notebook_and_parameters_with_run_json(tmp_path, clean_env):
    clean_env.chdir(tmp_path)
    ns = {"RATE": 10.0, "PHASES": [[0, "librispeech"]], "NB": "03_x", "service": object(), "lower": 1}
    params = outputs.run_parameters(ns)
    assert params == {"RATE": 10.0, "PHASES": [[0, "librispeech"]]}  # UPPER_CASE literals, not NB
    d1 = outputs.interactive_run_dir("03_x", params)
    assert d1.parent == tmp_path.resolve() / "runs" / "03_x"
    assert d1.name.endswith("-" + outputs.parameters_hash(params))
    rec = json.loads((d1 / "run.json").read_text())
    assert rec["parameters"] == params and rec["notebook"] == "03_x" and rec["kind"] == "interactive"
    assert outputs.interactive_run_dir("03_x", dict(params)) == d1  # same kernel, same parameters: same folder
    d2 = outputs.interactive_run_dir("03_x", {**params, "RATE": 8})
    assert d2 != d1 and d2.parent == d1.parent  # other parameters never mix with earlier files
    assert outputs.parameters_hash({"a": 1, "b": 2}) == outputs.parameters_hash({"b": 2, "a": 1})


def test_a_new_kernel_with_the_same_parameters_and_code_reuses_the_run_folder(tmp_path, clean_env):
    """Every Voila visit is a new kernel: it reuses the folder a clean checkout at the same commit made for
    the same parameters, and gets a new one for another commit or uncommitted changes."""
    clean_env.chdir(tmp_path)
    prov = {"commit": "a" * 40, "clean_tree": True}
    clean_env.setattr(outputs, "provenance", lambda *a, **k: dict(prov))
    params = {"RATE": 10.0}
    d1 = outputs.interactive_run_dir("03_x", params)
    clean_env.setattr(outputs, "_RUN_DIRS", {})  # a new kernel
    assert outputs.interactive_run_dir("03_x", params) == d1
    assert outputs.interactive_run_dir("03_x", {"RATE": 8.0}) != d1
    for changed in ({"commit": "b" * 40, "clean_tree": True}, {"commit": "a" * 40, "clean_tree": False}):
        prov.update(changed)
        clean_env.setattr(outputs, "_RUN_DIRS", {})
        time.sleep(1.01)  # folder names carry the second
        d = outputs.interactive_run_dir("03_x", params)
        assert d != d1 and d.name.endswith(d1.name.split("-")[-1]), changed
        prov.update({"commit": "a" * 40, "clean_tree": True})


def test_exports_go_to_the_run_folder_unless_a_gallery_run_asks(tmp_path, clean_env):
    clean_env.chdir(tmp_path)
    d = export_dir("03_workload_drift")
    assert d.parent == tmp_path.resolve() / "runs" / "03_workload_drift" and (d / "run.json").exists()
    p = export_table(pd.DataFrame({"a": [1]}), "t", "03_workload_drift")
    assert p.parent == d
    clean_env.setenv(outputs.FIGURES_ENV, str(tmp_path / "gallery"))
    assert export_dir("03_workload_drift") == tmp_path / "gallery" / "03_workload_drift"
    assert export_dir("03_workload_drift", root=tmp_path / "x") == tmp_path / "x" / "03_workload_drift"
    assert not (tmp_path / "figures").exists()


@pytest.mark.slow
def test_papermill_in_the_notebook_folder_writes_nothing_beside_the_notebook(tmp_path, clean_env):
    """papermill with notebooks/ as working directory leaves no new file there
    and writes run.json under runs/; progress lines are plain text, never widgets or stderr."""
    proj = fake_checkout(tmp_path / "proj")
    shutil.copy(REPO / "notebooks" / "03_workload_drift.ipynb", proj / "notebooks")
    before = sorted(p.name for p in (proj / "notebooks").rglob("*"))
    out = tmp_path / "executed.ipynb"
    cmd = [
        sys.executable,
        "-m",
        "papermill",
        "03_workload_drift.ipynb",
        str(out),
        "-k",
        "python3",
        "--execution-timeout",
        "600",
        "-p",
        "N_REQUESTS",
        "900",
        "-p",
        "RAMP_S",
        "20.0",
        "-y",
        "PHASES: [[0, librispeech], [40, uniform]]",
    ]
    r = subprocess.run(cmd, cwd=proj / "notebooks", capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in (proj / "notebooks").rglob("*")) == before
    assert sorted(p.name for p in proj.iterdir()) == ["asrsched", "notebooks", "pyproject.toml", "runs"]
    (run,) = (proj / "runs" / "03_workload_drift").iterdir()
    rec = json.loads((run / "run.json").read_text())
    assert rec["parameters"]["N_REQUESTS"] == 900 and rec["parameters"]["RATE"] == 10.0
    assert rec["parameters"]["PHASES"] == [[0, "librispeech"], [40, "uniform"]]
    assert {"drift_abrupt.png", "drift_gradual.svg", "phase_latency.csv"} <= {p.name for p in run.iterdir()}
    nb = nbformat.read(out, as_version=4)
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    stderr = [o.text for o in outs if o.output_type == "stream" and o.name == "stderr"]
    assert not [s for s in stderr if "it/s]" in s or "%|" in s], stderr  # no tqdm lines on stderr
    lines = [
        o.data["text/plain"]
        for o in outs
        if o.output_type == "display_data"
        and "text/plain" in o.data
        and str(o.data["text/plain"]).startswith(("✓", "✗"))
    ]
    assert any(line.startswith("✓ exported to runs/03_workload_drift/") for line in lines), lines


# ------------------------------------------------------------------------------------ progress, exporter noise
def test_progress_mode_follows_the_front_end(monkeypatch):
    from asrsched.figures import progress

    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    assert progress.mode() == "terminal"  # pytest: no kernel
    for m in progress.MODES:
        monkeypatch.setenv(progress.PROGRESS_ENV, m)
        assert progress.mode() == m
    monkeypatch.setenv(progress.PROGRESS_ENV, "fancy")
    with pytest.raises(ValueError, match="ASRSCHED_PROGRESS='fancy': allowed values widget, text"):
        progress.mode()


def test_install_points_tqdm_auto_at_the_chosen_bar_and_back():
    import tqdm.auto

    from asrsched.figures import progress

    orig = tqdm.auto.tqdm
    try:
        assert progress.install("text") == "text" and tqdm.auto.tqdm is progress.TextBar
        assert progress.install("off") == "off"
        assert list(tqdm.auto.tqdm(range(3))) == [0, 1, 2]  # a disabled bar still iterates
    finally:
        progress.install("terminal")
    assert tqdm.auto.tqdm is orig


def test_text_bar_ends_as_one_line(capsys):
    from asrsched.figures.progress import TextBar, final_line

    bar = TextBar(total=4, desc="sweep", unit="pt")
    for _ in range(4):
        bar.update()
    bar.close()
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and out.startswith("✓ sweep: 4/4 [") and "pt/s" in out and err == ""
    # the final line's rate is the run's mean (n / elapsed), not tqdm's smoothed rate of the last items
    mean = TextBar(total=72, desc="sweep", unit="it", mininterval=0, miniters=1, smoothing=0.3)
    mean.update(71)
    mean.last_print_t = mean.start_t  # as if the last update came late
    time.sleep(0.2)
    mean.update(1)
    line = final_line(mean)
    elapsed = mean.format_dict["elapsed"]
    shown = float(re.search(r", ([\d.]+) it/s\]", line).group(1))
    assert abs(shown / (72 / elapsed) - 1) < 0.05, (line, elapsed)
    mean.close()
    stopped = TextBar(total=5, desc="sweep")
    stopped.update(2)
    assert final_line(stopped).startswith("✗ stopped at sweep: 2/5")
    stopped.close()
    capsys.readouterr()


def test_exporter_log_tracebacks_become_one_line(tmp_path, monkeypatch, capsys, caplog):
    """choreographer logs a JSONError traceback from its pipe to Chromium (and ignores it): in a page it
    must not appear as a traceback, only as a note on the export's final line."""
    import logging

    import plotly.graph_objects as go

    from asrsched.figures import progress, style

    need("kaleido")
    monkeypatch.setenv(progress.PROGRESS_ENV, "text")
    caplog.set_level(logging.DEBUG)
    with style.export_session():
        style.export_figure(go.Figure(layout=dict(title="t")), "t", "99_x", root=tmp_path, formats=("html",))
        try:
            raise RuntimeError("Another JSONError.")
        except RuntimeError:
            logging.getLogger("choreographer.channels.pipe").exception("JSONError decoding message. Ignoring")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and not [r for r in caplog.records if r.name.startswith("choreographer")]
    (line,) = [s for s in out.splitlines() if s.startswith("✓")]
    assert line.startswith(f"✓ exported to {tmp_path / '99_x'}: 1 fig [")
    assert "1 note(s) from the image exporter, ignored: choreographer: JSONError decoding message" in line


def test_explorer_export_button_writes_the_current_view_into_the_run_folder(tmp_path, clean_env):
    """ "export this view": the figure as shown, house formats, into runs/<notebook>/<run>/, with run.json."""
    import ipywidgets as W
    import plotly.graph_objects as go

    from asrsched.figures import style
    from asrsched.figures.widgets import policy_explorer

    if style._chromium() is None:
        pytest.skip("Debian chromium not installed")
    clean_env.chdir(tmp_path)
    clean_env.setenv(style.FORMATS_ENV, "html,svg")
    panel = policy_explorer(rate=12, policy="hrrn", n_requests=150)
    fig = next(w for w in panel.children if isinstance(w, go.FigureWidget))
    (bar,) = [w for w in panel.children if isinstance(w, W.HBox) and any(isinstance(c, W.Button) for c in w.children)]
    button, status = bar.children
    assert button.description == "export this view" and "overflow-x:auto" in status.value  # tables scroll
    button.click()
    (run,) = (tmp_path / "runs" / "02_policy_sweep").iterdir()
    written = sorted(p.name for p in run.iterdir())
    stems = {p.rsplit(".", 1)[0] for p in written if not p.endswith((".json", ".js"))}  # plotly.min.js: shared
    assert len(stems) == 1 and next(iter(stems)).startswith("policy_explorer_") and "run.json" in written
    assert {p.rsplit(".", 1)[1] for p in written} == {"html", "svg", "json", "js"} and "plotly.min.js" in written
    assert "wrote" in status.value and str(run.name) in status.value
    from asrsched.figures.reexport import figure_from_html

    shown = figure_from_html(run / f"{next(iter(stems))}.html")
    assert [t.name for t in shown.data] == [t.name for t in fig.data]  # the view as it is now
    assert shown.layout.xaxis.ticktext == fig.layout.xaxis.ticktext  # 1-2-5 log ticks, as on screen


def test_a_cells_warnings_are_one_line_each_with_their_count(capsys):
    """``warnings_as_lines``: every distinct warning once on stdout, with its count, nothing on stderr; the lines
    still come when the block raises. The dashboards' ``showwarning`` writes the same line."""
    import warnings

    from asrsched.figures.progress import show_warning_as_line, warnings_as_lines
    from asrsched.sim.overload import OverloadWarning

    with warnings_as_lines():
        for _ in range(3):
            warnings.warn("arrival rate 19.00 req/s exceeds capacity", OverloadWarning, stacklevel=1)
        warnings.warn("librispeech at rho 0.95: CI half-width 22.5 pp after 4 seeds", UserWarning, stacklevel=1)
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "⚠ OverloadWarning: arrival rate 19.00 req/s exceeds capacity (x3)",
        "⚠ UserWarning: librispeech at rho 0.95: CI half-width 22.5 pp after 4 seeds",
    ]
    assert out.err == ""
    with pytest.raises(ValueError, match="rate must be > 0"), warnings_as_lines():
        warnings.warn("before the error", UserWarning, stacklevel=1)
        raise ValueError("rate must be > 0")
    assert capsys.readouterr().out == "⚠ UserWarning: before the error\n"
    show_warning_as_line(OverloadWarning("queue grows"), OverloadWarning, "f.py", 3)
    assert capsys.readouterr().out == "⚠ OverloadWarning: queue grows\n"


def test_committed_path_finds_results_under_a_scratch_root(tmp_path, monkeypatch):
    """A notebook whose $ASRSCHED_ROOT is a scratch folder (the browser tests) still finds the committed results
    of the checkout it runs from; a copy under the root wins; a missing result is None, not an error."""
    from asrsched.figures.outputs import committed_path

    monkeypatch.setenv("ASRSCHED_ROOT", str(tmp_path))
    checkout = Path(__file__).resolve().parents[2]
    rel = "figures/06_ab_asr_policies/plan"
    assert committed_path(rel) == checkout / rel and (checkout / rel / "run.json").is_file()
    (tmp_path / rel).mkdir(parents=True)
    assert committed_path(rel) == tmp_path / rel
    assert committed_path("figures/no_such_result") is None
