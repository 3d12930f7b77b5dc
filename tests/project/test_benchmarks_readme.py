"""The benchmark claims in benchmarks/README.md are the committed results, and the check runs for real."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

import check  # noqa: E402


def test_readme_table_is_the_committed_check_results():
    """The table between the check markers must equal a rendering of results/check.json."""
    record = json.loads(check.RESULTS.read_text())
    text = check.README.read_text()
    block = text[text.index(check.BEGIN) : text.index(check.END) + len(check.END)]
    assert block == check.readme_table(record), (
        "benchmarks/README.md disagrees with benchmarks/results/check.json: "
        "run `python benchmarks/check.py --readme` (or --write to re-measure)"
    )


def test_committed_check_results_carry_provenance_and_consistent_verdicts():
    record = json.loads(check.RESULTS.read_text())
    p = record["provenance"]
    assert len(p["commit"]) == 40 and isinstance(p["clean_tree"], bool) and p["cpu_model"] and p["command"]
    assert len(record["rows"]) >= 10
    for r in record["rows"]:
        ok = r["value"] >= r["target"] if r["kind"] == "min" else r["value"] <= r["target"]
        assert r["passed"] == (ok and not math.isnan(r["value"])), r["name"]


def test_readme_states_every_missed_target():
    """A missed target is written as missed in the README, never hidden."""
    record = json.loads(check.RESULTS.read_text())
    table = check.readme_table(record)
    assert table.count("**missed**") == sum(not r["passed"] for r in record["rows"])


@pytest.mark.slow
def test_check_measures_the_plugin_queue_for_real_and_reports_a_broken_module():
    rows = check.run_checks(("bench_vllm_queue", "bench_does_not_exist"))
    real = [r for r in rows if r["module"] == "bench_vllm_queue"]
    assert {r["name"] for r in real} >= {"vLLM plug-in hrrn decision @ depth 10,000"}
    assert all(r["value"] > 0 and r["unit"] == "µs" for r in real)
    broken = [r for r in rows if r["module"] == "bench_does_not_exist"]
    assert len(broken) == 1 and not broken[0]["passed"] and "ModuleNotFoundError" in broken[0]["note"]
    assert check.line(broken[0]).startswith("FAIL")


def test_measured_study_row_reads_the_committed_full_run_and_judges_it(tmp_path):
    """check.py's row for the A/B study run end to end: the committed wall time against 60 s, with its commit."""
    import bench_abtest

    row = bench_abtest.measured_study_row()  # the committed file itself
    rec = json.loads((ROOT / "benchmarks" / "results" / "bench_abtest_study.json").read_text())
    assert row["value"] == pytest.approx(rec["study"]["full"]["wall_s"])
    assert row["passed"] == (row["value"] <= 60.0) and rec["provenance"]["commit"][:10] in row["note"]
    fast = dict(rec, study=dict(rec["study"], full=dict(rec["study"]["full"], wall_s=41.5)))
    (tmp_path / "fast.json").write_text(json.dumps(fast))
    got = bench_abtest.measured_study_row(tmp_path / "fast.json")
    assert got["passed"] and got["value"] == 41.5
    (tmp_path / "none.json").write_text(json.dumps(dict(rec, study={"ratio": {}})))
    none = bench_abtest.measured_study_row(tmp_path / "none.json")
    assert not none["passed"] and math.isnan(none["value"]) and "--study-full" in none["note"]
