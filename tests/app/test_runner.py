"""The papermill runner and CLI: notebooks execute headlessly with parameters and export their tables (notebook
03 here; what each other notebook's run makes is checked on its dashboard run, ``tests/notebook_checks.py``)."""

import json
import subprocess
import sys
from pathlib import Path

from extras import need

need("nbformat")

import nbformat
import pandas as pd
import pytest

import asrsched
from asrsched.app import paths
from asrsched.app.cli import main
from asrsched.app.params import params_for, parse_value
from asrsched.app.runner import notebook_parameters, notebooks, resolve, run_notebook, run_series


def test_every_notebook_follows_the_conventions():
    nbs = notebooks()
    assert [nb.stem[:2] for nb in nbs] == sorted(nb.stem[:2] for nb in nbs) and nbs
    for nb in nbs:
        book = nbformat.read(nb, as_version=4)
        code = [c for c in book.cells if c.cell_type == "code"]
        assert "parameters" in code[0].metadata.get("tags", []), f"{nb.name}: first code cell not tagged"
        assert all(not c.get("outputs") for c in code), f"{nb.name}: committed with outputs"
        params = notebook_parameters(nb)
        assert params and all(k.isupper() for k in params), f"{nb.name}: parameters must be UPPER_CASE"
        assert any(c.cell_type == "markdown" and "Parameters" in c.source for c in book.cells), nb.name


