"""The suite's skip rule (tests/conftest.py), run on a throw-away suite with the real conftest and extras helper.

A skip for a missing extra passes in the quick subset and fails in the full suite
(``ASRSCHED_ALL_EXTRAS=1``, set by scripts/test.sh); any other skip fails unless ``ASRSCHED_ALLOW_SKIP=1``.
Each case runs serially and under pytest-xdist (``-n 2``, as scripts/test.sh runs the suite), where
collection happens in the workers and the controlling process must still fail the session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/: the suite's conftest.py and extras.py
SUITE = """
import pytest
from extras import need


def test_needs_an_extra():
    need("asrsched_no_such_module")


def test_skips_for_another_reason():
    pytest.skip("the fixture's server did not start")


def test_runs():
    assert 1 + 1 == 2
"""


# modules that skip as a whole, at import: one for a missing extra, one for another reason
AT_IMPORT = {
    "test_extra_at_import.py": 'from extras import need\nneed("asrsched_no_such_module")\n\n\ndef test_x():\n    pass\n',
    "test_other_at_import.py": 'import pytest\npytest.importorskip("asrsched_no_such_module")\n\n\ndef test_x():\n    pass\n',
}
XDIST = [pytest.param([], id="serial"), pytest.param(["-n", "2"], id="xdist")]


def _pytest(tmp_path: Path, files: dict[str, str], args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """pytest on a throw-away suite of ``files`` beside the real conftest and extras helper."""
    for f in ("conftest.py", "extras.py"):
        shutil.copy(HERE / f, tmp_path / f)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    e = {k: v for k, v in os.environ.items() if k not in ("ASRSCHED_ALL_EXTRAS", "ASRSCHED_ALLOW_SKIP")} | env
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=out.xml", *args, *files],
        cwd=tmp_path,
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _outcomes(tmp_path: Path, r: subprocess.CompletedProcess) -> dict[str, str]:
    """Each test's outcome in ``test_suite.py`` (``passed``, ``failed``, ``skipped``, from pytest's JUnit XML)."""
    out = {}
    for case in ET.parse(tmp_path / "out.xml").iter("testcase"):
        if case.get("classname") != "test_suite":
            continue  # a module skipped at import (checked by name in the output)
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        out[case.get("name")] = {"failure": "failed", "error": "failed", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return out


@pytest.mark.parametrize(
    "env, needs, other, failing_modules",
    [
        ({}, "skipped", "failed", ["test_other_at_import.py"]),  # the quick subset on a partial install
        # the full suite: every extra must be there
        ({"ASRSCHED_ALL_EXTRAS": "1"}, "failed", "failed", ["test_extra_at_import.py", "test_other_at_import.py"]),
        ({"ASRSCHED_ALLOW_SKIP": "1"}, "skipped", "skipped", []),  # a partial install on purpose
    ],
)
@pytest.mark.parametrize("args", XDIST)
def test_a_skip_fails_unless_it_is_for_a_missing_extra_outside_the_full_suite(
    tmp_path, env, needs, other, failing_modules, args
):
    """A test that skips at run time, and a module that skips as a whole at import (which fails the session
    naming it: turning its collection report into an error would stop every other test)."""
    r = _pytest(tmp_path, {"test_suite.py": SUITE, **AT_IMPORT}, args, env)
    assert _outcomes(tmp_path, r) == {
        "test_runs": "passed",
        "test_needs_an_extra": needs,
        "test_skips_for_another_reason": other,
    }, r.stdout[-3000:]
    named = sorted(m for m in AT_IMPORT if f"FAILED (skip not allowed): module {m} skipped" in r.stdout)
    assert named == failing_modules, r.stdout[-3000:]
    assert r.returncode == (0 if other == "skipped" and not failing_modules else 1), r.stdout[-3000:]
