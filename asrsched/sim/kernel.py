"""The compiled ASR engine: N continuous-batching replicas behind a router, one numba loop.

One model, written once in Python (:class:`asrsched.sim.engine.Engine`, the readable
specification, driven by :func:`~asrsched.sim.engine.simulate` and by the fleet of
:mod:`asrsched.sim.fleet`) and once here. A single server is a fleet of one replica;
:mod:`asrsched.sim.compiled` drives this loop for both (tests compare the two engines'
records, timelines, event and mode counts decision by decision).

What :func:`run` does, request by request in arrival order (the driver protocol of the
Python fleet): every replica processes its decision points before the arrival
(:meth:`Engine.run_until <asrsched.sim.engine.Engine.run_until>`: admissions, each stalling
the batch for its encoder pass, then a jump over the decode steps to the next completion or,
while a slot is free, to the first step boundary at or after the arrival), the request's
router picks a replica from what it can see (:meth:`~asrsched.sim.engine.Engine.n_in_system`,
:meth:`~asrsched.sim.engine.Engine.outstanding_work`), and the request joins that replica's
waiting queue (:meth:`~asrsched.sim.engine.Engine.submit`). A policy switch (a switchback or
replica x block boundary) first catches every replica up to its time, as an arrival does, then
re-orders the waiting queue of its replica, or of every replica when its replica is ``-1``
(:meth:`~asrsched.sim.engine.Engine.set_policy`). Queues and policy
rules come from :mod:`asrsched.core.rulebook` (:func:`~asrsched.core.rulebook.queue_push`,
:func:`~asrsched.core.rulebook.queue_pop`, :func:`~asrsched.core.rulebook.queue_set_policy`).

State, packed (every array is owned by the driver, so a call resumes where the last stopped):

* :class:`Params` -- the run's constants (``steps[b]``: the decode step time at batch ``b``);
* :class:`Requests` -- per-request inputs: arrival, size estimate ``est`` (s), encoder time,
  true tokens, the estimate in tokens on the grid of :func:`~asrsched.sim.engine.work_tokens`
  (``est_q``, integer multiples), a static policy's key;
* :class:`Queues` -- every replica's waiting queue in flat arrays (replica ``r`` at offset
  ``r * cap``): heap, slot store, FIFO links;
* :class:`Replicas` -- per-replica scalars (clock, decode step, counts, policy, mode counts, pushes into
  the waiting queue since its policy was set);
* :class:`Running` -- the running sets: rows of ``W`` slots (``max_num_seqs`` rounded up to
  whole SIMD widths; free slots hold sentinels), unordered; a completion is one vector pass
  over the row (cheaper than a heap's chain of unpredictable branches);
* :class:`Routing` -- each arm's router (code, ``d``, its pre-drawn uniforms: the numbers the
  Python router draws from its generator) and candidate replicas;
* :class:`Switches` (per switch: request index, time, policy code, and replica, ``-1`` for every one),
  :class:`Output` (per-request times, the finished-record buffer, the timeline);
* ``ctl`` -- the loop's position and counters (:data:`CTL`).

:func:`run` returns :data:`DONE` (drained), :data:`MORE` (every arrival of a non-final chunk
submitted: the next may arrive before the next decision), :data:`FLUSH` (the finished-record
buffer reached ``flush_at``) or :data:`FULL` (a waiting queue needs more room; nothing of the
request being routed has happened). The driver acts and calls again.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from asrsched.core.rulebook import FCFS, insertion_sort, queue_pop, queue_push, queue_set_policy
from asrsched.sim.cache import guard_numba_cache

__all__ = [
    "Params",
    "Requests",
    "Queues",
    "Replicas",
    "Running",
    "Routing",
    "Switches",
    "Output",
    "run",
    "call",
    "ROUTER_CODES",
    "CTL",
    "DONE",
    "MORE",
    "FLUSH",
    "FULL",
    "NOSTEP",
    "NONE",
]

Params = namedtuple(
    "Params", "max_num_seqs steps overhead low_depth ratio_cap min_service grid final flush_at keep_out timeline work"
)
Requests = namedtuple("Requests", "arrival est enc tokens est_q key")
Queues = namedtuple("Queues", "k1 k2 kid sid sarr sinv spos alive nxt")
Replicas = namedtuple(
    "Replicas", "t step nrun next_fin npend nwait heap_n slot_n head tail est_wait just_fin events policy modes pushes"
)
Running = namedtuple("Running", "fin_step rid est_end pend")
Routing = namedtuple("Routing", "arm inst_of_arm code d U uptr rrnext cands ncand samp tied vals")
Switches = namedtuple("Switches", "req time code replica")
Output = namedtuple("Output", "admit first finish replica out_j tl_t tl_r tl_q tl_open")

ROUTER_CODES = {"random": 0, "round_robin": 1, "jsq": 2, "least_work": 3, "pod": 4, "pod_work": 5}
_RANDOM, _ROUND_ROBIN, _JSQ, _LEAST_WORK, _POD, _POD_WORK = range(6)
#: slots of ``ctl``: next request, next switch, replica to resume at, records in the buffer,
#: timeline points, timeline stride and decision count
CTL = {"j": 0, "sw": 1, "r0": 2, "n_out": 3, "tl_n": 4, "stride": 5, "count": 6}
_J, _SW, _R0, _NOUT, _TLN, _STRIDE, _COUNT = range(7)
DONE, MORE, FLUSH, FULL = 0, 1, 2, 3
NONE = -(1 << 62)  # an empty slot's estimate end (never past any step)
NOSTEP = 1 << 62  # an empty slot's finish step, and the next completion of an empty running set


# ----------------------------------------------------------------------------- the loop's helpers
#
# The kernel and its helpers (here and the rulebook's queue_push/queue_pop) take arrays and scalars as
# arguments, never the namedtuples, and the loop takes no array slices: numba then proves every
# reference count redundant and emits none. A tuple argument holding an array, or one slice method
# call, defeats that proof for the whole function, and every inlined helper call then costs atomic
# increments and decrements (more than the loop's own work).


@njit(cache=True, inline="always")
def _record(final, arrival, nrun, nwait, tl_t, tl_r, tl_q, tl_open, ctl, t, j, count):
    """A timeline point at a decision of replica 0 (the time, running, and waiting with the arrivals up to ``t``);
    the decisions until the next point."""
    n = arrival.shape[0]
    k = j
    while k < n and arrival[k] <= t:  # arrived, not yet submitted: waiting too
        k += 1
    i = ctl[_TLN]
    tl_t[i] = t
    tl_r[i] = nrun
    tl_q[i] = nwait + k - j
    tl_open[i] = k == n and not final  # arrivals of the next chunk up to t are waiting too
    i += 1
    stride = ctl[_STRIDE]
    if i >= tl_t.shape[0]:  # stride doubling: keep every other point
        half = 0
        for x in range(0, i, 2):
            tl_t[half] = tl_t[x]
            tl_r[half] = tl_r[x]
            tl_q[half] = tl_q[x]
            tl_open[half] = tl_open[x]
            half += 1
        i = half
        stride *= 2
        ctl[_STRIDE] = stride
    ctl[_TLN] = i
    return stride - count % stride  # a point at every decision count that is a multiple of the stride


# ----------------------------------------------------------------------------- the loop


@njit(cache=True)
def run(M, steps, overhead, low_depth, ratio_cap, min_service, grid, final, flush_at, keep_out, timeline, work,  # noqa: C901
        # (the engine's one loop, kept flat: see above; one line per namedtuple, unformatted) the fields of Params, then
        arrival, est, enc, tokens, est_q, key,  # Requests
        k1, k2, kid, sid, sarr, sinv, spos, alive, nxt,  # Queues
        T, G, nrun, next_fin, npend, nwait, heap_n, slot_n, head, tail, est_wait, just_fin, events, policy,  # Replicas
        modes, pushes,
        fin_step, rid, est_end, pend,  # Running
        route_arm, inst_of_arm, r_code, r_d, U, uptr, rrnext, cands, ncand, samp, tied, vals,  # Routing
        sw_req, sw_time, sw_code, sw_rep,  # Switches
        admit, first, finish, replica, out_j, tl_t, tl_r, tl_q, tl_open,  # Output
        ctl):  # fmt: skip
    """Run from ``ctl``'s position until DONE, MORE, FLUSH or FULL (see the module docstring).

    The arguments are the fields of :class:`Params`, :class:`Requests`, :class:`Queues`,
    :class:`Replicas` (``T`` is its ``t``, ``G`` its ``step``), :class:`Running`, :class:`Routing`,
    :class:`Switches` and :class:`Output`, in order (:func:`call` passes them so), then ``ctl``.
    """
    n = arrival.shape[0]
    N = T.shape[0]
    W = fin_step.shape[1]
    cap = kid.shape[0] // N
    nsw = sw_req.shape[0]
    j = ctl[_J]
    s = ctl[_SW]
    r0 = ctl[_R0]
    count = ctl[_COUNT]  # decisions of replica 0 so far, and until the next timeline point
    skip = ctl[_STRIDE] - count % ctl[_STRIDE]
    status = DONE
    while True:
        if j < n:
            if s < nsw and sw_req[s] == j:
                h = sw_time[s]  # a switchback boundary crossed before this arrival
                kind = 1
            else:
                h = arrival[j]
                kind = 0
        elif not final:
            status = MORE
            break
        else:
            h = math.inf
            kind = 2
        # ---- every replica catches up: Engine.run_until(h), each decision point strictly before h
        for r in range(N):
            if r < r0 or T[r] >= h:
                continue
            # the replica's scalars in registers for the catch-up (stores to the per-request arrays
            # would otherwise force them to be reloaded), written back at its end
            t, g, nr, nfin, npd, nw, ew, jf, ev = (
                T[r],
                G[r],
                nrun[r],
                next_fin[r],
                npend[r],
                nwait[r],
                est_wait[r],
                just_fin[r],
                events[r],
            )
            code = policy[r]
            while t < h:
                while nr < M:  # admissions, each with its encoder stall
                    if nw == 0 or t >= h:  # arrivals during the encodes compete for the remaining slots
                        break
                    jq = queue_pop(
                        code,
                        r,
                        t,
                        r * cap,
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
                    )
                    nw -= 1
                    if work:
                        ew -= est[jq]
                    admit[jq] = t
                    t += enc[jq]
                    f = g + tokens[jq]  # into the next free slot of the running set
                    fin_step[r, nr] = f
                    rid[r, nr] = jq
                    if f < nfin:
                        nfin = f
                    if work:  # its estimate end, in grid units (integer sums are exact in any order)
                        est_end[r, nr] = g * grid + est_q[jq]
                    nr += 1
                    pend[r, npd] = jq
                    npd += 1
                if t >= h and nr < M:
                    break  # a slot is free: the arrivals up to t are submitted first
                ev += 1
                if timeline and r == 0:
                    count += 1
                    skip -= 1
                    if skip == 0:
                        skip = _record(final, arrival, nr, nw, tl_t, tl_r, tl_q, tl_open, ctl, t, j, count)
                if nr == 0:  # idle: nothing happens before the next submit
                    jf = 0
                    if h < math.inf:
                        t = max(t, h)
                    break
                st = steps[nr]
                k = nfin - g  # decode steps to the next completion ...
                if nr < M and h < math.inf:  # ... or to the first step boundary at or after h
                    ka = max(1, math.ceil((h - t) / st - 1e-9))
                    if ka < k:
                        k = ka
                if npd > 0:
                    ft = t + st
                    for i in range(npd):
                        first[pend[r, i]] = ft
                    npd = 0
                t += k * st
                g += k
                jf = 0
                if nfin == g:  # completions: every slot finishing at step g leaves, the last slot moves in
                    lo = NOSTEP  # one vector pass over the whole row (free slots hold NOSTEP): how many finish
                    hit = 0  # here, which one (when one does), and the next completion step after
                    at = 0
                    for i in range(W):
                        f = fin_step[r, i]
                        x = f == g
                        hit += x
                        at += i * x
                        lo = min(lo, NOSTEP if x else f)
                    i = at if hit == 1 else 0  # the common case, one leaving, goes straight to its slot
                    left = hit
                    n_out = ctl[_NOUT]
                    while left > 0:
                        if fin_step[r, i] == g:
                            jq = rid[r, i]
                            finish[jq] = t + overhead
                            if keep_out:
                                out_j[n_out] = jq
                                n_out += 1
                            left -= 1
                            nr -= 1
                            fin_step[r, i] = fin_step[r, nr]
                            rid[r, i] = rid[r, nr]
                            est_end[r, i] = est_end[r, nr]
                            fin_step[r, nr] = NOSTEP
                            est_end[r, nr] = NONE
                        else:
                            i += 1
                    if keep_out:
                        if hit > 1:  # records leave in request order within a step (as the Engine's heap)
                            insertion_sort(out_j, n_out - hit, n_out)
                        ctl[_NOUT] = n_out
                    jf = hit
                    nfin = lo
                if keep_out and ctl[_NOUT] >= flush_at:
                    status = FLUSH
                    break
            T[r], G[r], nrun[r], next_fin[r], npend[r], nwait[r], est_wait[r], just_fin[r], events[r] = (
                t,
                g,
                nr,
                nfin,
                npd,
                nw,
                ew,
                jf,
                ev,
            )
            if status == FLUSH:
                r0 = r
                break
        if status == FLUSH:
            break
        r0 = 0
        if kind == 2:
            break
        if kind == 1:  # every replica has caught up; the switch's replica (-1: every one) re-orders its queue
            r_lo = sw_rep[s] if sw_rep[s] >= 0 else 0
            r_hi = r_lo + 1 if sw_rep[s] >= 0 else N
            if sw_code[s] != FCFS:  # the re-pushed queues need room for every waiting request
                for r in range(r_lo, r_hi):
                    if nwait[r] >= cap:
                        status = FULL
                if status == FULL:
                    break
            for r in range(r_lo, r_hi):
                queue_set_policy(
                    r,
                    sw_code[s],
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
                )
            s += 1
            continue
        # ---- route request j: what its arm's router sees of each candidate at a = h
        a = h
        dst = 0  # one replica: nothing to choose (a router's draws could change nothing: its stream serves only this)
        rc = -1
        inst = 0
        u0 = 0
        if N > 1:
            arm = route_arm[j]
            inst = inst_of_arm[arm]
            rc = r_code[inst]
            nc = ncand[arm]
            u0 = uptr[inst]
        if N == 1:
            pass
        elif rc == _RANDOM:
            i = min(int(U[inst, uptr[inst]] * nc), nc - 1)
            uptr[inst] += 1
            dst = cands[arm, i]
        elif rc == _ROUND_ROBIN:
            dst = cands[arm, rrnext[inst] % nc]
        else:
            for c in range(nc):
                samp[c] = cands[arm, c]
            nv = nc  # jsq / least_work: every candidate
            if rc >= _POD:  # power of d: d distinct candidates (partial Fisher-Yates), the first wins ties
                nv = min(r_d[inst], nc)
                for c in range(nv):
                    x = c + min(int(U[inst, uptr[inst]] * (nc - c)), nc - c - 1)
                    uptr[inst] += 1
                    y = samp[c]
                    samp[c] = samp[x]
                    samp[x] = y
                if nv == 1:
                    nv = 0  # one sample: no load to compare
            for c in range(nv):
                r = samp[c]
                if rc == _JSQ or rc == _POD:  # Engine.n_in_system
                    vals[c] = nwait[r] + nrun[r] + (just_fin[r] if T[r] > a else 0)
                else:  # Engine.outstanding_work: the same value, bit for bit (sums exact on the grid)
                    b = nrun[r]
                    if b == 0:
                        vals[c] = est_wait[r]
                        continue
                    st = steps[b]
                    g = G[r]
                    if T[r] > a:
                        g -= int((T[r] - a) / st)
                    gq = g * grid
                    w = 0
                    for i in range(W):  # the whole row (free slots hold NONE): fixed length, no branches
                        w += max(est_end[r, i] - gq, 0)
                    vals[c] = est_wait[r] + (float(w) * (1.0 / grid)) * st
            if rc >= _POD:
                dst = samp[0]
                if nv > 1:
                    bv = vals[0]
                    for c in range(1, nv):
                        if vals[c] < bv:
                            dst = samp[c]
                            bv = vals[c]
            else:  # the least, ties broken by a uniform among the tied (in candidate order)
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
        # ---- submit (Engine.submit)
        if max(heap_n[dst], slot_n[dst]) >= cap:
            uptr[inst] = u0  # rewound: the call after the queues grow routes this request again, same draws
            status = FULL
            break
        if rc == _ROUND_ROBIN:
            rrnext[inst] += 1
        queue_push(
            policy[dst],
            dst,
            j,
            dst * cap,
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
        nwait[dst] += 1
        if work:
            est_wait[dst] += est[j]
        if nrun[dst] == 0 and T[dst] < a:
            T[dst] = a
        if N > 1:
            replica[j] = dst
        j += 1
    ctl[_J] = j
    ctl[_SW] = s
    ctl[_R0] = r0
    ctl[_COUNT] = count
    return status


# run inlines the rulebook's queue functions: its cached machine code is keyed by the code it is compiled from
guard_numba_cache(run)


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def call(
    p: Params,
    req: Requests,
    q: Queues,
    rep: Replicas,
    rs: Running,
    ro: Routing,
    sw: Switches,
    out: Output,
    ctl: np.ndarray,
) -> int:
    """:func:`run` on the packed state (its arguments in order); the status.

    The kernel only reads a request's arrival, estimate, encoder time and tokens; they reach it as
    read-only views, whether the caller's arrays are writable or not (a trace's are read-only, a
    chunk's carried-over arrays are not): numba compiles one machine code per combination of those
    flags, so passing them one way keeps it to one compilation.
    """
    req = req._replace(
        arrival=_read_only(req.arrival), est=_read_only(req.est), enc=_read_only(req.enc), tokens=_read_only(req.tokens)
    )
    return run(*p, *req, *q, *rep, *rs, *ro, *sw, *out, ctl)
