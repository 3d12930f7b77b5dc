"""A multi-replica ASR fleet: N continuous-batching servers behind a router.

Each replica is one :class:`asrsched.sim.engine.Engine` (the foundation simulator, unchanged) with
its own scheduling policy. A router sends every arriving request to one replica, looking
only at what a real load balancer can see at that instant: the number of requests each
replica holds, and the *estimated* outstanding work derived from the size estimate
``kappa x duration`` (never the true token counts). The fleet uses the engines only
through their public API (:meth:`~asrsched.sim.engine.Engine.submit`,
:meth:`~asrsched.sim.engine.Engine.run_until`,
:meth:`~asrsched.sim.engine.Engine.n_in_system`,
:meth:`~asrsched.sim.engine.Engine.outstanding_work`,
:meth:`~asrsched.sim.engine.Engine.set_policy`, :func:`~asrsched.sim.engine.chunk_jobs`).

Driver protocol (the same as :func:`asrsched.sim.engine.simulate`, for many engines; :class:`Fleet`):
for each arrival in time order, every replica processes its decision points before the arrival
(``run_until``), the router reads their state and picks one, the request is submitted
there; at the end every replica drains (``run_until(inf)``). With one replica this is
exactly :func:`~asrsched.sim.engine.simulate` (tests check the records are identical).

Routers: :mod:`asrsched.sim.routers` (``random``, ``round_robin``, ``jsq``, ``pod<d>``, ``least_work``,
``pod<d>_work``, and any registered with :func:`register_router`).

A router's :meth:`Router.route` gets a :class:`FleetView` (``view.n(i)``: requests in
replica ``i``; ``view.work(i)``: its estimated outstanding work) and the candidate replicas.

Estimated outstanding work of a replica at time ``t`` (:meth:`Engine.outstanding_work`): the sum of
the waiting requests' estimated service times (``est_service``: encoder windows + kappa x
duration x batch-1 decode step + overhead) plus, for each running request, its estimated
remaining tokens ``max(kappa x duration - generated so far, 0)`` times the current decode
step time. Only the estimate enters: a request that runs longer than estimated counts as
zero remaining work.

Two engines, identical records (``tests/sim/test_fleet_compiled.py`` compares them for every
router, policy and design): the Python :class:`Fleet` (the readable reference, and
the path for user-defined policies and routers) and the compiled engine of
:mod:`asrsched.sim.kernel` (the built-in policies, static-key policies and every built-in
router). :func:`run_fleet` drives either (``engine="auto"`` takes the compiled one exactly
when :func:`asrsched.sim.inputs.compiled_support` says it runs them).

A plain fleet (:func:`simulate_fleet`: one router, one policy everywhere) returns a
:class:`FleetResult`. A/B experiments on the fleet (designs, arms, the estimators'
trajectories) are the A/B layer's: :mod:`asrsched.abtest.fleet_experiment`.

Seeds: ``seed`` drives the router's own random stream (the second of three
:class:`numpy.random.SeedSequence` children, as for the control arm of an experiment), so a
run is reproducible from ``(trace, router, policy, seed)``.

Records: the simulator's per-request columns (``rid, arrival, duration, language,
est_service, tokens, admit, first_token, finish`` and derived ``queue_delay, ttft, e2el``,
so :func:`asrsched.core.metrics.summarize` works) plus ``replica``; :func:`simulate_fleet` also
writes ``z = 0`` and ``block = -1``, so a plain fleet's records have the columns of an
experiment's (every request in the control arm, no switchback block).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import Trace
from asrsched.sim.capacity import fleet_trace, replica_capacity
from asrsched.sim.engine import Engine, SimJob, chunk_jobs
from asrsched.sim.inputs import choose_engine, clear_trace_cache, run_in_memory, trace_inputs
from asrsched.sim.routers import (
    ROUTERS,
    Router,
    make_router,
    parse_router,
    register_router,
    router_names,
    uniform_uses,
    validate_router,
)

__all__ = [
    "Router",
    "ROUTERS",
    "register_router",
    "router_names",
    "make_router",
    "validate_router",
    "validate_run",
    "design_streams",
    "clear_trace_cache",
    "FleetView",
    "Fleet",
    "FleetResult",
    "simulate_fleet",
    "run_fleet",
    "replica_capacity",
    "fleet_trace",
]


# ----------------------------------------------------------------------------- router state


class FleetView:
    """What a router sees at time ``now``: per-replica request counts and estimated work.

    ``n(i)`` is :meth:`Engine.n_in_system <asrsched.sim.engine.Engine.n_in_system>` and
    ``work(i)`` :meth:`Engine.outstanding_work <asrsched.sim.engine.Engine.outstanding_work>`
    (O(log b) per query) of replica ``i``.
    """

    __slots__ = ("engines", "est_tok", "now")

    def __init__(self, engines: list[Engine], est_tok) -> None:
        self.engines = engines
        self.est_tok = est_tok  # estimated tokens per rid (kappa x duration)
        self.now = 0.0

    def n(self, i: int) -> int:
        return self.engines[i].n_in_system(self.now)

    def work(self, i: int) -> float:
        return self.engines[i].outstanding_work(self.now, self.est_tok)


# ----------------------------------------------------------------------------- the fleet


class Fleet:
    """The replicas of one run on ``trace``: one :class:`~asrsched.sim.engine.Engine` per entry of ``policies``.

    Drive it in arrival order: for each job of :meth:`jobs`, :meth:`dispatch` it (every
    replica catches up to its arrival, the router picks among ``cands``, the job is
    submitted there); :meth:`switch_policy` changes one replica's or every replica's policy at a time;
    :meth:`drain` finishes the run and returns the records. ``policy_params`` go to every
    replica's waiting queue.
    """

    def __init__(
        self,
        trace: Trace,
        policies: list[str],
        service: ServiceModel | None = None,
        *,
        max_num_seqs: int = 32,
        policy_params: dict | None = None,
    ) -> None:
        self.trace = trace
        self.service = service or default_service_model()
        self.engines = [
            Engine(pol, self.service, max_num_seqs=max_num_seqs, policy_params=policy_params) for pol in policies
        ]
        self.view = FleetView(self.engines, trace_inputs(trace, self.service).est_tok.tolist())
        self.replica = np.zeros(len(trace), np.int64)  # replica of each rid, set by dispatch

    def __len__(self) -> int:
        return len(self.engines)

    def jobs(self) -> Iterator[SimJob]:
        """The trace's jobs in arrival order (``rid`` = row of the trace)."""
        return chunk_jobs(self.trace, self.service)

    def dispatch(self, job: SimJob, router: Router, cands: Sequence[int]) -> int:
        """Catch every replica up to ``job.arrival``, route the job among ``cands``, submit it; the replica."""
        a = job.arrival
        engines = self.engines
        for e in engines:
            if e.t < a:
                e.run_until(a)
        self.view.now = a
        i = router.route(self.view, cands)
        engines[i].submit(job)
        self.replica[job.rid] = i
        return i

    def switch_policy(self, at: float, policy: str, policy_params: dict | None = None, replica: int = -1) -> None:
        """Every replica processes its decisions before ``at``; then replica ``replica`` (``-1``: every replica)
        re-orders its waiting queue under ``policy``.

        Every replica catches up, not only the one that switches, as before an arrival: the two engines then
        stop every replica at the same times (a decode jump split at a boundary ends where the unsplit one
        would, up to rounding; the compiled kernel splits it the same way).
        """
        engines = self.engines
        for e in engines:
            if e.t < at:
                e.run_until(at)
        for i in range(len(engines)) if replica < 0 else (replica,):
            engines[i].set_policy(policy, policy_params)

    def drain(self) -> pd.DataFrame:
        """Run every replica to completion; the records of all requests by ``rid``, with their ``replica``."""
        for e in self.engines:
            e.run_until(math.inf)
            e.flush()
        parts = [e.sink.result() for e in self.engines]
        rec = pd.concat(parts, ignore_index=True).sort_values("rid", kind="stable").reset_index(drop=True)
        rec["replica"] = self.replica[rec["rid"].to_numpy(np.int64)]
        return rec

    @property
    def events(self) -> int:
        """Decision points processed, summed over the replicas."""
        return sum(e.events for e in self.engines)


