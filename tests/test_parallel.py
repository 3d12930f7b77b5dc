"""``map_tasks``: one code path for joblib (in-process or processes) and Dask, same results."""

from __future__ import annotations

import numpy as np
import pytest

from asrsched.core.workloads import make_trace
from asrsched.sim.parallel import in_task_order, map_tasks

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
    return _collect(n_jobs=1)


def test_serial_results_match_direct_calls(serial):
    for t in TASKS[:3]:
        np.testing.assert_array_equal(serial[_key(t)].arrival, make_trace(**t).arrival)


def test_joblib_processes_give_the_same_results(serial):
    _assert_same(serial, _collect(n_jobs=2))


def test_dask_local_cluster_gives_the_same_results(serial):
    _assert_same(serial, _collect(address="local"))  # ~8 s on 2 cores (LocalCluster start-up)


@pytest.mark.parametrize("kw", [dict(n_jobs=1), dict(n_jobs=2)])
def test_task_errors_reach_the_caller(kw):
    bad = TASKS[:2] + [dict(workload="nope", rate=1.0, n=10, seed=0)]
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        list(map_tasks(make_trace, bad, progress=False, **kw))


def test_empty_task_list():
    assert list(map_tasks(make_trace, [], progress=False)) == []


@pytest.mark.parametrize("kw", [dict(n_jobs=2), dict(address="local")])
def test_pairs_carry_the_callers_tasks_and_go_back_in_task_order(kw):
    pairs = list(map_tasks(make_trace, TASKS, progress=False, **kw))
    assert sorted(map(id, (t for t, _ in pairs))) == sorted(map(id, TASKS))  # the caller's dicts, not copies
    ordered = in_task_order(pairs, TASKS)
    for t, trace in zip(TASKS, ordered):
        np.testing.assert_array_equal(trace.arrival, make_trace(**t).arrival)
    assert in_task_order(pairs[::-1], TASKS)[0] is ordered[0]
