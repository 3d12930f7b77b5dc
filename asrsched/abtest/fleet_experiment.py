"""A/B experiments on the multi-replica fleet: designs, their realisation, the estimators' trajectories.

The fleet (replicas, routers, estimated work) is :mod:`asrsched.sim.fleet`; this module
randomises requests, replicas or time blocks between two arms on it and hands the
estimators of :mod:`asrsched.abtest.estimators` a :class:`~asrsched.abtest.estimators.Trajectory`
(:meth:`ExperimentResult.trajectory`).

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
``replica_block`` replica x block (space x time): blocks ``[b B, (b+1) B)`` as the
                switchback's; in every block b a fresh uniformly random set of ``round(p N)``
                replicas is the treatment group (drawn independently per block; each block has
                both arms), the rest the control group. Request j is treated with probability
                ``p`` (``z_j ~ Bernoulli(p)``) and routed by its arm's router only among its
                arm's group *of the block it arrives in* (the group design re-drawn per block).
                Each arm has one router for the whole run (its state and random stream carry
                across blocks; only its candidate set changes), and a replica keeps the queue
                it built in earlier blocks (carry-over, which the estimator's burn-in reduces).

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
``replica_block`` replica x block (space x time): blocks ``[b B, (b+1) B)`` as the
                switchback's; in every block b a fresh uniformly random set of ``round(p N)``
                replicas (drawn independently per block; each block has both arms) runs the
                treatment policy, the rest the control policy. Replicas start in block 0's
                arms; at each boundary ``b B`` every replica catches up to ``b B`` and each
                replica whose arm in block b differs from its arm in block b - 1 re-orders
                its waiting queue under its new policy (as the switchback does for every
                replica; requests already running continue). Requests are routed by
                ``router`` over all replicas; a request's arm is the arm of (the replica
                that served it, the block it arrived in). After the last arrival every
                replica drains under its arm of the last block.

The estimators see the design through :meth:`ExperimentResult.trajectory`: ``group`` and
``replica`` as the group design (difference of the arms' means), ``switchback`` and
``replica_block`` as the switchback design (per-request ``z`` and ``block``: the difference of
the arms' means over the requests past their block's first ``burn_in`` seconds, batch means
over groups of consecutive blocks; :func:`asrsched.abtest.estimators.switchback`).

``control`` / ``treatment`` (either factor): the whole fleet under one arm -- the separate
full runs that define the ground truth. ``control`` is exactly
:func:`asrsched.sim.fleet.simulate_fleet` with the control setting (same seeds, same records).

Seeds: one ``seed`` drives the design's randomisation and each router's own random
stream (:class:`numpy.random.SeedSequence` children), so a run is reproducible from
``(trace, test, seed)``.

Records: the fleet's per-request columns (the simulator's ``rid, arrival, duration,
language, est_service, tokens, admit, first_token, finish``, derived ``queue_delay, ttft,
e2el``, and ``replica``) plus ``z`` (1 = treatment arm) and ``block`` (the block index
``floor(arrival / block_s)`` of the switchback and replica_block designs, -1 otherwise).

>>> from asrsched.core.workloads import make_trace
>>> tr = make_trace("uniform", rate=8.0, n=400, seed=1)
>>> res = run_experiment(tr, ABTest(control="random", treatment="least_work"), n_replicas=2, seed=0)
>>> sorted(set(res.records.z)), res.trajectory("ttft").design
([0, 1], 'bernoulli')
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import Trajectory
from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import Trace
from asrsched.sim.fleet import FleetResult, design_streams, fleet_trace, run_fleet, validate_router, validate_run

__all__ = [
    "ABTest",
    "ExperimentResult",
    "run_experiment",
    "fleet_trace",
    "FACTORS",
    "FLEET_DESIGNS",
]

FACTORS = ("routing", "scheduling")
FLEET_DESIGNS = {
    "routing": ("bernoulli", "group", "switchback", "replica_block", "control", "treatment"),
    "scheduling": ("replica", "switchback", "replica_block", "control", "treatment"),
}


# ----------------------------------------------------------------------------- designs


@dataclass(frozen=True)
class ABTest:
    """One A/B experiment on the fleet (exact definitions in the module docstring).

    ``factor="routing"``: ``control``/``treatment`` are routers, ``policy`` is the scheduling
    policy of every replica. ``factor="scheduling"``: ``control``/``treatment`` are
    scheduling policies, ``router`` routes every request. ``design`` is one of
    :data:`FLEET_DESIGNS` ``[factor]``; ``p`` the treatment probability (per request, per
    replica split, or per switchback block when ``alternate=False``); ``block_s`` the
    block length (s) of the switchback and replica_block designs.
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
        if self.design not in FLEET_DESIGNS[self.factor]:
            hint = ""
            if self.factor == "scheduling" and self.design in ("bernoulli", "group"):
                hint = (
                    " (request-level randomisation of a per-replica scheduling policy is ill-defined: one "
                    "waiting queue orders both arms' requests; use 'replica', 'switchback' or 'replica_block')"
                )
            raise ValueError(
                f"design: {self.design!r} not allowed for a {self.factor} test; allowed: "
                f"{', '.join(FLEET_DESIGNS[self.factor])}{hint}"
            )
        if not isinstance(n_replicas, (int, np.integer)) or isinstance(n_replicas, bool) or n_replicas < 1:
            raise ValueError(f"n_replicas: need an integer >= 1, got {n_replicas!r}")
        if not (isinstance(self.p, (int, float)) and 0 < self.p < 1):
            raise ValueError(f"p: treatment probability must be in (0, 1), got {self.p!r}")
        if not (isinstance(self.block_s, (int, float)) and math.isfinite(self.block_s) and self.block_s > 0):
            raise ValueError(f"block_s: the block length must be > 0 seconds, got {self.block_s!r}")
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
        if self.design in ("group", "replica", "replica_block"):
            m = int(round(self.p * n_replicas))
            if not 1 <= m <= n_replicas - 1:
                raise ValueError(
                    f"n_replicas: the {self.design} design splits replicas round(p*N) = {m} vs "
                    f"{n_replicas - m}; need at least one replica per arm (N >= 2 and p not extreme)"
                )
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


