"""Compiled fleet: N continuous-batching replicas behind a router, one numba kernel.

The same model and the same decisions as the Python reference
(:class:`asrsched.sim.fleet.Fleet`: one :class:`asrsched.sim.engine.Engine` per replica,
driven arrival by arrival; ``tests/test_fleet_compiled.py`` asserts identical per-request
records for every router, policy and design). The Python path stays the readable
reference and the path for user-defined policies and routers;
:func:`asrsched.sim.fleet.run_cluster` and
:func:`asrsched.abtest.fleet_experiment.run_experiment` take this one when
:func:`compiled_supported` says so (``engine="auto"``).

What the kernel mirrors, step for step:

* each replica's :meth:`Engine.run_until <asrsched.sim.engine.Engine.run_until>` (admissions
  with encoder stalls, jumps over decode steps to the next completion or to the first step
  boundary at or after the next arrival while a slot is free), :meth:`~asrsched.sim.engine.Engine.submit`
  and :meth:`~asrsched.sim.engine.Engine.set_policy` (a switchback re-orders every waiting
  queue at the block boundary);
* the waiting queues of ``fcfs``, ``sjf``, ``ljf`` (a binary heap of ``(key, arrival, rid)``,
  the order of :class:`asrsched.core.policies.KeyQueue`), ``hrrn`` (slots, one scan for the
  largest ``(now - arrival) / max(S, 1e-6)``; ties to the earliest arrival, then the earliest
  submission, as :class:`asrsched.core.policies.HRRNQueue`) and ``adaptive`` (both at once,
  the mode rule of :class:`asrsched.core.policies.AdaptiveQueue`). Requests reach a replica in
  arrival order, so the request index is the submission order;
* what a router sees: :meth:`~asrsched.sim.engine.Engine.n_in_system` and
  :meth:`~asrsched.sim.engine.Engine.outstanding_work` (computed with the same floating-point
  operations, so ties and comparisons come out the same; the sum of the running requests'
  estimate ends is kept in integer multiples of the grid of
  :func:`~asrsched.sim.engine.work_tokens`, exact and so equal to the engine's sorted float
  sum, whatever the order). The work
  estimate reads only the size estimates ``kappa x duration`` (``est_tok``) and each running
  request's count of decode steps so far; the true token counts enter only the server side
  (when a request finishes), never a routing decision;
* the routers ``random``, ``round_robin``, ``jsq``, ``least_work``, ``pod<d>``, ``pod<d>_work``
  (:mod:`asrsched.sim.fleet`), each reading its own stream of uniforms: the same numbers
  the Python router draws from its generator (``rng.random``), pre-drawn.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from asrsched.sim.engine import WORK_TOKEN_GRID

__all__ = ["COMPILED_POLICIES", "COMPILED_ROUTERS", "run_fleet_kernel", "router_code", "request_inputs"]

COMPILED_POLICIES = {"fcfs": 0, "sjf": 1, "ljf": 2, "hrrn": 3, "adaptive": 4}
COMPILED_ROUTERS = {"random": 0, "round_robin": 1, "jsq": 2, "least_work": 3, "pod": 4, "pod_work": 5}
_MIN_S = 1e-6  # HRRNQueue.min_service


# ----------------------------------------------------------------------------- heaps (row r of 2-D arrays)

@njit(cache=True, inline="always")
def _less(a1, a2, ar, b1, b2, br):
    return a1 < b1 or (a1 == b1 and (a2 < b2 or (a2 == b2 and ar < br)))


@njit(cache=True)
def _hpush(k1, k2, kr, hsz, r, x1, x2, xr):
    i = hsz[r]
    hsz[r] += 1
    while i > 0:
        p = (i - 1) >> 1
        if _less(x1, x2, xr, k1[r, p], k2[r, p], kr[r, p]):
            k1[r, i] = k1[r, p]
            k2[r, i] = k2[r, p]
            kr[r, i] = kr[r, p]
            i = p
        else:
            break
    k1[r, i] = x1
    k2[r, i] = x2
    kr[r, i] = xr


@njit(cache=True)
def _hpop(k1, k2, kr, hsz, r):
    top = kr[r, 0]
    n = hsz[r] - 1
    hsz[r] = n
    if n == 0:
        return top
    x1, x2, xr = k1[r, n], k2[r, n], kr[r, n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(k1[r, c + 1], k2[r, c + 1], kr[r, c + 1], k1[r, c], k2[r, c], kr[r, c]):
            c += 1
        if _less(k1[r, c], k2[r, c], kr[r, c], x1, x2, xr):
            k1[r, i] = k1[r, c]
            k2[r, i] = k2[r, c]
            kr[r, i] = kr[r, c]
            i = c
        else:
            break
    k1[r, i] = x1
    k2[r, i] = x2
    kr[r, i] = xr
    return top


@njit(cache=True)
def _keys(code, j, arr, est):
    if code == 0:
        return arr[j], 0.0
    if code == 2:
        return -est[j], arr[j]
    return est[j], arr[j]  # sjf, and the SJF side of adaptive


# ----------------------------------------------------------------------------- waiting queue of replica r

@njit(cache=True)
def _q_push(code, r, j, arr, est, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive):
    if code <= 2 or code == 4:
        a, b = _keys(code, j, arr, est)
        _hpush(k1, k2, kr, hsz, r, a, b, j)
    if code >= 3:
        i = nsl[r]
        srid[r, i] = j
        sarr[r, i] = arr[j]
        sinv[r, i] = 1.0 / max(est[j], _MIN_S)
        spos[j] = i
        nsl[r] = i + 1
        alive[j] = True


@njit(cache=True)
def _argbest(r, n, now, srid, sarr, sinv):
    best = 0
    br = (now - sarr[r, 0]) * sinv[r, 0]
    ba = sarr[r, 0]
    bs = srid[r, 0]
    for i in range(1, n):
        x = (now - sarr[r, i]) * sinv[r, i]
        a = sarr[r, i]
        if x > br or (x == br and (a < ba or (a == ba and srid[r, i] < bs))):
            best = i
            br = x
            ba = a
            bs = srid[r, i]
    return best


@njit(cache=True)
def _slot_take(r, i, srid, sarr, sinv, nsl, spos, alive):
    j = srid[r, i]
    last = nsl[r] - 1
    if i != last:
        m = srid[r, last]
        srid[r, i] = m
        sarr[r, i] = sarr[r, last]
        sinv[r, i] = sinv[r, last]
        spos[m] = i
    nsl[r] = last
    alive[j] = False
    return j


@njit(cache=True)
def _q_pop(code, r, now, arr, est, low_depth, ratio_cap, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive):
    """Admit from the slots of ``hrrn`` (3) or ``adaptive`` (4); the heap policies pop inline in :func:`_loop`."""
    n = nsl[r]
    if code == 3:
        return _slot_take(r, _argbest(r, n, now, srid, sarr, sinv), srid, sarr, sinv, nsl, spos, alive)
    # adaptive: FCFS below low_depth, else HRRN when the top response ratio exceeds ratio_cap, else SJF
    if n < low_depth:
        best = 0
        for i in range(1, n):
            if sarr[r, i] < sarr[r, best] or (sarr[r, i] == sarr[r, best] and srid[r, i] < srid[r, best]):
                best = i
        return _slot_take(r, best, srid, sarr, sinv, nsl, spos, alive)
    bi = _argbest(r, n, now, srid, sarr, sinv)
    top = srid[r, bi]
    ratio = 1.0 + (now - arr[top]) / max(est[top], _MIN_S)
    if ratio > ratio_cap:
        return _slot_take(r, bi, srid, sarr, sinv, nsl, spos, alive)
    while not alive[kr[r, 0]]:  # lazy deletion: entries taken by the FCFS/HRRN modes
        _hpop(k1, k2, kr, hsz, r)
    j = _hpop(k1, k2, kr, hsz, r)
    return _slot_take(r, spos[j], srid, sarr, sinv, nsl, spos, alive)


@njit(cache=True)
def _set_policy(r, new, pcode, arr, est, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive):
    """Engine.set_policy: every waiting job re-pushed (in submission order) into a fresh queue."""
    old = pcode[r]
    if old == new:
        return
    if old <= 2:
        w = kr[r, :hsz[r]].copy()
    else:
        w = srid[r, :nsl[r]].copy()
    w.sort()
    hsz[r] = 0
    nsl[r] = 0
    pcode[r] = new
    for j in w:
        _q_push(new, r, j, arr, est, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive)


# ----------------------------------------------------------------------------- the fleet
#
# One flat loop, no calls on the hot path. A numba call passes every array argument as a
# struct and reference-counts it (an atomic increment and decrement each); with ~35 arrays of
# replica state, calls per replica per arrival cost ten times the simulation itself (the first
# version of this kernel, helper per step, ran 10x slower than the single-server kernel on one
# replica). So each replica's Engine.run_until, the FCFS/SJF/LJF heap, the running set and
# Engine.outstanding_work are written out inline below; the HRRN and adaptive queues (a scan per
# admission anyway) and policy switches stay calls.
#
# The running set of replica r is a row of slots (max_num_seqs, rounded up to whole SIMD widths;
# free slots hold sentinels), unordered: request rr[r, i] finishes at decode step rf[r, i] and its
# estimate ends at exq[r, i] (grid units of work_tokens); rmin[r] is the next completion step.
# Where the engine keeps a heap ordered by (finish step, request), the kernel needs only the least
# step and the set finishing there (their records do not depend on the order they leave in), so
# an admission fills the next slot and a completion is one vector pass over the row plus an O(1)
# removal (a heap's sift-down is a chain of unpredictable branches). The work query sums the slots'
# estimate ends past the current step as integers, in one fixed-width vector pass: exact, so
# equal to the engine's sorted float sum.

_DONE, _FULL = 0, 1
_NONE = -(1 << 62)  # an empty slot of the estimate ends (never past any step)
_NOSTEP = 1 << 62  # the next completion step of an empty running set


@njit(cache=True)
def _loop(j, sw, arr, est, enc, tok, est_q, grid, M, steps, overhead, low_depth, ratio_cap, route_arm, inst_of_arm,
          r_code, r_d, U, cands, ncand, sw_req, sw_time, sw_code, pcode, k1, k2, kr, hsz, srid, sarr, sinv, nsl,
          spos, alive, T, G, rf, rr, rmin, nrun, pend, npend, qest, jf, events, exq, uptr, rrnext, samp, tied,
          vals, admit, first, fin, replica, pos):  # noqa: C901 - one driver loop, kept flat on purpose
    """Run requests ``j`` (and switch ``sw``) onward; stop before a submit that would overflow a queue.

    Returns ``_DONE`` after the drain, or ``_FULL`` with ``pos = [j, sw]`` (nothing of request
    ``j`` done yet but its replicas' catch-up and routing, which a restart repeats with the
    same result: the catch-up is a no-op the second time and the router's uniforms are rewound).
    """
    n = arr.shape[0]
    N = T.shape[0]
    cap = kr.shape[1]
    nsw = sw_req.shape[0]
    work = False  # does a router read Engine.outstanding_work? (else the estimate ends need no upkeep)
    unit = 1.0 / grid
    W = exq.shape[1]
    for x in range(r_code.shape[0]):
        if r_code[x] == 3 or r_code[x] == 5:
            work = True
    while True:
        if j < n:
            if sw < nsw and sw_req[sw] == j:
                h = sw_time[sw]  # a switchback boundary crossed before this arrival
                kind = 1
            else:
                h = arr[j]
                kind = 0
        else:
            h = math.inf
            kind = 2
        # ---- every replica catches up: Engine.run_until(h), each decision point strictly before h
        for r in range(N):
            while T[r] < h:
                t = T[r]
                code = pcode[r]
                while nrun[r] < M:  # admissions, each with its encoder stall
                    if (hsz[r] if code <= 2 else nsl[r]) == 0 or t >= h:
                        break
                    if code <= 2:  # heap pop (KeyQueue order: key, arrival, submission)
                        q = kr[r, 0]
                        m = hsz[r] - 1
                        hsz[r] = m
                        if m > 0:
                            x1 = k1[r, m]
                            x2 = k2[r, m]
                            xr = kr[r, m]
                            i = 0
                            while True:
                                c = 2 * i + 1
                                if c >= m:
                                    break
                                if c + 1 < m and _less(k1[r, c + 1], k2[r, c + 1], kr[r, c + 1], k1[r, c], k2[r, c],
                                                       kr[r, c]):
                                    c += 1
                                if _less(k1[r, c], k2[r, c], kr[r, c], x1, x2, xr):
                                    k1[r, i] = k1[r, c]
                                    k2[r, i] = k2[r, c]
                                    kr[r, i] = kr[r, c]
                                    i = c
                                else:
                                    break
                            k1[r, i] = x1
                            k2[r, i] = x2
                            kr[r, i] = xr
                    else:
                        q = _q_pop(code, r, t, arr, est, low_depth, ratio_cap, k1, k2, kr, hsz, srid, sarr, sinv,
                                   nsl, spos, alive)
                    qest[r] -= est[q]
                    admit[q] = t
                    t += enc[q]
                    b = nrun[r]  # into the next free slot of the running set
                    f = G[r] + tok[q]
                    rf[r, b] = f
                    rr[r, b] = q
                    if f < rmin[r]:
                        rmin[r] = f
                    if work:  # its estimate end, in grid units (order-free: integer sums are exact)
                        exq[r, b] = G[r] * grid + est_q[q]
                    nrun[r] = b + 1
                    pend[r, npend[r]] = q
                    npend[r] += 1
                T[r] = t
                if t >= h and nrun[r] < M:
                    break
                events[r] += 1
                if nrun[r] == 0:
                    jf[r] = 0
                    if h < math.inf:
                        T[r] = max(t, h)
                    break
                b = nrun[r]
                st = steps[b]
                k = rmin[r] - G[r]  # decode steps to the next completion ...
                if b < M and h < math.inf:  # ... or to the first step boundary at or after h
                    ka = max(1, math.ceil((h - t) / st - 1e-9))
                    if ka < k:
                        k = ka
                if npend[r] > 0:
                    ft = t + st
                    for i in range(npend[r]):
                        first[pend[r, i]] = ft
                    npend[r] = 0
                t += k * st
                G[r] += k
                T[r] = t
                nf = 0
                g = G[r]
                if rmin[r] == g:  # completions: every slot finishing at step g leaves, the last slot takes its place
                    m = nrun[r]
                    lo = _NOSTEP  # one vector pass over the whole row (free slots hold _NOSTEP): how many
                    hit = 0  # finish here, which one (when one does), and the next completion step after
                    at = 0
                    for i in range(W):
                        f = rf[r, i]
                        x = f == g
                        hit += x
                        at += i * x
                        lo = min(lo, _NOSTEP if x else f)
                    i = at if hit == 1 else 0  # the common case, one leaving, goes straight to its slot
                    left = hit
                    while left > 0:
                        if rf[r, i] == g:
                            fin[rr[r, i]] = t + overhead
                            left -= 1
                            m -= 1
                            rf[r, i] = rf[r, m]
                            rr[r, i] = rr[r, m]
                            exq[r, i] = exq[r, m]
                            rf[r, m] = _NOSTEP
                            exq[r, m] = _NONE
                        else:
                            i += 1
                    nf = hit
                    nrun[r] = m
                    rmin[r] = lo
                jf[r] = nf
        if kind == 2:
            return _DONE
        if kind == 1:
            for r in range(N):
                _set_policy(r, sw_code[sw], pcode, arr, est, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive)
            sw += 1
            continue
        # ---- route request j
        a = h
        arm = route_arm[j]
        inst = inst_of_arm[arm]
        rc = r_code[inst]
        nc = ncand[arm]
        u0 = uptr[inst]
        if rc == 0:  # random
            i = min(int(U[inst, uptr[inst]] * nc), nc - 1)
            uptr[inst] += 1
            dst = cands[arm, i]
        elif rc == 1:  # round robin
            dst = cands[arm, rrnext[inst] % nc]
        else:
            if rc <= 3:  # jsq / least_work: every candidate
                nv = nc
                for c in range(nc):
                    samp[c] = cands[arm, c]
            else:  # power of d: d distinct candidates (partial Fisher-Yates), the first of them wins ties
                for c in range(nc):
                    samp[c] = cands[arm, c]
                nv = min(r_d[inst], nc)
                for c in range(nv):
                    x = c + min(int(U[inst, uptr[inst]] * (nc - c)), nc - c - 1)
                    uptr[inst] += 1
                    y = samp[c]
                    samp[c] = samp[x]
                    samp[x] = y
                if nv == 1:
                    nv = 0  # one sample: no load to compare
            for c in range(nv):  # what the router sees of each
                r = samp[c]
                if rc == 2 or rc == 4:  # Engine.n_in_system
                    vals[c] = (hsz[r] if pcode[r] <= 2 else nsl[r]) + nrun[r] + (jf[r] if T[r] > a else 0)
                else:  # Engine.outstanding_work: the same value, bit for bit
                    b = nrun[r]
                    if b == 0:
                        vals[c] = qest[r]
                        continue
                    st = steps[b]
                    g = G[r]
                    if T[r] > a:
                        g -= int((T[r] - a) / st)
                    gq = g * grid
                    # the engine's (suffix sum of the ends past step g) - (their count) x g, exact on the grid:
                    # the same value as its float operations give, whatever the order
                    w = 0
                    for i in range(W):  # the whole row (unused slots hold _NONE): fixed length, no branches
                        w += max(exq[r, i] - gq, 0)
                    vals[c] = qest[r] + (float(w) * unit) * st
            if rc <= 3:  # the least, ties broken by a uniform among the tied (in candidate order)
                mv = np.inf
                for c in range(nc):
                    mv = min(mv, vals[c])
                nt = 0
                for c in range(nc):  # no branches: write, then keep it if tied
                    tied[nt] = samp[c]
                    nt += vals[c] == mv
                if nt == 1:
                    dst = tied[0]
                else:
                    dst = tied[min(int(U[inst, uptr[inst]] * nt), nt - 1)]
                    uptr[inst] += 1
            else:
                dst = samp[0]
                if nv > 1:
                    bv = vals[0]
                    for c in range(1, nv):
                        if vals[c] < bv:
                            dst = samp[c]
                            bv = vals[c]
        # ---- submit (Engine.submit)
        if max(hsz[dst], nsl[dst]) >= cap:
            uptr[inst] = u0  # rewound: the restart routes this request again, with the same draws
            pos[0] = j
            pos[1] = sw
            return _FULL
        if rc == 1:
            rrnext[inst] += 1
        code = pcode[dst]
        if code <= 2:  # heap push, inline (the order of KeyQueue: key, arrival, submission)
            if code == 0:
                x1 = arr[j]
                x2 = 0.0
            elif code == 2:
                x1 = -est[j]
                x2 = arr[j]
            else:
                x1 = est[j]
                x2 = arr[j]
            i = hsz[dst]
            hsz[dst] = i + 1
            while i > 0:
                p = (i - 1) >> 1
                if _less(x1, x2, j, k1[dst, p], k2[dst, p], kr[dst, p]):
                    k1[dst, i] = k1[dst, p]
                    k2[dst, i] = k2[dst, p]
                    kr[dst, i] = kr[dst, p]
                    i = p
                else:
                    break
            k1[dst, i] = x1
            k2[dst, i] = x2
            kr[dst, i] = j
        else:
            _q_push(code, dst, j, arr, est, k1, k2, kr, hsz, srid, sarr, sinv, nsl, spos, alive)
        qest[dst] += est[j]
        if nrun[dst] == 0 and T[dst] < a:
            T[dst] = a
        replica[j] = dst
        j += 1


@njit(cache=True)
def _grow(x, cap):
    y = np.empty((x.shape[0], cap), x.dtype)
    y[:, :x.shape[1]] = x
    return y


@njit(cache=True)
def _fleet(arr, est, enc, tok, est_q, grid, M, steps, overhead, pol0, low_depth, ratio_cap, route_arm, inst_of_arm,
           r_code, r_d, U, cands, ncand, sw_req, sw_time, sw_code, admit, first, fin, replica):
    n = arr.shape[0]
    N = pol0.shape[0]
    admit[:] = np.nan
    first[:] = np.nan
    fin[:] = np.nan
    replica[:] = 0
    pcode = pol0.copy()
    cap = 256
    k1 = np.empty((N, cap))
    k2 = np.empty((N, cap))
    kr = np.empty((N, cap), np.int64)
    hsz = np.zeros(N, np.int64)
    srid = np.empty((N, cap), np.int64)
    sarr = np.empty((N, cap))
    sinv = np.empty((N, cap))
    nsl = np.zeros(N, np.int64)
    spos = np.zeros(n, np.int64)
    alive = np.zeros(n, np.bool_)
    T = np.zeros(N)
    G = np.zeros(N, np.int64)
    W = (M + 7) // 8 * 8  # slots of the running set: rows in whole SIMD widths
    rf = np.full((N, W), _NOSTEP, np.int64)
    rr = np.zeros((N, W), np.int64)
    rmin = np.full(N, _NOSTEP, np.int64)
    nrun = np.zeros(N, np.int64)
    pend = np.empty((N, M), np.int64)
    npend = np.zeros(N, np.int64)
    qest = np.zeros(N)
    jf = np.zeros(N, np.int64)
    events = np.zeros(N, np.int64)
    exq = np.full((N, W), _NONE, np.int64)
    uptr = np.zeros(U.shape[0], np.int64)
    rrnext = np.zeros(U.shape[0], np.int64)
    samp = np.empty(N, np.int64)
    tied = np.empty(N, np.int64)
    vals = np.empty(N)
    pos = np.zeros(2, np.int64)
    j = 0
    sw = 0
    while _loop(j, sw, arr, est, enc, tok, est_q, grid, M, steps, overhead, low_depth, ratio_cap, route_arm,
                inst_of_arm, r_code, r_d, U, cands, ncand, sw_req, sw_time, sw_code, pcode, k1, k2, kr, hsz, srid,
                sarr, sinv, nsl, spos, alive, T, G, rf, rr, rmin, nrun, pend, npend, qest, jf, events, exq,
                uptr, rrnext, samp, tied, vals, admit, first, fin, replica, pos) == _FULL:
        j = pos[0]
        sw = pos[1]
        cap *= 2  # a waiting queue is full: double every queue's room, then go on from request j
        k1 = _grow(k1, cap)
        k2 = _grow(k2, cap)
        kr = _grow(kr, cap)
        srid = _grow(srid, cap)
        sarr = _grow(sarr, cap)
        sinv = _grow(sinv, cap)
    return events.sum()


# ----------------------------------------------------------------------------- per-request inputs

@njit(cache=True)
def _request_inputs(duration, codes, kappa, window_s, enc_s, step1, overhead, grid):
    """:func:`request_inputs` in one pass (the operations of the numpy expressions it replaces)."""
    n = duration.shape[0]
    est = np.empty(n)
    enc = np.empty(n)
    tok = np.empty(n)
    for i in range(n):
        d = duration[i]
        w = max(1.0, math.ceil(d / window_s - 1e-9))  # ServiceModel.windows (a whole number)
        e = w * enc_s
        t = kappa[codes[i]] * d  # ServiceModel.est_tokens
        est[i] = e + t * step1 + overhead  # ServiceModel.service_time at batch 1
        enc[i] = e
        tok[i] = np.rint(t * grid) / grid  # asrsched.sim.engine.work_tokens
    return est, enc, tok


def request_inputs(duration, codes, kappa, *, window_s: float, encode_s_per_window: float, step1_s: float,
                   overhead_s: float):
    """``(est_service, encoder s, size estimate on the work grid)`` of every request, in one compiled pass.

    Bit for bit what :func:`asrsched.sim.engine.estimate_services`,
    ``ServiceModel.windows(d) * encode_s_per_window`` and
    ``work_tokens(ServiceModel.est_tokens(d, language))`` give (``tests/test_fleet_compiled.py``
    compares them): the same floating-point operations in the same order, without the dozen
    temporary arrays of the numpy expressions. ``codes`` index ``kappa`` (tokens per second
    of speech of each language); ``step1_s`` is ``ServiceModel.step_s(1)``. Durations must be
    finite and >= 0 (the caller checks; numpy and this pass differ on NaN).
    """
    return _request_inputs(np.ascontiguousarray(duration, np.float64), np.ascontiguousarray(codes, np.int64),
                           np.ascontiguousarray(kappa, np.float64), float(window_s), float(encode_s_per_window),
                           float(step1_s), float(overhead_s), float(WORK_TOKEN_GRID))


# ----------------------------------------------------------------------------- Python entry

def router_code(key: str) -> int:
    """Kernel code of a registry key (``random`` ... ``pod_work``)."""
    return COMPILED_ROUTERS[key]


def run_fleet_kernel(arrival, est, enc, tokens, est_tok, *, max_num_seqs: int, steps, overhead: float,
                     policies, route_arm, routers, cands, switches=(), policy_params: dict | None = None, out=None):
    """Run the compiled fleet; returns ``(admit, first_token, finish, replica, events)``.

    ``out``: four arrays of one entry per request (float64, float64, float64, int64; each
    C-contiguous) to write ``admit``, ``first_token``, ``finish`` and ``replica`` into (e.g. rows
    of the records' blocks); by default new ones.

    ``policies``: the initial policy name of each replica; ``route_arm[j]`` the arm (0/1) whose
    router and candidate replicas route request ``j``; ``routers[arm]`` a tuple
    ``(registry key, d, uniforms, instance)`` where requests of both arms that name the same
    ``instance`` share one router (its uniform stream and round-robin pointer);
    ``cands[arm]`` the candidate replicas of that arm; ``switches`` a list of
    ``(request index, time, policy)``: before dispatching that request, every replica
    catches up to ``time`` and re-orders its queue under ``policy``.
    """
    N = len(policies)
    x = np.asarray(est_tok, np.float64) * WORK_TOKEN_GRID  # exact: a power of two
    est_q = x.astype(np.int64)
    if not np.array_equal(est_q, x):
        raise ValueError("est_tok: the size estimates must lie on the grid of asrsched.sim.engine.work_tokens")
    pp = dict(policy_params or {})
    low_depth = int(pp.pop("low_depth", 4))
    ratio_cap = float(pp.pop("ratio_cap", 50.0))
    if pp:
        raise ValueError(f"policy_params: {sorted(pp)} not understood by the compiled fleet")
    n_inst = max(r[3] for r in routers) + 1
    K = max(len(r[2]) for r in routers)
    U = np.zeros((n_inst, max(K, 1)))
    r_code = np.zeros(n_inst, np.int64)
    r_d = np.ones(n_inst, np.int64)
    A = len(routers)
    inst_of_arm = np.zeros(A, np.int64)
    for arm, (key, d, u, inst) in enumerate(routers):
        U[inst, :len(u)] = u
        r_code[inst] = COMPILED_ROUTERS[key]
        r_d[inst] = int(d)
        inst_of_arm[arm] = inst
    C = np.zeros((A, N), np.int64)
    nc = np.zeros(A, np.int64)
    for arm in range(A):
        c = list(cands[arm])
        C[arm, :len(c)] = c
        nc[arm] = len(c)
    sw_req = np.array([s[0] for s in switches], np.int64)
    sw_time = np.array([s[1] for s in switches], np.float64)
    sw_code = np.array([COMPILED_POLICIES[s[2]] for s in switches], np.int64)
    n = len(arrival)
    if out is None:
        out = (np.empty(n), np.empty(n), np.empty(n), np.empty(n, np.int64))
    admit, first, fin, replica = out
    for x, dt in zip(out, (np.float64, np.float64, np.float64, np.int64)):
        if x.dtype != dt or x.shape != (n,) or not x.flags.c_contiguous or not x.flags.writeable:
            raise ValueError("out: need four writeable C-contiguous arrays of one entry per request "
                             "(float64 x 3, int64)")
    events = _fleet(
        np.ascontiguousarray(arrival, np.float64), np.ascontiguousarray(est, np.float64),
        np.ascontiguousarray(enc, np.float64), np.ascontiguousarray(tokens, np.int64),
        est_q, WORK_TOKEN_GRID, int(max_num_seqs), np.asarray(steps, np.float64), float(overhead),
        np.array([COMPILED_POLICIES[p] for p in policies], np.int64), low_depth, ratio_cap,
        np.ascontiguousarray(route_arm, np.int64), inst_of_arm, r_code, r_d, U, C, nc, sw_req, sw_time, sw_code,
        admit, first, fin, replica)
    return admit, first, fin, replica, int(events)
