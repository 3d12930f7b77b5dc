"""A multi-replica ASR cluster: N continuous-batching servers behind a router, and A/B designs on it.

Each replica is one :class:`asrsched.sim.engine.Engine` (the foundation simulator, unchanged) with
its own scheduling policy. A router sends every arriving request to one replica, looking
only at what a real load balancer can see at that instant: the number of requests each
replica holds, and the *estimated* outstanding work derived from the size estimate
``kappa x duration`` (never the true token counts).

Driver protocol (the same as :func:`asrsched.sim.engine.simulate`, for many engines): for each
arrival in time order, every replica processes its decision points before the arrival
(``run_until``), the router reads their state and picks one, the request is submitted
there; at the end every replica drains (``run_until(inf)``). With one replica this is
exactly :func:`~asrsched.sim.engine.simulate` (tests check the records are identical).

Routers (registry: :func:`register_router`, :func:`make_router`, :func:`router_names`)
-------------------------------------------------------------------------------------
``random``       a uniformly random replica.
``round_robin``  replicas in turn (each router object keeps its own pointer).
``jsq``          join the shortest queue: fewest requests in the replica (waiting + running),
                 ties broken uniformly at random (vLLM-router "least outstanding requests").
``pod<d>``       Power-of-d on queue length: sample ``d`` distinct replicas uniformly, join
                 the one with the fewest requests (ties: first sampled, i.e. uniformly).
``least_work``   duration-aware: the replica with the least estimated outstanding work
                 (:func:`estimated_work`), ties uniformly at random.
``pod<d>_work``  duration-aware Power-of-d: sample ``d`` replicas, join the least estimated work.

Estimated outstanding work of a replica at time ``t`` (:func:`estimated_work`): the sum of
the waiting requests' estimated service times (``est_service``: encoder windows + kappa x
duration x batch-1 decode step + overhead) plus, for each running request, its estimated
remaining tokens ``max(kappa x duration - generated so far, 0)`` times the current decode
step time. Only the estimate enters: a request that runs longer than estimated counts as
zero remaining work.

A/B designs (:class:`ABTest`; ``factor`` says what is tested)
-------------------------------------------------------------
Routing tests (``factor="routing"``: ``control``/``treatment`` are routers; every replica
runs the scheduling policy ``policy``):

``bernoulli``   request-level randomisation: request j is treated with probability ``p``
                independently (``z_j ~ Bernoulli(p)``) and routed by the treatment router,
                otherwise by the control router; both arms share all replicas (so each
                arm's routing changes the queues the other arm sees: interference).
``group``       replica split: a uniformly random set of ``round(p N)`` replicas forms the
                treatment group (re-drawn per experiment), the rest the control group;
                request j is treated with probability ``p`` and routed by its arm's router
                *only among its group's replicas*. No interference, but each arm runs on a
                fleet of ``~pN`` replicas instead of N (finite-size bias).
``switchback``  time is cut into blocks ``[b B, (b+1) B)`` of ``block_s`` seconds; block b is
                treated (``alternate=True``: blocks alternate, the first block's arm is a
                fair coin; ``False``: each block independently with probability ``p``); every
                request arriving in a treated block is routed by the treatment router.

Scheduling tests (``factor="scheduling"``: ``control``/``treatment`` are scheduling
policies, e.g. FCFS vs HRRN; every request is routed by ``router``). Request-level
randomisation is not defined here: a replica orders *one* waiting queue, and the order
between a "treated" and a "control" request is neither policy's decision. So:

``replica``     replica-level (cluster) randomisation: a uniformly random set of
                ``round(p N)`` replicas (re-drawn per experiment) runs the treatment policy,
                the rest the control policy; requests are routed by ``router`` over all
                replicas and a request's arm is the arm of the replica that served it. With
                a load-aware router the arms interfere through the router (a replica that
                drains faster looks shorter and receives more requests).
``switchback``  all replicas run the block's policy: at each block boundary every replica's
                waiting queue is re-ordered under the new policy (requests already running
                continue; the new order applies from the replica's first decision point at
                or after the boundary). A request's arm is the arm of the block it arrives
                in; it may be served partly under the next block's policy (carry-over,
                which the estimator's burn-in reduces). After the last arrival the fleet
                drains under the last block's policy.

``control`` / ``treatment`` (either factor): the whole fleet under one arm -- the separate
full runs that define the ground truth.

Seeds: one ``seed`` drives the design's randomisation and each router's own random
stream (:class:`numpy.random.SeedSequence` children), so a run is reproducible from
``(trace, test, seed)``.

Records: the simulator's per-request columns (``rid, arrival, duration, language,
est_service, tokens, admit, first_token, finish`` and derived ``queue_delay, ttft, e2el``,
so :func:`asrsched.core.metrics.summarize` works) plus ``replica``, ``z`` (1 = treatment arm)
and ``block`` (switchback block index, -1 otherwise). :meth:`ClusterResult.trajectory`
turns them into the estimators' :class:`~asrsched.abtest.estimators.Trajectory`.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import Trajectory
from asrsched.core.policies import make_queue, validate_policies
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.sim.engine import Engine, _chunk_jobs, simulate
from asrsched.core.workloads import Drift, Trace, make_source, make_trace

__all__ = [
    "Router",
    "register_router",
    "router_names",
    "make_router",
    "validate_router",
    "estimated_work",
    "ABTest",
    "ClusterResult",
    "run_cluster",
    "run_experiment",
    "replica_capacity",
    "cluster_trace",
    "FACTORS",
    "DESIGNS",
]

FACTORS = ("routing", "scheduling")
DESIGNS = {"routing": ("bernoulli", "group", "switchback", "control", "treatment"),
           "scheduling": ("replica", "switchback", "control", "treatment")}


# ----------------------------------------------------------------------------- router state

class _View:
    """What a router sees at time ``now``: per-replica request counts and estimated work.

    The work estimate keeps, per replica, the sorted decode steps ``E_j`` at which each
    running request's *estimate* runs out (``admission step + kappa x duration``); it is
    rebuilt only when the replica's running set changed (a completion or an admission), so
    a query costs O(log b) instead of a scan of the batch.
    """

    __slots__ = ("engines", "est_tok", "now", "_cache")

    def __init__(self, engines: list[Engine], est_tok: np.ndarray) -> None:
        self.engines = engines
        self.est_tok = est_tok  # estimated tokens per rid (kappa x duration)
        self.now = 0.0
        self._cache: list[Any] = [None] * len(engines)

    def n(self, i: int) -> int:
        return self.engines[i].n_in_system(self.now)

    def work(self, i: int) -> float:
        e = self.engines[i]
        running = e.running
        if not running:
            return e.queued_est
        key = (e.completed + len(e.out), len(running))
        c = self._cache[i]
        if c is None or c[0] != key:
            est = self.est_tok
            ex = sorted([f - job.tokens + est[rid] for f, rid, job in running])
            suffix = list(itertools.accumulate(reversed(ex)))[::-1] + [0.0]
            c = self._cache[i] = (key, ex, suffix)
        _, ex, suffix = c
        st = e.steps[len(running)]
        G = e.G
        if e.t > self.now:
            G -= int((e.t - self.now) / st)
        k = bisect.bisect_right(ex, G)
        return e.queued_est + (suffix[k] - (len(ex) - k) * G) * st


def estimated_work(engine: Engine, at: float, est_tokens) -> float:
    """Estimated outstanding work (s) of one replica at time ``at`` (see module docstring).

    ``est_tokens[rid]`` is the size estimate (tokens) of request ``rid``. Call after
    ``engine.run_until(at)``: if the engine's clock already jumped past ``at`` (it jumps to
    its next completion), the decode steps between ``at`` and that point are added back.
    This is the reference implementation; routers use an equivalent cached version.
    """
    running = engine.running
    work = engine.queued_est
    if running:
        st = engine.steps[len(running)]
        G = engine.G
        if engine.t > at:
            G -= int((engine.t - at) / st)
        for f, rid, job in running:
            left = est_tokens[rid] - (job.tokens - (f - G))
            if left > 0:
                work += left * st
    return work


# ----------------------------------------------------------------------------- routers

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

    def route(self, view: _View, cands: list[int]) -> int:  # pragma: no cover - interface
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

_POD = re.compile(r"^pod(\d+)(_work)?$")


def router_names() -> list[str]:
    """Registered router names (``pod<d>`` and ``pod<d>_work`` stand for ``pod``/``pod_work`` with ``d``)."""
    return sorted(set(ROUTERS) - {"pod", "pod_work"}) + ["pod<d>", "pod<d>_work"]


def _parse(name: str) -> tuple[str, dict]:
    key = str(name).strip().lower()
    m = _POD.match(key)
    if m:
        return ("pod_work" if m.group(2) else "pod"), {"d": int(m.group(1))}
    if key in ROUTERS:
        return key, {}
    raise ValueError(f"router: unknown router {name!r}; allowed values: {', '.join(router_names())} "
                     "(e.g. 'pod2', 'pod3_work')")


def validate_router(name: str, n_replicas: int | None = None, param: str = "router") -> str:
    """The router's canonical name, or ``ValueError`` naming ``param`` and the allowed values."""
    try:
        key, kw = _parse(name)
    except ValueError as e:
        raise ValueError(str(e).replace("router:", f"{param}:", 1)) from None
    d = kw.get("d")
    if d is not None and (d < 1 or (n_replicas is not None and d > n_replicas)):
        raise ValueError(f"{param}: Power-of-d needs 1 <= d <= n_replicas ({n_replicas}), got {name!r}")
    return str(name).strip().lower()


