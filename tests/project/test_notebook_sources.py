"""The notebooks are jupytext pairs, and the two files of a pair agree.

``notebooks/NN_name.py`` (jupytext ``py:percent``) is the reviewed, ruff-linted source;
``notebooks/NN_name.ipynb`` is what papermill (``asrsched run``) and JupyterLab open, committed without
outputs. Both hold the same cells: type, source and tags. The ``.ipynb`` carries the pairing metadata
(``jupytext.formats: ipynb,py:percent``) and one ``parameters`` cell, the first code cell, made of
``UPPER_CASE = <plain literal>`` lines so papermill can override every value. No kernel runs here.

When this fails after an edit: ``jupytext --sync notebooks/NN_name.py`` copies the newer file of the pair
onto the older one (CONTRIBUTING.md, "Notebooks").
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from extras import need

need("jupytext", "nbformat")

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
FORMATS = "ipynb,py:percent"
UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")


def unpaired(folder: Path) -> list[str]:
    """Files in ``folder`` whose partner is missing: an ``.ipynb`` without ``.py`` or a ``.py`` without ``.ipynb``."""
    ipynb = {p.stem for p in folder.glob("*.ipynb")}
    py = {p.stem for p in folder.glob("*.py")}
    return sorted([f"{s}.ipynb has no {s}.py" for s in ipynb - py] + [f"{s}.py has no {s}.ipynb" for s in py - ipynb])


def _cells(nb) -> list[tuple[str, str, list[str]]]:
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def _parameters_problems(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"parameters cell does not parse: {e}"]
    problems = []
    for node in tree.body:
        line = ast.get_source_segment(source, node) or ""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            problems.append(f"parameters cell: `{line}` is not a `NAME = literal` assignment")
            continue
        name = node.targets[0].id
        if not UPPER.match(name):
            problems.append(f"parameters cell: `{name}` is not an UPPER_CASE name")
        try:
            ast.literal_eval(node.value)
        except ValueError:
            problems.append(f"parameters cell: `{name}` is not a plain literal (papermill cannot override it)")
    return problems


def pair_problems(ipynb: Path) -> list[str]:
    """Everything wrong with the pair ``ipynb`` + ``ipynb.with_suffix(".py")``; an empty list when it is in sync."""
    name = ipynb.stem
    py = ipynb.with_suffix(".py")
    sync = f"run `jupytext --sync notebooks/{name}.py` (the newer file of the pair wins)"
    if not py.exists():
        return [f"{name}: no {py.name}; pair it with `jupytext --set-formats {FORMATS} notebooks/{ipynb.name}`"]
    problems = []
    raw = nbformat.read(ipynb, as_version=4)
    nbformat.validate(raw)
    text = jupytext.read(py)

    # the same cells in both files
    a, b = _cells(jupytext.read(ipynb)), _cells(text)
    if len(a) != len(b):
        problems.append(f"{name}: {len(a)} cells in the .ipynb, {len(b)} in the .py; {sync}")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for what, u, v in (("type", x[0], y[0]), ("source", x[1], y[1]), ("tags", x[2], y[2])):
            if u != v:
                problems.append(f"{name}: cell {i} {what} differs: .ipynb {u!r:.80} vs .py {v!r:.80}; {sync}")
                break

    # committed without outputs
    for i, c in enumerate(raw.cells):
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None):
            problems.append(
                f"{name}: cell {i} has outputs or an execution count; clear them before committing "
                f"(`jupyter nbconvert --clear-output --inplace notebooks/{ipynb.name}`)"
            )

    # one parameters cell, the first code cell, plain literals
    code = [c for c in raw.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        problems.append(f"{name}: {len(tagged)} code cells tagged `parameters`, papermill needs exactly one")
    elif tagged[0] is not code[0]:
        problems.append(f"{name}: the `parameters` cell is not the first code cell")
    for c in tagged:
        problems += [f"{name}: {p}" for p in _parameters_problems(c.source)]

    # pairing metadata and kernel
    for label, nb in ((".ipynb", raw), (".py", text)):
        formats = nb.metadata.get("jupytext", {}).get("formats")
        if formats != FORMATS:
            problems.append(
                f"{name}: the {label} says jupytext formats {formats!r}, expected {FORMATS!r}; "
                f"`jupytext --set-formats {FORMATS} notebooks/{ipynb.name}`"
            )
    if raw.metadata.get("kernelspec", {}).get("name") != "python3":
        problems.append(f"{name}: the .ipynb kernelspec is not python3")
    return problems


NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_every_notebook_is_a_pair():
    assert NOTEBOOK_FILES, "no notebooks found"
    assert unpaired(NOTEBOOKS) == []


@pytest.mark.parametrize("ipynb", NOTEBOOK_FILES, ids=[p.stem for p in NOTEBOOK_FILES])
def test_pair_in_sync(ipynb):
    assert pair_problems(ipynb) == []


@pytest.mark.parametrize("ipynb", NOTEBOOK_FILES, ids=[p.stem for p in NOTEBOOK_FILES])
def test_first_code_cell_after_the_parameters_calls_the_front_end_setup(ipynb):
    """Importing the package changes nothing process-wide; each notebook asks for its front end explicitly, in its
    first code cell after the parameters and their checks (the checks cell, tag ``checks``, sets nothing up)."""
    code = [c for c in nbformat.read(ipynb, as_version=4).cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []) and "checks" in code[1].metadata.get("tags", [])
    assert "setup(" not in code[1].source
    calls = [
        n
        for n in ast.parse(code[2].source).body
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "setup"
    ]
    assert len(calls) == 1 and "from asrsched.figures.style import" in code[2].source, code[2].source[:400]


# The check itself: a copy of a pair under tmp_path, broken in one way at a time, must be reported.


def _edit_py_cell(ipynb: Path, py: Path) -> None:
    nb = jupytext.read(py)
    nb.cells[-1].source += "\nprint('edited in the .py only')"
    jupytext.write(nb, py, fmt="py:percent")


def _edit_ipynb_markdown(ipynb: Path, py: Path) -> None:
    nb = nbformat.read(ipynb, as_version=4)
    next(c for c in nb.cells if c.cell_type == "markdown").source += "\n\nEdited in the .ipynb only."
    nbformat.write(nb, ipynb)


def _swap_ipynb_cells(ipynb: Path, py: Path) -> None:
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[-1], nb.cells[-2] = nb.cells[-2], nb.cells[-1]
    nbformat.write(nb, ipynb)


def _drop_ipynb_cell(ipynb: Path, py: Path) -> None:
    nb = nbformat.read(ipynb, as_version=4)
    del nb.cells[-1]
    nbformat.write(nb, ipynb)


def _untag_parameters_in_py(ipynb: Path, py: Path) -> None:
    nb = jupytext.read(py)
    for c in nb.cells:
        c.metadata.pop("tags", None)
    jupytext.write(nb, py, fmt="py:percent")


def _store_output(ipynb: Path, py: Path) -> None:
    nb = nbformat.read(ipynb, as_version=4)
    c = next(c for c in nb.cells if c.cell_type == "code")
    c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    nbformat.write(nb, ipynb)


def _store_execution_count(ipynb: Path, py: Path) -> None:
    nb = nbformat.read(ipynb, as_version=4)
    next(c for c in nb.cells if c.cell_type == "code").execution_count = 1
    nbformat.write(nb, ipynb)


def _both(edit):
    """Apply ``edit`` to the .ipynb and write the .py from it, so the pair stays in sync."""

    def apply(ipynb: Path, py: Path) -> None:
        nb = nbformat.read(ipynb, as_version=4)
        edit(nb)
        nbformat.write(nb, ipynb)
        jupytext.write(nb, py, fmt="py:percent")

    return apply


def _params(nb):
    return next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def _computed_parameter(nb):
    _params(nb).source += "\nSEEDS = list(range(3))"


def _lowercase_parameter(nb):
    _params(nb).source += "\nrate = 1.0"


def _second_parameters_cell(nb):
    nb.cells.append(nbformat.v4.new_code_cell("EXTRA = 1", metadata={"tags": ["parameters"]}))


def _parameters_not_first(nb):
    i = nb.cells.index(_params(nb))
    nb.cells.insert(i, nbformat.v4.new_code_cell("import math"))


def _no_pairing_metadata(nb):
    nb.metadata.pop("jupytext", None)


def _delete_py(ipynb: Path, py: Path) -> None:
    py.unlink()


BREAKAGES = {
    "py cell edited": (_edit_py_cell, "source differs"),
    "ipynb markdown edited": (_edit_ipynb_markdown, "source differs"),
    "ipynb cells reordered": (_swap_ipynb_cells, "differs"),
    "ipynb cell deleted": (_drop_ipynb_cell, "cells in the .ipynb"),
    "parameters tag dropped in py": (_untag_parameters_in_py, "tags differs"),
    "output stored": (_store_output, "outputs"),
    "execution count stored": (_store_execution_count, "execution count"),
    "computed parameter": (_both(_computed_parameter), "not a plain literal"),
    "lowercase parameter": (_both(_lowercase_parameter), "UPPER_CASE"),
    "two parameters cells": (_both(_second_parameters_cell), "exactly one"),
    "parameters not first": (_both(_parameters_not_first), "first code cell"),
    "no pairing metadata": (_both(_no_pairing_metadata), "jupytext formats"),
    "py missing": (_delete_py, "pair it with"),
}


@pytest.fixture
def pair(tmp_path):
    """A copy of the first notebook pair under tmp_path; checked to be in sync before it is broken."""
    src = NOTEBOOK_FILES[0]
    ipynb = Path(shutil.copy(src, tmp_path / src.name))
    py = Path(shutil.copy(src.with_suffix(".py"), tmp_path / src.with_suffix(".py").name))
    assert pair_problems(ipynb) == []
    return ipynb, py


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_pair_check_reports(pair, breakage):
    ipynb, py = pair
    edit, expected = BREAKAGES[breakage]
    edit(ipynb, py)
    problems = pair_problems(ipynb)
    assert problems, f"{breakage}: not reported"
    assert any(expected in p for p in problems), problems


def test_unpaired_files_reported(pair, tmp_path):
    ipynb, py = pair
    assert unpaired(tmp_path) == []
    py.rename(tmp_path / "99_orphan.py")
    assert unpaired(tmp_path) == [f"{ipynb.stem}.ipynb has no {ipynb.stem}.py", "99_orphan.py has no 99_orphan.ipynb"]
