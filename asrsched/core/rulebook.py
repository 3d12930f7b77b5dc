"""The rulebook: every compiled queue primitive and policy rule, written once.

Every compiled loop of the package takes its queues from here: the ASR engine
(:mod:`asrsched.sim.kernel`, a single server and a fleet alike), the supermarket model
(:mod:`asrsched.abtest.model`) and the Python reference queues of
:mod:`asrsched.core.policies` where they need a compiled scan (HRRN's argbest). A policy's
rule is written twice at most: readable, in its Python queue (:mod:`asrsched.core.policies`,
also what the HTTP server and the vLLM plug-in run), and compiled, here.

Storage convention: a structure lives in flat 1-D arrays at an offset ``b`` (replica
``r`` of a fleet holds ``[r * cap, r * cap + n)``; a single structure uses ``b = 0``), so
one set of arrays holds every replica's queue and no call builds an array view. Sizes
are returned, not stored: ``n = heap_push(..., n, ...)``. Indices are taken as unsigned
(:func:`_u`): numba then omits the negative-index wraparound of every access (a large part
of a fleet run's time is spent in the heap).

Primitives
----------
* a binary **heap** of ``(k1, k2, id)`` triples, least first in lexicographic order
  (:func:`key_less`): the waiting queue of SJF, LJF and static-key policies (id = the
  request index, which is the submission order), the SJF side of the adaptive policy,
  and the supermarket's calendar of next departures;
* a **FIFO** as links over the requests (:func:`fifo_push`, :func:`fifo_pop`): FCFS, whose
  order is the submission order;
* a **slot store** with swap-remove (:func:`slot_put`, :func:`slot_take`): the waiting jobs
  of HRRN and adaptive, with their arrival and ``1 / max(S, min_service)``;
* the **argbest scans** over a slot store: :func:`hrrn_argbest` (largest ``(now - arrival) /
  S``; ties to the earliest arrival, then the smallest id) and :func:`fcfs_argmin` (earliest
  arrival, then the smallest id);
* each policy's **rule**: :func:`static_keys` (the heap key of SJF, LJF and a static key),
  :func:`adaptive_mode` (:class:`asrsched.core.policies.AdaptiveQueue`'s switch);
* a waiting queue **under a policy code** (one replica's, at offset ``b``): :func:`queue_push`,
  :func:`queue_pop` (the request the policy admits now) and :func:`queue_set_policy` (the waiting
  requests moved to another policy's queue). The compiled engine calls only these three, so a new
  compiled policy is a code in :data:`POLICY_CODES` and its branches here.

Policy codes (:data:`POLICY_CODES`) name the compiled policies; a policy outside the table
runs only in the Python engines.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "FCFS",
    "SJF",
    "LJF",
    "HRRN",
    "ADAPTIVE",
    "KEY",
    "KEY_COUNT",
    "POLICY_CODES",
    "MODE_FCFS",
    "MODE_SJF",
    "MODE_HRRN",
    "key_less",
    "heap_push",
    "heap_pop",
    "fifo_push",
    "fifo_pop",
    "slot_put",
    "slot_take",
    "hrrn_argbest",
    "fcfs_argmin",
    "insertion_sort",
    "static_keys",
    "response_ratio",
    "adaptive_mode",
    "queue_push",
    "queue_pop",
    "queue_set_policy",
]

FCFS, SJF, LJF, HRRN, ADAPTIVE, KEY, KEY_COUNT = 0, 1, 2, 3, 4, 5, 6
#: the built-in policies the compiled engine runs (a static-key policy gets ``KEY``, one on the push count
#: ``KEY_COUNT``: see :func:`static_keys`)
POLICY_CODES = {"fcfs": FCFS, "sjf": SJF, "ljf": LJF, "hrrn": HRRN, "adaptive": ADAPTIVE}
#: the adaptive policy's modes, in the order of its ``mode_counts``
MODE_FCFS, MODE_SJF, MODE_HRRN = 0, 1, 2


# ----------------------------------------------------------------------------- heap of (k1, k2, id)


@njit(cache=True, inline="always")
def _u(i):
    """An array index as unsigned (it is never negative here): no wraparound code for it."""
    return np.uint64(i)


@njit(cache=True, inline="always")
def key_less(a1, a2, ai, b1, b2, bi):
    """``(a1, a2, ai) < (b1, b2, bi)`` lexicographically."""
    return a1 < b1 or (a1 == b1 and (a2 < b2 or (a2 == b2 and ai < bi)))


@njit(cache=True, inline="always")
def heap_push(k1, k2, kid, b, n, x1, x2, xid):
    """Push ``(x1, x2, xid)`` onto the heap at ``[b, b + n)``; returns the new size ``n + 1``."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if key_less(x1, x2, xid, k1[_u(b + p)], k2[_u(b + p)], kid[_u(b + p)]):
            k1[_u(b + i)] = k1[_u(b + p)]
            k2[_u(b + i)] = k2[_u(b + p)]
            kid[_u(b + i)] = kid[_u(b + p)]
            i = p
        else:
            break
    k1[_u(b + i)] = x1
    k2[_u(b + i)] = x2
    kid[_u(b + i)] = xid
    return n + 1


