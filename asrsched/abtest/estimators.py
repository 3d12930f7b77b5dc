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
    (``alpha="batch"``, the default); ``alpha="job"`` takes them from the
    per-decision Q values centred per arm (:func:`arm_centred_alpha`);
    ``alpha=<float>`` fixes it (e.g. from pilot runs, :func:`pilot_alpha`).

The DQ family lives in :mod:`asrsched.abtest.dq` (re-exported here): :func:`dq_family` computes wDQ,
the queue-length DQs and their mixes in one compiled pass per cost over prefix sums (O(n) for any
horizon), and :func:`dq_sweep` does so for many ``L`` at once.

Horizon ``L`` counts decisions (jobs); the default ``L = 30 * N * lam_per_server`` is
``30 * total_rate`` here, i.e. 30 mean service times of future jobs. ``tau=`` counts it in time
instead (the jobs arriving in ``[t_k, t_k + tau)``; :func:`default_tau`).
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

from asrsched.abtest.dq import (  # the DQ family lives in asrsched.abtest.dq; re-exported for its callers
    ALPHAS,
    COSTS,
    arm_centred_alpha,
    check_batches,
    default_L,
    default_tau,
    dq,
    dq_family,
    dq_sweep,
    horizon_ends,
    mixed_dq,
    optimal_alpha,
    pilot_alpha,
    q_values,
    qdq,
    wdq,
)
from asrsched.abtest.trajectory import Estimate, Trajectory, batch_ci, littles_law

__all__ = [
    "Trajectory",
    "Estimate",
    "default_L",
    "default_tau",
    "horizon_ends",
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
    "arm_centred_alpha",
    "pilot_alpha",
    "estimate_all",
    "littles_law",
    "diff_means",
    "batch_diffs",
    "batch_ci",
    "ESTIMATORS",
    "COSTS",
    "ALPHAS",
]

ESTIMATORS = ("naive", "group", "switchback", "qdq", "wdq", "mixed_dq")


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
    n_batches = check_batches(n_batches)
    v = diff_means(traj.response, traj.z)
    return batch_ci(name, v, batch_diffs(traj.response, traj.z, n_batches), level)


def group(traj: Trajectory, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """Group (cluster) design: treated-group minus control-group mean response time."""
    return naive(traj, n_batches, level, name="group")


def switchback(traj: Trajectory, burn_in: float = 0.0, n_batches: int = 20, level: float = 0.95) -> Estimate:
    """Switchback: mean W in treated blocks - control blocks, dropping each block's first ``burn_in``.

    Batches for the CI are groups of consecutive blocks.
    """
    n_batches = check_batches(n_batches)
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
