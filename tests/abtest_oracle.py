"""Reference implementations of the A/B-test model and estimators: the oracles of the tests and the
baseline of ``benchmarks/bench_abtest.py`` (the pre-optimisation path of the study).

* :func:`linked_list_kernel`: the supermarket model on linked lists (pass it to
  ``simulate_supermarket(..., _kernel=linked_list_kernel)``);
* :func:`readable_dq`, :func:`readable_mixed_dq`: DQ and mixed DQ from the full numpy arrays of Q
  values and numpy masks, one horizon at a time (the package computes them from per-segment sums in
  one compiled pass, :func:`asrsched.abtest.estimators.dq_sweep`);
* :func:`reference_dq_sweep`: ``dq_sweep``'s output from the readable estimators;
* :func:`reference_simulate`: ``simulate_supermarket`` on the linked-list kernel with every per-job output;
* :func:`readable_time_q`: the Q values of a horizon counted in time by a loop over each decision's window
  (O(n L)), and :func:`readable_arm_centred_alpha`: the per-job weight from numpy masks.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrsched.abtest.estimators import Trajectory, batch_ci, optimal_alpha, q_values
from asrsched.abtest.model import simulate_supermarket
from asrsched.sim.rng import next_double as _next_double
from asrsched.sim.rng import std_exp as _std_exp


def np_diff_means(v: np.ndarray, z: np.ndarray) -> float:
    """Mean of ``v`` over ``z == 1`` minus over ``z == 0`` with numpy masks (NaN if an arm is empty)."""
    t = z == 1
    nt = int(t.sum())
    if nt == 0 or nt == t.size:
        return float("nan")
    return float(v[t].mean() - v[~t].mean())


def np_batch_diffs(v: np.ndarray, z: np.ndarray, n_batches: int) -> np.ndarray:
    """:func:`np_diff_means` on each of ``n_batches`` contiguous batches."""
    edges = np.linspace(0, v.size, n_batches + 1).astype(np.int64)
    st = edges[:-1]
    t = z == 1
    s1 = np.add.reduceat(np.where(t, v, 0.0), st)
    n1 = np.add.reduceat(t.astype(np.int64), st)
    s = np.add.reduceat(v, st)
    n0 = np.diff(edges) - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        d = s1 / n1 - (s - s1) / n0
    d[(n1 == 0) | (n0 == 0)] = np.nan
    return d


def _alpha_batches(m: int, L: int, alpha_batches: int) -> int:
    return max(3, min(int(alpha_batches), m // (5 * int(L))))


def readable_dq(tr: Trajectory, L: int, cost: str = "w", n_batches: int = 20):
    """DQ with cost ``cost`` at horizon ``L`` from the full array of Q values."""
    Q = q_values(tr, L, cost)
    z = tr.z[: Q.size]
    return batch_ci(f"{cost}dq", np_diff_means(Q, z), np_batch_diffs(Q, z, n_batches))


def readable_mixed_dq(tr: Trajectory, L: int, n_batches: int = 20, alpha_batches: int = 100, alpha=None):
    """Mixed DQ of wDQ and qDQ at horizon ``L``; ``alpha`` fixed or (``None``) the in-experiment weight."""
    return _readable_pair(tr, L, n_batches, alpha_batches, alpha)["mixed_dq"]


def _readable_pair(tr: Trajectory, L: int, n_batches: int, alpha_batches: int, alpha=None) -> dict:
    Qw = q_values(tr, L, "w")
    Qq = q_values(tr, L, "q")
    z = tr.z[: Qw.size]
    k = _alpha_batches(Qw.size, L, alpha_batches)
    a = optimal_alpha(np_batch_diffs(Qw, z, k), np_batch_diffs(Qq, z, k)) if alpha is None else float(alpha)
    bw = np_batch_diffs(Qw, z, n_batches)
    bq = np_batch_diffs(Qq, z, n_batches)
    vw, vq = np_diff_means(Qw, z), np_diff_means(Qq, z)
    return {
        "wdq": batch_ci("wdq", vw, bw),
        "qdq": batch_ci("qdq", vq, bq),
        "mixed_dq": batch_ci("mixed_dq", a * vw + (1 - a) * vq, a * bw + (1 - a) * bq, alpha=a),
    }


def reference_dq_sweep(tr: Trajectory, Ls, n_batches: int = 20, alpha_batches: int = 100, costs=("w", "q")) -> dict:
    """``dq_sweep(tr, Ls, ...)`` (costs ``w`` and ``q``) from the readable estimators, one horizon at a time."""
    if tuple(costs) != ("w", "q"):
        raise ValueError(f"costs: the reference computes ('w', 'q') only, got {costs!r}")
    return {int(L): _readable_pair(tr, int(L), n_batches, alpha_batches) for L in Ls}


def readable_time_q(tr: Trajectory, tau: float, cost: str = "w") -> np.ndarray:
    """Q of every decision k with ``t_k + tau <= t_{n-1}``: over the jobs j with ``t_k <= t_j < t_k + tau``
    (``L_k`` of them), the sum of their W (``cost="w"``) or of ``X(t_j-) / lam`` at jobs ``k+1 .. k+L_k``
    (``cost="q"``), one window at a time."""
    a = tr.arrival
    lam = tr.total_rate_at if tr.total_rate_at is not None else np.full(a.size, tr.total_rate)
    out = []
    for k in range(a.size):
        if a[k] + tau > a[-1]:
            break
        inside = np.flatnonzero((a >= a[k]) & (a < a[k] + tau))
        Lk = inside.size
        if cost == "w":
            out.append(tr.response[inside].sum())
        else:
            out.append((tr.n_before[k + 1 : k + Lk + 1] / lam[k + 1 : k + Lk + 1]).sum())
    return np.array(out)


def readable_arm_centred_alpha(qw: np.ndarray, qq: np.ndarray, z: np.ndarray) -> float:
    """``(V_q - C) / (V_w + V_q - 2 C)`` of ``qw``, ``qq`` centred on each arm's own mean (numpy masks, np.cov)."""
    t = z == 1
    cw, cq = qw.astype(float).copy(), qq.astype(float).copy()
    cw[t] -= qw[t].mean()
    cw[~t] -= qw[~t].mean()
    cq[t] -= qq[t].mean()
    cq[~t] -= qq[~t].mean()
    c = np.cov(np.vstack([cw, cq]), bias=True) + np.outer([cw.mean(), cq.mean()], [cw.mean(), cq.mean()])
    return float((c[1, 1] - c[0, 1]) / (c[0, 0] + c[1, 1] - 2 * c[0, 1]))