@njit(cache=True, inline="always")
def heap_pop(k1, k2, kid, b, n):
    """Remove the least entry (``kid[b]``, read it first) of the heap at ``[b, b + n)``; returns ``n - 1``."""
    n -= 1
    if n > 0:
        x1 = k1[_u(b + n)]
        x2 = k2[_u(b + n)]
        xid = kid[_u(b + n)]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and key_less(
                k1[_u(b + c + 1)], k2[_u(b + c + 1)], kid[_u(b + c + 1)], k1[_u(b + c)], k2[_u(b + c)], kid[_u(b + c)]
            ):
                c += 1
            if key_less(k1[_u(b + c)], k2[_u(b + c)], kid[_u(b + c)], x1, x2, xid):
                k1[_u(b + i)] = k1[_u(b + c)]
                k2[_u(b + i)] = k2[_u(b + c)]
                kid[_u(b + i)] = kid[_u(b + c)]
                i = c
            else:
                break
        k1[_u(b + i)] = x1
        k2[_u(b + i)] = x2
        kid[_u(b + i)] = xid
    return n


# ----------------------------------------------------------------------------- FIFO (links over the requests)


@njit(cache=True, inline="always")
def fifo_push(nxt, head, tail, r, j):
    """Append request ``j`` to FIFO ``r`` (``head[r]``/``tail[r]``: -1 when empty; ``nxt``: links)."""
    nxt[_u(j)] = -1
    t = tail[_u(r)]
    if t < 0:
        head[_u(r)] = j
    else:
        nxt[_u(t)] = j
    tail[_u(r)] = j


@njit(cache=True, inline="always")
def fifo_pop(nxt, head, tail, r):
    """Remove and return the first request of FIFO ``r`` (not empty)."""
    j = head[_u(r)]
    h = nxt[_u(j)]
    head[_u(r)] = h
    if h < 0:
        tail[_u(r)] = -1
    return j


# ----------------------------------------------------------------------------- slot store


@njit(cache=True, inline="always")
def slot_put(sid, sarr, sinv, spos, b, n, j, arrival, inv):
    """Put job ``j`` (its arrival and ``1 / size``) in the next slot of the store at ``[b, b + n)``; returns ``n + 1``.

    ``spos[j]`` is the job's slot (``spos`` is indexed by job id).
    """
    sid[_u(b + n)] = j
    sarr[_u(b + n)] = arrival
    sinv[_u(b + n)] = inv
    spos[j] = n
    return n + 1


@njit(cache=True, inline="always")
def slot_take(sid, sarr, sinv, spos, b, n, i):
    """Remove slot ``i`` of the store at ``[b, b + n)`` (the last slot moves into it); returns the job id."""
    j = sid[_u(b + i)]
    last = n - 1
    if i != last:
        m = sid[_u(b + last)]
        sid[_u(b + i)] = m
        sarr[_u(b + i)] = sarr[_u(b + last)]
        sinv[_u(b + i)] = sinv[_u(b + last)]
        spos[m] = i
    return j


