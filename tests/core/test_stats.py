"""``asrsched.core.stats``: batch means, percentile intervals and mixed DQ's gain bound, against direct formulas."""

from __future__ import annotations

import numpy as np
import pytest

from asrsched.core.stats import batch_mean_se, gain_bound, percentile_ci


def test_batch_mean_se_of_independent_draws_matches_the_iid_standard_error():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(200_000)
    se = batch_mean_se(x, 50)
    assert se == pytest.approx(1 / np.sqrt(x.size), rel=0.25)
    # positively correlated data: batch means see the correlation an iid formula misses
    ar = np.empty_like(x)
    ar[0] = x[0]
    for i in range(1, x.size):
        ar[i] = 0.9 * ar[i - 1] + x[i]
    assert batch_mean_se(ar, 50) > 3 * ar.std() / np.sqrt(ar.size)


def test_percentile_ci_drops_non_finite_draws_and_uses_the_level():
    d = np.r_[np.arange(1001.0), np.nan, np.inf]
    assert percentile_ci(d) == (25.0, 975.0)
    assert percentile_ci(d, level=0.5) == (250.0, 750.0)
    lo, hi = percentile_ci(np.array([np.nan, np.inf]))
    assert np.isnan(lo) and np.isnan(hi)


def test_gain_bound_is_the_best_fixed_weight():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5000, 2)) @ np.array([[1.0, 0.6], [0.0, 0.8]])
    cov = np.cov(x[:, 0], x[:, 1], ddof=1)
    a = np.linspace(-2, 3, 20001)
    sd = np.sqrt(a**2 * cov[0, 0] + (1 - a) ** 2 * cov[1, 1] + 2 * a * (1 - a) * cov[0, 1])
    assert gain_bound(cov) == pytest.approx(np.sqrt(min(cov[0, 0], cov[1, 1])) / sd.min(), rel=1e-6)
    assert gain_bound(np.array([[1.0, 1.0], [1.0, 1.0]])) == np.inf
