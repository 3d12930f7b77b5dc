"""``map_tasks``: one code path for joblib (in-process or processes) and Dask, same results; ``run_tasks``'s cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
from extras import need

from asrsched.core.workloads import make_trace
from asrsched.sim.parallel import StudyPlan, in_task_order, json_default, map_tasks, run_study, run_tasks, task_seed

TASKS = [
    dict(workload=w, rate=r, n=200, seed=s) for w in ("librispeech", "uniform") for r in (2.0, 9.0) for s in (0, 1)
]


def _key(task: dict) -> tuple:
    return tuple(sorted(task.items()))


def _collect(**kw) -> dict:
    out = {}
    for task, trace in map_tasks(make_trace, TASKS, progress=False, **kw):
        assert _key(task) not in out, "a task came back twice"
        out[_key(task)] = trace
    assert len(out) == len(TASKS)
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k].arrival, b[k].arrival)
        np.testing.assert_array_equal(a[k].tokens, b[k].tokens)


@pytest.fixture(scope="module")
def serial():
    return _collect(workers=1)


def test_serial_results_match_direct_calls(serial):
    for t in TASKS[:3]:
        np.testing.assert_array_equal(serial[_key(t)].arrival, make_trace(**t).arrival)


def test_joblib_processes_give_the_same_results(serial):
    _assert_same(serial, _collect(workers=2))


def test_dask_local_cluster_gives_the_same_results(serial):
    need("distributed")
    _assert_same(serial, _collect(address="local"))  # ~8 s on 2 cores (LocalCluster start-up)


@pytest.mark.parametrize("kw", [dict(workers=1), dict(workers=2)])
def test_task_errors_reach_the_caller(kw):
    bad = TASKS[:2] + [dict(workload="nope", rate=1.0, n=10, seed=0)]
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        list(map_tasks(make_trace, bad, progress=False, **kw))


def test_empty_task_list():
    assert list(map_tasks(make_trace, [], progress=False)) == []


@pytest.mark.parametrize("kw", [dict(workers=2), dict(address="local")])
def test_pairs_carry_the_callers_tasks_and_go_back_in_task_order(kw):
    if "address" in kw:
        need("distributed")
    pairs = list(map_tasks(make_trace, TASKS, progress=False, **kw))
    assert sorted(map(id, (t for t, _ in pairs))) == sorted(map(id, TASKS))  # the caller's dicts, not copies
    ordered = in_task_order(pairs, TASKS)
    for t, trace in zip(TASKS, ordered):
        np.testing.assert_array_equal(trace.arrival, make_trace(**t).arrival)
    assert in_task_order(pairs[::-1], TASKS)[0] is ordered[0]


def _mean_arrival(**task) -> dict:
    tr = make_trace(**task)
    return {"mean": np.float64(tr.arrival.mean()), "n": np.int64(len(tr)), "first": tr.arrival[:2]}


@pytest.mark.parametrize("workers", [1, 2])
def test_run_tasks_keeps_task_order_and_resumes_from_its_cache(tmp_path, workers):
    direct = [_mean_arrival(**t) for t in TASKS]
    got = run_tasks(_mean_arrival, TASKS, cache_dir=tmp_path, code="c1", prefix="t", workers=workers, progress=False)
    assert [g["mean"] for g in got] == [d["mean"] for d in direct]  # the tasks' order, whatever the completion order
    files = sorted(tmp_path.glob("t-*.json"))
    assert len(files) == len(TASKS) and not list(tmp_path.glob("*.tmp"))
    # a rerun reads every result back (numpy values as plain JSON ones) and runs nothing
    again = run_tasks(
        lambda **t: pytest.fail("ran a cached task"),
        TASKS,
        cache_dir=tmp_path,
        code="c1",
        prefix="t",
        workers=1,
        progress=False,
    )
    assert again == [json.loads(json.dumps(d, default=json_default)) for d in direct]
    # other code: another key, nothing read back; a cache without a code key is refused before any work
    assert (
        len(run_tasks(_mean_arrival, TASKS[:1], cache_dir=tmp_path, code="c2", prefix="t", workers=1, progress=False))
        == 1
    )
    assert len(list(tmp_path.glob("t-*.json"))) == len(TASKS) + 1
    with pytest.raises(ValueError, match="cache_dir needs code="):
        run_tasks(lambda **t: pytest.fail("ran"), TASKS, cache_dir=tmp_path, progress=False)


class _MeanArrivals:
    """A study as the runner sees it: check, plan, assemble (the A/B and serving studies are the real ones)."""

    def __init__(self, n_traces: int, *, one_at_a_time: bool = False, cacheable: bool = True):
        self.n_traces, self.one_at_a_time, self.cacheable, self.calls = n_traces, one_at_a_time, cacheable, []

    def validate(self):
        self.calls.append("validate")
        if self.n_traces < 1:
            raise ValueError(f"n_traces: need at least one trace, got {self.n_traces}")

    def plan(self):
        self.calls.append("plan")
        tasks = [dict(TASKS[0], seed=s) for s in range(self.n_traces)]
        return StudyPlan(
            _mean_arrival,
            tasks,
            prefix="means",
            one_at_a_time=self.one_at_a_time,
            cacheable=self.cacheable,
            context={"first_seed": tasks[0]["seed"]},
        )

    def assemble(self, plan, results, seconds):
        self.calls.append("assemble")
        return {"means": [r["mean"] for r in results], "first_seed": plan.context["first_seed"], "seconds": seconds}


@pytest.mark.parametrize("workers", [1, 2])
def test_run_study_validates_plans_runs_and_assembles_in_task_order(tmp_path, workers):
    study = _MeanArrivals(4)
    got = run_study(study, workers=workers, cache_dir=tmp_path, progress=False)
    assert study.calls == ["validate", "plan", "assemble"] and got["first_seed"] == 0 and got["seconds"] >= 0
    assert got["means"] == [_mean_arrival(**dict(TASKS[0], seed=s))["mean"] for s in range(4)]
    assert len(list(tmp_path.glob("means-*.json"))) == 4  # keyed by the code of this module (the study class)
    assert run_study(_MeanArrivals(4), workers=1, cache_dir=tmp_path, progress=False)["means"] == got["means"]


def test_run_study_refuses_bad_input_before_any_task():
    bad = _MeanArrivals(0)
    with pytest.raises(ValueError, match="n_traces: need at least one trace, got 0"):
        run_study(bad, progress=False)
    assert bad.calls == ["validate"]  # never planned, nothing ran
    with pytest.raises(ValueError, match="workers/address: a _MeanArrivals runs its tasks one at a time"):
        run_study(_MeanArrivals(2, one_at_a_time=True), workers=2, progress=False)
    with pytest.raises(ValueError, match="cache_dir: a _MeanArrivals keeps no cache"):
        run_study(_MeanArrivals(2, cacheable=False), cache_dir="x", progress=False)
    assert (
        run_study(_MeanArrivals(2, one_at_a_time=True), progress=False)["means"][0]
        == _mean_arrival(**dict(TASKS[0], seed=0))["mean"]
    )


def test_task_seed_is_stable_and_separates_tasks():
    assert task_seed(0, "homogeneous", 3, "bernoulli") == task_seed(0, "homogeneous", 3, "bernoulli")
    seeds = {task_seed(0, s, r) for s in ("a", "b") for r in range(50)}
    assert len(seeds) == 100 and all(0 <= s < 2**32 for s in seeds)
    assert task_seed(1, digest_size=8) >= 0 and task_seed(1, digest_size=8) != task_seed(1)
