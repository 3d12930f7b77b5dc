"""The examples in the module docstrings run (docs as tests, as in Ciw).

Every ``asrsched`` module whose source has a runnable ``>>>`` example (one not marked
``# doctest: +SKIP``) is found on disk and collected, so a new example is tested without
editing a list; each module must run every example it has (``attempted`` equals the number
of runnable examples doctest finds, and is > 0), and the collection itself must not be empty.
"""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest
from extras import need

PKG = Path(__file__).resolve().parents[2] / "asrsched"
_RUNNABLE = re.compile(r"^\s*>>> (?!.*doctest: \+SKIP)", re.M)


def _doctest_modules() -> list[str]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if _RUNNABLE.search(path.read_text(encoding="utf-8")):
            parts = path.relative_to(PKG.parent).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


MODULES = _doctest_modules()
#: modules whose examples need an extra beyond the base install
NEEDS = {"asrsched.whisper.audio": ("soundfile",)}


def _runnable_examples(mod) -> int:
    tests = doctest.DocTestFinder().find(mod, mod.__name__)
    return sum(1 for t in tests for ex in t.examples if not ex.options.get(doctest.SKIP))


def test_doctests_are_collected():
    """Discovery finds the modules known to carry examples (a broken finder would run nothing)."""
    assert {
        "asrsched.core.policies",
        "asrsched.core.workloads",
        "asrsched.sim.sweep",
        "asrsched.sim.routers",
        "asrsched.sim.cache",
        "asrsched.abtest.fleet_experiment",
    } <= set(MODULES)
    assert "asrsched.whisper.convert" not in MODULES  # only +SKIP examples (it downloads a model)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    need(*NEEDS.get(name, ()))
    mod = importlib.import_module(name)
    runnable = _runnable_examples(mod)
    assert runnable > 0, f"{name}: a '>>>' line in the source, but doctest finds no runnable example"
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS, verbose=False)
    assert res.failed == 0
    assert res.attempted == runnable > 0
