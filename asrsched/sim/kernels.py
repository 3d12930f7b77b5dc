"""Compiled fast path of the simulator for the built-in static policies.

The same server model and the same decisions as :class:`asrsched.sim.engine.Engine`
(``tests/test_simfast.py`` asserts identical per-request records), written as
one numba kernel over plain arrays. :func:`asrsched.sim.engine.simulate` uses it
automatically (``engine="auto"``) for ``fcfs``, ``sjf``, ``ljf`` and ``hrrn``
on an in-memory trace; custom policies, policy parameters, chunked traces and
custom sinks take the Python engine.

Queues inside the kernel, equal to the Python ones decision for decision:

* FCFS: jobs leave in arrival order, so the queue is the index range
  ``[head, next_arrival)``;
* SJF / LJF: a binary heap of ``(+/-est_service, arrival, index)``, the key and
  tie-break order of :class:`asrsched.core.policies.KeyQueue`;
* HRRN: waiting jobs in slots with swap-remove and one scan per decision for the
  largest ``(now - arrival) / max(S, 1e-6)``, ties to the earliest arrival, as in
  :class:`asrsched.core.policies.HRRNQueue`.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from numba import njit

__all__ = ["FAST_POLICIES", "run_kernel"]

FAST_POLICIES = {"fcfs": 0, "sjf": 1, "ljf": 2, "hrrn": 3}


@njit(cache=True)
def _kernel(arr, est, enc, tok, M, steps, overhead, code, tl_cap):  # noqa: C901 - one loop, kept flat for speed
    n = arr.shape[0]
    admit = np.full(n, np.nan)
    first = np.full(n, np.nan)
    fin = np.full(n, np.nan)
    # timeline with stride doubling (as asrsched.sim.engine._Timeline)
    tl_t = np.empty(tl_cap)
    tl_r = np.empty(tl_cap, np.int64)
    tl_q = np.empty(tl_cap, np.int64)
    tl_n = 0
    stride = 1
    count = 0
    # queues
    head = 0  # FCFS: queue is [head, ci)
    kheap = [(0.0, 0.0, 0)]  # SJF/LJF heap
    kheap.pop()
    slots = np.empty(n, np.int64)  # HRRN slots
    inv = np.empty(n)
    nw = 0
    nq = 0
    running = [(0, 0)]  # (finish step, index)
    running.pop()
    pending = np.empty(max(M, 1), np.int64)
    npend = 0
    t = 0.0
    G = 0
    ci = 0
    events = 0
    while True:
        # arrivals up to t (also those that came during an encode)
        while ci < n and arr[ci] <= t:
            if code == 1:
                heapq.heappush(kheap, (est[ci], arr[ci], ci))
            elif code == 2:
                heapq.heappush(kheap, (-est[ci], arr[ci], ci))
            elif code == 3:
                slots[nw] = ci
                inv[nw] = 1.0 / max(est[ci], 1e-6)
                nw += 1
            ci += 1
            nq += 1
        if len(running) < M and nq > 0:  # admit one job, then take the arrivals during its encode
            if code == 0:
                j = head
                head += 1
            elif code == 1 or code == 2:
                j = heapq.heappop(kheap)[2]
            else:
                best = 0
                best_r = -np.inf
                best_a = 0.0
                for i in range(nw):
                    s = slots[i]
                    r = (t - arr[s]) * inv[i]
                    if r > best_r or (r == best_r and arr[s] < best_a):
                        best = i
                        best_r = r
                        best_a = arr[s]
                j = slots[best]
                nw -= 1
                if best != nw:
                    slots[best] = slots[nw]
                    inv[best] = inv[nw]
            nq -= 1
            admit[j] = t
            t += enc[j]
            heapq.heappush(running, (G + tok[j], j))
            pending[npend] = j
            npend += 1
            continue
        events += 1
        count += 1
        if count % stride == 0:
            tl_t[tl_n] = t
            tl_r[tl_n] = len(running)
            tl_q[tl_n] = nq
            tl_n += 1
            if tl_n >= tl_cap:
                half = 0
                for i in range(0, tl_n, 2):
                    tl_t[half] = tl_t[i]
                    tl_r[half] = tl_r[i]
                    tl_q[half] = tl_q[i]
                    half += 1
                tl_n = half
                stride *= 2
        if len(running) == 0:
            if ci >= n:
                break
            t = arr[ci]
            continue
        b = len(running)
        st = steps[b]
        k = running[0][0] - G
        if b < M and ci < n:
            ka = max(1, math.ceil((arr[ci] - t) / st - 1e-9))
            if ka < k:
                k = ka
        if npend > 0:
            ft = t + st
            for i in range(npend):
                first[pending[i]] = ft
            npend = 0
        t += k * st
        G += k
        while len(running) > 0 and running[0][0] == G:
            j = heapq.heappop(running)[1]
            fin[j] = t + overhead
    return admit, first, fin, events, tl_t[:tl_n], tl_r[:tl_n], tl_q[:tl_n]


def run_kernel(arrival, est, enc, tokens, policy: str, max_num_seqs: int, steps, overhead: float,
               timeline_points: int = 4000):
    """Run the compiled simulator; returns ``(admit, first_token, finish, events, (t, running, waiting))``."""
    admit, first, fin, events, tt, tr, tq = _kernel(
        np.ascontiguousarray(arrival, np.float64), np.ascontiguousarray(est, np.float64),
        np.ascontiguousarray(enc, np.float64), np.ascontiguousarray(tokens, np.int64), int(max_num_seqs),
        np.asarray(steps, np.float64), float(overhead), FAST_POLICIES[policy], max(16, int(timeline_points)))
    return admit, first, fin, int(events), (tt, tr, tq)
