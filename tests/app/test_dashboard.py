"""``asrsched dashboard``: the parameterised copy Voila serves, the command line, bad input.

The dashboards themselves are driven in a real browser in tests/app/test_browser.py.
"""

import subprocess
import sys

from extras import need

need("nbformat")

import nbformat
import pytest

from asrsched.app.cli import COMMANDS
from asrsched.app.dashboard import main, prepare, voila_command
from asrsched.app.paths import notebooks_dir


def test_prepare_injects_parameters_and_keeps_the_notebook_folder_as_cwd(tmp_path):
    out = prepare("03", {"N_REQUESTS": 1200, "PHASES": [[0, "librispeech"], [60, "uniform"]]}, out_dir=tmp_path)
    assert out == tmp_path / "03_workload_drift.ipynb"
    nb = nbformat.read(out, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.tags and "injected-parameters" in code[1].metadata.tags
    injected = code[1].source
    assert f"_os.chdir({str(notebooks_dir().resolve())!r})" in injected  # the tests run from the checkout root
    assert "N_REQUESTS = 1200" in injected and 'PHASES = [[0, "librispeech"], [60, "uniform"]]' in injected
    assert '_os.environ["ASRSCHED_PROGRESS"] = "text"' in injected  # progress as plain lines, no stderr box
    assert "_warnings.showwarning" in injected  # warnings as one stdout line
    assert "_dashboard.show_parameters(globals(), ['RATE', 'PHASES'," in injected  # the values in effect, shown
    assert "['N_REQUESTS', 'PHASES'])" in injected
    params_only = "\n".join(line for line in injected.splitlines() if not line.startswith(("_", "import")))
    ns = {}
    exec(code[0].source + "\n" + params_only, ns)  # later assignments win
    assert ns["N_REQUESTS"] == 1200 and ns["RATE"] == 10.0


def test_the_page_opens_with_the_parameters_in_effect_the_injected_ones_in_bold():
    from asrsched.app.dashboard import parameters_markdown

    md = parameters_markdown({"RATE": 8, "SEED": 0, "PHASES": [[0, "uniform"]]}, ["RATE", "PHASES", "SEED"], ["RATE"])
    assert md.endswith("**`RATE = 8`**, `PHASES = [[0, 'uniform']]`, `SEED = 0`")
    assert "--VoilaConfiguration.progressive_rendering=True" in voila_command("x.ipynb")


def test_unknown_parameter_or_notebook_fails_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) N_REQUESTZ; allowed: .*N_REQUESTS"):
        prepare("02", {"N_REQUESTZ": 3}, out_dir=tmp_path)
    assert main(["99", "--out-dir", str(tmp_path), "--dry-run"]) == 2
    assert "unknown notebook '99'" in capsys.readouterr().err
    assert main(["02", "-p", "RATEZ", "1", "--out-dir", str(tmp_path), "--dry-run"]) == 2
    assert not list(tmp_path.iterdir())


def test_a_mistyped_value_or_one_of_the_wrong_kind_fails_before_anything_is_written(tmp_path, capsys):
    """A list missing its bracket is refused, not injected as the string "[5, 15" (which failed only when the
    page ran the notebook); a value must be of its default's kind, and the error names the parameter."""
    assert main(["02", "-p", "RATES", "[5, 15", "--out-dir", str(tmp_path), "--dry-run"]) == 2
    assert "RATES = '[5, 15' is not a Python literal" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"RHOS must be a list like its default \[0\.2, .*got 0\.9 \(a number\)"):
        prepare("02", {"RHOS": 0.9}, out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"N_REQUESTS must be a number like its default 2000, got '300x' \(a string\)"):
        prepare("02", {"N_REQUESTS": "300x"}, out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"STREAM must be True or False like its default True, got 1 \(a number\)"):
        prepare("04", {"STREAM": 1}, out_dir=tmp_path)
    assert not list(tmp_path.iterdir())
    # None goes anywhere (CACHE_DIR = None turns the cache off), a whole number where the default is a float
    assert prepare("02", {"CACHE_DIR": None, "CDF_RHO": 1}, out_dir=tmp_path).exists()


def test_dry_run_prints_a_loopback_voila_command_with_a_token(tmp_path, capsys):
    params = tmp_path / "p.json"
    params.write_text('{"*": {"SEED": 3}, "02": {"N_REQUESTS": 300}, "02_policy_sweep": {"RATES": [19]}}')
    assert (
        main(
            [
                "02",
                "--params",
                str(params),
                "-p",
                "N_REQUESTS",
                "400",
                "--out-dir",
                str(tmp_path / "d"),
                "--dry-run",
                "--no-browser",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    cmd = out.strip().splitlines()[-1]
    assert "-m voila" in cmd and "--Voila.ip=127.0.0.1" in cmd and "--no-browser" in cmd
    assert "--VoilaConfiguration.show_tracebacks=True" in cmd
    token = cmd.split("--Voila.token=")[1].split()[0]
    assert len(token) >= 16
    src = nbformat.read(tmp_path / "d" / "02_policy_sweep.ipynb", as_version=4).cells
    injected = next(c.source for c in src if "injected-parameters" in c.metadata.get("tags", []))
    # "*" applies only where the notebook has the parameter (02 has no SEED); -p wins over the file
    assert (
        "N_REQUESTS = 400" in injected and "RATES = [19]" in injected and "\nSEED" not in injected
    )  # not injected (named only in the shown list)
    assert voila_command("x.ipynb", token=None)[-1] == "--Voila.token="  # --no-token: no auth, loopback


def test_outside_a_checkout_the_kernel_runs_in_the_copy_folder(tmp_path, monkeypatch):
    """Notebooks from an installed package are no place to write: relative paths land beside the copy."""
    monkeypatch.chdir(tmp_path)
    out = prepare("03")
    assert out == tmp_path / "runs" / "dashboard" / "03_workload_drift.ipynb"
    injected = next(
        c.source for c in nbformat.read(out, as_version=4).cells if "injected-parameters" in c.metadata.get("tags", [])
    )
    assert f"_os.chdir({str(out.parent.resolve())!r})" in injected


def test_registered_as_an_asrsched_command():
    assert COMMANDS["dashboard"] == "asrsched.app.dashboard:main"
    r = subprocess.run(
        [sys.executable, "-m", "asrsched.app.cli", "dashboard", "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "Voila" in r.stdout and "--params" in r.stdout
