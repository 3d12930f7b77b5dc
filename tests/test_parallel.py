"""``map_tasks``: one code path for joblib (in-process or processes) and Dask, same results; ``run_tasks``'s cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
from extras import need

from asrsched.core.workloads import make_trace
from asrsched.sim.parallel import in_task_order, json_default, map_tasks, run_tasks, task_seed

TASKS = [dict(workload=w, rate=r, n=200, seed=s) for w in ("librispeech", "uniform") for r in (2.0, 9.0)
         for s in (0, 1)]


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
    again = run_tasks(lambda **t: pytest.fail("ran a cached task"), TASKS, cache_dir=tmp_path, code="c1", prefix="t",
                      workers=1, progress=False)
    assert again == [json.loads(json.dumps(d, default=json_default)) for d in direct]
    # other code: another key, nothing read back; a cache without a code key is refused before any work
    assert len(run_tasks(_mean_arrival, TASKS[:1], cache_dir=tmp_path, code="c2", prefix="t", workers=1,
                         progress=False)) == 1
    assert len(list(tmp_path.glob("t-*.json"))) == len(TASKS) + 1
    with pytest.raises(ValueError, match="cache_dir needs code="):
        run_tasks(lambda **t: pytest.fail("ran"), TASKS, cache_dir=tmp_path, progress=False)


def test_task_seed_is_stable_and_separates_tasks():
    assert task_seed(0, "homogeneous", 3, "bernoulli") == task_seed(0, "homogeneous", 3, "bernoulli")
    seeds = {task_seed(0, s, r) for s in ("a", "b") for r in range(50)}
    assert len(seeds) == 100 and all(0 <= s < 2 ** 32 for s in seeds)
    assert task_seed(1, digest_size=8) >= 0 and task_seed(1, digest_size=8) != task_seed(1)
