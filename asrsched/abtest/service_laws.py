"""The supermarket model's service-time laws, and the closed forms the model is checked against.

Service laws (every one with mean 1; a server of rate ``r`` divides the draw by ``r``)
--------------------------------------------------------------------------------------
``"exp"``
    exponential, squared coefficient of variation (SCV) 1.
``"const"``
    deterministic 1, SCV 0.
``"pareto"``
    classic Pareto with tail index ``shape`` > 1 and scale ``(shape - 1) / shape``;
    SCV ``1 / (shape (shape - 2))`` for ``shape`` > 2, infinite otherwise.
``"erlang"``
    Erlang-k, the sum of ``k`` exponentials of mean ``1 / k``: SCV ``1 / k``.
``"h2"``
    two-phase hyperexponential with balanced means (Whitt 1982, *Approximating a point process
    by a renewal process, I: two basic methods*, Operations Research 30(1); Tijms 2003, *A First
    Course in Stochastic Models*, Wiley): with probability ``p1`` an exponential of rate ``2 p1``, otherwise of rate
    ``2 (1 - p1)``, ``p1 = (1 + sqrt((c2 - 1) / (c2 + 1))) / 2``, so the mean is 1 and the SCV is
    ``c2`` > 1.

:func:`service_constants` turns (law, parameter) into three numbers once per run and
:func:`draw_service` draws one service requirement from the xoshiro256++ stream of
:mod:`asrsched.sim.rng` (both compiled, inlined into the model's kernel).

Closed forms: :func:`mm1_response` (M/M/1), :func:`mg1_response` (M/G/1, Pollaczek-Khinchine),
:func:`mean_field_response` (Power-of-d as N -> infinity, exponential service; Mitzenmacher 2001,
*The power of two choices in randomized load balancing*, IEEE TPDS 12(10)).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from asrsched.sim.rng import next_double as _next_double
from asrsched.sim.rng import std_exp as _std_exp

__all__ = [
    "SERVICE_KINDS",
    "service_parameter",
    "check_service",
    "service_scv",
    "service_constants",
    "draw_service",
    "mm1_response",
    "mg1_response",
    "mean_field_response",
]

#: the service laws of the supermarket model, in the order of their kernel codes
SERVICE_KINDS = ("exp", "const", "pareto", "erlang", "h2")


def service_parameter(service: str, pareto_shape: float, erlang_k: int, h2_scv: float) -> float:
    """The one number the kernel takes for a law: Pareto's tail index, Erlang's ``k`` or H2's SCV (else 0)."""
    return {"pareto": float(pareto_shape), "erlang": float(erlang_k), "h2": float(h2_scv)}.get(service, 0.0)


def check_service(service: str, pareto_shape: float = 2.5, erlang_k: int = 4, h2_scv: float = 4.0) -> None:
    """Raise ``ValueError`` naming the parameter if the law or its parameter is out of range."""
    if service not in SERVICE_KINDS:
        raise ValueError(f"service: {service!r} not in {SERVICE_KINDS}")
    if service == "pareto" and not (np.isfinite(pareto_shape) and pareto_shape > 1):
        raise ValueError(f"pareto_shape: the Pareto tail index must be > 1 (finite mean), got {pareto_shape!r}")
    if service == "erlang" and (
        isinstance(erlang_k, bool) or not isinstance(erlang_k, (int, np.integer)) or not 1 <= erlang_k <= 1000
    ):
        raise ValueError(f"erlang_k: the Erlang law needs an integer number of phases in [1, 1000], got {erlang_k!r}")
    if service == "h2" and not (np.isfinite(h2_scv) and h2_scv > 1):
        raise ValueError(
            f"h2_scv: the hyperexponential law needs a squared coefficient of variation > 1, got {h2_scv!r}"
        )


def service_scv(service: str, pareto_shape: float = 2.5, erlang_k: int = 4, h2_scv: float = 4.0) -> float:
    """The squared coefficient of variation of a law (``inf`` for a Pareto tail index <= 2)."""
    check_service(service, pareto_shape, erlang_k, h2_scv)
    if service == "exp":
        return 1.0
    if service == "const":
        return 0.0
    if service == "erlang":
        return 1.0 / erlang_k
    if service == "h2":
        return float(h2_scv)
    a = float(pareto_shape)
    return 1.0 / (a * (a - 2.0)) if a > 2 else math.inf


@njit(cache=True)
def service_constants(kind, par):
    """``(a, b, c)`` for :func:`draw_service` from a law's code (index in :data:`SERVICE_KINDS`) and parameter.

    Pareto: (scale, tail index, 0); Erlang-k: (0, k, 0); H2: (p1, 2 p1, 2 (1 - p1)) (the phases' rates);
    otherwise zeros.
    """
    if kind == 2:
        return (par - 1.0) / par, par, 0.0
    if kind == 3:
        return 0.0, par, 0.0
    if kind == 4:
        p1 = 0.5 * (1.0 + np.sqrt((par - 1.0) / (par + 1.0)))
        return p1, 2.0 * p1, 2.0 * (1.0 - p1)
    return 0.0, 0.0, 0.0


@njit(inline="always")
def draw_service(st, kind, a, b, c):
    """One service requirement (mean 1) of law ``kind`` with :func:`service_constants` ``(a, b, c)``.

    Draws from ``st`` in a fixed order: exp one exponential; const none; Pareto one uniform;
    Erlang-k ``k`` exponentials; H2 one uniform (the phase), then one exponential.
    """
    if kind == 0:
        return _std_exp(st)
    if kind == 1:
        return 1.0
    if kind == 2:
        return a * (1.0 - _next_double(st)) ** (-1.0 / b)
    if kind == 3:
        x = 0.0
        for _ in range(int(b)):
            x += _std_exp(st)
        return x / b
    if _next_double(st) < a:
        return _std_exp(st) / b
    return _std_exp(st) / c


def mm1_response(lam: float, mu: float = 1.0) -> float:
    """Mean response time of an M/M/1 queue, ``1 / (mu - lam)``."""
    if not 0 < lam < mu:
        raise ValueError(f"lam: need 0 < lam < mu, got lam={lam}, mu={mu}")
    return 1.0 / (mu - lam)


def mg1_response(lam: float, scv: float) -> float:
    """Mean response time of an M/G/1 queue with mean service 1 (Pollaczek-Khinchine):
    ``1 + lam (1 + scv) / (2 (1 - lam))``."""
    if not 0 < lam < 1:
        raise ValueError(f"lam: need 0 < lam < 1 (unit mean service), got {lam}")
    if not scv >= 0:
        raise ValueError(f"scv: need a squared coefficient of variation >= 0, got {scv}")
    return 1.0 + lam * (1.0 + scv) / (2.0 * (1.0 - lam))


def mean_field_response(lam: float, d: int, tol: float = 1e-15) -> float:
    """Mean-field (N -> infinity) mean response time of Power-of-d, unit rates, load ``lam``.

    The fraction of servers with at least ``i`` jobs is ``s_i = lam ** ((d**i - 1)/(d - 1))``
    (``lam ** i`` for d = 1); mean jobs per server is ``sum_i s_i`` and Little's law
    divides by ``lam``.
    """
    if not 0 < lam < 1:
        raise ValueError(f"lam: need 0 < lam < 1 (unit service rate), got {lam}")
    if d < 1:
        raise ValueError(f"d: need d >= 1, got {d}")
    total, i = 0.0, 1
    while True:
        e = i if d == 1 else (d**i - 1) / (d - 1)
        s = lam**e
        total += s
        if s < tol or i > 100000:
            break
        i += 1
    return total / lam
