"""A/B-test estimators for queueing systems, on a simulator-independent trajectory
(:class:`~asrsched.abtest.trajectory.Trajectory`, documented in :mod:`asrsched.abtest.trajectory`).

Estimators (all return an :class:`Estimate` with a batch-means CI)
------------------------------------------------------------------
``naive``
    mean W of treated jobs - mean W of control jobs (Bernoulli design).
``group``
    the same difference of means on a group-design trajectory.
``switchback``
    mean W of jobs arriving in treated blocks - control blocks, dropping
    jobs that arrive in the first ``burn_in`` time units of a block.
``wdq``
    Differences-in-Q with response-time cost: for decision k,
    ``Q_w(k) = sum_{j=k}^{k+L-1} W_j``; estimate = mean Q_w over treated
    decisions - mean over control decisions (Farias et al. 2022).
``qdq``
    the same with queue-length cost scaled by the arrival rate:
    ``Q_q(k) = sum_{j=k+1}^{k+L} X(t_j-) / lam_j`` (the state after decision k).
``qtdq``
    (``cost="qt"``) the same with the time-integral of the number in system over
    the horizon, ``integral_{t_k}^{t_{k+L}} X(t) dt`` (needs ``area_at``).
``mixed_dq``
    ``alpha * wDQ + (1 - alpha) * qDQ`` (Jia, Johari, Si, Zheng) with
    ``alpha = (V_q - C_wq) / (V_w + V_q - 2 C_wq)``, the minimum-variance
    weight, where V and C are the variances/covariance of the two DQ
    estimates. They are estimated **inside the experiment, without the truth**:
    the decision range is cut into ``n_batches`` contiguous batches, wDQ and
    qDQ are computed per batch, and their sample (co)variances give alpha
    (``alpha="batch"``, the default). ``alpha=<float>`` fixes it (e.g. from
    pilot runs, :func:`pilot_alpha`).

:func:`dq_family` computes wDQ, the queue-length DQs and their mixes in one compiled pass per
cost over prefix sums (O(n) for any ``L``), and :func:`dq_sweep` does so for many ``L`` at once;
:func:`wdq`, :func:`qdq` and :func:`mixed_dq` are its members (tests compare them with the full
arrays of Q values, ``tests/abtest_oracle.py``).

Horizon ``L`` counts decisions (jobs); the default ``L = 30 * N * lam_per_server`` is
``30 * total_rate`` here, i.e. 30 mean service times of future jobs.
Only decisions with a full horizon (the first ``n - L``) enter the DQ estimators.

Confidence intervals: batch means. The estimator is recomputed on each of
``n_batches`` contiguous batches (of decisions, or of switchback blocks), and
``estimate +/- t_{B-1, 0.975} * sd(batch estimates) / sqrt(B)``. Batches must be much
longer than ``L`` and the system's relaxation time for the CI to be honest; the study
measures its coverage over replications.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrsched.abtest.trajectory import Estimate, Trajectory, batch_ci, littles_law

__all__ = [
    "Trajectory",
    "Estimate",
    "default_L",
    "q_values",
    "naive",
    "group",
    "switchback",
    "wdq",
    "qdq",
    "dq",
    "dq_family",
    "dq_sweep",
    "mixed_dq",
    "optimal_alpha",
    "pilot_alpha",
    "estimate_all",
    "littles_law",
    "diff_means",
    "batch_diffs",
    "batch_ci",
    "ESTIMATORS",
    "COSTS",
]

ESTIMATORS = ("naive", "group", "switchback", "qdq", "wdq", "mixed_dq")


def default_L(traj_or_rate) -> int:
    """``L = 30 * N * lam`` decisions = 30 x the total arrival rate (30 mean service times)."""
    rate = traj_or_rate.total_rate if isinstance(traj_or_rate, Trajectory) else float(traj_or_rate)
    return max(1, int(round(30.0 * rate)))


def _check_L(traj: Trajectory, L) -> int:
    if L is None:
        L = default_L(traj)
    if not isinstance(L, (int, np.integer)) or isinstance(L, bool) or L <= 0:
        raise ValueError(f"L: the truncation horizon must be a positive integer number of jobs, got {L!r}")
    if L >= len(traj):
        raise ValueError(f"L: horizon {L} must be shorter than the trajectory ({len(traj)} jobs)")
    return int(L)


def _check_batches(n_batches) -> int:
    if not isinstance(n_batches, (int, np.integer)) or n_batches < 2:
        raise ValueError(f"n_batches: need an integer >= 2 for a batch-means CI, got {n_batches!r}")
    return int(n_batches)


COSTS = ("w", "q", "qt")


@njit(cache=True)
def _cumsum0(x, scale):
    """``[0, x0 / s0, x0 / s0 + x1 / s1, ...]`` (``scale``: one value or one per element), summed in order:
    ``np.concatenate(([0.0], np.cumsum(x / scale)))`` in one pass, the same additions in the same order."""
    n = x.shape[0]
    out = np.empty(n + 1)
    acc = 0.0
    out[0] = 0.0
    per = scale.shape[0] == n
    s0 = scale[0]
    for i in range(n):
        acc += x[i] / (scale[i] if per else s0)
        out[i + 1] = acc
    return out


def _prefix(traj: Trajectory, cost: str) -> tuple[np.ndarray, int]:
    """Prefix sums ``C`` and offset ``o`` with ``Q(k) = C[k + o + L] - C[k + o]`` (O(n) for every L)."""
    if cost == "w":
        return _cumsum0(np.ascontiguousarray(traj.response, np.float64), np.ones(1)), 0
    if cost == "q":
        rate = traj.total_rate_at if traj.total_rate_at is not None else traj.total_rate
        return _cumsum0(np.ascontiguousarray(traj.n_before), np.atleast_1d(np.asarray(rate, np.float64))), 1
    if cost == "qt":
        if traj.area_at is None:
            raise ValueError("cost: 'qt' (time-integral of the number in system) needs a trajectory with area_at")
        return traj.area_at, 0
    raise ValueError(f"cost: {cost!r} not in {COSTS}")


def q_values(traj: Trajectory, L: int | None = None, cost: str = "w") -> np.ndarray:
    """Truncated Q estimates for the first ``n - L`` decisions (from prefix sums: O(n) for any L).

    ``cost="w"``: ``sum_{j=k}^{k+L-1} W_j``; ``cost="q"``: ``sum_{j=k+1}^{k+L} X(t_j-)/lam_j``
    (queue length sampled at arrivals); ``cost="qt"``: ``integral of X(t) dt`` from ``t_k`` to
    ``t_{k+L}`` (queue length integrated over the horizon; by Little's law all three have
    the same mean, ``L * mean W``).
    """
    L = _check_L(traj, L)
    n = len(traj)
    c, o = _prefix(traj, cost)
    return c[o + L : o + n] - c[o : o + n - L]


@njit(cache=True)
def _masked_sums(v, z, seg):
    """Per segment ``[seg[i], seg[i+1])``: sum of ``v``, sum of ``v`` over ``z == 1`` and the count of ``z == 1``."""
    ns = seg.size - 1
    s = np.zeros(ns)
    s1 = np.zeros(ns)
    n1 = np.zeros(ns, np.int64)
    for i in range(ns):
        a = 0.0
        a1 = 0.0
        c1 = 0
        for k in range(seg[i], seg[i + 1]):
            x = v[k]
            t = z[k] == 1
            a += x
            a1 += x if t else 0.0  # a select, not a branch (z is a coin flip: a branch mispredicts half the time)
            c1 += t
        s[i] = a
        s1[i] = a1
        n1[i] = c1
    return s, s1, n1


def _as_z(z) -> np.ndarray:
    z = np.asarray(z)
    return z if z.dtype == np.int8 else (z == 1).astype(np.int8)


def diff_means(v: np.ndarray, z: np.ndarray) -> float:
    """Mean of ``v`` over the treated (``z == 1``) minus the mean over the control; NaN if an arm is empty.

    One compiled pass (no boolean-mask copies); equal to ``v[z == 1].mean() - v[z == 0].mean()`` up to
    floating-point rounding.
    """
    v = np.asarray(v, dtype=np.float64)
    s, s1, n1 = _masked_sums(v, _as_z(z), np.array([0, v.size], np.int64))
    nt = int(n1[0])
    if nt == 0 or nt == v.size:
        return float("nan")
    return float(s1[0] / nt - (s[0] - s1[0]) / (v.size - nt))


def batch_diffs(v: np.ndarray, z: np.ndarray, n_batches: int) -> np.ndarray:
    """Treated-minus-control difference of means on each of ``n_batches`` contiguous batches (NaN if an arm is empty)."""
    v = np.asarray(v, dtype=np.float64)
    if v.size < n_batches:
        raise ValueError(f"n_batches: {n_batches} batches need at least as many decisions, got {v.size}")
    edges = np.linspace(0, v.size, n_batches + 1).astype(np.int64)
    s, s1, n1 = _masked_sums(v, _as_z(z), edges)
    n0 = np.diff(edges) - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        d = s1 / n1 - (s - s1) / n0
    d[(n1 == 0) | (n0 == 0)] = np.nan
    return d


def naive(traj: Trajectory, n_batches: int = 20, level: float = 0.95, name: str = "naive") -> Estimate:
    """Difference of mean response time, treated minus control jobs (job-level design)."""
    n_batches = _check_batches(n_batches)
    v = diff_means(traj.response, traj.z)
    return batch_ci(name, v, batch_diffs(traj.response, traj.z, n_batches), level)


def group(traj: Trajectory, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """Group (cluster) design: treated-group minus control-group mean response time."""
    return naive(traj, n_batches, level, name="group")


def switchback(traj: Trajectory, burn_in: float = 0.0, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """Switchback: mean W in treated blocks - control blocks, dropping each block's first ``burn_in``.

    Batches for the CI are groups of consecutive blocks.
    """
    n_batches = _check_batches(n_batches)
    if traj.block is None or traj.block_len is None:
        raise ValueError("traj: switchback needs a trajectory with 'block' and 'block_len' (design='switchback')")
    if not (0 <= burn_in < traj.block_len):
        raise ValueError(f"burn_in: must be in [0, block_len={traj.block_len}), got {burn_in!r}")
    # the jobs kept are those past their block's first burn_in seconds (blocks run in time order)
    arrival = np.ascontiguousarray(traj.arrival, np.float64)
    block = np.ascontiguousarray(traj.block, np.int64)
    ub, ordered = _kept_blocks(arrival, block, float(traj.block_len), float(burn_in))
    if not ordered:
        raise ValueError("traj.block: blocks must not decrease in arrival order (block = floor(arrival / block_len))")
    nb = min(n_batches, ub.size // 2)
    gstarts = ub[np.linspace(0, ub.size, nb + 1).astype(np.int64)[:-1]] if nb >= 1 else np.zeros(0, np.int64)
    tot, grp = _kept_sums(
        arrival,
        block,
        float(traj.block_len),
        float(burn_in),
        np.ascontiguousarray(traj.response, np.float64),
        _as_z(traj.z),
        gstarts,
    )
    s, s1, n1, n = tot
    v = float("nan") if n1 == 0 or n1 == n else float(s1 / n1 - (s - s1) / (n - n1))
    if gstarts.size:
        bs, bs1, bn1, bn = grp
        bn0 = bn - bn1
        with np.errstate(divide="ignore", invalid="ignore"):
            bats = bs1 / bn1 - (bs - bs1) / bn0
        bats[(bn1 == 0) | (bn0 == 0)] = np.nan
    else:
        bats = np.zeros(0)
    return batch_ci("switchback", v, bats, level)


@njit(cache=True)
def _kept_blocks(arrival, block, block_len, burn_in):
    """The distinct blocks, in order, of the jobs past their block's first ``burn_in`` seconds, and whether
    the blocks never decrease (the batches are runs of consecutive blocks)."""
    out = np.empty(block.shape[0], np.int64)
    m = 0
    for j in range(arrival.shape[0]):
        if j > 0 and block[j] < block[j - 1]:
            return out[:0], False
        if arrival[j] - block[j] * block_len >= burn_in and (m == 0 or out[m - 1] != block[j]):
            out[m] = block[j]
            m += 1
    return out[:m], True


@njit(cache=True)
def _kept_sums(arrival, block, block_len, burn_in, w, z, gstarts):
    """Over the kept jobs, in order (one pass, no copies): ``(sum w, sum w treated, treated, all)`` in total
    and for each group of blocks ``[gstarts[g], gstarts[g + 1])``, each sum added up in job order."""
    ng = gstarts.shape[0]
    gs = np.zeros(ng)
    gs1 = np.zeros(ng)
    gn1 = np.zeros(ng, np.int64)
    gn = np.zeros(ng, np.int64)
    a = 0.0
    a1 = 0.0
    c1 = 0
    c = 0
    g = -1
    for j in range(arrival.shape[0]):
        if arrival[j] - block[j] * block_len >= burn_in:
            x = w[j]
            t = z[j] == 1
            a += x
            a1 += x if t else 0.0
            c1 += t
            c += 1
            if ng:
                while g + 1 < ng and block[j] >= gstarts[g + 1]:
                    g += 1
                gs[g] += x
                gs1[g] += x if t else 0.0
                gn1[g] += t
                gn[g] += 1
    return (a, a1, c1, c), (gs, gs1, gn1, gn)


def dq(traj: Trajectory, L: int | None = None, cost: str = "w", n_batches: int = 20, level: float = 0.95) -> Estimate:
    """Differences-in-Q with cost ``"w"`` (response time), ``"q"`` (number in system / total_rate) or ``"qt"``
    (its time integral); :func:`dq_family`'s ``f"{cost}dq"``."""
    if cost not in COSTS:
        raise ValueError(f"cost: {cost!r} not in {COSTS}")
    return dq_family(traj, L, n_batches, costs=("w",) if cost == "w" else ("w", cost), level=level)[f"{cost}dq"]


