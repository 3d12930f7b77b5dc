"""Plan an A/B test of ASR routing or scheduling on a fleet before running it: the precision study.

An operator about to test a policy on a fleet asks *how long must I run it, with which design
and estimator, to see a given change?* This module answers from simulation. For one fleet
setting (replicas, load, workload, the routing and scheduling pairs of
:class:`~asrsched.abtest.asr_fleet.ASRStudyConfig`) it runs every design of the ASR A/B study
(:mod:`asrsched.abtest.asr_fleet`: the same experiments and the same estimators, nothing
re-implemented) at several **experiment lengths** (``lengths_s``: seconds of traffic, the
warm-up included, at the offered load), ``reps`` experiments per length, and the ground truth
at each length. :mod:`asrsched.abtest.plan_report` turns the result into the sd law, power,
required experiment length, minimum detectable effect and a recommendation.

The estimate studied is the change in **mean E2EL** (treatment - control), the headline
estimator of each design (:func:`~asrsched.abtest.asr_fleet.estimate_run` rows with
``headline``): Bernoulli -> naive, qDQ, wDQ, mixed DQ; replica split / replica -> group
difference of means; switchback and replica x block (``replica_block``) -> the switchback
estimator with the study's burn-in.

The block designs (switchback, replica x block) also run at each extra block setting
(``extra_blocks``: block length and burn-in), on the same traces, so the plan can compare block
lengths (carry-over bias against the number of blocks). Every length is its own ASR study configuration (``n_requests = round(length_s x total
rate)``) with its own seed, so the lengths' experiments are independent; each length's
experiments and truth runs are tasks of :func:`~asrsched.sim.parallel.run_study` (processes or
Dask, a cache keyed by this module's code).

>>> cfg = PlanConfig(lengths_s=(150, 300, 600), reps=4, truth_seeds=3, routing_designs=("bernoulli",),
...                  scheduling_designs=())
>>> cfg.validate().n_requests(150) > 1000
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from asrsched.abtest.asr_fleet import ASRStudyConfig, run_replications, run_truths
from asrsched.sim.parallel import StudyPlan, task_seed

__all__ = ["PlanConfig", "PlanResult", "PLAN_METRIC", "PLAN_STAT", "BLOCK_DESIGNS"]

#: the metric and statistic whose change the planner sizes an experiment for
PLAN_METRIC = "e2el"
PLAN_STAT = "mean"
#: the designs whose arms change at block boundaries (their rows carry ``block_s``; others 0)
BLOCK_DESIGNS = ("switchback", "replica_block")


@dataclass(frozen=True)
class PlanConfig:
    """One fleet setting and the experiment lengths to simulate (every field checked by :meth:`validate`).

    The fleet fields mean what they mean in :class:`~asrsched.abtest.asr_fleet.ASRStudyConfig`
    (``rho``: offered load as a fraction of the fleet's measured capacity); ``lengths_s``: the
    experiment lengths (s of traffic, warm-up included), at least three, increasing; ``reps``:
    experiments per design and length; ``truth_seeds``: full runs of each arm per length.
    ``block_s``/``burn_in_s`` are the block designs' (switchback, replica x block) first block setting;
    ``extra_blocks`` more ``(block_s, burn_in_s)`` settings, run on the same traces for those designs only.
    """

    workload: str = "librispeech"
    n_replicas: int = 4
    rho: float = 0.95
    routing_control: str = "random"
    routing_treatment: str = "least_work"
    routing_designs: tuple = ("bernoulli", "group", "switchback", "replica_block")
    scheduling_control: str = "fcfs"
    scheduling_treatment: str = "hrrn"
    scheduling_router: str = "random"
    scheduling_designs: tuple = ("replica", "switchback", "replica_block")
    lengths_s: tuple = (300.0, 600.0, 1200.0, 2400.0, 4800.0)
    reps: int = 100
    truth_seeds: int = 20
    p: float = 0.5
    block_s: float = 30.0
    burn_in_s: float = 5.0
    extra_blocks: tuple = ((60.0, 15.0),)
    warmup_s: float = 30.0
    L: int | None = None
    n_batches: int = 20
    max_num_seqs: int = 32
    seed: int = 0
    service: dict | None = None

    def replace(self, **kw) -> PlanConfig:
        """A copy with some fields changed."""
        return replace(self, **kw)

    def blocks(self) -> list[tuple[float, float]]:
        """Every ``(block_s, burn_in_s)`` setting of the block designs, the first one first."""
        return [(self.block_s, self.burn_in_s), *(tuple(b) for b in self.extra_blocks)]

    def fleet(self, length_s: float | None = None, block: tuple | None = None) -> ASRStudyConfig:
        """The ASR study configuration of one experiment length (``None``: the longest); with ``block``
        (an entry of :meth:`blocks` after the first) only the block designs, at that block setting."""
        length_s = max(self.lengths_s) if length_s is None else length_s
        base = ASRStudyConfig(
            workloads=(self.workload,),
            n_replicas=self.n_replicas,
            rho=self.rho,
            warmup_s=self.warmup_s,
            p=self.p,
            routing_control=self.routing_control,
            routing_treatment=self.routing_treatment,
            routing_designs=tuple(self.routing_designs),
            scheduling_control=self.scheduling_control,
            scheduling_treatment=self.scheduling_treatment,
            scheduling_router=self.scheduling_router,
            scheduling_designs=tuple(self.scheduling_designs),
            block_s=self.block_s,
            burn_in_s=self.burn_in_s,
            sb_burn_ins=(),
            L=self.L,
            L_factors=(1.0,),
            n_batches=self.n_batches,
            reps=max(2, self.reps),
            truth_seeds=max(2, self.truth_seeds),
            max_num_seqs=self.max_num_seqs,
            seed=self.seed,
            service=self.service,
        )
        idx = list(self.lengths_s).index(length_s) if length_s in self.lengths_s else -1
        base = base.replace(
            n_requests=max(1, int(round(float(length_s) * base.total_rate(self.workload)))),
            seed=task_seed(self.seed, "plan", idx, float(length_s)),
        )
        if block is None:
            return base
        return base.replace(
            block_s=float(block[0]),
            burn_in_s=float(block[1]),
            routing_designs=tuple(d for d in self.routing_designs if d in BLOCK_DESIGNS),
            scheduling_designs=tuple(d for d in self.scheduling_designs if d in BLOCK_DESIGNS),
        )

    def total_rate(self) -> float:
        """The fleet's total arrival rate (req/s) at ``rho``."""
        return self.fleet(max(self.lengths_s)).total_rate(self.workload)

    def n_requests(self, length_s: float) -> int:
        """Requests in an experiment of ``length_s`` seconds."""
        return int(round(float(length_s) * self.total_rate()))

    def validate(self) -> PlanConfig:
        """Check every parameter before any simulation (errors name the parameter as written here)."""
        if not isinstance(self.extra_blocks, (tuple, list)) or any(
            not isinstance(b, (tuple, list)) or len(b) != 2 for b in self.extra_blocks
        ):
            raise ValueError(f"extra_blocks: need (block_s, burn_in_s) pairs, got {self.extra_blocks!r}")
        for i, (block, burn) in enumerate(self.blocks()):
            name = "block_s" if i == 0 else "extra_blocks"
            if not (isinstance(block, (int, float)) and isinstance(burn, (int, float))):
                raise ValueError(f"{name}: need numbers of seconds, got block {block!r}, burn-in {burn!r}")
            if not block > 0:
                raise ValueError(f"{name}: switchback block length must be > 0 seconds, got {block!r}")
            if not 0 <= burn < block:
                raise ValueError(
                    f"{name}: a block of {block} s is not longer than the burn-in ({burn} s); every request of a "
                    "block would be dropped"
                )
        if len(set(self.blocks())) != len(self.blocks()):
            raise ValueError(f"extra_blocks: a block setting is given twice: {self.blocks()!r}")
        Ls = self.lengths_s
        if (
            not isinstance(Ls, (tuple, list))
            or len(Ls) < 3
            or any(not isinstance(x, (int, float)) or not np.isfinite(x) or x <= 0 for x in Ls)
            or list(Ls) != sorted(set(Ls))
        ):
            raise ValueError(
                f"lengths_s: need at least 3 increasing experiment lengths in seconds (to fit the sd law), got {Ls!r}"
            )
        for name in ("reps", "truth_seeds"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 3:
                raise ValueError(f"{name}: need an integer >= 3, got {v!r}")
        if not self.routing_designs and not self.scheduling_designs:
            raise ValueError("routing_designs, scheduling_designs: need at least one design to plan")
        for length in Ls:
            for block in [None, *self.blocks()[1:]]:
                cfg = self.fleet(length, block)
                if not cfg.designs():
                    continue
                try:
                    cfg.validate()
                except ValueError as e:
                    raise ValueError(f"lengths_s: an experiment of {length:g} s: {e}") from None
        return self

    def plan(self) -> StudyPlan:
        """One task per (length, replication) and per (length, truth trace); the extra block settings add
        their block designs' replications (on the same traces; the truth does not depend on the block)."""
        tasks = []
        for length in self.lengths_s:
            for block in [None, *self.blocks()[1:]]:
                cfg = self.fleet(length, block)
                if not cfg.designs():
                    continue
                for t in cfg.plan().tasks:
                    if block is None or t["kind"] == "rep":
                        tasks.append(dict(length_s=float(length), block_s=cfg.block_s, kind=t["kind"], task=t["task"]))
        return StudyPlan(_run_task, tasks, prefix="abplan", desc="A/B plan runs")

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> PlanResult:
        """The :class:`PlanResult` from the tasks' results (mean E2EL rows only)."""
        est, truth = [], []
        for t, r in zip(plan.tasks, results):
            if t["kind"] == "truth":
                truth += [dict(row, length_s=t["length_s"]) for row in r]
            else:
                est += [
                    dict(row, length_s=t["length_s"], block_s=t["block_s"] if row["design"] in BLOCK_DESIGNS else 0.0)
                    for row in r["rows"]
                    if row["metric"] == PLAN_METRIC and row["stat"] == PLAN_STAT and row["headline"]
                ]
        est_df = pd.DataFrame(est)
        return PlanResult(self, est_df, _truth_by_length(self, pd.DataFrame(truth)), seconds)

    def to_dict(self) -> dict:
        """JSON-friendly dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PlanConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        for k in ("routing_designs", "scheduling_designs", "lengths_s"):
            if k in d:
                d[k] = tuple(d[k])
        if "extra_blocks" in d:
            d["extra_blocks"] = tuple(tuple(b) for b in d["extra_blocks"])
        return cls(**d)


def _run_task(length_s: float, block_s: float, kind: str, task: dict):
    return run_truths(**task) if kind == "truth" else run_replications(**task)


def _truth_by_length(cfg: PlanConfig, runs: pd.DataFrame) -> pd.DataFrame:
    """Per length and factor: the control's mean E2EL and the true effect (mean over truth traces, with se)."""
    out = []
    col = f"{PLAN_STAT}_{PLAN_METRIC}"
    for length, g in runs.groupby("length_s"):
        fleet = cfg.fleet(length)
        for factor in sorted({f for f, _ in fleet.designs()}):
            t = fleet.test(factor)
            (rc, pc), (rt, pt) = t.setting("control"), t.setting("treatment")
            c = g[(g.router == rc) & (g.policy == pc)].set_index("k")[col].sort_index()
            tt = g[(g.router == rt) & (g.policy == pt)].set_index("k")[col].sort_index()
            d = (tt - c).dropna()
            out.append(
                dict(
                    length_s=float(length),
                    factor=factor,
                    control=f"{rc}|{pc}",
                    treatment=f"{rt}|{pt}",
                    value_control=float(c.mean()),
                    gte=float(d.mean()),
                    gte_se=float(d.std(ddof=1) / np.sqrt(len(d))),
                    truth_runs=int(len(d)),
                )
            )
    return pd.DataFrame(out)


@dataclass
class PlanResult:
    """What the precision study returns: the estimates (one row per experiment) and the truth per length."""

    config: PlanConfig
    estimates: pd.DataFrame
    truth: pd.DataFrame
    seconds: float

    def __post_init__(self) -> None:
        if len(self.estimates) and "block_s" not in self.estimates:  # one block setting: no column needed
            blocks = np.where(self.estimates["design"].isin(BLOCK_DESIGNS), float(self.config.block_s), 0.0)
            self.estimates = self.estimates.assign(block_s=blocks)