@njit(cache=True, nogil=True, inline="always")
def hrrn_argbest(sarr, sinv, sid, b, n, now):
    """Slot (``0 <= i < n``) of the largest ``(now - arrival) * inv`` in the store at ``[b, b + n)``.

    HRRN's order (Brinch Hansen's highest response ratio next: ``(W + S) / S = 1 + W * inv``):
    exact ties go to the earliest arrival, then to the smallest id, so with equal sizes HRRN is
    FCFS in submission order.
    """
    best = 0
    br = (now - sarr[_u(b)]) * sinv[_u(b)]
    ba = sarr[_u(b)]
    bs = sid[_u(b)]
    for i in range(1, n):
        a = sarr[_u(b + i)]
        x = (now - a) * sinv[_u(b + i)]
        if x > br or (x == br and (a < ba or (a == ba and sid[_u(b + i)] < bs))):
            best = i
            br = x
            ba = a
            bs = sid[_u(b + i)]
    return best


@njit(cache=True, nogil=True, inline="always")
def fcfs_argmin(sarr, sid, b, n):
    """Slot of the earliest arrival (ties: the smallest id) in the store at ``[b, b + n)``: FCFS over a few jobs."""
    best = 0
    for i in range(1, n):
        if sarr[_u(b + i)] < sarr[_u(b + best)] or (
            sarr[_u(b + i)] == sarr[_u(b + best)] and sid[_u(b + i)] < sid[_u(b + best)]
        ):
            best = i
    return best


@njit(cache=True, inline="always")
def insertion_sort(a, lo, hi):
    """Sort ``a[lo:hi]`` in place (a few entries: the requests finishing at one decode step)."""
    for i in range(lo + 1, hi):
        x = a[i]
        k = i - 1
        while k >= lo and a[k] > x:
            a[k + 1] = a[k]
            k -= 1
        a[k + 1] = x


# ----------------------------------------------------------------------------- the policies' rules


@njit(cache=True, inline="always")
def static_keys(code, arrival, est, key, pushed):
    """The heap key ``(k1, k2)`` of a job under a static policy (ties then go to the earlier submission).

    SJF ``(S, arrival)``, LJF ``(-S, arrival)``, a static key policy ``(key, 0)``, a static key on the
    push count ``(pushed + key, 0)`` (``pushed``: the jobs pushed into this queue before this one, as
    :class:`asrsched.core.policies.KeyQueue` with ``count_clock``; Nudge-M's order), and SJF's key for
    the adaptive policy's SJF side: the orders of :class:`asrsched.core.policies.KeyQueue`.
    """
    if code == LJF:
        return -est, arrival
    if code == KEY:
        return key, 0.0
    if code == KEY_COUNT:
        return pushed + key, 0.0
    return est, arrival


@njit(cache=True, inline="always")
def response_ratio(now, arrival, est, min_service):
    """``1 + W / max(S, min_service)``, the response ratio the adaptive policy compares with its cap."""
    return 1.0 + (now - arrival) / max(est, min_service)


@njit(cache=True, inline="always")
def adaptive_mode(n_waiting, low_depth, top_ratio, ratio_cap):
    """The adaptive policy's mode: FCFS below ``low_depth`` waiting, else HRRN past ``ratio_cap``, else SJF.

    ``top_ratio`` is the largest response ratio among the waiting jobs (ignored below
    ``low_depth``). The rule of :class:`asrsched.core.policies.AdaptiveQueue`.
    """
    if n_waiting < low_depth:
        return MODE_FCFS
    if top_ratio > ratio_cap:
        return MODE_HRRN
    return MODE_SJF


# ----------------------------------------------------------------------------- a waiting queue under a policy code
# (arrays and scalars as arguments, no slices in the inlined two: see asrsched.sim.kernel on reference counts)


