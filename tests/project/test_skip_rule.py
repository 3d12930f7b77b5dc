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


def _outcomes(tmp_path: Path, args: list[str], **env: str) -> dict[str, str]:
    """Each test's outcome (``passed``, ``failed``, ``skipped``, from pytest's JUnit XML) and the exit status."""
    r = _pytest(tmp_path, {"test_suite.py": SUITE}, args, env)
    out = {"rc": r.returncode}
    for case in ET.parse(tmp_path / "out.xml").iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        out[case.get("name")] = {"failure": "failed", "error": "failed", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return out


@pytest.mark.parametrize(
    "env, needs, other, rc",
    [
        ({}, "skipped", "failed", 1),  # the quick subset on a partial install
        ({"ASRSCHED_ALL_EXTRAS": "1"}, "failed", "failed", 1),  # the full suite: every extra must be there
        ({"ASRSCHED_ALLOW_SKIP": "1"}, "skipped", "skipped", 0),  # a partial install on purpose
    ],
)
@pytest.mark.parametrize("args", XDIST)
def test_a_missing_extra_may_skip_except_in_the_full_suite(tmp_path, env, needs, other, rc, args):
    got = _outcomes(tmp_path, args, **env)
    assert got == {
        "test_runs": "passed",
        "test_needs_an_extra": needs,
        "test_skips_for_another_reason": other,
        "rc": rc,
    }


@pytest.mark.parametrize(
    "env, failing",
    [
        ({}, ["test_other_at_import.py"]),
        ({"ASRSCHED_ALL_EXTRAS": "1"}, ["test_extra_at_import.py", "test_other_at_import.py"]),
        ({"ASRSCHED_ALLOW_SKIP": "1"}, []),
    ],
)
@pytest.mark.parametrize("args", XDIST)
def test_a_module_that_skips_at_import_fails_the_session_naming_it(tmp_path, env, failing, args):
    r = _pytest(tmp_path, {"test_runs.py": "def test_runs():\n    assert True\n", **AT_IMPORT}, args, env)
    named = sorted(m for m in AT_IMPORT if f"FAILED (skip not allowed): module {m} skipped" in r.stdout)
    assert named == failing, r.stdout[-3000:]
    assert "1 passed" in r.stdout.splitlines()[-1], r.stdout[-3000:]
    assert r.returncode == (1 if failing else 0), r.stdout[-3000:]
