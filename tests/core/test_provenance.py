"""One provenance record, one schema: the builder, and every committed result file that carries one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrsched.core.provenance import KEYS, provenance

ROOT = Path(__file__).resolve().parents[2]
RESULT_FILES = sorted([*(ROOT / "benchmarks" / "results").glob("*.json"), *(ROOT / "figures").rglob("*run.json")])
OLD_KEYS = {"loadavg_1_5_15", "git_commit", "cores", "created"}  # the benchmarks' and the interactive runs' old names


def _records(o):
    """Every dict in ``o`` that is a provenance record (it has a commit and a UTC date)."""
    if isinstance(o, dict):
        if "commit" in o and ("date_utc" in o or "date" in o):
            yield o
        for v in o.values():
            yield from _records(v)
    elif isinstance(o, list):
        for v in o:
            yield from _records(v)


def test_the_builder_writes_every_key_in_order():
    r = provenance("cmd", {"a": 1}, load_start=[0.5, 0.4, 0.3], paths=("asrsched",), exclude=("asrsched/data",))
    assert tuple(r) == KEYS
    assert r["command"] == "cmd" and r["parameters"] == {"a": 1} and r["load_average_start_1_5_15"] == [0.5, 0.4, 0.3]
    assert r["commit"] is None or len(r["commit"]) == 40
    assert isinstance(r["clean_tree"], bool) and r["clean_tree"] == (not r["dirty_paths"])
    assert not any(p.startswith("asrsched/data") for p in r["dirty_paths"])  # excluded paths are not watched


def test_the_benchmarks_use_the_same_builder():
    from provenance import provenance as bench_provenance  # benchmarks/provenance.py

    r = bench_provenance(["asrsched/core"])
    assert tuple(r) == KEYS and not any(p.startswith("benchmarks/results") for p in r["dirty_paths"])


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_result_has_the_one_schema(path):
    recs = list(_records(json.loads(path.read_text())))
    assert recs, f"{path.name}: no provenance record"
    for r in recs:
        missing = [k for k in KEYS if k not in r]
        assert not missing, f"{path.name}: missing {missing}"
        assert not OLD_KEYS & set(r), f"{path.name}: old key names {sorted(OLD_KEYS & set(r))}"
        assert len(r["commit"]) == 40 and isinstance(r["clean_tree"], bool) and r["asrsched_version"]
