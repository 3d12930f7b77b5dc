"""The scaling model of benchmarks/bench_scaling.py against schedules worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

import bench_scaling as B  # noqa: E402


@pytest.mark.parametrize(("n", "w"), [(10, 4), (12, 4), (1, 8), (7, 1), (10_000, 16), (10_000, 128)])
def test_equal_tasks_take_ceil_n_over_w_rounds(n, w):
    t, o = 0.25, 0.01
    assert B.list_schedule([t] * n, w, overhead=o) == pytest.approx(math.ceil(n / w) * (t + o))


def test_warmup_delays_every_worker_once_and_serial_dispatch_is_a_floor():
    # 8 tasks of 1 s on 4 workers, each worker busy 0.5 s first: 0.5 + 2 rounds
    assert B.list_schedule([1.0] * 8, 4, warmup=0.5) == pytest.approx(2.5)
    # 100 tasks of 1 ms on 50 workers: 2 rounds = 2 ms, but one dispatcher at 0.1 ms per task needs 10 ms
    assert B.list_schedule([1e-3] * 100, 50, serial=1e-4) == pytest.approx(100 * 1e-4)


def test_greedy_order_matters_long_task_last():
    # costs [1, 1, 1, 3] on 2 workers: w1 gets 1, w2 gets 1, w1 -> 2, the 3 goes to w2 (free at 1) -> 4;
    # an optimal packing ({3}, {1, 1, 1}) is 3, which the greedy order finds when the long task comes first
    assert B.list_schedule([1, 1, 1, 3], 2) == pytest.approx(4.0)
    assert B.list_schedule([3, 1, 1, 1], 2) == pytest.approx(3.0)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="workers"):
        B.list_schedule([1.0], 0)
    with pytest.raises(ValueError, match="costs"):
        B.list_schedule([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="batch"):
        B.predict({"a": [1.0]}, n_tasks=4, batch=0)


def test_prediction_of_equal_costs_matches_the_hand_schedule():
    t, o, s = 0.2, 0.002, 0.003
    rows = B.predict({"a": [t], "b": [t]}, n_tasks=1000, workers=(1, 8, 1000), overhead=o, serial=s, n_draws=2)
    by = {r["workers"]: r for r in rows}
    assert by[1]["wall_s"] == pytest.approx(1000 * (t + o))
    assert by[8]["wall_s"] == pytest.approx(125 * (t + o))
    assert by[8]["efficiency"] == pytest.approx(1000 * t / (8 * 125 * (t + o)))
    # 1000 workers: one round (0.202 s) is shorter than the dispatch floor 1000 * 3 ms = 3 s
    assert by[1000]["wall_s"] == pytest.approx(1000 * s)
    assert by[1000]["speedup"] == pytest.approx(1000 * (t + o) / (1000 * s))


def test_batching_divides_the_dispatch_floor():
    t, s = 0.01, 0.001
    one = B.predict({"a": [t]}, n_tasks=1000, workers=(100,), serial=s, n_draws=1)[0]
    ten = B.predict({"a": [t]}, n_tasks=1000, workers=(100,), serial=s, n_draws=1, batch=10)[0]
    assert one["wall_s"] == pytest.approx(1000 * s)  # floor: 1 s against 0.1 s of work per worker
    assert ten["wall_s"] == pytest.approx(100 * s)  # 100 tasks of 0.1 s: one round, and the floor 0.1 s


def test_draws_keep_the_scenario_mix():
    rng = np.random.default_rng(0)
    d = B.draw_costs({"a": [1.0], "b": [2.0], "c": [3.0]}, 10, rng)
    assert sorted(d.tolist()) == [1.0] * 4 + [2.0] * 3 + [3.0] * 3


def test_capacity_bound_wall_prediction():
    # 4 tasks of 1 CPU-s on 2 workers, but the machine gives 0.5 cores in all: 4 / 0.5 = 8 s, not 2 s
    assert B.predict_wall([1.0] * 4, 2, 0.0, 0.0, cores=0.5) == pytest.approx(8.0)
    assert B.predict_wall([1.0] * 4, 2, 0.0, 0.0, cores=2.0) == pytest.approx(2.0)
