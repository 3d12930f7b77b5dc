"""Installed, not only checked out: ``pip install .`` into a fresh venv, outside the source tree.

* The base install (no extras) imports the simulator and the A/B study and runs ``simulate(...)``,
  with none of the optional stacks (Jupyter, plotly, Whisper, Dask) present.
* Adding the ``notebooks`` extra, ``asrsched list`` and ``asrsched run 03`` work from a project folder
  that holds only a report gallery: the notebooks come from the package, results land in ``./runs``, and
  ``./figures`` is left alone.
* The build prints no setuptools deprecation warning (SPDX ``license = "MIT"``).

Slow (a fresh venv and two pip installs, ~1-2 minutes with a warm pip cache); the installed sizes
are printed (``pytest -s``) and attached to the report as ``record_property``. The quick subset on the
base install plus the test tools is its own command, ``bash scripts/quick.sh`` (a fresh venv, then
``pytest -m "not slow"``), which CI runs after this suite: inside it, it ran every quick test a second time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
# never copied into the build: local environments, outputs and caches (at the top) and build litter (anywhere)
TOP_LEVEL_SKIP = {".venv", ".git", "runs", "figures", "build", "dist", ".whl"}
ANYWHERE_SKIP = shutil.ignore_patterns(
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    ".mypy_cache",
    ".import_linter_cache",
    ".cache",
    ".ipynb_checkpoints",
)
NOT_IN_BASE = ("plotly", "jupyterlab", "faster_whisper", "dask", "papermill", "ipywidgets", "starlette", "vllm")


def _ignore(folder: str, names: list[str]) -> set[str]:
    skip = set(ANYWHERE_SKIP(folder, names))
    if Path(folder).resolve() == ROOT:
        skip |= TOP_LEVEL_SKIP & set(names)
    return skip


def _env() -> dict[str, str]:
    """The environment of the checkout's test run minus what would point the fresh venv back at it."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "ASRSCHED_ROOT", "ASRSCHED_FIGURES")
    }


def _run(cmd: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    )
    return r


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory):
    """A fresh venv with ``pip install <copy of the checkout>`` (not editable, no extras)."""
    d = tmp_path_factory.mktemp("install")
    src = d / "src"  # a copy: pip builds in the source tree, which would leave build/ and *.egg-info in the checkout
    shutil.copytree(ROOT, src, ignore=_ignore)
    venv = d / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=d)
    py = venv / "bin" / "python"
    r = _run([str(py), "-m", "pip", "install", "-v", str(src)], cwd=d, timeout=1200)
    build_log = r.stdout + r.stderr
    (d / "pip-install-base.log").write_text(build_log)
    site = next((venv / "lib").glob("python3*/site-packages"))
    return {"dir": d, "src": src, "venv": venv, "py": py, "site": site, "build_log": build_log}


def test_base_install_runs_the_simulator_without_the_optional_stacks(base_venv, record_property):
    log = base_venv["build_log"]
    assert "Successfully installed" in log and "asrsched-" in log
    for warning in (
        "SetuptoolsDeprecationWarning",
        "License classifiers are deprecated",
        "`project.license` as a TOML table is deprecated",
    ):
        assert warning not in log, f"the build warns: {warning}"
    work = base_venv["dir"] / "base-cwd"
    work.mkdir()
    code = f"""
import importlib, importlib.util, json, pkgutil, sys
import asrsched, asrsched.core, asrsched.sim, asrsched.abtest
assert asrsched.__file__.startswith(sys.prefix), asrsched.__file__  # the installed copy, not the checkout
for pkg in (asrsched.core, asrsched.sim, asrsched.abtest):  # every module of the base layers imports
    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(m.name)
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate
s = simulate(make_trace("librispeech", rate=5.0, n=300, seed=0), "sjf").summary()
present = [n for n in {NOT_IN_BASE!r} if importlib.util.find_spec(n) is not None]
print(json.dumps({{"summary": s, "present": present, "version": asrsched.__version__}}))
"""
    r = _run([str(base_venv["py"]), "-c", code], cwd=work)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["present"] == [], f"the base install pulls in {out['present']}"
    s = out["summary"]
    assert s["completed"] == 300 and s["failed"] == 0 and 0 < s["p50_e2el_ms"] < s["p90_e2el_ms"]
    # the same seeded run as in this checkout's environment
    from asrsched.core.workloads import make_trace
    from asrsched.sim.engine import simulate

    here = simulate(make_trace("librispeech", rate=5.0, n=300, seed=0), "sjf").summary()
    assert s["p90_e2el_ms"] == pytest.approx(here["p90_e2el_ms"], rel=1e-9)
    import asrsched

    assert out["version"] == asrsched.__version__
    size = _du(base_venv["site"])
    record_property("base_site_packages_mb", round(size / 2**20))
    print(f"\n[install] base install: site-packages {size / 2**20:.0f} MiB")