@dataclass(kw_only=True)
class ExperimentResult(FleetResult):
    """Output of :func:`run_experiment`: a :class:`~asrsched.sim.fleet.FleetResult` and the design's realisation.

    ``replica_arm[i]`` is 1 if replica ``i`` belonged to the treatment (group/replica
    designs, or its policy under ``treatment``; replica_block: its arm in block 0);
    ``block_arms[b]`` the arm of switchback block ``b``; ``block_replica_arms[b, i]`` (replica_block
    only, ``blocks x N``) the arm of replica ``i`` in block ``b``. ``total_rate`` is the nominal
    total arrival rate (req/s); requests arriving before ``warmup_s`` are simulated but left out
    of :meth:`summary` and :meth:`trajectory`.
    """

    test: ABTest
    replica_arm: np.ndarray
    block_arms: np.ndarray | None
    block_replica_arms: np.ndarray | None = None

    def by_arm(self) -> pd.DataFrame:
        """Requests, share and mean/P90 E2EL and TTFT per arm (measured requests)."""
        m = self.measured
        g = m.groupby("z")
        out = pd.DataFrame(
            {
                "requests": g.size(),
                "mean_e2el_s": g.e2el.mean(),
                "p90_e2el_s": g.e2el.quantile(0.9),
                "mean_ttft_s": g.ttft.mean(),
                "p90_ttft_s": g.ttft.quantile(0.9),
            }
        )
        out["share"] = out["requests"] / out["requests"].sum()
        return out

    def by_replica(self) -> pd.DataFrame:
        """Requests and mean E2EL per replica, with the replica's arm (measured requests).

        replica_block: a replica serves both arms, so ``treated_share`` (its measured requests' mean ``z``)
        replaces ``arm``.
        """
        out = super().by_replica()
        if self.block_replica_arms is None:
            out["arm"] = self.replica_arm[out.index.to_numpy()]
        else:
            out["treated_share"] = self.measured.groupby("replica")["z"].mean()
        return out

    def trajectory(self, metric: str = "e2el") -> Trajectory:
        """The estimators' :class:`Trajectory` for ``metric`` (``"e2el"`` or ``"ttft"``).

        ``response`` is the metric per measured request; ``n_before`` counts requests in the
        *whole fleet* not yet done with that metric (E2EL: not finished; TTFT: no first
        token yet), including warm-up requests still inside, so Little's law links the two
        exactly (``area`` over ``[warmup_s, last arrival]``). ``design`` is ``"group"`` for the
        group and replica designs (difference of means is the group estimator) and ``"switchback"``
        for the switchback and replica_block designs (``block`` and ``block_len`` set; the switchback
        estimator takes each request's own ``z``, so both arms may share a block).
        """
        if metric not in ("e2el", "ttft"):
            raise ValueError(f"metric: {metric!r} not in ('e2el', 'ttft')")
        r = self.records
        arr = r["arrival"].to_numpy(float)
        fin = r["finish" if metric == "e2el" else "first_token"].to_numpy(float)
        design = {"replica": "group", "replica_block": "switchback"}.get(self.test.design, self.test.design)
        sb = design == "switchback"
        kw: dict[str, Any] = dict(server=r["replica"].to_numpy(np.int64))
        if sb:
            kw.update(block=r["block"].to_numpy(np.int64))
        full = Trajectory.from_records(
            arr,
            fin,
            r["z"].to_numpy(np.int8),
            total_rate=self.total_rate,
            t_start=self.warmup_s,
            t_end=float(arr.max()),
            **kw,
        )
        keep = full.arrival >= self.warmup_s
        if keep.sum() < 2:
            raise ValueError(f"warmup_s: {self.warmup_s} s leaves fewer than 2 measured requests")
        return Trajectory(
            arrival=full.arrival[keep],
            z=full.z[keep],
            response=full.response[keep],
            n_before=full.n_before[keep],
            total_rate=self.total_rate,
            area=full.area,
            t_start=full.t_start,
            t_end=full.t_end,
            block=full.block[keep] if sb else None,
            block_len=float(self.test.block_s) if sb else None,
            server=full.server[keep],
            design=design,
            p=float(self.test.p),
            meta=dict(metric=metric, factor=self.test.factor, design=self.test.design),
        )


