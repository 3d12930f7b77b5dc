"""The papermill runner and CLI: notebooks execute headlessly with parameters and export their tables."""

import json
import subprocess
import sys

import nbformat
import pandas as pd
import pytest

from asrsched.app.cli import main
from asrsched.app.runner import notebook_parameters, notebooks, run_notebook, run_series


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


def test_policy_sweep_notebook_headless(tmp_path):
    r = run_notebook("02", {"RATES": [6, 19], "SEEDS": [0], "N_REQUESTS": 400, "CDF_RATE": 19,
                            "ADAPTIVE_CAPS": [50], "N_JOBS": 1, "CACHE_DIR": None},
                     run_dir=tmp_path / "run", figures_root=tmp_path / "fig", progress=False)
    assert r.status == "ok", r.error
    out = tmp_path / "fig" / "02_policy_sweep"
    rc = pd.read_csv(out / "relative_change.csv")
    assert set(rc.policy) == {"fcfs", "sjf", "hrrn", "adaptive"} and set(rc.rate) == {6, 19}
    sjf = rc[(rc.policy == "sjf") & (rc.rate == 19) & (rc.workload == "librispeech")]
    assert float(sjf.p50_e2el_ms_change_pct.iloc[0]) < -30
    for f in ("relative_change_librispeech", "cdf_e2el_uniform_rate19", "throughput"):
        for ext in ("html", "png", "svg"):
            assert (out / f"{f}.{ext}").stat().st_size > 1000
    executed = nbformat.read(tmp_path / "run" / "02_policy_sweep.ipynb", as_version=4)
    assert any("paper" in "".join(o.get("text", "")) for c in executed.cells for o in c.get("outputs", []))


def test_drift_notebook_headless(tmp_path):
    df = run_series(["03"], {"03": {"N_REQUESTS": 1500, "PHASES": [[0, "librispeech"], [60, "uniform"]]}},
                    run_dir=tmp_path / "run", figures_root=tmp_path / "fig")
    assert (df.status == "ok").all(), df.error.tolist()
    t = pd.read_csv(tmp_path / "fig" / "03_workload_drift" / "phase_latency.csv")
    assert set(t.drift) == {"abrupt", "gradual"} and len(set(t.phase)) == 2
    assert (tmp_path / "run" / "summary.csv").exists()


def test_unknown_parameter_and_notebook_fail_fast(tmp_path):
    with pytest.raises(ValueError, match="unknown parameter.*RATEZ"):
        run_notebook("02", {"RATEZ": [1]}, run_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown notebook '99'"):
        run_notebook("99", {}, run_dir=tmp_path)
    assert not list(tmp_path.glob("*.ipynb"))


def test_failed_notebook_is_reported_not_raised(tmp_path):
    r = run_notebook("02", {"RATES": [-1]}, run_dir=tmp_path, figures_root=tmp_path / "f", progress=False)
    assert r.status == "failed" and "rate must be a positive number" in r.error


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
