"""The suite's ``exclusive`` mark (tests/conftest.py) on a throw-away suite under pytest-xdist (``-n 2``).

An exclusive test runs with no other test beside it; the others still run two at a time; the modules
with an exclusive test are scheduled first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # tests/: the suite's conftest.py and extras.py
TIMED = '''
import json, os, time
from pathlib import Path

import pytest


def _run(name):
    t0 = time.time()
    time.sleep(0.6)
    Path(os.environ["SPANS"], name).write_text(json.dumps([t0, time.time()]))
'''


def test_an_exclusive_test_runs_alone_and_the_others_in_parallel(tmp_path):
    for f in ("conftest.py", "extras.py"):
        shutil.copy(HERE / f, tmp_path / f)
    spans = tmp_path / "spans"
    spans.mkdir()
    (tmp_path / "test_a_plain.py").write_text(TIMED + "".join(
        f"\n\ndef test_plain_{i}():\n    _run('plain_{i}')\n" for i in range(4)))
    (tmp_path / "test_b_plain.py").write_text(TIMED + "".join(
        f"\n\ndef test_other_{i}():\n    _run('other_{i}')\n" for i in range(4)))
    (tmp_path / "test_z_exclusive.py").write_text(
        TIMED + "\n\n@pytest.mark.exclusive\ndef test_alone():\n    _run('alone')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ASRSCHED_ALL_EXTRAS", "ASRSCHED_ALLOW_SKIP")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                        "loadfile", "--no-loadscope-reorder"], cwd=tmp_path, env=env | {"SPANS": str(spans)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    got = {p.name: json.loads(p.read_text()) for p in spans.iterdir()}
    assert len(got) == 9
    alone = got.pop("alone")
    assert all(end <= alone[0] or start >= alone[1] for start, end in got.values()), (alone, got)
    # the exclusive test's module went first: at most the other worker's first test ran before it
    assert sum(start < alone[0] for start, _ in got.values()) <= 1, (alone, got)
    # and the others overlapped each other (two workers)
    spans_sorted = sorted(got.values())
    assert any(b[0] < a[1] for a, b in zip(spans_sorted, spans_sorted[1:])), spans_sorted
