"""Differences-in-Q (Farias, Li, Peng, Ren, Zhang, Zheng 2022, *Markovian interference in experiments*,
arXiv:2206.02371): the Q values of each decision over a horizon counted in jobs or in time, the DQ
estimators and mixed DQ (Jia, Johari, Si, Zheng), all on a :class:`~asrsched.abtest.trajectory.Trajectory`.

Horizon
-------
*In jobs* (``L``, the default ``L = 30 * total_rate``, 30 mean service times of future jobs): decision k's
``Q_w(k) = sum_{j=k}^{k+L-1} W_j``, ``Q_q(k) = sum_{j=k+1}^{k+L} X(t_j-) / lam_j`` (the state after
decision k), ``Q_qt(k) = integral of X(t) dt from t_k to t_{k+L}``; the first ``n - L`` decisions enter.

*In time* (``tau``; ``L`` jobs correspond to ``tau = L / total_rate``): decision k's horizon is the
``L_k`` jobs arriving in ``[t_k, t_k + tau)`` (a number that varies with the arrivals):
``Q_w(k)`` sums their W, ``Q_q(k)`` samples ``X / lam`` at the next ``L_k`` arrivals (jobs ``k+1 .. k+L_k``,
as in the jobs horizon) and ``Q_qt(k)`` integrates X up to the first arrival at or after ``t_k + tau``.
Only decisions with a full horizon (``t_k + tau <= t_{n-1}``, the last arrival) enter.

Estimators
----------
``wdq`` / ``qdq`` / ``qtdq``: mean Q over treated decisions minus over control decisions;
``mixed_dq``: ``alpha * wDQ + (1 - alpha) * qDQ`` with the minimum-variance weight
``alpha = (V_q - C_wq) / (V_w + V_q - 2 C_wq)``, where V and C are estimated inside the experiment,
without the truth:

* ``alpha="batch"`` (default): variances and covariance of wDQ and qDQ computed on contiguous batches;
* ``alpha="job"``: of the per-decision ``Q_w`` and ``Q_q`` values, each centred on its own arm's mean
  (:func:`arm_centred_alpha`);
* ``alpha=<float>``: fixed (e.g. from pilot runs, :func:`pilot_alpha`).

:func:`dq_family` computes them in one compiled pass per cost over prefix sums (O(n) for any
horizon); :func:`dq_sweep` does so for many ``L`` at once. Tests compare them with the full arrays of
Q values (``tests/abtest_oracle.py``). Confidence intervals are batch means (see
:mod:`asrsched.abtest.estimators`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from asrsched.abtest.trajectory import Estimate, Trajectory, batch_ci

__all__ = [
    "COSTS",
    "ALPHAS",
    "default_L",
    "default_tau",
    "check_batches",
    "horizon_ends",
    "q_values",
    "dq",
    "wdq",
    "qdq",
    "dq_family",
    "dq_sweep",
    "mixed_dq",
    "optimal_alpha",
    "arm_centred_alpha",
    "pilot_alpha",
]

#: the in-experiment ways to weigh mixed DQ (or a number)
ALPHAS = ("batch", "job")


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


def check_batches(n_batches) -> int:
    """``n_batches`` as an int, or ``ValueError`` naming it (a batch-means CI needs at least 2 batches)."""
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


def q_values(traj: Trajectory, L: int | None = None, cost: str = "w", *, tau: float | None = None) -> np.ndarray:
    """Truncated Q estimates of the decisions with a full horizon (from prefix sums: O(n) for any horizon).

    Horizon in jobs (``L``, the first ``n - L`` decisions): ``cost="w"``: ``sum_{j=k}^{k+L-1} W_j``;
    ``cost="q"``: ``sum_{j=k+1}^{k+L} X(t_j-)/lam_j`` (queue length sampled at arrivals); ``cost="qt"``:
    ``integral of X(t) dt`` from ``t_k`` to ``t_{k+L}`` (queue length integrated over the horizon; by
    Little's law all three have the same mean, ``L * mean W``). Horizon in time (``tau``): the same with
    ``L`` replaced by each decision's count of jobs arriving in ``[t_k, t_k + tau)`` (module docstring).
    """
    m, L, e = _horizon(traj, L, tau)
    c, o = _prefix(traj, cost)
    if e is None:
        return c[o + L : o + L + m] - c[o : o + m]
    return c[e + o] - c[o : o + m]


def default_tau(traj_or_rate) -> float:
    """The time horizon of :func:`default_L` jobs: ``default_L / total_rate`` (30 mean service times)."""
    rate = traj_or_rate.total_rate if isinstance(traj_or_rate, Trajectory) else float(traj_or_rate)
    return default_L(rate) / rate


def horizon_ends(traj: Trajectory, tau) -> np.ndarray:
    """For each decision with a full time horizon, ``e_k``: the number of jobs arriving before ``t_k + tau``.

    Decision k's horizon holds jobs ``k .. e_k - 1``; the decisions returned are those with
    ``t_k + tau <= t_{n-1}`` (a prefix, as arrivals are sorted).
    """
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) or not (0 < tau < np.inf):
        raise ValueError(f"tau: the time horizon must be a positive finite number of time units, got {tau!r}")
    e = _ends(np.ascontiguousarray(traj.arrival, np.float64), float(tau))
    if e.size < 1:
        span = traj.arrival[-1] - traj.arrival[0]
        raise ValueError(f"tau: horizon {tau} time units must be shorter than the trajectory ({span:g} time units)")
    return e


@njit(cache=True)
def _ends(a, tau):
    """:func:`horizon_ends` on sorted arrivals ``a`` by two pointers (O(n)): ``e_k`` = #{j: a_j < a_k + tau} for
    every k with ``a_k + tau <= a[-1]``."""
    n = a.shape[0]
    e = np.empty(n, np.int64)
    last = a[n - 1]
    j = 0
    m = 0
    for k in range(n):
        t = a[k] + tau
        if t > last:
            break
        while a[j] < t:  # stops at the latest at n - 1, as a[n - 1] >= t
            j += 1
        e[k] = j
        m += 1
    return e[:m]


def _horizon(traj: Trajectory, L, tau) -> tuple[int, int, np.ndarray | None]:
    """``(m, L_jobs, ends)``: decisions with a full horizon, the horizon in jobs (time: ``round(tau * total_rate)``,
    at least 1) and the per-decision ends (``None`` for a horizon in jobs)."""
    if tau is None:
        L = _check_L(traj, L)
        return len(traj) - L, L, None
    _horizon_args(L, tau)
    e = horizon_ends(traj, tau)
    return e.size, max(1, int(round(float(tau) * traj.total_rate))), e


def _horizon_args(L, tau) -> None:
    if L is not None and tau is not None:
        raise ValueError(f"L: give a horizon in jobs (L) or in time (tau), not both; got L={L!r}, tau={tau!r}")


def _check_alpha(alpha) -> None:
    if isinstance(alpha, str):
        if alpha not in ALPHAS:
            raise ValueError(f"alpha: use one of {ALPHAS} or a number, got {alpha!r}")
    elif (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.integer, np.floating))
        or not np.isfinite(alpha)
    ):
        raise ValueError(f"alpha: must be one of {ALPHAS} or a finite number, got {alpha!r}")


def dq(
    traj: Trajectory,
    L: int | None = None,
    cost: str = "w",
    n_batches: int = 20,
    level: float = 0.95,
    *,
    tau: float | None = None,
) -> Estimate:
    """Differences-in-Q with cost ``"w"`` (response time), ``"q"`` (number in system / total_rate) or ``"qt"``
    (its time integral), horizon ``L`` jobs or ``tau`` time units; :func:`dq_family`'s ``f"{cost}dq"``."""
    if cost not in COSTS:
        raise ValueError(f"cost: {cost!r} not in {COSTS}")
    costs = ("w",) if cost == "w" else ("w", cost)
    return dq_family(traj, L, n_batches, costs=costs, level=level, tau=tau)[f"{cost}dq"]


def wdq(
    traj: Trajectory, L: int | None = None, n_batches: int = 20, level: float = 0.95, *, tau: float | None = None
) -> Estimate:
    """DQ with response-time cost (see module docstring)."""
    return dq(traj, L, "w", n_batches, level, tau=tau)


def qdq(
    traj: Trajectory, L: int | None = None, n_batches: int = 20, level: float = 0.95, *, tau: float | None = None
) -> Estimate:
    """DQ with queue-length cost scaled by the arrival rate (see module docstring)."""
    return dq(traj, L, "q", n_batches, level, tau=tau)


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


@njit(cache=True)
def _segment_sums_ends(C, off, e, z, seg):
    """:func:`_segment_sums` for a horizon in time: ``Q(k) = C[e[k]+off] - C[k+off]`` (``e``: :func:`horizon_ends`)."""
    ns = seg.size - 1
    s = np.zeros(ns)
    s1 = np.zeros(ns)
    n1 = np.zeros(ns, np.int64)
    for i in range(ns):
        a = 0.0
        a1 = 0.0
        c1 = 0
        for k in range(seg[i], seg[i + 1]):
            q = C[e[k] + off] - C[k + off]
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


def _sweep_plan(traj: Trajectory, L, n_batches: int, alpha_batches: int, costs: tuple, tau=None) -> dict:
    """The segments of one horizon (``L`` jobs or ``tau`` time units): both batchings (``n_batches`` for the
    CI, ``ka`` for alpha) are unions of the segments ``seg`` of the ``m`` decisions with a full horizon."""
    n_batches = check_batches(n_batches)
    if "w" not in costs:
        raise ValueError(f"costs: need 'w' (mixed DQ mixes wDQ with the queue-length DQs), got {costs!r}")
    m, L, e = _horizon(traj, L, tau)
    if m < n_batches:
        raise ValueError(f"n_batches: {n_batches} batches need at least as many decisions, got {m}")
    ka = max(3, min(int(alpha_batches), m // (5 * L)))
    ea, eb = _edges(m, n_batches), _edges(m, ka)
    seg = np.union1d(ea, eb)  # both batchings are unions of these segments
    return dict(
        L=L,
        m=m,
        ends=e,
        seg=seg,
        ia=np.searchsorted(seg, ea[:-1]),
        ib=np.searchsorted(seg, eb[:-1]),
        na=np.diff(ea),
        nb=np.diff(eb),
    )


def _family_from_sums(plan: dict, sums: dict, costs: tuple, level: float, alpha) -> dict[str, Estimate]:
    """The DQ and mixed-DQ estimates of one horizon from its per-segment sums ``{cost: (s, s1, n1)}``
    (``alpha``: ``"batch"``, a number, or ``{cost: weight}`` already computed)."""
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
        if isinstance(alpha, dict):
            a = alpha[c]
        elif isinstance(alpha, str):
            a = optimal_alpha(abat["w"], abat[c])
        else:
            a = float(alpha)
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
    *,
    tau: float | None = None,
) -> dict[str, Estimate]:
    """DQ with every cost in ``costs``, and mixed DQ of wDQ with each queue-length DQ, at horizon ``L`` jobs
    (or ``tau`` time units: give one of them; both ``None`` is the default ``L``).

    Returns ``{"wdq", "qdq", "mixed_dq"}`` for the default costs; with ``"qt"`` also
    ``"qtdq"`` (time-integral queue-length cost) and ``"mixed_dq_qt"`` (wDQ mixed with it).
    ``alpha``: ``"batch"``, ``"job"`` (:func:`arm_centred_alpha`) or a number (module docstring).
    The horizon sums of each cost come from one compiled O(n) pass over its prefix sums
    (:func:`dq_sweep` at one horizon; tests compare it with the full arrays of Q values).
    """
    if tau is None:
        return _sweep(traj, [L], n_batches, alpha_batches, costs, level, alpha)[0]
    _horizon_args(L, tau)
    return _sweep(traj, [], n_batches, alpha_batches, costs, level, alpha, taus=[tau])[0]


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
    traj: Trajectory,
    Ls,
    n_batches: int = 20,
    alpha_batches: int = 100,
    costs: tuple = ("w", "q"),
    level: float = 0.95,
    alpha="batch",
) -> dict[int, dict[str, Estimate]]:
    """:func:`dq_family` at every horizon in ``Ls`` (jobs): ``{L: {name: Estimate}}``, the same bits.

    The prefix sums are computed once, and each pair of costs is one compiled pass over the decisions
    for all horizons together (:func:`_sweep_sums2`), which reads each decision's data once instead of
    once per horizon.
    """
    Ls = list(dict.fromkeys(int(L) for L in Ls))
    return dict(zip(Ls, _sweep(traj, Ls, n_batches, alpha_batches, costs, level, alpha)))


def _sweep(
    traj: Trajectory, Ls: list, n_batches: int, alpha_batches: int, costs: tuple, level: float, alpha, taus=()
) -> list[dict[str, Estimate]]:
    """The DQ family at each horizon of ``Ls`` (jobs, distinct; ``None``: the default), then of ``taus`` (time)."""
    _check_alpha(alpha)
    plans = [_sweep_plan(traj, L, n_batches, alpha_batches, costs) for L in Ls]
    plans += [_sweep_plan(traj, None, n_batches, alpha_batches, costs, tau) for tau in taus]
    if not plans:
        return []
    pre = {c: _prefix(traj, c) for c in costs}
    sums: list[dict] = [{} for _ in plans]
    jobs = [i for i, p in enumerate(plans) if p["ends"] is None]
    if jobs:
        order = sorted(jobs, key=lambda i: plans[i]["L"])
        nseg = np.array([plans[i]["seg"].size - 1 for i in order], np.int64)
        segs = np.zeros((len(order), int(nseg.max()) + 1), np.int64)
        for r, i in enumerate(order):
            segs[r, : plans[i]["seg"].size] = plans[i]["seg"]
        bps = np.unique(np.concatenate([plans[i]["seg"] for i in order]))
        Larr = np.array([plans[i]["L"] for i in order], np.int64)
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
            for i in jobs:
                sums[i][costs[-1]] = _segment_sums(C, o, plans[i]["L"], traj.z, plans[i]["seg"])
    for i, p in enumerate(plans):
        if p["ends"] is not None:
            for c in costs:
                C, o = pre[c]
                sums[i][c] = _segment_sums_ends(C, o, p["ends"], traj.z, p["seg"])
    out = []
    for i, p in enumerate(plans):
        a = alpha
        if alpha == "job":  # the per-decision Q values of each cost, centred per arm
            q = {c: _q_from_prefix(pre[c], p) for c in costs}
            z = traj.z[: p["m"]]
            a = {c: arm_centred_alpha(q["w"], q[c], z) for c in costs if c != "w"}
        out.append(_family_from_sums(p, sums[i], costs, level, a))
    return out


def _q_from_prefix(pre: tuple, plan: dict) -> np.ndarray:
    """The Q values of the ``plan["m"]`` decisions from a cost's prefix sums ``(C, o)`` (as :func:`q_values`)."""
    C, o = pre
    m, L, e = plan["m"], plan["L"], plan["ends"]
    return C[o + L : o + L + m] - C[o : o + m] if e is None else C[e + o] - C[o : o + m]


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


def arm_centred_alpha(qw: np.ndarray, qq: np.ndarray, z: np.ndarray) -> float:
    """The in-experiment weight ``alpha="job"``: ``(V_q - C_wq) / (V_w + V_q - 2 C_wq)`` from the per-decision
    ``Q_w`` and ``Q_q`` values, each centred on its own arm's mean (treated decisions on the treated mean,
    control decisions on the control mean), so the effect itself does not count as variation.

    V and C are the sums of squares and cross products of the centred values (the ratio does not depend
    on the normalisation). 0.5 when the two are practically identical (``V_w + V_q - 2 C_wq`` at most
    1e-12 of ``V_w + V_q``) or an arm is empty, as :func:`optimal_alpha`.
    """
    qw = np.asarray(qw, float)
    qq = np.asarray(qq, float)
    t = np.asarray(z) == 1
    if qw.shape != qq.shape or qw.shape != t.shape:
        raise ValueError(f"z: need Q_w, Q_q and z of one length, got {qw.shape}, {qq.shape}, {t.shape}")
    if t.all() or not t.any():
        return 0.5
    vw, vq, c = _arm_centred_moments(qw, qq, t.astype(np.int8))
    den = vw + vq - 2.0 * c
    if not (np.isfinite(den) and den > 1e-12 * (vw + vq)):
        return 0.5
    return float((vq - c) / den)


@njit(cache=True)
def _arm_centred_moments(qw, qq, z):
    """Sums of squares and cross products of ``qw`` and ``qq``, each centred on its arm's mean (``z``: 0/1)."""
    n = qw.shape[0]
    sw = np.zeros(2)
    sq = np.zeros(2)
    cnt = np.zeros(2)
    for k in range(n):
        sw[z[k]] += qw[k]
        sq[z[k]] += qq[k]
        cnt[z[k]] += 1.0
    mw = sw / cnt
    mq = sq / cnt
    vw = 0.0
    vq = 0.0
    c = 0.0
    for k in range(n):
        dw = qw[k] - mw[z[k]]
        dq = qq[k] - mq[z[k]]
        vw += dw * dw
        vq += dq * dq
        c += dw * dq
    return vw, vq, c


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
    *,
    tau: float | None = None,
) -> Estimate:
    """Mixed DQ, ``alpha*wDQ + (1-alpha)*qDQ`` at horizon ``L`` jobs or ``tau`` time units; alpha estimated in
    the experiment (``"batch"``: wDQ and qDQ on ``alpha_batches`` contiguous batches, fewer if a batch would
    hold under ``5 * L`` decisions, never fewer than 3, then :func:`optimal_alpha`; ``"job"``:
    :func:`arm_centred_alpha`) or fixed."""
    return dq_family(traj, L, n_batches, alpha_batches, ("w", "q"), level, alpha, tau=tau)["mixed_dq"]