def run_fleet(
    trace: Trace,
    policies: Sequence[str],
    routers: Sequence[tuple[str, Any]],
    *,
    route_arm: np.ndarray | None = None,
    cands: Sequence[Sequence[int]] | None = None,
    arm_router: Sequence[int] | None = None,
    switches: Sequence[tuple] = (),
    service: ServiceModel | None = None,
    max_num_seqs: int = 32,
    policy_params: dict | None = None,
    engine: str = "auto",
    extra: dict | None = None,
) -> tuple[pd.DataFrame, int, str]:
    """One fleet run, on the Python :class:`Fleet` or the compiled kernel; ``(records, events, engine used)``.

    ``policies``: each replica's initial policy. ``routers``: one ``(name, seed)`` per router
    (``seed``: anything :func:`numpy.random.default_rng` takes; each entry is one router object,
    with its own random stream and state). Routing arms: ``route_arm[j]`` (default 0) is the
    routing arm of request ``j``; arm ``a`` is routed by ``routers[arm_router[a]]`` (default:
    one arm per router, ``arm_router[a] = a``) among the replicas ``cands[a]`` (default: every
    replica). Several arms may share one router (a router whose candidate set changes over
    time, e.g. per block of the replica x block design: its state and stream carry on).
    ``switches``: ``(request index, time, policy)`` or ``(request index, time, policy,
    replica)`` in order; before dispatching that request every replica catches up to ``time``
    and replica ``replica`` (``-1`` or left out: every replica) re-orders its waiting queue
    under ``policy`` (:meth:`Fleet.switch_policy`). ``engine``: ``"auto"`` (compiled when
    :func:`asrsched.sim.inputs.compiled_support`), ``"python"`` or ``"numba"`` (an error naming
    what the compiled engine cannot run).
    ``extra``: more per-request columns (name -> array in request order) for the records.
    """
    n, N = len(trace), len(policies)
    if N < 1:
        raise ValueError("policies: need one policy per replica (at least one)")
    of = list(range(len(routers))) if arm_router is None else [int(x) for x in arm_router]
    if any(not 0 <= x < len(routers) for x in of):
        raise ValueError(f"arm_router: need one entry in [0, {len(routers)}) per routing arm")
    n_arms = len(of)
    arm = np.zeros(n, np.int64) if route_arm is None else np.asarray(route_arm, np.int64)
    if arm.shape != (n,) or (n and (arm.min() < 0 or arm.max() >= n_arms)):
        raise ValueError(f"route_arm: need one entry in [0, {n_arms}) per request")
    cands = [list(range(N))] * n_arms if cands is None else [list(map(int, c)) for c in cands]
    if len(cands) != n_arms or any(not c or min(c) < 0 or max(c) >= N for c in cands):
        raise ValueError(f"cands: need a non-empty list of replicas in [0, {N}) per routing arm")
    sw = [tuple(s) for s in switches]
    for s in sw:
        if len(s) not in (3, 4) or (len(s) == 4 and not -1 <= int(s[3]) < N):
            raise ValueError(f"switches: need (request index, time, policy[, replica in [-1, {N})]), got {s!r}")
    service = service or default_service_model()
    names = [str(r[0]) for r in routers]
    for name in names:
        parse_router(name)  # an unknown router: the same error on either engine
    ok = choose_engine(engine, list(policies) + [s[2] for s in sw], names, policy_params)
    if ok:
        rec, events = _run_compiled(
            trace, list(policies), routers, arm, cands, of, sw, service, max_num_seqs, policy_params, extra or {}
        )
        return rec, events, "numba"
    fleet = Fleet(trace, list(policies), service, max_num_seqs=max_num_seqs, policy_params=policy_params)
    objs = [make_router(name, np.random.default_rng(seed)) for name, seed in routers]
    k = 0
    for job in fleet.jobs():
        while k < len(sw) and sw[k][0] == job.rid:
            fleet.switch_policy(float(sw[k][1]), sw[k][2], policy_params, int(sw[k][3]) if len(sw[k]) > 3 else -1)
            k += 1
        a = int(arm[job.rid])
        fleet.dispatch(job, objs[of[a]], cands[a])
    rec = fleet.drain()
    for k, v in (extra or {}).items():
        rec[k] = v
    return rec, fleet.events, "python"


