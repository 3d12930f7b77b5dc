"""The outlier rule of the kappa fit: a clip whose tokens per second its language's other clips cannot explain.

A hallucinating decoder (a repetition loop, text invented over noise) can emit ten times the tokens a
clip's speech holds. One such clip moves a ratio-of-sums kappa far from every other clip and makes
its R² meaningless, so :func:`asrsched.profiling.fit.fit_kappa` finds such clips with this rule,
leaves them out of the fit and names them.

The rule (:func:`rate_outliers`), per language: the *modified z-score* of Iglewicz and Hoaglin
(B. Iglewicz, D. C. Hoaglin, "How to Detect and Handle Outliers", ASQC Basic References in Quality
Control 16, 1993), ``M = (x - median) / (1.4826 MAD)`` with ``|M| > 3.5`` an outlier, computed on
the log of each clip's rate ``tokens / duration``, with two guards for what the plain rule gets
wrong on a handful of token counts:

* the robust spread is never taken below ``min_spread`` (:data:`MIN_SPREAD`, 0.15 on the log
  scale: speaking rates of clips of one language differ by that much). Four clips whose rates
  happen to agree within 3 %, or counts without noise, would otherwise give a MAD so small that an
  ordinary 25 % difference in speaking rate reads as an outlier;
* each clip's spread adds its own counting noise, ``1 / (kappa_med x duration)`` on the log scale
  (a Poisson count's relative variance; ``kappa_med`` is the language's median rate): a 2 s clip
  with 8 expected tokens can have 14 by chance, a 50 s clip cannot have 1.75 times its 200.

So a clip is an outlier when ``|log r - median log r| > outlier_z x sqrt(s^2 + 1 / (kappa_med x d))``
with ``s = max(1.4826 MAD(log r), min_spread)``. The median and the MAD ignore up to half the clips,
so one hallucinated clip (or several) cannot hide itself by moving them. The rule is two-sided: a
clip with far too few tokens (speech skipped, a long silence) is left out too, with its own reason.
A zero count is taken as half a token for the log. Fewer than 3 clips: nothing is flagged (with two,
either could be the odd one).

>>> import numpy as np
>>> d = np.array([5.0, 10.0, 15.0, 20.0, 25.0, 30.0])
>>> rate_outliers(d, np.array([22, 45, 66, 92, 113, 1350])).outlier.tolist()
[False, False, False, False, False, True]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import median_abs_deviation

__all__ = ["OUTLIER_Z", "MIN_SPREAD", "RateOutliers", "check_rule", "rate_outliers", "rule_text"]

#: the modified z-score beyond which a clip is an outlier (Iglewicz and Hoaglin's 3.5)
OUTLIER_Z = 3.5
#: the smallest spread of log tokens per second assumed between clips of one language
MIN_SPREAD = 0.15


def check_rule(outlier_z: float | None, min_spread: float) -> None:
    """Raise ``ValueError`` naming the parameter unless ``outlier_z`` is ``None`` (no rule) or a finite
    number > 0 and ``min_spread`` a finite number >= 0."""
    if outlier_z is not None and not (_real(outlier_z) and math.isfinite(outlier_z) and outlier_z > 0):
        raise ValueError(f"outlier_z must be a finite number > 0 (or None: no outlier rule), got {outlier_z!r}")
    if not (_real(min_spread) and math.isfinite(min_spread) and min_spread >= 0):
        raise ValueError(f"min_spread must be a finite number >= 0, got {min_spread!r}")


def _real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def rule_text(outlier_z: float | None, min_spread: float = MIN_SPREAD) -> str:
    """The rule in one line, for a figure's subtitle or a report."""
    if outlier_z is None:
        return "no outlier rule: every good clip fitted"
    return (
        f"outlier: tokens per second more than {outlier_z:g} robust deviations from its language's median "
        f"(modified z-score of the log rate; MAD spread, at least {min_spread:g}, plus counting noise)"
    )


@dataclass
class RateOutliers:
    """The rule's verdict on one language's clips (arrays in the clips' order)."""

    #: the language's median rate (tokens per second; of an even count, the geometric mean of the middle two)
    median_rate: float
    #: each clip's rate (tokens / duration)
    rate: np.ndarray
    #: each clip's score: its log rate's distance from the median, in spreads (signed)
    z: np.ndarray
    #: True for the clips the rule leaves out
    outlier: np.ndarray

    def reason(self, i: int, outlier_z: float) -> str:
        """Why clip ``i`` is an outlier, in words and numbers."""
        f = self.rate[i] / self.median_rate
        what = (
            "more tokens than its duration explains (hallucination or repetition loop?)"
            if self.z[i] > 0
            else "fewer tokens than its duration explains (speech skipped or silence?)"
        )
        return (
            f"{self.rate[i]:.1f} tokens/s = {f:.2g}x the language's median {self.median_rate:.2f} "
            f"(z = {self.z[i]:+.1f}, beyond ±{outlier_z:g}): {what}"
        )


def rate_outliers(
    duration: np.ndarray,
    tokens: np.ndarray,
    *,
    outlier_z: float | None = OUTLIER_Z,
    min_spread: float = MIN_SPREAD,
) -> RateOutliers:
    """Apply the rule (module docstring) to one language's clips: positive durations, finite token counts.

    ``outlier_z=None`` turns the rule off (nothing flagged). Bad ``outlier_z`` or ``min_spread``:
    ``ValueError`` naming it.
    """
    check_rule(outlier_z, min_spread)
    x = np.asarray(duration, float)
    y = np.asarray(tokens, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"duration and tokens must be 1-d arrays of one length, got {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and (x > 0).all() and np.isfinite(y).all()):
        raise ValueError("duration must be finite and > 0 and tokens finite for every clip")
    n = len(x)
    rate = y / x
    if n == 0:
        return RateOutliers(math.nan, rate, np.zeros(0), np.zeros(0, bool))
    log_rate = np.log(np.maximum(y, 0.5) / x)
    med = float(np.median(log_rate))
    spread = max(float(median_abs_deviation(log_rate, scale="normal")), float(min_spread))
    z = (log_rate - med) / np.sqrt(spread**2 + 1.0 / (math.exp(med) * x))
    flagged = np.abs(z) > outlier_z if (outlier_z is not None and n >= 3) else np.zeros(n, bool)
    return RateOutliers(math.exp(med), rate, z, flagged)