@njit(cache=True, inline="always")
def queue_push(
    code,
    r,
    j,
    b,
    arrival,
    est,
    key,
    min_service,
    k1,
    k2,
    kid,
    sid,
    sarr,
    sinv,
    spos,
    alive,
    nxt,
    head,
    tail,
    heap_n,
    slot_n,
    pushes,
):
    """Request ``j`` joins replica ``r``'s waiting queue (offset ``b``) under policy ``code``.

    ``pushes[r]`` counts the pushes into the replica's queue since its policy was set (the clock of
    ``KEY_COUNT``).
    """
    pushed = pushes[r]
    pushes[r] = pushed + 1
    if code == FCFS:
        fifo_push(nxt, head, tail, r, j)
    elif code != HRRN:  # a heap: sjf, ljf, a static key, and the SJF side of adaptive
        x1, x2 = static_keys(code, arrival[j], est[j], key[j] if code == KEY or code == KEY_COUNT else 0.0, pushed)
        heap_n[r] = heap_push(k1, k2, kid, b, heap_n[r], x1, x2, j)
    if code == HRRN or code == ADAPTIVE:
        slot_n[r] = slot_put(sid, sarr, sinv, spos, b, slot_n[r], j, arrival[j], 1.0 / max(est[j], min_service))
        alive[j] = True


@njit(cache=True, inline="always")
def queue_pop(
    code,
    r,
    now,
    b,
    arrival,
    est,
    low_depth,
    ratio_cap,
    min_service,
    k1,
    k2,
    kid,
    sid,
    sarr,
    sinv,
    spos,
    alive,
    nxt,
    head,
    tail,
    heap_n,
    slot_n,
    modes,
):
    """The request replica ``r``'s policy ``code`` admits at ``now`` (its queue is not empty), taken out."""
    if code == FCFS:
        return fifo_pop(nxt, head, tail, r)
    if code != HRRN and code != ADAPTIVE:
        j = kid[b]
        heap_n[r] = heap_pop(k1, k2, kid, b, heap_n[r])
        return j
    n = slot_n[r]
    if code == HRRN:
        i = hrrn_argbest(sarr, sinv, sid, b, n, now)
    else:  # adaptive: FCFS below low_depth, else HRRN when the top response ratio exceeds ratio_cap, else SJF
        if n < low_depth:
            i = fcfs_argmin(sarr, sid, b, n)
            mode = MODE_FCFS
        else:
            i = hrrn_argbest(sarr, sinv, sid, b, n, now)
            top = sid[b + i]
            mode = adaptive_mode(n, low_depth, response_ratio(now, arrival[top], est[top], min_service), ratio_cap)
        if mode == MODE_SJF:
            while not alive[kid[b]]:  # lazy deletion: entries the FCFS and HRRN modes took
                heap_n[r] = heap_pop(k1, k2, kid, b, heap_n[r])
            i = spos[kid[b]]
            heap_n[r] = heap_pop(k1, k2, kid, b, heap_n[r])
        modes[3 * r + mode] += 1
    j = slot_take(sid, sarr, sinv, spos, b, n, i)
    slot_n[r] = n - 1
    alive[j] = False
    if n == 1 and code == ADAPTIVE:
        heap_n[r] = 0  # nothing waits: every entry left in the SJF heap is dead (no need to pop them one by one)
    return j


@njit(cache=True)
def queue_set_policy(
    r,
    new,
    cap,
    min_service,
    arrival,
    est,
    key,
    k1,
    k2,
    kid,
    sid,
    sarr,
    sinv,
    spos,
    alive,
    nxt,
    nwait,
    heap_n,
    slot_n,
    head,
    tail,
    policy,
    pushes,
):
    """:meth:`asrsched.sim.engine.Engine.set_policy` compiled: the waiting requests re-pushed, in submission order, into a fresh ``new`` queue."""
    old = policy[r]
    if old == new:
        return
    n = nwait[r]
    w = np.empty(n, np.int64)
    b = r * cap
    if old == FCFS:
        j = head[r]
        for i in range(n):
            w[i] = j
            j = nxt[j]
    elif old == HRRN or old == ADAPTIVE:
        w[:] = sid[b : b + n]
        for i in range(n):
            alive[w[i]] = False
    else:
        w[:] = kid[b : b + n]
    w.sort()
    heap_n[r] = 0
    slot_n[r] = 0
    head[r] = -1
    tail[r] = -1
    policy[r] = new
    pushes[r] = 0
    for j in w:
        queue_push(
            new,
            r,
            j,
            b,
            arrival,
            est,
            key,
            min_service,
            k1,
            k2,
            kid,
            sid,
            sarr,
            sinv,
            spos,
            alive,
            nxt,
            head,
            tail,
            heap_n,
            slot_n,
            pushes,
        )