def _run_compiled(trace, policies, routers, arm, cands, of, switches, service, max_num_seqs, policy_params, extra):
    # each router pre-draws the uniforms it can use: per request of each of its arms, at most uniform_uses
    routed = np.bincount(arm, minlength=len(of))
    uses = [0] * len(routers)
    parsed = []
    for name, _ in routers:
        key, kw = parse_router(name)
        parsed.append((key, int(kw.get("d", 1))))
    for a, i in enumerate(of):
        key, d = parsed[i]
        uses[i] += int(routed[a]) * uniform_uses(key, d, len(cands[a]))
    draws = [np.random.default_rng(seed).random(uses[i] + 1) for i, (_, seed) in enumerate(routers)]
    specs = []
    first = set()
    for i in of:  # a router's uniforms go with its first arm (router_inputs writes each arm's row)
        key, d = parsed[i]
        specs.append((key, d, draws[i] if i not in first else np.empty(0), i))
        first.add(i)
    rec, run = run_in_memory(
        trace,
        service,
        policies,
        max_num_seqs=max_num_seqs,
        policy_params=policy_params,
        routers=specs,
        route_arm=arm,
        cands=cands,
        switches=switches,
        extra=extra,
    )
    return rec, run.events


@dataclass
class FleetResult:
    """Output of :func:`simulate_fleet`: per-request records of a fleet run.

    ``total_rate`` is the nominal total arrival rate (req/s); requests arriving before ``warmup_s``
    are simulated but left out of :attr:`measured` and :meth:`summary`.
    """

    records: pd.DataFrame
    n_replicas: int
    total_rate: float
    warmup_s: float
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

    def by_replica(self) -> pd.DataFrame:
        """Requests and mean E2EL per replica (measured requests)."""
        g = self.measured.groupby("replica")
        return pd.DataFrame({"requests": g.size(), "mean_e2el_s": g.e2el.mean()})


