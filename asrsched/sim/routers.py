"""Routers of a multi-replica fleet: each picks the replica for an arriving request from what a load balancer sees.

Routers (registry: :func:`register_router`, :func:`make_router`, :func:`router_names`)
--------------------------------------------------------------------------------------
``random``
    a uniformly random replica.
``round_robin``
    replicas in turn (each router object keeps its own pointer).
``jsq``
    join the shortest queue: fewest requests in the replica (waiting + running),
    ties broken uniformly at random (vLLM-router "least outstanding requests").
``pod<d>``
    Power-of-d on queue length: sample ``d`` distinct replicas uniformly, join
    the one with the fewest requests (ties: first sampled, i.e. uniformly).
``least_work``
    duration-aware: the replica with the least estimated outstanding work
    (:meth:`asrsched.sim.engine.Engine.outstanding_work`), ties uniformly at random.
``pod<d>_work``
    duration-aware Power-of-d: sample ``d`` replicas, join the least estimated work.

A router's :meth:`Router.route` gets a view of the fleet at the arrival (``view.n(i)``: requests
in replica ``i``; ``view.work(i)``: its estimated outstanding work, from the size estimates
only) and the candidate replicas. The compiled engine (:mod:`asrsched.sim.kernel`) runs the
built-in ones with the same draws (:data:`asrsched.sim.inputs.BUILTIN_ROUTERS`); a router
registered here, or a built-in name re-registered, runs in the Python fleet.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from asrsched.sim.inputs import BUILTIN_ROUTERS, set_router_lookup

__all__ = [
    "Router",
    "ROUTERS",
    "register_router",
    "router_names",
    "make_router",
    "validate_router",
    "parse_router",
    "router_info",
    "uniform_uses",
]


class Router:
    """Base class: :meth:`route` returns the replica (an element of ``cands``) for a request.

    Subclasses use :meth:`_u` (a buffered uniform stream from the router's own generator)
    so that every router's randomness is reproducible and independent of other routers.
    """

    name = "router"

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._buf = np.empty(0)
        self._k = 0

    def _u(self) -> float:
        if self._k >= self._buf.shape[0]:
            self._buf = self.rng.random(4096)
            self._k = 0
        self._k += 1
        return float(self._buf[self._k - 1])

    def _pick(self, k: int) -> int:
        return min(int(self._u() * k), k - 1)

    def _sample(self, cands: list[int], d: int) -> list[int]:
        """``d`` distinct candidates in uniformly random order (partial Fisher-Yates)."""
        c = list(cands)
        n = len(c)
        d = min(d, n)
        for i in range(d):
            j = i + self._pick(n - i)
            c[i], c[j] = c[j], c[i]
        return c[:d]

    def _argmin(self, cands: list[int], vals: list) -> int:
        m = min(vals)
        ties = [c for c, v in zip(cands, vals) if v == m]
        return ties[0] if len(ties) == 1 else ties[self._pick(len(ties))]

    def route(self, view: Any, cands: Sequence[int]) -> int:  # pragma: no cover - interface
        raise NotImplementedError


class RandomRouter(Router):
    name = "random"

    def route(self, view, cands):
        return cands[self._pick(len(cands))]


class RoundRobinRouter(Router):
    name = "round_robin"

    def __init__(self, rng=None):
        super().__init__(rng)
        self.next = 0

    def route(self, view, cands):
        i = cands[self.next % len(cands)]
        self.next += 1
        return i


class JSQRouter(Router):
    name = "jsq"

    def route(self, view, cands):
        return self._argmin(cands, [view.n(i) for i in cands])


class LeastWorkRouter(Router):
    name = "least_work"

    def route(self, view, cands):
        return self._argmin(cands, [view.work(i) for i in cands])


class PowerOfDRouter(Router):
    """Power-of-d on queue length (``work=False``) or on estimated work (``work=True``)."""

    def __init__(self, rng=None, d: int = 2, work: bool = False):
        super().__init__(rng)
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
            raise ValueError(f"d: Power-of-d needs an integer d >= 1, got {d!r}")
        self.d = int(d)
        self.work = bool(work)
        self.name = f"pod{self.d}_work" if work else f"pod{self.d}"

    def route(self, view, cands):
        s = self._sample(cands, self.d)
        if len(s) == 1:
            return s[0]
        f = view.work if self.work else view.n
        best, bv = s[0], f(s[0])
        for i in s[1:]:
            v = f(i)
            if v < bv:
                best, bv = i, v
        return best


ROUTERS: dict[str, Callable[..., Router]] = {}


def register_router(name: str) -> Callable[[Callable[..., Router]], Callable[..., Router]]:
    """Decorator: register a factory ``(rng, **params) -> Router`` under ``name``.

    >>> @register_router("first")
    ... def _first(rng=None):
    ...     class First(Router):
    ...         def route(self, view, cands):
    ...             return cands[0]
    ...     return First(rng)
    >>> make_router("first").route(None, [3, 1])
    3
    >>> _ = ROUTERS.pop("first")
    """

    def deco(factory):
        ROUTERS[name.lower()] = factory
        return factory

    return deco


register_router("random")(RandomRouter)
register_router("round_robin")(RoundRobinRouter)
register_router("jsq")(JSQRouter)
register_router("least_work")(LeastWorkRouter)
register_router("pod")(lambda rng=None, d=2: PowerOfDRouter(rng, d=d, work=False))
register_router("pod_work")(lambda rng=None, d=2: PowerOfDRouter(rng, d=d, work=True))

BUILTIN_ROUTERS.update(ROUTERS)  # what the compiled engine implements (a re-registered name takes the Python path)
_POD = re.compile(r"^pod(\d+)(_work)?$")


def router_names() -> list[str]:
    """Registered router names (``pod<d>`` and ``pod<d>_work`` stand for ``pod``/``pod_work`` with ``d``)."""
    return sorted(set(ROUTERS) - {"pod", "pod_work"}) + ["pod<d>", "pod<d>_work"]


def router_info(name: str) -> tuple[str, Any]:
    """A router name's registry key and the factory registered under it now (the engine-choice rule reads them)."""
    key = parse_router(name)[0]
    return key, ROUTERS.get(key)


def parse_router(name: str) -> tuple[str, dict]:
    """A router name as ``(registered key, factory parameters)``: ``"pod3_work"`` -> ``("pod_work", {"d": 3})``."""
    key = str(name).strip().lower()
    m = _POD.match(key)
    if m:
        return ("pod_work" if m.group(2) else "pod"), {"d": int(m.group(1))}
    if key in ROUTERS:
        return key, {}
    raise ValueError(
        f"router: unknown router {name!r}; allowed values: {', '.join(router_names())} (e.g. 'pod2', 'pod3_work')"
    )


set_router_lookup(router_info)


def validate_router(name: str, n_replicas: int | None = None, param: str = "router") -> str:
    """The router's canonical name, or ``ValueError`` naming ``param`` and the allowed values."""
    try:
        key, kw = parse_router(name)
    except ValueError as e:
        raise ValueError(str(e).replace("router:", f"{param}:", 1)) from None
    d = kw.get("d")
    if d is not None and (d < 1 or (n_replicas is not None and d > n_replicas)):
        raise ValueError(f"{param}: Power-of-d needs 1 <= d <= n_replicas ({n_replicas}), got {name!r}")
    return str(name).strip().lower()


def make_router(name: str, rng: np.random.Generator | None = None, **params) -> Router:
    """A fresh router by name (``random``, ``round_robin``, ``jsq``, ``least_work``, ``pod<d>``, ``pod<d>_work``)."""
    key, kw = parse_router(name)
    kw.update(params)
    return ROUTERS[key](rng, **kw)


def uniform_uses(key: str, d: int, n_cands: int) -> int:
    """Most uniforms a router draws per request (Power-of-d: one per sampled replica; argmin routers: one on a tie)."""
    return {"round_robin": 0, "pod": min(d, n_cands), "pod_work": min(d, n_cands)}.get(key, 1)