def make_router(name: str, rng: np.random.Generator | None = None, **params) -> Router:
    """A fresh router by name (``random``, ``round_robin``, ``jsq``, ``least_work``, ``pod<d>``, ``pod<d>_work``)."""
    key, kw = _parse(name)
    kw.update(params)
    return ROUTERS[key](rng, **kw)


# ----------------------------------------------------------------------------- designs

@dataclass(frozen=True)
class ABTest:
    """One A/B experiment on the cluster (exact definitions in the module docstring).

    ``factor="routing"``: ``control``/``treatment`` are routers, ``policy`` is the scheduling
    policy of every replica. ``factor="scheduling"``: ``control``/``treatment`` are
    scheduling policies, ``router`` routes every request. ``design`` is one of
    :data:`DESIGNS` ``[factor]``; ``p`` the treatment probability (per request, per
    replica split, or per switchback block when ``alternate=False``); ``block_s`` the
    switchback block length (s).
    """

    factor: str = "routing"
    control: str = "pod2"
    treatment: str = "least_work"
    design: str = "bernoulli"
    p: float = 0.5
    block_s: float = 30.0
    alternate: bool = True
    policy: str = "fcfs"
    router: str = "pod2"

    def validate(self, n_replicas: int) -> ABTest:
        """Check every field against ``n_replicas`` (clear error naming the parameter)."""
        if self.factor not in FACTORS:
            raise ValueError(f"factor: {self.factor!r} not in {FACTORS}")
        if self.design not in DESIGNS[self.factor]:
            hint = ""
            if self.factor == "scheduling" and self.design in ("bernoulli", "group"):
                hint = (" (request-level randomisation of a per-replica scheduling policy is ill-defined: one "
                        "waiting queue orders both arms' requests; use 'replica' or 'switchback')")
            raise ValueError(f"design: {self.design!r} not allowed for a {self.factor} test; allowed: "
                             f"{', '.join(DESIGNS[self.factor])}{hint}")
        if not isinstance(n_replicas, (int, np.integer)) or isinstance(n_replicas, bool) or n_replicas < 1:
            raise ValueError(f"n_replicas: need an integer >= 1, got {n_replicas!r}")
        if not (isinstance(self.p, (int, float)) and 0 < self.p < 1):
            raise ValueError(f"p: treatment probability must be in (0, 1), got {self.p!r}")
        if not (isinstance(self.block_s, (int, float)) and math.isfinite(self.block_s) and self.block_s > 0):
            raise ValueError(f"block_s: switchback block length must be > 0 seconds, got {self.block_s!r}")
        if self.factor == "routing":
            validate_router(self.control, n_replicas, "control")
            validate_router(self.treatment, n_replicas, "treatment")
            validate_policies([self.policy])
        else:
            for name, v in (("control", self.control), ("treatment", self.treatment)):
                try:
                    validate_policies([v])
                except ValueError as e:
                    raise ValueError(f"{name}: {e}") from None
            validate_router(self.router, n_replicas, "router")
        if self.design in ("group", "replica"):
            m = int(round(self.p * n_replicas))
            if not 1 <= m <= n_replicas - 1:
                raise ValueError(f"n_replicas: the {self.design} design splits replicas round(p*N) = {m} vs "
                                 f"{n_replicas - m}; need at least one replica per arm (N >= 2 and p not extreme)")
        return self

    def replace(self, **kw) -> ABTest:
        """A copy with fields changed."""
        return replace(self, **kw)

    def arm(self, which: str) -> ABTest:
        """The ground-truth run of one arm (``"control"`` or ``"treatment"``) everywhere."""
        if which not in ("control", "treatment"):
            raise ValueError(f"which: {which!r} not in ('control', 'treatment')")
        return replace(self, design=which)

    def setting(self, which: str) -> tuple[str, str]:
        """``(router, policy)`` that the whole fleet runs under arm ``which``."""
        name = self.control if which == "control" else self.treatment
        return (name, self.policy) if self.factor == "routing" else (self.router, name)

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- result