@lru_cache(maxsize=256)
def design_streams(seed: int) -> tuple[np.random.SeedSequence, ...]:
    """A run's three random streams ``(design, control, treatment)``: ``SeedSequence(seed).spawn(3)``.

    Every run with this ``seed`` gets the same three (cached: only ever passed to
    :func:`numpy.random.default_rng`, which does not change them).
    """
    return tuple(np.random.SeedSequence(int(seed)).spawn(3))


def validate_run(trace: Trace, n_replicas, warmup_s) -> None:
    """``ValueError`` naming the parameter unless ``n_replicas >= 1``, ``warmup_s >= 0`` and ``trace`` is not empty."""
    if not isinstance(n_replicas, (int, np.integer)) or isinstance(n_replicas, bool) or n_replicas < 1:
        raise ValueError(f"n_replicas: need an integer >= 1, got {n_replicas!r}")
    if not (isinstance(warmup_s, (int, float)) and warmup_s >= 0):
        raise ValueError(f"warmup_s: need a number >= 0 seconds, got {warmup_s!r}")
    if not len(trace):
        raise ValueError("trace: need at least one request")


def simulate_fleet(
    trace: Trace,
    *,
    n_replicas: int = 4,
    router: str = "random",
    policy: str = "fcfs",
    service: ServiceModel | None = None,
    max_num_seqs: int = 32,
    seed: int = 0,
    warmup_s: float = 0.0,
    policy_params: dict | None = None,
    engine: str = "auto",
) -> FleetResult:
    """A plain fleet (no experiment): every request routed by ``router``, every replica running ``policy``.

    The same run as the ``control`` arm of an A/B experiment with that router and policy
    (:func:`asrsched.abtest.fleet_experiment.run_experiment`): same seeds, identical records.
    ``engine``: see :func:`run_fleet` (the compiled and Python fleets give identical records).
    """
    validate_run(trace, n_replicas, warmup_s)
    validate_router(router, n_replicas, "router")
    validate_policies([policy])
    t0 = time.perf_counter()
    N = int(n_replicas)
    _, s_router, _ = design_streams(seed)
    service = service or default_service_model()
    n = len(trace)
    rec, events, used = run_fleet(
        trace,
        [policy] * N,
        [(router, s_router)],
        service=service,
        max_num_seqs=max_num_seqs,
        policy_params=policy_params,
        engine=engine,
        extra={"z": np.zeros(n, np.int8), "block": np.full(n, -1, np.int64)},
    )
    total_rate = float(trace.rate) if len(trace) > 1 and trace.arrival[-1] > trace.arrival[0] else 1.0
    params = dict(
        router=str(router),
        policy=str(policy),
        n_replicas=N,
        max_num_seqs=int(max_num_seqs),
        service=service.name,
        seed=int(seed),
        engine=used,
        **{f"trace_{k}": v for k, v in trace.meta.items()},
    )
    return FleetResult(rec, N, total_rate, float(warmup_s), time.perf_counter() - t0, events, params)
