"""The A/B test's data: a simulator-independent per-job :class:`Trajectory`, an :class:`Estimate` with its
batch-means confidence interval, and the Little's-law check of a run.

The trajectory interface
------------------------
Every estimator takes a :class:`Trajectory`: plain per-job numpy arrays in arrival
order plus a few scalars. Nothing in it depends on how the system was simulated (the
supermarket model of :mod:`asrsched.abtest.model`, a multi-replica ASR fleet, or a
production log), so any system that can produce these arrays can be A/B-analysed.

Required (length ``n``, one entry per job, sorted by arrival time):

``arrival``
    float, arrival (decision) time of job ``j``.
``z``
    0/1, the arm: 1 = job (or its group / block) got the treatment policy.
``response``
    float, the job's cost ``W_j`` (response time = departure - arrival; any
    per-job cost works for naive/wDQ, but Little's law, and so qDQ and mixed
    DQ, link the *mean response time* to the number in system).
``n_before``
    float/int, number of jobs in the whole system just before job ``j``
    arrives, ``X(t_j-)`` (the queue-length cost sampled at decision epochs).
``total_rate``
    float scalar, the long-run total arrival rate (jobs per time unit) that
    converts number in system into response time (Little: X = total_rate * W).

Optional:

``total_rate_at``
    float array, instantaneous arrival rate at each arrival for a
    non-stationary arrival process; qDQ then uses ``X(t_j-) / total_rate_at[j]``
    whose arrival-average is ``mean X / mean total_rate = mean W`` (Little's law
    without PASTA). Missing: ``total_rate`` is used for every job.
``area``, ``t_start``, ``t_end``
    integral of X(t) over [t_start, t_end] (for the
    Little's-law check :func:`littles_law`).
``area_at``
    float array, ``A(t_j) = integral of X(t) dt`` from any fixed origin up to
    each arrival (only differences are used); needed by the time-integral
    queue-length cost ``cost="qt"`` of :func:`q_values`.
``block``, ``block_len``
    switchback block index of each job and the block length;
    the block of job j starts at ``block[j] * block_len``.
``design``, ``p``
    the experiment design ("bernoulli", "group", "switchback", ...) and
    the treatment probability; ``server``, ``q_seen``, ``meta``: free-form.

From records (arrival and finish time per job, as an ASR simulator produces),
:meth:`Trajectory.from_records` builds ``n_before`` and ``area`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from numba import njit
from scipy import stats

__all__ = ["Trajectory", "Estimate", "batch_ci", "littles_law"]


@njit(cache=True)
def _valid_z_sorted(z, arrival):
    for j in range(z.shape[0]):
        if z[j] != 0 and z[j] != 1:
            return False
        if j > 0 and arrival[j] < arrival[j - 1]:
            return False
    return True


@dataclass
class Trajectory:
    """Per-job record of one A/B experiment (see the module docstring for every field)."""

    arrival: np.ndarray
    z: np.ndarray
    response: np.ndarray
    n_before: np.ndarray
    total_rate: float
    total_rate_at: np.ndarray | None = None
    area: float | None = None
    area_at: np.ndarray | None = None
    t_start: float | None = None
    t_end: float | None = None
    block: np.ndarray | None = None
    block_len: float | None = None
    server: np.ndarray | None = None
    q_seen: np.ndarray | None = None
    design: str = "bernoulli"
    p: float | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.arrival = np.asarray(self.arrival, dtype=np.float64)
        z = np.asarray(self.z)
        if z.dtype != np.int8:
            if not np.all((z == 0) | (z == 1)):
                raise ValueError("z: treatment indicator must be 0 or 1")
            z = z.astype(np.int8)
        self.z = z
        self.response = np.asarray(self.response, dtype=np.float64)
        nb = np.asarray(self.n_before)
        if nb.dtype.kind not in "iuf":
            nb = nb.astype(np.float64)
        self.n_before = nb
        n = self.arrival.shape[0]
        for name in ("z", "response", "n_before"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name}: need one entry per job ({n}), got shape {getattr(self, name).shape}")
        if self.total_rate_at is not None:
            self.total_rate_at = np.asarray(self.total_rate_at, dtype=np.float64)
            if self.total_rate_at.shape != (n,) or np.any(self.total_rate_at <= 0):
                raise ValueError("total_rate_at: need one positive arrival rate per job")
        if self.area_at is not None:
            self.area_at = np.asarray(self.area_at, dtype=np.float64)
            if self.area_at.shape != (n,):
                raise ValueError(f"area_at: need one entry per job ({n}), got shape {self.area_at.shape}")
        if not (np.isfinite(self.total_rate) and self.total_rate > 0):
            raise ValueError(f"total_rate: need a positive total arrival rate, got {self.total_rate!r}")
        if not _valid_z_sorted(self.z, self.arrival):
            raise ValueError("z, arrival: z must be 0/1 and jobs sorted by arrival time")
        if self.block is not None:
            self.block = np.asarray(self.block, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    @property
    def observed_rate(self) -> float:
        """Observed arrival rate n / (t_end - t_start) (falls back to ``total_rate``)."""
        if self.t_start is None or self.t_end is None or self.t_end <= self.t_start:
            return float(self.total_rate)
        return len(self) / (self.t_end - self.t_start)

    @classmethod
    def from_records(
        cls,
        arrival,
        finish,
        z,
        *,
        total_rate: float | None = None,
        t_start: float | None = None,
        t_end: float | None = None,
        **kw,
    ) -> Trajectory:
        """Build a trajectory from per-job arrival and finish times (any system).

        ``n_before[j]`` = jobs that arrived before ``j`` and finish after ``arrival[j]``;
        ``area_at[j]`` = integral of their number in system from ``arrival[0]`` to ``arrival[j]``;
        ``area`` = exact integral of the number in system over ``[t_start, t_end]``
        (defaults: first and last arrival); ``total_rate`` defaults to ``n / (t_end - t_start)``.
        Rows are sorted by arrival first (``kw`` arrays of length n are sorted alongside).
        """
        arrival = np.asarray(arrival, dtype=np.float64)
        finish = np.asarray(finish, dtype=np.float64)
        z = np.asarray(z)
        n = arrival.shape[0]
        if finish.shape != (n,) or z.shape != (n,):
            raise ValueError("finish, z: need one entry per job, like arrival")
        if np.any(~np.isfinite(finish)) or np.any(finish < arrival):
            raise ValueError("finish: every job needs a finite finish time >= its arrival")
        order = np.argsort(arrival, kind="stable")
        arrival, finish, z = arrival[order], finish[order], z[order]
        for k, v in list(kw.items()):
            if isinstance(v, np.ndarray) and v.shape[:1] == (n,):
                kw[k] = v[order]
        ranks_arr = np.arange(n)  # jobs strictly before j in arrival order (ties: earlier rows)
        fin_sorted = np.sort(finish)
        departed = np.searchsorted(fin_sorted, arrival, side="right")
        # jobs before j that finished by arrival[j] (all finishes <= arrival[j] belong to earlier jobs
        # except zero-length jobs at the same instant, which the 'right' search would also count)
        n_before = ranks_arr - np.minimum(departed, ranks_arr)
        # area_at[j] = sum over earlier jobs i of min(finish_i, t_j) - arrival_i (times from arrival[0])
        a0 = arrival - arrival[0]
        fsum = np.concatenate(([0.0], np.cumsum(fin_sorted - arrival[0])))
        asum = np.concatenate(([0.0], np.cumsum(a0)))[:-1]
        area_at = fsum[np.minimum(departed, ranks_arr)] + a0 * n_before - asum
        t0 = float(arrival[0]) if t_start is None else float(t_start)
        t1 = float(arrival[-1]) if t_end is None else float(t_end)
        area = float(np.sum(np.clip(np.minimum(finish, t1) - np.maximum(arrival, t0), 0, None)))
        if total_rate is None:
            total_rate = n / (t1 - t0)
        kw.setdefault("area_at", area_at)
        return cls(
            arrival=arrival,
            z=z,
            response=finish - arrival,
            n_before=n_before,
            total_rate=float(total_rate),
            area=area,
            t_start=t0,
            t_end=t1,
            **kw,
        )


@dataclass
class Estimate:
    """One estimator's value on one experiment, with a batch-means confidence interval."""

    name: str
    value: float
    se: float
    lo: float
    hi: float
    n_batches: int
    alpha: float | None = None
    batches: np.ndarray | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        """Scalars only (for DataFrames)."""
        return {
            "estimator": self.name,
            "estimate": self.value,
            "se": self.se,
            "ci_lo": self.lo,
            "ci_hi": self.hi,
            "n_batches": self.n_batches,
            "alpha": self.alpha,
        }


@lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    return float(stats.t.ppf(q, df))


def batch_ci(name: str, value: float, batches: np.ndarray, level: float = 0.95, alpha=None) -> Estimate:
    """An :class:`Estimate` of ``value`` with the batch-means CI from the per-batch estimates ``batches``.

    ``value +/- t_{k-1, (1+level)/2} x sd(batches) / sqrt(k)`` over the ``k`` finite batch
    estimates (NaN bounds when ``k < 2``); ``alpha`` is mixed DQ's weight, if any.
    """
    b = batches[np.isfinite(batches)]
    k = b.size
    if k >= 2:
        se = float(b.std(ddof=1) / np.sqrt(k))
        h = _t_quantile(0.5 + level / 2, k - 1) * se
    else:
        se = h = float("nan")
    return Estimate(name, float(value), se, float(value - h), float(value + h), k, alpha, batches)


def littles_law(traj: Trajectory) -> dict:
    """Little's law check on one run: time-average number in system vs observed_rate * mean W.

    Returns ``time_avg_n`` (area / duration), ``arrival_avg_n`` (mean of ``n_before``,
    equal to the time average under PASTA), ``observed_rate``, ``mean_response``,
    ``little_n`` = observed_rate * mean_response and ``rel_gap`` = little_n / time_avg_n - 1.
    """
    if traj.area is None or traj.t_start is None or traj.t_end is None:
        raise ValueError("traj: Little's law needs area, t_start and t_end")
    dur = traj.t_end - traj.t_start
    xbar = traj.area / dur
    observed_rate = len(traj) / dur
    wbar = float(traj.response.mean())
    return {
        "time_avg_n": xbar,
        "arrival_avg_n": float(traj.n_before.mean()),
        "observed_rate": observed_rate,
        "mean_response": wbar,
        "little_n": observed_rate * wbar,
        "rel_gap": observed_rate * wbar / xbar - 1.0,
    }
