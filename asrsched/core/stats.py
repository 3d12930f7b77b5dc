"""The statistics the studies share: batch means, percentile-bootstrap intervals, mixed DQ's gain bound.

One home for each formula, so that the A/B studies (:mod:`asrsched.abtest`), their reports and
the full run compute them the same way. An estimator's batch-means CI is
:func:`asrsched.abtest.trajectory.batch_ci`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["batch_mean_se", "percentile_ci", "gain_bound"]


def batch_mean_se(x: np.ndarray, n_batches: int = 50) -> float:
    """Batch-means standard error of the mean of ``x`` (``n_batches`` contiguous batches)."""
    b = np.array([v.mean() for v in np.array_split(x, n_batches)])
    return float(b.std(ddof=1) / np.sqrt(n_batches))


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` percentile interval of bootstrap ``draws``, over the finite ones (NaN, NaN if none).

    A resample of identical replications can give a ratio of two zero spreads: such draws are dropped.
    """
    b = np.asarray(draws, float)
    b = b[np.isfinite(b)]
    if not b.size:
        return float("nan"), float("nan")
    q = round((1 - level) / 2, 12)
    return float(np.quantile(b, q)), float(np.quantile(b, 1 - q))


def gain_bound(cov: np.ndarray) -> float:
    """The largest sd gain any fixed weight can give over the better of two estimators with covariance ``cov``.

    ``sqrt(min(V_1, V_2) (V_1 + V_2 - 2C) / (V_1 V_2 - C^2))`` (infinite when the two are
    perfectly correlated): what mixed DQ's combination of wDQ and qDQ can reach at best.
    """
    det = cov[0, 0] * cov[1, 1] - cov[0, 1] ** 2
    if not det > 0:
        return float("inf")
    return float(np.sqrt(min(cov[0, 0], cov[1, 1]) * (cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]) / det))