@dataclass
class ClusterResult:
    """Output of :func:`run_experiment`: per-request records and the design's realisation.

    ``replica_arm[i]`` is 1 if replica ``i`` belonged to the treatment (group/replica
    designs, or its policy under ``treatment``); ``block_arms[b]`` the arm of switchback
    block ``b``. ``lam`` is the nominal total arrival rate (req/s); requests arriving before
    ``warmup_s`` are simulated but left out of :meth:`summary` and :meth:`trajectory`.
    """

    records: pd.DataFrame
    test: ABTest
    n_replicas: int
    lam: float
    warmup_s: float
    replica_arm: np.ndarray
    block_arms: np.ndarray | None
    seconds: float
    events: int
    params: dict = field(default_factory=dict)

    @property
    def measured(self) -> pd.DataFrame:
        """Records of the requests that arrived after the warm-up."""
        r = self.records
        return r[r["arrival"].to_numpy() >= self.warmup_s]

    def summary(self, **kw) -> dict:
        """:func:`asrsched.core.metrics.summarize` of the measured requests."""
        from asrsched.core.metrics import summarize

        return summarize(self.measured, **kw)

    def by_arm(self) -> pd.DataFrame:
        """Requests, share and mean/P90 E2EL and TTFT per arm (measured requests)."""
        m = self.measured
        g = m.groupby("z")
        out = pd.DataFrame({"requests": g.size(), "mean_e2el_s": g.e2el.mean(), "p90_e2el_s": g.e2el.quantile(0.9),
                            "mean_ttft_s": g.ttft.mean(), "p90_ttft_s": g.ttft.quantile(0.9)})
        out["share"] = out["requests"] / out["requests"].sum()
        return out

    def by_replica(self) -> pd.DataFrame:
        """Requests and mean E2EL per replica, with the replica's arm (measured requests)."""
        m = self.measured
        g = m.groupby("replica")
        out = pd.DataFrame({"requests": g.size(), "mean_e2el_s": g.e2el.mean()})
        out["arm"] = self.replica_arm[out.index.to_numpy()]
        return out

    def trajectory(self, metric: str = "e2el") -> Trajectory:
        """The estimators' :class:`Trajectory` for ``metric`` (``"e2el"`` or ``"ttft"``).

        ``response`` is the metric per measured request; ``n_before`` counts requests in the
        *whole cluster* not yet done with that metric (E2EL: not finished; TTFT: no first
        token yet), including warm-up requests still inside, so Little's law links the two
        exactly (``area`` over ``[warmup_s, last arrival]``). ``design`` is ``"group"`` for the
        group and replica designs (difference of means is the group estimator).
        """
        if metric not in ("e2el", "ttft"):
            raise ValueError(f"metric: {metric!r} not in ('e2el', 'ttft')")
        r = self.records
        arr = r["arrival"].to_numpy(float)
        fin = r["finish" if metric == "e2el" else "first_token"].to_numpy(float)
        design = {"replica": "group"}.get(self.test.design, self.test.design)
        sb = self.test.design == "switchback"
        kw: dict[str, Any] = dict(server=r["replica"].to_numpy(np.int64))
        if sb:
            kw.update(block=r["block"].to_numpy(np.int64))
        full = Trajectory.from_records(arr, fin, r["z"].to_numpy(np.int8), lam=self.lam, t_start=self.warmup_s,
                                       t_end=float(arr.max()), **kw)
        keep = full.arrival >= self.warmup_s
        if keep.sum() < 2:
            raise ValueError(f"warmup_s: {self.warmup_s} s leaves fewer than 2 measured requests")
        return Trajectory(
            arrival=full.arrival[keep], z=full.z[keep], response=full.response[keep],
            n_before=full.n_before[keep], lam=self.lam, area=full.area, t_start=full.t_start, t_end=full.t_end,
            block=full.block[keep] if sb else None, block_len=float(self.test.block_s) if sb else None,
            server=full.server[keep], design=design, p=float(self.test.p),
            meta=dict(metric=metric, factor=self.test.factor, design=self.test.design))


