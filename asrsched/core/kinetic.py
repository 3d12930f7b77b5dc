"""A kinetic tournament tree: the highest-response-ratio job in O(log n) per change.

HRRN serves the waiting job with the largest ``(now - arrival) / size``. Each job's
ratio is a line in ``now`` (slope ``1/size``), so the winner changes only when one
line overtakes another. A scan re-ranks every job at every decision (O(n)); this
structure keeps a tournament over slots in which every internal node stores the
winner of its subtree *at the last time it was checked* and a **certificate**: the
earliest time at which that winner could change (the next crossing of the two
children's winners, or a child's own certificate). A query at ``now`` re-plays only
the nodes whose certificate has expired (Basch, Guibas & Hershberger's kinetic
tournament); a push or a removal re-plays one leaf-to-root path. With a clock that
moves forward, the amortised cost per decision is O(log² n) and in practice a few
microseconds at depth 10,000, against tens for a scan.

Order (the same total order as :func:`asrsched.core.policies.HRRNQueue`'s scan):
larger ratio first, then the earlier arrival, then the earlier push (``seq``), so
HRRN with equal sizes is FCFS.

Exactness: winners are always decided by the same float expression as the scan,
``(now - arrival) * inv``; certificates are only triggers for re-checking, and are
set early by a bound on the rounding error of that expression, so a re-check
happens before any float comparison could flip. A query at an earlier time than
the last one rebuilds the tree (O(n)).

Everything here is plain numpy arrays and numba functions; the caller keeps the
slot -> job mapping (see :class:`asrsched.core.policies.HRRNQueue`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EPS = np.finfo(np.float64).eps


@njit(cache=True, nogil=True)
def _beats(i: int, j: int, now: float, arr: np.ndarray, inv: np.ndarray, seq: np.ndarray) -> bool:
    """Whether slot ``i`` ranks before slot ``j`` at ``now`` (-1 is an empty slot)."""
    if j < 0:
        return i >= 0
    if i < 0:
        return False
    ri = (now - arr[i]) * inv[i]
    rj = (now - arr[j]) * inv[j]
    if ri != rj:
        return ri > rj
    if arr[i] != arr[j]:
        return arr[i] < arr[j]
    return seq[i] < seq[j]


@njit(cache=True, nogil=True)
def _overtake(w: int, lo: int, now: float, arr: np.ndarray, inv: np.ndarray) -> float:
    """A time no later than the first moment after ``now`` at which ``lo`` could rank before ``w``.

    ``w`` ranks before ``lo`` at ``now``. Only a steeper line (smaller size) can catch
    up; the crossing ``t*`` solves ``(t - a_w) inv_w = (t - a_l) inv_l``, written
    around ``a_l`` so that large clock values (Unix time) do not cancel. The answer
    is pulled earlier by a bound on the rounding error of both ratios near ``t*``.
    """
    if w < 0 or lo < 0:
        return np.inf
    iw, il = inv[w], inv[lo]
    if il <= iw:
        return np.inf
    aw, al = arr[w], arr[lo]
    gap = il - iw
    u = (al - aw) * iw / gap
    t = al + u
    err = 8.0 * _EPS * (abs(t - aw) * iw + abs(t - al) * il + (abs(t) + abs(aw) + abs(al)) * (iw + il))
    return t - err / gap - 8.0 * _EPS * abs(t)


@njit(cache=True, nogil=True)
def _fix(node: int, now: float, win: np.ndarray, cert: np.ndarray,
         arr: np.ndarray, inv: np.ndarray, seq: np.ndarray) -> None:
    """Recompute internal ``node`` from its two children (which are correct at ``now``)."""
    a, b = win[2 * node], win[2 * node + 1]
    ca, cb = cert[2 * node], cert[2 * node + 1]
    if _beats(a, b, now, arr, inv, seq):
        w, lo = a, b
    else:
        w, lo = b, a
    win[node] = w
    c = _overtake(w, lo, now, arr, inv)
    if ca < c:
        c = ca
    if cb < c:
        c = cb
    cert[node] = c


@njit(cache=True, nogil=True)
def _advance(root: int, now: float, cap: int, win: np.ndarray, cert: np.ndarray,
             arr: np.ndarray, inv: np.ndarray, seq: np.ndarray, buf: np.ndarray) -> None:
    """Re-play every node under ``root`` whose certificate has expired at ``now``.

    A parent's certificate is never later than its children's, so the expired nodes
    form a top part of the subtree: collect them top-down into ``buf`` (a work
    array of ``2 * cap`` slots), then re-play them bottom-up. Iterative on purpose:
    numba's on-disk cache does not handle recursive functions.
    """
    if root >= cap or cert[root] > now:
        return
    buf[0] = root
    top, n = 1, 0
    while n < top:
        node = buf[n]
        n += 1
        for child in (2 * node, 2 * node + 1):
            if child < cap and cert[child] <= now:
                buf[top] = child
                top += 1
    for k in range(top - 1, -1, -1):
        _fix(buf[k], now, win, cert, arr, inv, seq)


@njit(cache=True, nogil=True)
def kt_query(now: float, cap: int, win: np.ndarray, cert: np.ndarray,
             arr: np.ndarray, inv: np.ndarray, seq: np.ndarray, last: np.ndarray, buf: np.ndarray) -> int:
    """The winning slot at ``now`` (-1 when empty). ``last[0]`` is the time the tree is valid for."""
    if now < last[0]:
        kt_rebuild(now, cap, win, cert, arr, inv, seq, last)
    else:
        _advance(1, now, cap, win, cert, arr, inv, seq, buf)
        last[0] = now
    return win[1]


@njit(cache=True, nogil=True)
def kt_set(slot: int, occupied: bool, cap: int, win: np.ndarray, cert: np.ndarray,
           arr: np.ndarray, inv: np.ndarray, seq: np.ndarray, last: np.ndarray, buf: np.ndarray) -> None:
    """Mark ``slot`` occupied (its data already in ``arr/inv/seq``) or empty; re-play its path."""
    now = last[0]
    leaf = cap + slot
    win[leaf] = slot if occupied else -1
    node = leaf // 2
    while node >= 1:
        # a sibling subtree may hold expired certificates: bring it to ``now`` first
        _advance(2 * node, now, cap, win, cert, arr, inv, seq, buf)
        _advance(2 * node + 1, now, cap, win, cert, arr, inv, seq, buf)
        _fix(node, now, win, cert, arr, inv, seq)
        node //= 2


@njit(cache=True, nogil=True)
def kt_rebuild(now: float, cap: int, win: np.ndarray, cert: np.ndarray,
               arr: np.ndarray, inv: np.ndarray, seq: np.ndarray, last: np.ndarray) -> None:
    """Recompute every internal node at ``now`` (O(n)); leaves are kept."""
    last[0] = now
    for node in range(cap - 1, 0, -1):
        _fix(node, now, win, cert, arr, inv, seq)


def kt_new(cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empty ``(win, cert, buf)`` arrays for ``cap`` slots (``cap`` a power of two)."""
    if cap < 1 or cap & (cap - 1):
        raise ValueError(f"capacity must be a power of two, got {cap}")
    win = np.full(2 * cap, -1, dtype=np.int64)
    cert = np.full(2 * cap, np.inf)
    return win, cert, np.empty(2 * cap, dtype=np.int64)
