"""Static policies given by a compiled key: written once, run by every engine.

:func:`register_static_policy` registers a policy ``key(estimate, arrival, duration, language)
-> float`` (smallest first) in :mod:`asrsched.core.policies`' registry as a
:class:`~asrsched.core.policies.KeyQueue` (the Python engines, the HTTP server and the vLLM
plug-in run that), and keeps its numba-compiled key, which the compiled engine
(:mod:`asrsched.sim.kernel`) evaluates once per request (:func:`static_key`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit

from asrsched.core.policies import POLICIES, KeyQueue, register_policy

__all__ = ["register_static_policy", "static_key", "static_clock", "KEY_CLOCKS"]

_STATIC_KEYS: dict[str, tuple[Callable, Any, str]] = {}  # name -> (factory, numba key, clock) of register_static_policy
#: what a static key is added to: nothing (``"arrival"``: the key is the order, as its name says, and may
#: use the arrival time) or the job's place in the push order (``"count"``: the key is an offset in places)
KEY_CLOCKS = ("arrival", "count")
_BUILTIN = frozenset(("fcfs", "sjf", "ljf", "hrrn", "adaptive", "random"))


def register_static_policy(name: str, key: Callable | None = None, *, clock: str = "arrival"):
    """Register a static policy given by ``key(estimate, arrival, duration, language) -> float``.

    The job with the smallest key is served first; ties go to the earlier submission
    (as :class:`KeyQueue`). ``estimate`` is the estimated service time (s), ``arrival`` the
    arrival time (s), ``duration`` the audio duration (s) and ``language`` a string. The key is
    compiled with numba (``numba.njit``; pass an already-jitted function to choose options), so
    it must be numba-compatible code.

    The policy joins the registry under ``name``: the Python engines, the HTTP server and the
    vLLM plug-in use it as a :class:`KeyQueue`, and the compiled engine
    (:mod:`asrsched.sim.kernel`: a single server and a fleet) runs it with the same
    decisions. Usable as a decorator::

        @register_static_policy("longest_wait_first_en")
        def key(estimate, arrival, duration, language):
            return arrival if language == "en" else arrival + 60.0

    ``clock="count"``: the job's heap key is ``key(...) + p``, with ``p`` the number of jobs pushed
    into the queue before it since the queue was made (:class:`KeyQueue`'s ``count_clock``; the
    compiled engine counts per replica, from the last policy switch). A key is then an offset in
    places of the arrival order: Nudge-M (:mod:`asrsched.core.nudge`) lets a short job pass a long
    one pushed at most ``M`` places before it.

    Returns the compiled key.
    """
    if key is None:
        return lambda f: register_static_policy(name, f, clock=clock)
    if clock not in KEY_CLOCKS:
        raise ValueError(f"clock: must be one of {KEY_CLOCKS}, got {clock!r}")
    if not callable(key):
        raise TypeError(f"key must be a function (estimate, arrival, duration, language) -> float, got {key!r}")
    lname = str(name).lower()
    if lname in _BUILTIN:
        raise ValueError(f"{name!r} is a built-in policy name; choose another name")
    jkey = key if hasattr(key, "py_func") else njit(key)

    def factory() -> KeyQueue:
        return KeyQueue(
            lambda j: float(jkey(float(j.est_service), float(j.arrival), float(j.duration), str(j.language))),
            name=lname,
            count_clock=clock == "count",
        )

    register_policy(lname)(factory)
    _STATIC_KEYS[lname] = (factory, jkey, clock)
    return jkey


def static_key(name: str) -> Any:
    """The compiled key of ``name`` if it is a static policy of :func:`register_static_policy` (and still
    registered as one), else ``None``."""
    entry = _STATIC_KEYS.get(str(name).lower())
    if entry is None or POLICIES.get(str(name).lower()) is not entry[0]:
        return None
    return entry[1]


def static_clock(name: str) -> str | None:
    """The clock (:data:`KEY_CLOCKS`) of ``name`` if it is a static policy of :func:`register_static_policy`, else ``None``."""
    if static_key(name) is None:
        return None
    return _STATIC_KEYS[str(name).lower()][2]