@pytest.mark.slow  # runs a notebook in a Jupyter kernel
def test_unknown_parameter_and_notebook_fail_fast(tmp_path):
    with pytest.raises(ValueError, match="unknown parameter.*RATEZ"):
        run_notebook("02", {"RATEZ": [1]}, run_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown notebook '99'"):
        run_notebook("99", {}, run_dir=tmp_path)
    assert not list(tmp_path.glob("*.ipynb"))


def test_every_notebook_has_a_small_set_and_the_readme_shows_it():
    """One small parameter set per notebook, in one file beside the notebooks: every notebook has one, its names
    and kinds pass the notebook's own check, and the README's quick-start table is made from it."""
    from asrsched.app.params import check_parameters, small_params, small_params_table

    sets = small_params()
    assert list(sets) == [nb.stem for nb in notebooks()]
    for stem, p in sets.items():
        check_parameters(resolve(stem), p)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert small_params_table(sets) in readme, "README's small-parameter table differs: paste small_params_table()"
    assert "`RAMP_S = 30.0`" in small_params_table(sets) and '`PHASES = [[0, "librispeech"]' in readme


def test_run_and_dashboard_take_the_small_set(tmp_path, capsys):
    from asrsched.app.dashboard import main as dashboard

    assert dashboard(["03", "--small", "-p", "RAMP_S", "10.0", "--out-dir", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "'N_REQUESTS': 1200" in out and "'RAMP_S': 10.0" in out  # the small set, -p over it
    code = "\n".join(c.source for c in nbformat.read(tmp_path / "03_workload_drift.ipynb", as_version=4).cells)
    assert "N_REQUESTS = 1200" in code
    with pytest.raises(SystemExit):
        main(["run", "03", "--small", "--params", "x.json"])
    assert "not allowed with argument --small" in capsys.readouterr().err


def test_a_series_checks_every_notebooks_parameters_before_the_first_runs(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"03_workload_drift: N_REQUESTS must be a number .*got '12x'"):
        run_series(["02", "03"], {"03": {"N_REQUESTS": "12x"}}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists() and "running 02" not in capsys.readouterr().out
    assert main(["run", "02", "-p", "RATES", "[5, 15", "--run-dir", str(tmp_path / "one")]) == 2
    assert "RATES = '[5, 15' is not a Python literal" in capsys.readouterr().err
    assert not (tmp_path / "one").exists()


@pytest.mark.slow  # runs a notebook in a Jupyter kernel
def test_failed_notebook_is_reported_not_raised(tmp_path):
    """A notebook that fails while it runs is a failed row; a value its checks cell refuses fails before it runs."""
    missing = tmp_path / "missing_profile.json"
    r = run_notebook(
        "02", {"PROFILE": str(missing)}, run_dir=tmp_path / "run", figures_root=tmp_path / "f", progress=False
    )
    assert r.status == "failed" and "missing_profile.json" in r.error
    with pytest.raises(ValueError, match=r"02_policy_sweep: RATES: rate must be a positive number"):
        run_notebook("02", {"RATES": [-1]}, run_dir=tmp_path / "bad", figures_root=tmp_path / "g", progress=False)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "g").exists()


def test_cli_simulate_and_bad_policy(capsys):
    assert main(["simulate", "--rate", "5", "--n-requests", "200", "--policy", "hrrn"]) == 0
    assert "p90_e2el_ms" in capsys.readouterr().out
    assert main(["simulate", "--policy", "lifo2"]) == 2
    assert "unknown policy 'lifo2'; allowed values" in capsys.readouterr().err


def test_cli_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "asrsched.app.cli", "list"], capture_output=True, text=True, check=True)
    assert "02_policy_sweep" in out.stdout and "RATES" in out.stdout


def test_params_file(tmp_path):
    from asrsched.app.runner import load_params

    p = tmp_path / "p.json"
    p.write_text(json.dumps({"02": {"SEEDS": [0]}}))
    assert load_params(p) == {"02": {"SEEDS": [0]}}
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must map notebook names"):
        load_params(p)


def test_notebooks_come_from_the_package(monkeypatch):
    """``asrsched.notebooks`` (package data); in this editable checkout that is the top-level notebooks/."""
    monkeypatch.delenv(paths.ROOT_ENV, raising=False)
    d = paths.notebooks_dir()
    assert d.resolve() == (Path(asrsched.__file__).resolve().parents[1] / "notebooks")
    assert notebooks() and all(nb.parent == d for nb in notebooks())
    assert resolve("03").name == "03_workload_drift.ipynb"


def test_results_go_under_the_current_directory_or_asrsched_root(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.ROOT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.runs_dir() == tmp_path / "runs" and paths.figures_dir() == tmp_path / "figures"
    assert paths.new_run_dir().parent == tmp_path / "runs"
    nb = resolve("03")
    # notebooks outside <base>/notebooks (installed, or a checkout run from elsewhere): the kernel runs in the run folder
    assert paths.kernel_dir(nb, fallback=tmp_path / "runs" / "x") == (tmp_path / "runs" / "x").resolve()
    # run from the checkout root (bash scripts/main.sh): the notebooks' own folder, as always
    repo = nb.resolve().parents[1]
    monkeypatch.chdir(repo)
    assert paths.kernel_dir(nb, fallback=tmp_path) == nb.resolve().parent
    assert paths.figures_dir() == repo / "figures"
    # $ASRSCHED_ROOT: a project folder with its own notebooks/, runs/ and figures/
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    assert paths.notebooks_dir() == tmp_path / "notebooks" and paths.runs_dir() == tmp_path / "runs"
    with pytest.raises(ValueError, match="unknown notebook '03'; available: $"):
        resolve("03")


def test_parameter_values_and_merging():
    assert parse_value("[6, 19]") == [6, 19] and parse_value("0.5") == 0.5 and parse_value("sjf") == "sjf"
    assert parse_value(3) == 3 and parse_value("None") is None
    params = {"*": {"SEED": 1, "NOPE": 2}, "02": {"RATES": [1]}, "02_policy_sweep": {"RATES": [2]}}
    assert params_for("02_policy_sweep", params, {"SEED": "0", "RATES": "[]"}) == {"SEED": 1, "RATES": [2]}


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"asrsched {asrsched.__version__}"


@pytest.mark.slow  # runs a notebook in a Jupyter kernel
def test_run_series_writes_the_report_gallery_from_a_real_run(tmp_path, monkeypatch):
    """``run_series(..., gallery=True)``, the main job's path (``asrsched run --gallery``), from a project folder:
    papermill runs notebook 03, the runner records the series (``summary.csv`` in the run folder) and writes
    the report gallery ``./figures/`` (the notebook's tables and figures, and ``README.md`` rewritten with the
    parameters, injected and default, and every figure's caption); the run folder gets no figures of its own.
    A run without ``--gallery`` (everything under ``./runs/<time>/``, ``./figures`` untouched) is checked on
    the installed package's CLI, ``tests/project/test_install.py``."""
    from asrsched.app.gallery import scan_figures
    from asrsched.app.runner import run_series

    monkeypatch.delenv(paths.ROOT_ENV, raising=False)
    monkeypatch.delenv(paths.FIGURES_ENV, raising=False)
    monkeypatch.delenv(paths.RUNS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "README.md").write_text("the gallery, as committed\n")
    small = {"N_REQUESTS": 900, "PHASES": [[0, "librispeech"], [40, "uniform"]], "RAMP_S": 20.0, "RATE": 8}
    df = run_series(["03"], {"03": small}, run_dir=tmp_path / "runs" / "g", gallery=True)
    assert (df.status == "ok").all(), df.error.tolist()
    run = tmp_path / "runs" / "g"
    assert (run / "03_workload_drift.ipynb").exists() and not (run / "figures").exists()
    summary = pd.read_csv(run / "summary.csv")  # the series' record: notebook, status, seconds
    assert summary["notebook"].tolist() == ["03_workload_drift"] and summary["status"].tolist() == ["ok"]
    fig = tmp_path / "figures"
    t = pd.read_csv(fig / "03_workload_drift" / "phase_latency.csv")  # the drift study: both kinds, both phases
    assert set(t.drift) == {"abrupt", "gradual"} and len(set(t.phase)) == 2
    rec = json.loads((fig / "03_workload_drift" / "run.json").read_text())
    assert rec["parameters"]["N_REQUESTS"] == 900 and rec["parameters"]["RATE"] == 8 and "RATE" in rec["injected"]
    assert rec["parameters"]["SEED"] == parse_value(notebook_parameters(resolve("03"))["SEED"])  # the default
    assert "SEED" not in rec["injected"]
    readme = (fig / "README.md").read_text()
    assert "the gallery, as committed" not in readme and "03_workload_drift" in readme
    assert "- **`N_REQUESTS`** = `900`" in readme and "- **`RATE`** = `8`" in readme and "- `SEED` = `" in readme
    infos = scan_figures(fig)["03_workload_drift"]
    assert infos
    for info in infos:
        assert f"| `{info.name}` | {info.caption}" in readme
        assert info.title and info.png_px == (2700, 1680) and set(info.files) == {"html", "png", "svg"}
    assert "Stale" not in readme


def test_run_help_documents_parameter_values(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "Python literal" in text and '-p RATES "[5, 15, 25]"' in text and "--gallery" in text
    assert "runs/<timestamp>/figures/<notebook>/" in text
