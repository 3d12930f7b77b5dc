"""The kinetic tournament behind HRRN gives exactly the scan's order, ties and all."""

from __future__ import annotations

import numpy as np
import pytest

from asrsched.core.kinetic import kt_new, kt_query, kt_set
from asrsched.core.policies import HRRNQueue, Job


def _scan(occupied, arr, inv, seq, now):
    """The reference: largest (now - a) * inv, then earliest arrival, then earliest push."""
    return min(occupied, key=lambda i: (-(now - arr[i]) * inv[i], arr[i], seq[i])) if occupied else -1


@pytest.mark.parametrize("sizes", ["continuous", "few_values"])
@pytest.mark.parametrize("clock", ["forward", "sometimes_back"])
def test_tree_matches_the_scan_through_random_pushes_removals_and_queries(sizes, clock):
    rng = np.random.default_rng(7)
    for trial in range(12):
        cap = 64
        win, cert, buf = kt_new(cap)
        arr, inv, seq = np.zeros(cap), np.zeros(cap), np.zeros(cap, np.int64)
        now = 1.7e9 + trial  # Unix-time clock values, as in the vLLM plug-in
        last = np.array([now])
        occupied: set[int] = set()
        pushes = 0
        for _ in range(300):
            u = rng.random()
            if u < 0.45 and len(occupied) < cap:
                i = int(rng.choice([k for k in range(cap) if k not in occupied]))
                # simultaneous arrivals (integer offsets) make exact ties common
                arr[i] = now - float(rng.integers(0, 3))
                inv[i] = 1.0 / (float(rng.choice([1.0, 2.0, 4.0])) if sizes == "few_values" else rng.uniform(0.1, 10))
                seq[i] = pushes
                pushes += 1
                kt_set(i, True, cap, win, cert, arr, inv, seq, last, buf)
                occupied.add(i)
            elif u < 0.65 and occupied:
                i = int(rng.choice(sorted(occupied)))
                occupied.discard(i)
                kt_set(i, False, cap, win, cert, arr, inv, seq, last, buf)
            else:
                step = rng.exponential(0.7)
                if clock == "sometimes_back" and rng.random() < 0.15:
                    step = -rng.uniform(0, 2)
                now += step
                got = kt_query(now, cap, win, cert, arr, inv, seq, last, buf)
                assert got == _scan(occupied, arr, inv, seq, now)


def test_crossing_lines_hand_over_at_the_crossing_time():
    """A short job overtakes an older long one exactly when their ratios cross."""
    cap = 4
    win, cert, buf = kt_new(cap)
    arr = np.array([0.0, 10.0, 0.0, 0.0])
    inv = np.array([1 / 10.0, 1 / 1.0, 0.0, 0.0])  # job 0: size 10, arrived at 0; job 1: size 1, at 10
    seq = np.array([0, 1, 0, 0])
    last = np.array([10.0])
    kt_set(0, True, cap, win, cert, arr, inv, seq, last, buf)
    kt_set(1, True, cap, win, cert, arr, inv, seq, last, buf)
    # (t - 0) / 10 == (t - 10) / 1  at t = 100/9
    assert kt_query(11.0, cap, win, cert, arr, inv, seq, last, buf) == 0
    assert kt_query(100 / 9 + 1e-6, cap, win, cert, arr, inv, seq, last, buf) == 1
    assert kt_query(11.0, cap, win, cert, arr, inv, seq, last, buf) == 0  # clock back: rebuilt, still exact


def _drain(q: HRRNQueue, jobs, now0: float, rng) -> list[int]:
    for j in jobs:
        q.push(j)
    out, now = [], now0
    while q:
        now += float(rng.exponential(0.3))
        out.append(q.pop(now).rid)
        if rng.random() < 0.3 and len(out) < 400:  # arrivals while draining
            q.push(Job(rid=1000 + len(out), arrival=now, est_service=float(rng.uniform(0.2, 5))))
    return out


def test_hrrn_queue_with_the_tree_pops_exactly_as_with_the_scan(monkeypatch):
    rng = np.random.default_rng(3)
    jobs = [Job(rid=i, arrival=float(rng.integers(0, 50)), est_service=float(rng.choice([0.5, 1.0, 3.0])))
            for i in range(600)]
    scan = HRRNQueue()
    scan.TREE_ON = 10**9
    tree = HRRNQueue()
    tree.TREE_ON, tree.TREE_OFF = 8, 4
    a = _drain(scan, [Job(j.rid, j.arrival, j.est_service) for j in jobs], 50.0, np.random.default_rng(1))
    b = _drain(tree, [Job(j.rid, j.arrival, j.est_service) for j in jobs], 50.0, np.random.default_rng(1))
    assert a == b
    assert len(a) > 600


def test_equal_sizes_and_simultaneous_arrivals_are_fcfs_with_the_tree():
    q = HRRNQueue()
    q.TREE_ON = 1
    for i in range(300):
        q.push(Job(rid=i, arrival=0.0, est_service=2.0))
    assert [q.pop(5.0).rid for _ in range(300)] == list(range(300))