def wdq(traj: Trajectory, L: int | None = None, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """DQ with response-time cost (see module docstring)."""
    return dq(traj, L, "w", n_batches, level)


def qdq(traj: Trajectory, L: int | None = None, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """DQ with queue-length cost scaled by the arrival rate (see module docstring)."""
    return dq(traj, L, "q", n_batches, level)


@njit(cache=True)
def _segment_sums(C, off, L, z, seg):
    """Horizon sums ``Q(k) = C[k+off+L] - C[k+off]`` added up over each segment ``[seg[i], seg[i+1])``
    of decisions: total, treated total and treated count (one branch-free pass, O(n) for any L)."""
    ns = seg.size - 1
    s = np.zeros(ns)
    s1 = np.zeros(ns)
    n1 = np.zeros(ns, np.int64)
    for i in range(ns):
        a = 0.0
        a1 = 0.0
        c1 = 0
        for k in range(seg[i], seg[i + 1]):
            q = C[k + off + L] - C[k + off]
            zk = z[k]
            a += q
            a1 += q * zk
            c1 += zk
        s[i] = a
        s1[i] = a1
        n1[i] = c1
    return s, s1, n1


def _edges(m: int, k: int) -> np.ndarray:
    return np.linspace(0, m, k + 1).astype(np.int64)


def _diffs_from_sums(s1, s, n1, n):
    n0 = n - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        d = s1 / n1 - (s - s1) / n0
    d = np.where((n1 == 0) | (n0 == 0), np.nan, d)
    S1, S, N1, N = s1.sum(), s.sum(), n1.sum(), n.sum()
    tot = float("nan") if N1 == 0 or N1 == N else float(S1 / N1 - (S - S1) / (N - N1))
    return tot, d


def _sweep_plan(traj: Trajectory, L, n_batches: int, alpha_batches: int, costs: tuple) -> dict:
    """The segments of one horizon ``L``: both batchings (``n_batches`` for the CI, ``ka`` for alpha) are
    unions of the segments ``seg`` of the ``m = n - L`` decisions (checked input)."""
    n_batches = _check_batches(n_batches)
    L = _check_L(traj, L)
    if "w" not in costs:
        raise ValueError(f"costs: need 'w' (mixed DQ mixes wDQ with the queue-length DQs), got {costs!r}")
    m = len(traj) - L
    if m < n_batches:
        raise ValueError(f"n_batches: {n_batches} batches need at least as many decisions, got {m}")
    ka = max(3, min(int(alpha_batches), m // (5 * L)))
    ea, eb = _edges(m, n_batches), _edges(m, ka)
    seg = np.union1d(ea, eb)  # both batchings are unions of these segments
    return dict(
        L=L, seg=seg, ia=np.searchsorted(seg, ea[:-1]), ib=np.searchsorted(seg, eb[:-1]), na=np.diff(ea), nb=np.diff(eb)
    )


def _family_from_sums(plan: dict, sums: dict, costs: tuple, level: float, alpha) -> dict[str, Estimate]:
    """The DQ and mixed-DQ estimates of one horizon from its per-segment sums ``{cost: (s, s1, n1)}``."""
    ia, ib, na, nb = plan["ia"], plan["ib"], plan["na"], plan["nb"]
    val, bat, abat = {}, {}, {}
    for c in costs:
        s, s1, n1 = sums[c]
        val[c], bat[c] = _diffs_from_sums(np.add.reduceat(s1, ia), np.add.reduceat(s, ia), np.add.reduceat(n1, ia), na)
        abat[c] = _diffs_from_sums(np.add.reduceat(s1, ib), np.add.reduceat(s, ib), np.add.reduceat(n1, ib), nb)[1]
    out = {f"{c}dq": batch_ci(f"{c}dq", val[c], bat[c], level) for c in costs}
    for c in costs:
        if c == "w":
            continue
        if isinstance(alpha, str):
            if alpha != "batch":
                raise ValueError(f"alpha: use 'batch' or a number, got {alpha!r}")
            a = optimal_alpha(abat["w"], abat[c])
        else:
            a = float(alpha)
            if not np.isfinite(a):
                raise ValueError(f"alpha: must be finite, got {alpha!r}")
        name = "mixed_dq" if c == "q" else f"mixed_dq_{c}"
        out[name] = batch_ci(name, a * val["w"] + (1 - a) * val[c], a * bat["w"] + (1 - a) * bat[c], level, alpha=a)
    return out


def dq_family(
    traj: Trajectory,
    L: int | None = None,
    n_batches: int = 20,
    alpha_batches: int = 100,
    costs: tuple = ("w", "q"),
    level: float = 0.95,
    alpha="batch",
) -> dict[str, Estimate]:
    """DQ with every cost in ``costs``, and mixed DQ of wDQ with each queue-length DQ, at horizon ``L``.

    Returns ``{"wdq", "qdq", "mixed_dq"}`` for the default costs; with ``"qt"`` also
    ``"qtdq"`` (time-integral queue-length cost) and ``"mixed_dq_qt"`` (wDQ mixed with it).
    The horizon sums of each cost come from one compiled O(n) pass over its prefix sums
    (:func:`dq_sweep` at one horizon; tests compare it with the full arrays of Q values).
    """
    return _sweep(traj, [L], n_batches, alpha_batches, costs, level, alpha)[0]


@njit(cache=True)
def _sweep_sums2(Ca, oa, Cb, ob, Ls, z, bps, segs, nseg):
    """:func:`_segment_sums2` at every horizon ``Ls[h]`` (ascending; segments ``segs[h, :nseg[h] + 1]``)
    in one pass over the decisions.

    ``bps`` is the sorted union of every horizon's segment bounds. Between two of them the active
    horizons are a prefix of ``Ls`` (a longer horizon has fewer decisions), and each decision's
    ``z`` and ``C[k]`` are read once for all of them. Each horizon's sums are added up in the same
    order as in its own pass (each segment from 0.0, decision by decision): the same bits as
    :func:`_segment_sums2` per L. Returns ``s, s1`` of shape ``(nL, 2, max segments)`` and the
    treated counts ``n1`` of shape ``(nL, max segments)``.
    """
    nL = Ls.shape[0]
    ms = segs.shape[1] - 1
    s = np.zeros((nL, 2, ms))
    s1 = np.zeros((nL, 2, ms))
    n1 = np.zeros((nL, ms), np.int64)
    acc = np.zeros((nL, 4))
    cnt = np.zeros(nL, np.int64)
    pos = np.zeros(nL, np.int64)
    for j in range(bps.shape[0] - 1):
        lo = bps[j]
        hi = bps[j + 1]
        na = 0
        while na < nL and pos[na] < nseg[na]:
            na += 1
        c1 = 0
        for k in range(lo, hi):
            zk = z[k]
            a0 = Ca[k + oa]
            b0 = Cb[k + ob]
            c1 += zk
            for h in range(na):
                qa = Ca[k + oa + Ls[h]] - a0
                qb = Cb[k + ob + Ls[h]] - b0
                acc[h, 0] += qa
                acc[h, 1] += qa * zk
                acc[h, 2] += qb
                acc[h, 3] += qb * zk
        for h in range(na):
            cnt[h] += c1
            if segs[h, pos[h] + 1] == hi:
                i = pos[h]
                s[h, 0, i] = acc[h, 0]
                s1[h, 0, i] = acc[h, 1]
                s[h, 1, i] = acc[h, 2]
                s1[h, 1, i] = acc[h, 3]
                n1[h, i] = cnt[h]
                acc[h, 0] = 0.0
                acc[h, 1] = 0.0
                acc[h, 2] = 0.0
                acc[h, 3] = 0.0
                cnt[h] = 0
                pos[h] += 1
    return s, s1, n1


def dq_sweep(
    traj: Trajectory, Ls, n_batches: int = 20, alpha_batches: int = 100, costs: tuple = ("w", "q"), level: float = 0.95
) -> dict[int, dict[str, Estimate]]:
    """:func:`dq_family` at every horizon in ``Ls``: ``{L: {name: Estimate}}``, the same bits.

    The prefix sums are computed once, and each pair of costs is one compiled pass over the decisions
    for all horizons together (:func:`_sweep_sums2`), which reads each decision's data once instead of
    once per horizon.
    """
    Ls = list(dict.fromkeys(int(L) for L in Ls))
    return dict(zip(Ls, _sweep(traj, Ls, n_batches, alpha_batches, costs, level, "batch")))


def _sweep(
    traj: Trajectory, Ls: list, n_batches: int, alpha_batches: int, costs: tuple, level: float, alpha
) -> list[dict[str, Estimate]]:
    """The DQ family at each horizon of ``Ls`` (distinct; ``None``: the default), in ``Ls``' order."""
    if not Ls:
        return []
    plans = [_sweep_plan(traj, L, n_batches, alpha_batches, costs) for L in Ls]
    order = sorted(range(len(plans)), key=lambda i: plans[i]["L"])
    pre = {c: _prefix(traj, c) for c in costs}
    nseg = np.array([plans[i]["seg"].size - 1 for i in order], np.int64)
    segs = np.zeros((len(plans), int(nseg.max()) + 1), np.int64)
    for r, i in enumerate(order):
        segs[r, : plans[i]["seg"].size] = plans[i]["seg"]
    bps = np.unique(np.concatenate([p["seg"] for p in plans]))
    Larr = np.array([plans[i]["L"] for i in order], np.int64)
    sums: list[dict] = [{} for _ in plans]
    for j in range(0, len(costs) - 1, 2):  # two costs per pass over the decisions
        ca, cb = costs[j], costs[j + 1]
        (Ca, oa), (Cb, ob) = pre[ca], pre[cb]
        s, s1, n1 = _sweep_sums2(Ca, oa, Cb, ob, Larr, traj.z, bps, segs, nseg)
        for r, i in enumerate(order):
            ns = int(nseg[r])
            sums[i][ca] = (s[r, 0, :ns].copy(), s1[r, 0, :ns].copy(), n1[r, :ns].copy())
            sums[i][cb] = (s[r, 1, :ns].copy(), s1[r, 1, :ns].copy(), n1[r, :ns].copy())
    if len(costs) % 2:
        C, o = pre[costs[-1]]
        for i, p in enumerate(plans):
            sums[i][costs[-1]] = _segment_sums(C, o, p["L"], traj.z, p["seg"])
    return [_family_from_sums(p, sums[i], costs, level, alpha) for i, p in enumerate(plans)]


def optimal_alpha(w: np.ndarray, q: np.ndarray) -> float:
    """Minimum-variance weight of ``alpha*w + (1-alpha)*q`` from paired samples of two estimators."""
    w = np.asarray(w, float)
    q = np.asarray(q, float)
    ok = np.isfinite(w) & np.isfinite(q)
    w, q = w[ok], q[ok]
    if w.size < 3:
        return 0.5
    c = np.cov(w, q, ddof=1)
    den = c[0, 0] + c[1, 1] - 2 * c[0, 1]
    if not np.isfinite(den) or den <= 1e-300:
        return 0.5
    return float((c[1, 1] - c[0, 1]) / den)


def pilot_alpha(trajs, L: int | None = None) -> float:
    """alpha* from the (co)variance of wDQ and qDQ over pilot experiments (no truth needed)."""
    fams = [dq_family(t, L) for t in trajs]  # wDQ and qDQ of each pilot from one pass
    return optimal_alpha(np.array([f["wdq"].value for f in fams]), np.array([f["qdq"].value for f in fams]))


def mixed_dq(
    traj: Trajectory,
    L: int | None = None,
    alpha="batch",
    n_batches: int = 20,
    level: float = 0.95,
    alpha_batches: int = 100,
) -> Estimate:
    """Mixed DQ, ``alpha*wDQ + (1-alpha)*qDQ``; alpha estimated in the experiment (``"batch"``: wDQ and
    qDQ on ``alpha_batches`` contiguous batches, fewer if a batch would hold under ``5 * L`` decisions,
    never fewer than 3, then :func:`optimal_alpha`) or fixed."""
    return dq_family(traj, L, n_batches, alpha_batches, ("w", "q"), level, alpha)["mixed_dq"]


def estimate_all(
    traj: Trajectory,
    L: int | None = None,
    n_batches: int = 20,
    burn_in: float = 0.0,
    alpha="batch",
    level: float = 0.95,
    alpha_batches: int = 100,
) -> dict[str, Estimate]:
    """Every estimator that applies to the trajectory's design.

    bernoulli -> naive, qdq, wdq, mixed_dq; group -> group; switchback -> switchback.
    """
    if traj.design == "group":
        return {"group": group(traj, n_batches, level)}
    if traj.design == "switchback":
        return {"switchback": switchback(traj, burn_in, n_batches, level)}
    fam = dq_family(traj, L, n_batches, alpha_batches, ("w", "q"), level, alpha)  # one pass for all three
    return {"naive": naive(traj, n_batches, level), "qdq": fam["qdq"], "wdq": fam["wdq"], "mixed_dq": fam["mixed_dq"]}