# ----------------------------------------------------------------------------- driver

def _est_tokens(service: ServiceModel, trace: Trace) -> np.ndarray:
    out = np.empty(len(trace))
    lang = np.asarray(trace.language, dtype=object)
    for lg in pd.unique(lang):
        m = lang == lg
        out[m] = service.est_tokens(trace.duration[m], str(lg))
    return out


def run_experiment(trace: Trace, test: ABTest, *, n_replicas: int = 4, service: ServiceModel | None = None,
                   max_num_seqs: int = 32, seed: int = 0, warmup_s: float = 0.0, lam: float | None = None,
                   policy_params: dict | None = None) -> ClusterResult:
    """Run one A/B experiment (or a ground-truth arm) of ``test`` on ``trace`` (see module docstring).

    ``lam`` is the nominal total arrival rate (default: the trace's empirical rate);
    ``policy_params`` go to every replica's waiting queue.
    """
    test.validate(n_replicas)
    if not (isinstance(warmup_s, (int, float)) and warmup_s >= 0):
        raise ValueError(f"warmup_s: need a number >= 0 seconds, got {warmup_s!r}")
    if not len(trace):
        raise ValueError("trace: need at least one request")
    service = service or default_service_model()
    t0 = time.perf_counter()
    N = int(n_replicas)
    ss = np.random.SeedSequence(int(seed))
    s_design, s_rc, s_rt = ss.spawn(3)
    rng = np.random.default_rng(s_design)
    design = test.design

    # replica arms and policies
    replica_arm = np.zeros(N, np.int8)
    if design in ("group", "replica"):
        m = int(round(test.p * N))
        replica_arm[rng.permutation(N)[:m]] = 1
    elif design == "treatment":
        replica_arm[:] = 1
    if test.factor == "scheduling":
        pols = [test.treatment if a else test.control for a in replica_arm]
        routers = {0: make_router(test.router, np.random.default_rng(s_rc))}
        routers[1] = routers[0]
    else:
        pols = [test.policy] * N
        routers = {0: make_router(test.control, np.random.default_rng(s_rc)),
                   1: make_router(test.treatment, np.random.default_rng(s_rt))}
    engines = [Engine(pol, service, max_num_seqs=max_num_seqs, policy_params=policy_params) for pol in pols]
    allr = list(range(N))
    cands = {0: [i for i in allr if replica_arm[i] == 0] if design == "group" else allr,
             1: [i for i in allr if replica_arm[i] == 1] if design == "group" else allr}

    n = len(trace)
    z = np.zeros(n, np.int8)
    rep = np.zeros(n, np.int64)
    block = np.full(n, -1, np.int64)
    block_arms = None
    B = float(test.block_s)
    if design == "switchback":
        nb = int(math.floor(float(trace.arrival[-1]) / B)) + 1
        if test.alternate:
            block_arms = ((np.arange(nb) + int(rng.integers(2))) % 2).astype(np.int8)
        else:
            block_arms = (rng.random(nb) < test.p).astype(np.int8)
    elif design == "bernoulli":
        z[:] = rng.random(n) < test.p
    elif design == "group":
        z[:] = rng.random(n) < test.p
    elif design == "treatment":
        z[:] = 1

    view = _View(engines, _est_tokens(service, trace).tolist())
    cur_block = -1
    sched_sb = design == "switchback" and test.factor == "scheduling"
    fixed_arm = 1 if design == "treatment" else 0
    for job in _chunk_jobs(trace, service, None, 0):
        a = job.arrival
        if design == "switchback":
            b = int(a // B)
            if b != cur_block:
                if sched_sb:
                    for k in range(cur_block + 1, b + 1):  # every boundary crossed, in order
                        _switch_policies(engines, k * B, test.treatment if block_arms[k] else test.control,
                                         policy_params)
                cur_block = b
            arm = int(block_arms[b])
            block[job.rid] = b
        elif design in ("bernoulli", "group"):
            arm = int(z[job.rid])
        else:
            arm = fixed_arm
        for e in engines:
            if e.t < a:
                e.run_until(a)
        view.now = a
        i = routers[arm].route(view, cands[arm])
        engines[i].submit(job)
        rep[job.rid] = i
        if design == "switchback":
            z[job.rid] = arm
        elif design == "replica":
            z[job.rid] = replica_arm[i]
    for e in engines:
        e.run_until(math.inf)
        e.flush()
    parts = [e.sink.result() for e in engines]
    rec = pd.concat(parts, ignore_index=True).sort_values("rid", kind="stable").reset_index(drop=True)
    rid = rec["rid"].to_numpy(np.int64)
    rec["replica"] = rep[rid]
    rec["z"] = z[rid]
    rec["block"] = block[rid]
    if lam is None:
        lam = float(trace.rate) if len(trace) > 1 else 1.0
    params = dict(test.to_dict(), n_replicas=N, max_num_seqs=int(max_num_seqs), service=service.name, seed=int(seed),
                  **{f"trace_{k}": v for k, v in trace.meta.items()})
    return ClusterResult(rec, test, N, float(lam), float(warmup_s), replica_arm, block_arms,
                         time.perf_counter() - t0, sum(e.events for e in engines), params)


def _switch_policies(engines: list[Engine], at: float, policy: str, policy_params: dict | None) -> None:
    """Every replica processes its decisions before ``at``, then re-orders its waiting queue under ``policy``."""
    for e in engines:
        if e.t < at:
            e.run_until(at)
        if getattr(e.q, "name", None) == str(policy).lower():
            continue
        q = make_queue(policy, **(policy_params or {}))
        for job in e.q:
            q.push(job)
        e.q = q


def run_cluster(trace: Trace, *, n_replicas: int = 4, router: str = "random", policy: str = "fcfs",
                service: ServiceModel | None = None, max_num_seqs: int = 32, seed: int = 0,
                warmup_s: float = 0.0, policy_params: dict | None = None) -> ClusterResult:
    """A plain fleet (no experiment): every request routed by ``router``, every replica running ``policy``."""
    test = ABTest(factor="routing", control=router, treatment=router, design="control", policy=policy)
    return run_experiment(trace, test, n_replicas=n_replicas, service=service, max_num_seqs=max_num_seqs, seed=seed,
                          warmup_s=warmup_s, policy_params=policy_params)


# ----------------------------------------------------------------------------- load helpers

@lru_cache(maxsize=64)
def _capacity(workload: str, max_num_seqs: int, service_json: str, n: int = 3000) -> float:
    import json

    service = ServiceModel.from_dict(json.loads(service_json))
    src = "uniform" if workload == "drift" else workload
    tr = make_trace(src, rate=1e6, n=n, seed=12345, kappa=dict(service.kappa))
    res = simulate(tr, "fcfs", service, max_num_seqs=max_num_seqs, warn_overload=False)
    return n / float(res.records["finish"].max() - tr.arrival[0])


def replica_capacity(workload: str = "librispeech", *, service: ServiceModel | None = None,
                     max_num_seqs: int = 32) -> float:
    """Saturated throughput (req/s) of one replica on ``workload`` (all requests queued at once, FCFS).

    For ``"drift"`` it is the capacity of the heavier phase (uniform 5-30 s), so a drifting
    fleet stays stable throughout.
    """
    if workload not in ("librispeech", "uniform", "commonvoice_id", "mix", "drift"):
        raise ValueError(f"workload: {workload!r} not in librispeech, uniform, commonvoice_id, mix, drift")
    import json

    service = service or default_service_model()
    return _capacity(workload, int(max_num_seqs), json.dumps(service.to_dict(), sort_keys=True, default=float))


def cluster_trace(workload: str, *, n_replicas: int, load: float, n_requests: int, seed: int,
                  service: ServiceModel | None = None, max_num_seqs: int = 32) -> tuple[Trace, float]:
    """A Poisson trace at ``load`` x fleet capacity; returns ``(trace, total rate)``.

    ``"drift"``: LibriSpeech durations for the first third of the run, a linear ramp over
    the second third, uniform 5-30 s for the last third (the arrival rate stays constant, so
    the offered load rises from ~60 % to ``load`` of capacity).
    """
    if not (isinstance(load, (int, float)) and 0 < load < 1):
        raise ValueError(f"load: offered load must be in (0, 1) of the fleet's capacity, got {load!r}")
    if not isinstance(n_requests, (int, np.integer)) or n_requests < 10:
        raise ValueError(f"n_requests: need an integer >= 10, got {n_requests!r}")
    service = service or default_service_model()
    lam = float(load) * int(n_replicas) * replica_capacity(workload, service=service, max_num_seqs=max_num_seqs)
    if workload == "drift":
        T = n_requests / lam
        src: Any = Drift([(0.0, make_source("librispeech")), (T / 3, make_source("uniform"))], ramp_s=T / 3)
    else:
        src = workload
    tr = make_trace(src, rate=lam, n=int(n_requests), seed=int(seed), kappa=dict(service.kappa))
    tr.meta["workload"] = workload
    return tr, lam