# ----------------------------------------------------------------------------- driver


def run_experiment(
    trace: Trace,
    test: ABTest,
    *,
    n_replicas: int = 4,
    service: ServiceModel | None = None,
    max_num_seqs: int = 32,
    seed: int = 0,
    warmup_s: float = 0.0,
    total_rate: float | None = None,
    policy_params: dict | None = None,
    engine: str = "auto",
) -> ExperimentResult:
    """Run one A/B experiment (or a ground-truth arm) of ``test`` on ``trace`` (see module docstring).

    ``total_rate`` is the nominal total arrival rate (default: the trace's empirical rate);
    ``policy_params`` go to every replica's waiting queue. ``engine`` (``"auto"``, ``"python"``,
    ``"numba"``): which fleet runs it (:func:`asrsched.sim.fleet.run_fleet`; identical records).
    The design is realised here (arms of requests, replicas and blocks, the policy switches);
    the fleet only executes it.
    """
    test.validate(n_replicas)
    validate_run(trace, n_replicas, warmup_s)
    t0 = time.perf_counter()
    service = service or default_service_model()
    N = int(n_replicas)
    s_design, s_rc, s_rt = design_streams(seed)
    rng = np.random.default_rng(s_design)
    design = test.design

    n = len(trace)
    B = float(test.block_s)
    blocks = np.floor_divide(np.asarray(trace.arrival, float), B).astype(np.int64)  # Python's a // B
    nb = int(math.floor(float(trace.arrival[-1]) / B)) + 1

    # replica arms and policies
    replica_arm = np.zeros(N, np.int8)
    block_replica_arms = None
    if design in ("group", "replica"):
        m = int(round(test.p * N))
        replica_arm[rng.permutation(N)[:m]] = 1
    elif design == "replica_block":  # per block, the first round(pN) of a uniformly random order
        m = int(round(test.p * N))
        order = np.argsort(rng.random((nb, N)), axis=1, kind="stable")
        block_replica_arms = np.zeros((nb, N), np.int8)
        np.put_along_axis(block_replica_arms, order[:, :m], 1, axis=1)
        replica_arm[:] = block_replica_arms[0]
    elif design == "treatment":
        replica_arm[:] = 1
    allr = list(range(N))
    arm_router = None
    if test.factor == "scheduling":
        pols = [test.treatment if a else test.control for a in replica_arm]
        routers = [(test.router, s_rc)]  # one router routes both arms
        cands = [allr]
    else:
        pols = [test.policy] * N
        routers = [(test.control, s_rc), (test.treatment, s_rt)]
        if design == "replica_block":  # routing arm 2b + z: arm z's group of block b, routed by arm z's router
            assert block_replica_arms is not None
            cands = [[i for i in allr if block_replica_arms[b, i] == a] for b in range(nb) for a in (0, 1)]
            arm_router = [0, 1] * nb
        else:
            cands = [
                [i for i in allr if replica_arm[i] == 0] if design == "group" else allr,
                [i for i in allr if replica_arm[i] == 1] if design == "group" else allr,
            ]

    z = np.zeros(n, np.int8)
    block = np.full(n, -1, np.int64)
    block_arms = None
    switches: list[tuple] = []
    new_block = np.flatnonzero(np.diff(blocks, prepend=-1)).tolist()  # first arrival of each new block
    if design == "switchback":
        if test.alternate:
            block_arms = ((np.arange(nb) + int(rng.integers(2))) % 2).astype(np.int8)
        else:
            block_arms = (rng.random(nb) < test.p).astype(np.int8)
        block[:] = blocks
        z[:] = block_arms[block]
        if test.factor == "scheduling":  # every boundary crossed before an arrival, in order
            cur = -1
            for j in new_block:
                b = int(blocks[j])
                for k in range(cur + 1, b + 1):
                    switches.append((j, k * B, test.treatment if block_arms[k] else test.control))
                cur = max(cur, b)
    elif design == "replica_block":
        assert block_replica_arms is not None
        block[:] = blocks
        if test.factor == "routing":
            z[:] = rng.random(n) < test.p
        else:  # every boundary crossed before an arrival, in order: the replicas whose arm changes
            cur = 0
            for j in new_block:
                b = int(blocks[j])
                for k in range(cur + 1, b + 1):
                    for r in np.flatnonzero(block_replica_arms[k] != block_replica_arms[k - 1]).tolist():
                        pol = test.treatment if block_replica_arms[k, r] else test.control
                        switches.append((j, k * B, pol, r))
                cur = max(cur, b)
    elif design in ("bernoulli", "group"):
        z[:] = rng.random(n) < test.p
    elif design == "treatment":
        z[:] = 1
    if test.factor == "scheduling":
        route_arm = np.zeros(n, np.int64)
    elif design == "replica_block":
        route_arm = 2 * blocks + z
    else:
        route_arm = z.astype(np.int64)

    rec, events, used = run_fleet(
        trace,
        pols,
        routers,
        route_arm=route_arm,
        cands=cands,
        arm_router=arm_router,
        switches=switches,
        service=service,
        max_num_seqs=max_num_seqs,
        policy_params=policy_params,
        engine=engine,
    )
    rid = rec["rid"].to_numpy(np.int64)
    if design == "replica":
        z = replica_arm[rec["replica"].to_numpy(np.int64)].astype(np.int8)
        rec["z"] = z
    elif design == "replica_block" and test.factor == "scheduling":
        assert block_replica_arms is not None
        rec["z"] = block_replica_arms[block[rid], rec["replica"].to_numpy(np.int64)]
    else:
        rec["z"] = z[rid]
    rec["block"] = block[rid]
    if total_rate is None:
        total_rate = float(trace.rate) if len(trace) > 1 and trace.arrival[-1] > trace.arrival[0] else 1.0
    params = dict(
        test.to_dict(),
        n_replicas=N,
        max_num_seqs=int(max_num_seqs),
        service=service.name,
        seed=int(seed),
        engine=used,
        **{f"trace_{k}": v for k, v in trace.meta.items()},
    )
    return ExperimentResult(
        records=rec,
        n_replicas=N,
        total_rate=float(total_rate),
        warmup_s=float(warmup_s),
        seconds=time.perf_counter() - t0,
        events=events,
        params=params,
        test=test,
        replica_arm=replica_arm,
        block_arms=block_arms,
        block_replica_arms=block_replica_arms,
    )