def reference_simulate(cfg, seed: int = 0, **_ignored) -> Trajectory:
    """``simulate_supermarket`` on :func:`linked_list_kernel` with every per-job output (the flags are ignored)."""
    return simulate_supermarket(cfg, seed, _kernel=linked_list_kernel)


@njit(cache=True)
def linked_list_kernel(
    n_requests,
    n_warm,
    rates,
    total_rate,
    amp,
    period,
    svc_kind,
    shape,
    d0,
    d1,
    design,
    p,
    group,
    block_len,
    alternate,
    delay,
    st,
    scan_max,
    keep,
):
    """The supermarket model on per-server linked lists over the job arrays, with its own heap:
    an independent implementation of :func:`asrsched.abtest.model._simulate` (same signature, same
    random draws in the same order), written before it; the package's kernel must match it bit for bit."""
    # every draw from ``st`` (xoshiro256++ state, asrsched.sim.rng), inlined into this loop
    N = rates.shape[0]
    total = n_warm + n_requests
    arr = np.empty(total)
    dep = np.empty(total)
    nxt = np.full(total, -1, np.int64)
    z = np.zeros(total, np.int8)
    keep_srv = (keep & 1) != 0  # per-job server and queue seen (bit 1), area at each arrival (bit 2)
    keep_area = (keep & 2) != 0
    srv = np.empty(total if keep_srv else 1, np.int32)
    qseen = np.empty(total if keep_srv else 1, np.int32)
    total_rate_at = np.empty(total if amp > 0.0 else 1)
    block = np.zeros(total if design == 2 else 1, np.int64)

    first = np.full(N, -1, np.int64)  # first job ever routed to s
    tail = np.full(N, -1, np.int64)  # last job routed to s
    n_routed = np.zeros(N, np.int64)
    lastdep = np.zeros(N)
    # current view: last job on s counted as departed by now, and how many; a binary
    # min-heap holds each busy server's next departure, so every departure is counted
    # once, in time order, when the first arrival after it comes
    cur_d = np.full(N, -1, np.int64)
    n_cur_d = np.zeros(N, np.int64)
    hkey = np.empty(N)
    hsrv = np.empty(N, np.int64)
    hsize = 0
    tot_dep = 0
    scan = N <= scan_max
    nextdep = np.full(N, np.inf)
    nb = np.empty(total, np.int32)
    # stale view (time now - delay): arrivals and departures counted by then
    st_a = np.full(N, -1, np.int64)
    n_st_a = np.zeros(N, np.int64)
    st_d = np.full(N, -1, np.int64)
    n_st_d = np.zeros(N, np.int64)

    # server pools: pool 0 = control servers, pool 1 = treatment servers (group design);
    # otherwise both pools hold all servers.
    pools = np.empty((2, N), np.int64)  # row z: the servers arm z routes to (indexed by row: the loop never
    m0 = 0  # rebinds an array variable)
    m1 = 0
    for s in range(N):
        if design != 1 or group[s] == 0:
            pools[0, m0] = s
            m0 += 1
        if design != 1 or group[s] == 1:
            pools[1, m1] = s
            m1 += 1

    inv_rate_max = 1.0 / (total_rate * (1.0 + amp))
    rate_max = total_rate * (1.0 + amp)
    two_pi = 2.0 * np.pi
    xm = (shape - 1.0) / shape if svc_kind == 2 else 1.0  # Pareto scale; ``shape``: the law's one parameter
    h2_p1 = 0.5 * (1.0 + np.sqrt((shape - 1.0) / (shape + 1.0))) if svc_kind == 4 else 0.5  # balanced-means H2
    t = 0.0
    cur_block = -1
    block_z = 0
    area_at = np.empty(total if keep_area else 1)  # integral of the number in system from 0 to each arrival
    acc = 0.0
    acc0 = 0.0

    for j in range(total):
        t_prev = t
        # ---- next arrival (thinning for the cyclic rate)
        if amp == 0.0:
            t += _std_exp(st) * inv_rate_max
        else:
            while True:
                t += _std_exp(st) * inv_rate_max
                lt = total_rate * (1.0 + amp * np.sin(two_pi * t / period))
                if _next_double(st) * rate_max <= lt:
                    break
            total_rate_at[j] = lt
        arr[j] = t
        acc += (j - tot_dep) * (t - t_prev)  # then minus (t - d) for each departure d in (t_prev, t]

        # ---- departures up to t
        if scan:
            # few servers: scan every server's next departure (cheap, branch-predictable)
            for s in range(N):
                while nextdep[s] <= t:
                    acc -= t - nextdep[s]
                    c = first[s] if cur_d[s] == -1 else nxt[cur_d[s]]
                    cur_d[s] = c
                    n_cur_d[s] += 1
                    tot_dep += 1
                    c = nxt[c]
                    nextdep[s] = dep[c] if c != -1 else np.inf
        else:
            # many servers: pop servers whose next departure is due from a binary min-heap
            while hsize > 0 and hkey[0] <= t:
                s = hsrv[0]
                acc -= t - hkey[0]
                c = first[s] if cur_d[s] == -1 else nxt[cur_d[s]]
                cur_d[s] = c
                n_cur_d[s] += 1
                tot_dep += 1
                c = nxt[c]
                if c != -1:
                    key = dep[c]
                else:
                    hsize -= 1
                    key = hkey[hsize]
                    s = hsrv[hsize]
                i = 0
                while True:
                    ch = 2 * i + 1
                    if ch >= hsize:
                        break
                    if ch + 1 < hsize and hkey[ch + 1] < hkey[ch]:
                        ch += 1
                    if key <= hkey[ch]:
                        break
                    hkey[i] = hkey[ch]
                    hsrv[i] = hsrv[ch]
                    i = ch
                if hsize > 0:
                    hkey[i] = key
                    hsrv[i] = s
        nb[j] = j - tot_dep
        if keep_area:
            area_at[j] = acc
        if j == n_warm:
            acc0 = acc

        # ---- assignment
        if design <= 1:
            zj = 1 if _next_double(st) < p else 0
        elif design == 2:
            k = int(np.floor(t / block_len))
            if k != cur_block:
                cur_block = k
                if alternate:
                    block_z = k % 2
                else:
                    block_z = 1 if _next_double(st) < p else 0
            zj = block_z
            block[j] = k
        elif design == 3:
            zj = 0
        else:
            zj = 1
        z[j] = zj
        if zj == 1:
            d = d1
            m = m1
        else:
            d = d0
            m = m0

        # ---- sample d distinct servers (partial Fisher-Yates on the pool), join the shortest
        best = -1
        bestq = 1 << 60
        tau = t - delay
        for i in range(d):
            r = i + int(_next_double(st) * (m - i))
            if r >= m:
                r = m - 1
            s = pools[zj, r]
            if d > 1:
                pools[zj, r] = pools[zj, i]
                pools[zj, i] = s
            if d == 1:
                # one sample: it is the choice whatever its queue; the stale pointers catch up at the
                # next look (they only move forward, to every event by that look's tau)
                best = s
                break
            if delay > 0.0:
                # stale view at tau: arrivals to s by tau minus departures from s by tau
                c = first[s] if st_a[s] == -1 else nxt[st_a[s]]
                while c != -1 and arr[c] <= tau:
                    st_a[s] = c
                    n_st_a[s] += 1
                    c = nxt[c]
                c = first[s] if st_d[s] == -1 else nxt[st_d[s]]
                while c != -1 and c <= st_a[s] and dep[c] <= tau:
                    st_d[s] = c
                    n_st_d[s] += 1
                    c = nxt[c]
                q = n_st_a[s] - n_st_d[s]
            else:
                q = n_routed[s] - n_cur_d[s]
            if q < bestq:
                bestq = q
                best = s
        s = best
        if keep_srv:
            qseen[j] = n_routed[s] - n_cur_d[s]

        # ---- service and departure (FCFS: known now)
        if svc_kind == 0:
            x = _std_exp(st)
        elif svc_kind == 1:
            x = 1.0
        elif svc_kind == 2:
            x = xm * (1.0 - _next_double(st)) ** (-1.0 / shape)
        elif svc_kind == 3:  # Erlang-k: k phases of mean 1 / k
            x = 0.0
            for _ in range(int(shape)):
                x += _std_exp(st)
            x /= shape
        elif _next_double(st) < h2_p1:  # H2: phase of rate 2 p1 ...
            x = _std_exp(st) / (2.0 * h2_p1)
        else:  # ... or of rate 2 (1 - p1)
            x = _std_exp(st) / (2.0 * (1.0 - h2_p1))
        start = t if lastdep[s] < t else lastdep[s]
        dj = start + x / rates[s]
        dep[j] = dj
        lastdep[s] = dj
        if keep_srv:
            srv[j] = s
        if tail[s] != -1:
            nxt[tail[s]] = j
        else:
            first[s] = j
        tail[s] = j
        if n_routed[s] == n_cur_d[s] and scan:
            nextdep[s] = dj
        elif n_routed[s] == n_cur_d[s]:
            # the server was idle: its next departure is this job's; sift it up into the heap
            i = hsize
            hsize += 1
            while i > 0:
                par = (i - 1) >> 1
                if hkey[par] <= dj:
                    break
                hkey[i] = hkey[par]
                hsrv[i] = hsrv[par]
                i = par
            hkey[i] = dj
            hsrv[i] = s
        n_routed[s] += 1

    # exact area under the number-in-system curve over [t0, t_end] (t0: first recorded arrival)
    t0 = arr[n_warm]
    area = acc - acc0

    return arr, dep, z, nb, total_rate_at, srv, qseen, block, area, t0, t, area_at
