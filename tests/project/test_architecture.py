"""The package's shape holds: layers point one way, no module reaches into another's private names,
the tree is what pyproject ships, and the code (notebook sources included) is lint-clean.

The layer contract itself lives in pyproject.toml ([tool.importlinter]); `lint-imports` checks it here so
a wrong-way import fails CI. The other checks are plain AST scans that could fail on a one-line change.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from extras import need

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "asrsched"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = p
    return out


def _is_package(dotted: str, mods: dict[str, Path]) -> bool:
    return dotted in mods and mods[dotted].name == "__init__.py"


def private_imports(path: Path, module: str, mods: dict[str, Path]) -> list[str]:
    """``from X import _name`` where ``X`` is another module of the package (not a parent package).

    Names with a leading underscore are a module's own business; another module that needs one needs a
    public name instead. Dunder names (``__version__``) are public.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg_parts = module.split(".") if _is_package(module, mods) else module.split(".")[:-1]
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg_parts[: len(pkg_parts) - (node.level - 1)]
            src = ".".join(base + ([node.module] if node.module else []))
        else:
            src = node.module or ""
        if not src.startswith("asrsched") or src == module:
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                bad.append(f"{where}:{node.lineno}: from {src} import {alias.name}")
    return bad


def test_layers_and_no_cycles_hold():
    """import-linter: the layer order, no cycles between sibling modules, no heavy deps in the base install."""
    res = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "broken" in res.stdout and " 0 broken" in res.stdout, res.stdout[-3000:]


def test_layer_contract_catches_a_wrong_way_import(tmp_path):
    """The same contract on a copy of the package in which the core imports the simulator: it breaks."""
    shutil.copytree(PKG, tmp_path / "asrsched", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    svc = tmp_path / "asrsched" / "core" / "service.py"
    svc.write_text(svc.read_text() + "\nfrom asrsched.sim.engine import simulate  # noqa: E402,F401\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run(
        [_tool("lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert res.returncode != 0
    assert "asrsched.core is not allowed to import asrsched.sim" in res.stdout, res.stdout[-3000:]
    assert "asrsched.core.service -> asrsched.sim.engine" in res.stdout


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    bad = [b for name, p in mods.items() for b in private_imports(p, name, mods)]
    assert not bad, "\n".join(bad)


def test_private_import_check_can_fail(tmp_path):
    """The scan above sees both absolute and relative private imports (and leaves dunders alone)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from asrsched.sim.engine import _secret\nfrom .kernel import _fast\n"
        "from asrsched import __version__\nfrom asrsched.sim.engine import simulate\n"
    )
    found = private_imports(probe, "asrsched.sim.probe", _modules())
    assert [f.split(": ", 1)[1] for f in found] == [
        "from asrsched.sim.engine import _secret",
        "from asrsched.sim.kernel import _fast",
    ]


def test_top_level_holds_subpackages_and_few_modules():
    modules = sorted(p.name for p in PKG.glob("*.py"))
    assert "__init__.py" in modules and len(modules) <= 3, modules
    subpackages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert {"core", "sim", "abtest", "whisper", "profiling", "vllm_plugin", "serving", "figures", "app"} <= subpackages


def test_pyproject_ships_every_subpackage():
    """The explicit package list in pyproject.toml names every folder with an __init__.py (a wheel would
    silently drop one that is missing), plus the data and notebooks package-data packages."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    on_disk = {name for name, p in _modules().items() if p.name == "__init__.py"}
    assert on_disk - listed == set(), f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert {"asrsched.data", "asrsched.notebooks"} <= listed
    assert conf["package-dir"]["asrsched.notebooks"] == "notebooks"


def test_ruff_is_clean_including_notebook_sources():
    res = subprocess.run(
        [_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-6000:]
    assert list((ROOT / "notebooks").glob("*.py")), "notebook sources (jupytext py:percent) are missing"


def test_ruff_format_is_applied():
    """Every Python file is as ``ruff format`` writes it (the compiled kernels' grouped signatures keep their
    layout with ``# fmt: skip``)."""
    res = subprocess.run(
        [_tool("ruff"), "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


MAX_MODULE_LINES = 600  # CONTRIBUTING: "If a file passes ~600 lines ... split it"


def test_no_module_is_over_the_size_limit():
    sizes = {str(p.relative_to(PKG.parent)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    over = {k: v for k, v in sizes.items() if v > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"
    assert len(sizes) > 50 and max(sizes.values()) > 100  # the scan saw the package


def test_tests_import_the_oracles_without_editing_sys_path():
    """The SimPy/Ciw oracles and benchmark helpers come in by name (pytest's ``pythonpath``), not by ``sys.path`` edits."""
    assert set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["pythonpath"]) >= {
        "benchmarks",
        "tests",
    }
    hits = [
        f"{f.name}:{i}"
        for f in sorted((ROOT / "tests").rglob("*.py"))
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if "sys.path.insert" in line and "hits" not in line
    ]
    assert not hits, hits


#: one name per concept (CONTRIBUTING, *Vocabulary*): a public function or class is defined in one module.
#: Command-line entry points are the exception by convention. Every study runs through the one
#: ``asrsched.sim.parallel.run_study``; each A/B study keeps its own model of one replication and one truth
#: run, and its own tables and figures, under the same names (ONE_PER_STUDY).
MAY_REPEAT = {"main", "build_parser"}
ONE_PER_STUDY = {"run_replication", "run_truth", "summary_table", "ablation_table", "fig_ablation", "fig_estimates"}


def _public_definitions() -> dict[str, list[str]]:
    """Public functions, classes and module constants (``UPPER_CASE = ...``) of ``asrsched``: name -> modules."""
    out: dict[str, list[str]] = {}
    for p in sorted(PKG.rglob("*.py")):
        for node in ast.parse(p.read_text()).body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id.isupper():
                names = [node.target.id]
            for name in names:
                if not name.startswith("_"):
                    out.setdefault(name, []).append(str(p.relative_to(ROOT)))
    return out


def test_no_public_name_is_defined_twice():
    defs = _public_definitions()
    twice = {k: v for k, v in defs.items() if len(v) > 1 and k not in MAY_REPEAT | ONE_PER_STUDY}
    assert not twice, f"public names defined in more than one module (give each concept one name): {twice}"
    assert len(defs) > 300 and len(defs["simulate"]) == 1 and len(defs["ESTIMATOR_ORDER"]) == 1  # the scan saw it all
    assert defs["run_study"] == ["asrsched/sim/parallel.py"]  # one study runner
    stale = {k for k in ONE_PER_STUDY if len(defs.get(k, [])) < 2}
    assert not stale, f"no longer defined twice, drop from ONE_PER_STUDY: {stale}"


def test_mypy_is_clean_on_core_and_sim():
    """The type checker on the simulator's layers (``[tool.mypy]`` in pyproject.toml)."""
    res = subprocess.run([_tool("mypy"), "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "asrsched/core" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]


def test_mypy_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> int:\n    return x\n\n\nf('not an int')\n")
    res = subprocess.run(
        [_tool("mypy"), "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"), str(bad)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1 and "arg-type" in res.stdout, res.stdout


def test_pre_commit_runs_the_suites_static_checks():
    """``.pre-commit-config.yaml`` is valid and runs what this module checks (ruff, its formatter, the layers, mypy)."""
    yaml = need("yaml")
    need("pre_commit")
    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    ids = {h["id"] for r in cfg["repos"] for h in r["hooks"]}
    assert {"ruff", "ruff-format", "lint-imports", "mypy", "quick-tests"} <= ids
    res = subprocess.run(
        [_tool("pre-commit"), "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
