"""CONTRIBUTING's vocabulary table matches the code: its names exist, its banned names are nowhere.

Reads the table from CONTRIBUTING.md (*Vocabulary*), the parameters cell of every notebook (the
jupytext ``.py`` twin, so no Jupyter is needed), every ``add_argument("--flag")`` in ``asrsched`` and
every function parameter and dataclass field of ``asrsched``.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from pathlib import Path

import pytest
from extras import need

ROOT = Path(__file__).resolve().parents[2]


def table() -> list[dict[str, list[str]]]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    sec = text.split("## Vocabulary", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in sec.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    out = []
    for ln in rows[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out.append({h: re.findall(r"`([^`]+)`", c) for h, c in zip(head, cells)})
    return out


@functools.cache
def notebook_parameters() -> dict[str, set[str]]:
    out = {}
    for f in sorted((ROOT / "notebooks").glob("0*.py")):
        src = f.read_text()
        cell = src.split('tags=["parameters"]', 1)[1].split("\n# %%", 1)[0]
        out[f.stem] = {n.targets[0].id for n in ast.parse(cell).body if isinstance(n, ast.Assign)}
    return out


@functools.cache
def package_trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of ``asrsched``, parsed once for the module's tests."""
    return tuple((f, ast.parse(f.read_text())) for f in sorted((ROOT / "asrsched").rglob("*.py")))


@functools.cache
def cli_flags() -> set[str]:
    flags = set()
    for _, tree in package_trees():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument":
                flags |= {a.value for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


@functools.cache
def code_names() -> dict[str, str]:
    """Function parameters and dataclass-style annotated fields of ``asrsched``: name -> where."""
    out = {}
    for f, tree in package_trees():
        rel = f.relative_to(ROOT)
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                    out.setdefault(arg.arg, f"{rel}:{n.lineno} {n.name}()")
            elif isinstance(n, ast.ClassDef):
                for s in n.body:
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                        out.setdefault(s.target.id, f"{rel}:{s.lineno} {n.name}")
    return out


ROWS = table()


def test_the_table_is_read():
    assert len(ROWS) >= 3 and all({"concept", "notebook parameter", "CLI flag", "never"} <= set(r) for r in ROWS)
    assert any("workers" in r["in code"] for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r["in code"][0] if r["in code"] else "?" for r in ROWS])
def test_the_names_the_table_gives_exist(row):
    params = set().union(*notebook_parameters().values())
    missing = [p for p in row["notebook parameter"] if p not in params]
    assert not missing, f"notebook parameters in CONTRIBUTING's table but in no notebook: {missing}"
    flags = cli_flags()
    missing = [p for p in row["CLI flag"] if p not in flags]
    assert not missing, f"CLI flags in CONTRIBUTING's table but in no asrsched CLI: {missing}"


@pytest.mark.parametrize("row", ROWS, ids=[r["in code"][0] if r["in code"] else "?" for r in ROWS])
def test_no_banned_name_is_used(row):
    banned = [b for b in row["never"] if not b.startswith("num_workers")]
    hits = []
    for nb, names in notebook_parameters().items():
        hits += [f"notebook {nb}: {n}" for n in names if any(fnmatch.fnmatchcase(n, b) for b in banned)]
    hits += [f"CLI flag {f}" for f in cli_flags() if any(fnmatch.fnmatchcase(f, b) for b in banned)]
    hits += [f"{where}: {n}" for n, where in code_names().items() if any(fnmatch.fnmatchcase(n, b) for b in banned)]
    assert not hits, f"names CONTRIBUTING's vocabulary rules out ({row['never']}):\n" + "\n".join(sorted(hits))


def test_an_old_notebook_parameter_name_is_an_error_naming_the_new_one():
    from asrsched.app.params import RENAMED

    params = notebook_parameters()
    for nb, ren in RENAMED.items():
        for old, new in ren.items():
            assert old not in params[nb] and new in params[nb], (nb, old, new)
    need("papermill")
    from asrsched.app.params import check_parameters

    with pytest.raises(ValueError, match=r"05_ab_estimators: parameter\(s\) renamed: N_JOBS is now N_REQUESTS"):
        check_parameters(ROOT / "notebooks" / "05_ab_estimators.ipynb", {"N_JOBS": 1000, "REPS": 2})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) NOPE; allowed: "):
        check_parameters(ROOT / "notebooks" / "05_ab_estimators.ipynb", {"NOPE": 1})
    assert "WORKERS" in check_parameters(ROOT / "notebooks" / "02_policy_sweep.ipynb", {"WORKERS": 1})
