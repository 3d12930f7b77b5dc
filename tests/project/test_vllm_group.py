"""The suite's vLLM group (tests/conftest.py) on a throw-away suite under pytest-xdist (``-n 2``).

The modules with a test marked ``vllm`` run on one worker, one after another, and first; the other
modules run on the other worker at the same time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # tests/: the suite's conftest.py and extras.py
TIMED = """
import json, os, time
from pathlib import Path

import pytest


def _run(name):
    t0 = time.time()
    time.sleep(0.4)
    Path(os.environ["SPANS"], name).write_text(json.dumps([t0, time.time(), os.environ["PYTEST_XDIST_WORKER"]]))
"""


def test_the_vllm_modules_run_on_one_worker_one_after_another_and_the_rest_beside_them(tmp_path):
    for f in ("conftest.py", "extras.py"):
        shutil.copy(HERE / f, tmp_path / f)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vllm: a real vLLM engine\n    slow: slow\n")
    spans = tmp_path / "spans"
    spans.mkdir()
    for name in ("a", "b"):  # plain modules, collected first
        (tmp_path / f"test_{name}_plain.py").write_text(
            TIMED + "".join(f"\n\ndef test_{name}_{i}():\n    _run('{name}_{i}')\n" for i in range(3))
        )
    (tmp_path / "test_y_engine.py").write_text(
        TIMED
        + "\npytestmark = pytest.mark.vllm\n"
        + "".join(f"\n\ndef test_y_{i}():\n    _run('vllm_y_{i}')\n" for i in range(3))
    )
    (tmp_path / "test_z_study.py").write_text(
        TIMED
        + "".join(f"\n\n@pytest.mark.vllm\ndef test_z_{i}():\n    _run('vllm_z_{i}')\n" for i in range(3))
        + "\n\ndef test_z_plain():\n    _run('vllm_z_plain')\n"
    )  # a module with a vllm test joins the group whole
    env = {k: v for k, v in os.environ.items() if k not in ("ASRSCHED_ALL_EXTRAS", "ASRSCHED_ALLOW_SKIP")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "--no-loadscope-reorder",
        ],
        cwd=tmp_path,
        env=env | {"SPANS": str(spans)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:]
    got = {p.name: json.loads(p.read_text()) for p in spans.iterdir()}
    assert len(got) == 13
    group = {k: v for k, v in got.items() if k.startswith("vllm_")}
    rest = {k: v for k, v in got.items() if not k.startswith("vllm_")}
    assert len({w for _, _, w in group.values()}) == 1, group  # one worker ...
    ordered = sorted(group.values())
    assert all(b[0] >= a[1] for a, b in zip(ordered, ordered[1:])), ordered  # ... one test at a time
    # the group went first although its modules were collected last, and the rest ran beside it
    assert min(s for s, _, _ in group.values()) <= min(s for s, _, _ in rest.values()) + 0.3, got
    (worker,) = {w for _, _, w in group.values()}
    assert {w for _, _, w in rest.values()} != {worker}
    assert any(s < ordered[-1][1] and e > ordered[0][0] for s, e, _ in rest.values()), got
