"""Each notebook's ``checks`` cell: run inside the notebook right after its parameters, and by ``asrsched run`` /
``asrsched dashboard`` before anything starts, so a value out of range fails at once naming the notebook parameter."""

from __future__ import annotations

from pathlib import Path

from extras import need

# the checks cells import what their notebooks use: the notebook, server and Whisper stacks
need("nbformat", "papermill", "plotly", "httpx", "starlette", "soundfile")

import nbformat
import pytest

from asrsched.app.cli import main as cli
from asrsched.app.params import CHECKS_TAG, named_as, notebook_parameters, params_for, run_checks, small_params

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))


def test_named_as_names_the_notebook_parameter():
    with pytest.raises(ValueError, match=r"^N_REQUESTS: n_requests must be >= 1, got 0$"):
        with named_as(N_REQUESTS="n_requests"):
            raise ValueError("n_requests must be >= 1, got 0")
    with pytest.raises(ValueError, match=r"^P \(p\): must be in \(0, 1\)$"):
        with named_as(N_REQUESTS="n_requests", P=("q", "p")):
            raise ValueError("p: must be in (0, 1)")
    with pytest.raises(ValueError, match=r"^rates_x is bad$"):  # a name is matched as a whole word
        with named_as(RATES="rates"):
            raise ValueError("rates_x is bad")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_checks_its_parameters_right_after_them_and_its_defaults_and_small_set_pass(nb):
    cells = [c for c in nbformat.read(nb, as_version=4).cells if c.cell_type == "code"]
    tags = [c.metadata.get("tags", []) for c in cells]
    assert "parameters" in tags[0] and CHECKS_TAG in tags[1], (nb.stem, tags[:3])
    assert sum(CHECKS_TAG in t for t in tags) == 1
    run_checks(nb, {})
    run_checks(nb, params_for(nb.stem, small_params(), notebook_parameters(nb)))


@pytest.mark.parametrize(
    ("nb", "params", "message"),
    [
        ("01", {"LANGUAGES": ["xx"]}, r"01_profile_whisper: LANGUAGES: languages \['xx'\] have no packaged texts"),
        ("02", {"N_REQUESTS": 0}, r"02_policy_sweep: N_REQUESTS: n_requests must be >= 1, got 0"),
        ("02", {"HEADLINE_RHO": -1}, r"02_policy_sweep: HEADLINE_RHO must be positive fractions of capacity"),
        ("03", {"RAMP_S": -5.0}, r"03_workload_drift: RAMP_S: drift ramp_s must be >= 0"),
        ("04", {"ENGINE": "tgi"}, r"04_real_serving: ENGINE: engine must be one of cpu-server, vllm"),
        ("05", {"P": 1.5}, r"05_ab_estimators: P \(p\): the treatment probability must be in \(0, 1\), got 1.5"),
        (
            "06",
            {"N_REQUESTS": 2500},
            r"06_ab_asr_policies: N_REQUESTS \(n_requests\): 2500 requests leave \d+ after the warm-up",
        ),
    ],
)
def test_a_value_out_of_range_fails_naming_the_notebook_parameter(nb, params, message):
    path = next(p for p in NOTEBOOKS if p.stem.startswith(nb))
    with pytest.raises(ValueError, match=message):
        run_checks(path, params)


def test_run_and_dashboard_refuse_a_value_out_of_range_before_starting_anything(tmp_path, capsys):
    assert cli(["run", "05", "-p", "P", "1.5", "--run-dir", str(tmp_path / "run")]) == 2
    assert "05_ab_estimators: P (p): the treatment probability must be in (0, 1)" in capsys.readouterr().err
    assert cli(["dashboard", "02", "-p", "N_REQUESTS", "0", "--out-dir", str(tmp_path / "dash"), "--dry-run"]) == 2
    assert "02_policy_sweep: N_REQUESTS: n_requests must be >= 1" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
