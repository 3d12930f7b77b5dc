"""γ-Boost (Yu & Scully, SIGMETRICS 2024): FCFS on a boosted arrival time, a static key in every engine.

A request with size estimate ``s`` (its estimated service time, s) and arrival time ``a`` is served
in order of its boosted arrival ``a - b_γ(s)``, with the boost

    ``b_γ(s) = (1/γ) log(1 / (1 - exp(-γ s)))``

(Yu & Scully, "Strongly Tail-Optimal Scheduling in the Light-Tailed M/G/1", SIGMETRICS 2024). A short
request is boosted ahead of requests that arrived a little earlier, a long one hardly at all. The
boost is decreasing in ``s`` and its parameter ``γ`` (1/s) spans two limits:

* ``γ -> ∞``: ``b_γ(s) ≈ exp(-γ s)/γ -> 0`` for every ``s > 0``, so the order is FCFS;
* ``γ -> 0``: ``b_γ(s) ≈ -(1/γ) log(γ s)``, so boosts differ by ``(1/γ) log(s'/s)`` and swamp any
  difference in arrival: the order is shortest-estimate-first (SJF, ties by arrival).

Strong tail optimality holds at ``γ = γ*``, the decay rate of FCFS's response-time tail in the
light-tailed M/G/1, ``P(T > t) ~ C exp(-γ* t)``: the positive root of the Cramér–Lundberg equation
``λ (E[exp(γ S)] - 1) = γ`` (:func:`decay_rate`, from a sample of service times and the arrival rate).

:func:`register_gamma_boost` puts the policy for one ``γ`` in the registry through
:func:`asrsched.core.static_policies.register_static_policy`, so the Python engines, the compiled
engine (decision for decision the same), the HTTP server and the vLLM plug-in all run the one key.

**Partial information** (Yu & Scully 2024): when the scheduler knows only a label of each job (here the
estimate, whose error the package models, :mod:`asrsched.core.estimate_error`), the boost of a label is
``(1/γ) log(M / (M - 1))`` with ``M = E[exp(γ S) | label]`` (:func:`partial_boost`); with exact sizes it is
the boost above. ``gamma_boost_<γ>_<error>`` names that policy for a named error model.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.optimize import brentq

from asrsched.core.estimate_error import PRESETS, estimate_error
from asrsched.core.policies import POLICIES
from asrsched.core.static_policies import register_static_policy, static_key

__all__ = [
    "boost",
    "partial_boost",
    "decay_rate",
    "register_gamma_boost",
    "gamma_boost_name",
    "gamma_boost_from_name",
    "PARTIAL_DRAWS",
]


def _check_gamma(gamma) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not (0 < gamma < math.inf):
        raise ValueError(f"gamma: γ-Boost's parameter must be a finite number > 0 (1/s), got {gamma!r}")
    return float(gamma)


def boost(s, gamma: float) -> np.ndarray:
    """``b_γ(s) = -(1/γ) log(-expm1(-γ s))`` for sizes ``s > 0`` (s), elementwise; see the module docstring."""
    g = _check_gamma(gamma)
    s = np.asarray(s, float)
    if np.any(~(s > 0)):
        raise ValueError("s: sizes must be > 0 seconds")
    return -np.log(-np.expm1(-g * s)) / g


def decay_rate(total_rate: float, sizes) -> float:
    """γ* of FCFS in the M/G/1 with arrival rate ``total_rate`` (1/s) and service times drawn from ``sizes`` (s).

    The positive root of ``λ (mean(exp(γ S)) - 1) = γ`` (the empirical moment-generating function of
    ``sizes``); it exists when the load ``λ E[S]`` is below 1. For exponential sizes of mean ``1/μ`` it is
    ``μ - λ``.
    """
    s = np.asarray(sizes, float)
    if s.size < 1 or np.any(~(s > 0)) or not np.all(np.isfinite(s)):
        raise ValueError("sizes: need at least one finite service time > 0 s")
    if not (isinstance(total_rate, (int, float, np.floating)) and total_rate > 0 and math.isfinite(total_rate)):
        raise ValueError(f"total_rate: need an arrival rate > 0 per second, got {total_rate!r}")
    rho = float(total_rate) * float(s.mean())
    if rho >= 1:
        raise ValueError(
            f"total_rate: load λ E[S] = {rho:.3f} >= 1; the FCFS queue is unstable and its tail has no decay rate"
        )
    smax = float(s.max())

    def f(g: float) -> float:  # λ (M(γ) - 1) - γ, scaled by exp(-γ smax) against overflow
        mgf = float(np.mean(np.exp(g * (s - smax))))
        return float(total_rate) * (mgf - math.exp(-g * smax)) - g * math.exp(-g * smax)

    hi = 1.0 / smax
    while f(hi) <= 0:  # f < 0 just above 0 (slope ρ - 1), convex, > 0 eventually
        hi *= 2.0
    lo = hi / 2.0
    while lo > 1e-300 and f(lo) > 0:
        lo /= 2.0
    return float(brentq(f, lo, hi, xtol=1e-14, rtol=1e-12))


#: draws of the estimate's error factor behind a partial-information boost (fixed seed: the boost is a
#: function of the policy's name alone, so every engine and process computes the same one)
PARTIAL_DRAWS = 4000
_GRID = np.logspace(-4, 4, 1601)  # estimates (s) on which a partial-information boost is tabulated


def partial_boost(s, gamma: float, error) -> np.ndarray:
    """The boost of γ-Boost with partial information (Yu & Scully 2024): the estimate ``s`` is a label, the
    true size ``S = s m`` with ``m`` drawn from the estimate's error (:func:`asrsched.core.estimate_error.estimate_error`:
    a preset such as ``"real"``), and ``b_γ(s) = (1/γ) log(M / (M - 1))``, ``M = E[exp(γ S) | s]``.

    With a perfect estimate (``m = 1``) it is :func:`boost`. ``M`` is the mean over :data:`PARTIAL_DRAWS`
    draws of ``m`` (seed 0), in log space against overflow. ``S = s m`` scales the whole estimate, encoder
    and overhead included: the error model describes the tokens, the largest and most uncertain part.
    """
    g = _check_gamma(gamma)
    s = np.atleast_1d(np.asarray(s, float))
    if np.any(~(s > 0)):
        raise ValueError("s: sizes must be > 0 seconds")
    m = estimate_error(error).sample(np.random.default_rng(0), PARTIAL_DRAWS, "en")
    x = g * s[:, None] * m[None, :]
    top = x.max(axis=1)
    log_mgf = top + np.log(np.mean(np.exp(x - top[:, None]), axis=1))
    return -np.log1p(-np.exp(-log_mgf)) / g


def gamma_boost_name(gamma: float, error: str | None = None) -> str:
    """The registry name of γ-Boost at ``gamma``: ``"gamma_boost_<γ>"`` (``%g``), or with partial information
    under a named estimate error ``"gamma_boost_<γ>_<error>"`` (e.g. ``gamma_boost_0.2_real``)."""
    base = f"gamma_boost_{_check_gamma(gamma):g}"
    if error is None:
        return base
    if str(error).lower() not in PRESETS or str(error).lower() == "perfect":
        raise ValueError(f"error: a partial-information boost needs a named error of {PRESETS[1:]}, got {error!r}")
    return f"{base}_{str(error).lower()}"


def register_gamma_boost(gamma: float, name: str | None = None, error: str | None = None) -> str:
    """Register γ-Boost at ``gamma`` (1/s) as a static policy (idempotent); its registry name.

    The key is ``arrival - b_γ(estimate)`` with ``estimate`` the request's estimated service time; with
    ``error`` (a preset name of :mod:`asrsched.core.estimate_error`) the boost is :func:`partial_boost`,
    tabulated on a log grid of estimates (1e-4 to 1e4 s) and interpolated in log s.
    """
    g = _check_gamma(gamma)
    lname = (name or gamma_boost_name(g, error)).lower()
    tag = (g, None if error is None else str(error).lower())
    if static_key(lname) is not None and getattr(static_key(lname), "_gamma", None) == tag:
        return lname
    if lname in POLICIES:
        raise ValueError(f"name: {lname!r} is already a policy in the registry")
    if error is None:

        @njit
        def key(estimate, arrival, duration, language):
            s = estimate if estimate > 1e-12 else 1e-12
            return arrival + math.log(-math.expm1(-g * s)) / g

    else:
        log_grid = np.log(_GRID)
        table = partial_boost(_GRID, g, tag[1])

        @njit
        def key(estimate, arrival, duration, language):
            s = min(max(estimate, 1e-4), 1e4)
            return arrival - np.interp(math.log(s), log_grid, table)

    register_static_policy(lname, key)
    key._gamma = tag
    return lname


def gamma_boost_from_name(name: str) -> str:
    """Register ``"gamma_boost_<γ>"`` or ``"gamma_boost_<γ>_<error>"`` from its name (the registry does this on
    first use, so a server started with ``--policy gamma_boost_0.5`` or a vLLM plug-in configured with it finds
    the policy)."""
    text = str(name).lower().removeprefix("gamma_boost_")
    num, _, err = text.partition("_")
    try:
        g = float(num)
    except ValueError:
        raise ValueError(f"gamma: {name!r} does not end in a number (write e.g. gamma_boost_0.5)") from None
    return register_gamma_boost(g, name=str(name).lower(), error=err or None)