def test_notebooks_extra_runs_a_notebook_from_a_project_folder(base_venv, tmp_path, record_property):
    """``asrsched run 03 --small -p RATE 8`` in a folder that holds only a report gallery: the notebook and its
    small set come from the package, and everything the run makes is under ``./runs/<time>/`` (executed copy,
    figures in every format, tables, ``run.json``, the run's own figure index); ``./figures`` is not touched
    without ``--gallery`` (which tests/app/test_runner.py runs)."""
    venv, src = base_venv["venv"], base_venv["src"]
    _run([str(base_venv["py"]), "-m", "pip", "install", "-q", f"{src}[notebooks]"], cwd=base_venv["dir"], timeout=1200)
    size = _du(base_venv["site"])
    record_property("notebooks_site_packages_mb", round(size / 2**20))
    print(f"\n[install] base + notebooks extra: site-packages {size / 2**20:.0f} MiB")
    cli = str(venv / "bin" / "asrsched")
    work = tmp_path / "project"
    (work / "figures").mkdir(parents=True)
    (work / "figures" / "README.md").write_text("the gallery, as committed\n")

    assert _run([cli, "--version"], cwd=work).stdout.strip().startswith("asrsched ")
    listed = _run([cli, "list"], cwd=work).stdout
    assert "03_workload_drift" in listed and "N_REQUESTS" in listed and "02_policy_sweep" in listed

    # the small set ships with the notebooks (notebooks/small_params.json); -p beside it
    params = json.loads((ROOT / "notebooks" / "small_params.json").read_text())
    r = _run([cli, "run", "03", "--small", "-p", "RATE", "8"], cwd=work, timeout=900)
    assert "03_workload_drift: ok" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]

    # without --gallery everything lands in one run folder; the report gallery figures/ is not touched
    assert sorted(p.name for p in work.iterdir()) == ["figures", "runs"]
    assert sorted(p.name for p in (work / "figures").iterdir()) == ["README.md"]
    assert (work / "figures" / "README.md").read_text() == "the gallery, as committed\n"
    (run,) = (work / "runs").iterdir()
    assert (run / "03_workload_drift.ipynb").stat().st_size > 1000
    figs = run / "figures" / "03_workload_drift"
    for ext in ("html", "png", "svg"):
        assert list(figs.glob(f"*.{ext}")), f"no {ext} export in {figs}"
    assert (figs / "drift_abrupt.png").exists() and "03_workload_drift" in (run / "figures" / "README.md").read_text()
    assert (figs / "phase_latency.csv").exists()  # its contents: tests/app/test_runner.py
    rec = json.loads((figs / "run.json").read_text())
    assert rec["status"] == "ok" and rec["parameters"]["N_REQUESTS"] == params["03_workload_drift"]["N_REQUESTS"]
    assert rec["parameters"]["RATE"] == 8 and "RATE" in rec["injected"]  # -p beside --small, recorded as injected
    pkg = base_venv["site"] / "asrsched"
    assert not (pkg / "runs").exists() and not (pkg / "figures" / "03_workload_drift").exists()
    assert {p.name for p in (pkg / "notebooks").iterdir() if p.is_dir()} <= {"__pycache__"}  # nothing written there
