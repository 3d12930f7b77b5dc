"""A/B-testing ASR routing and scheduling policies on a multi-replica cluster: which estimator to trust.

The study joins the two source papers: the fleet of :mod:`asrsched.sim.fleet` (N
continuous-batching Whisper replicas from :mod:`asrsched.sim.engine` behind a router) is the
queueing system, and the estimators of :mod:`asrsched.abtest.estimators` (naive, group,
switchback, qDQ, wDQ, mixed DQ) are applied to its trajectories.

Two A/B tests per workload (:class:`ASRStudyConfig`):

* **routing** -- control router vs treatment router (default ``random`` -> ``least_work``,
  the duration-aware router), every replica FCFS; designs ``bernoulli`` (request-level),
  ``group`` (replica split) and ``switchback``, and (not in the defaults) ``replica_block``;
* **scheduling** -- control vs treatment per-replica scheduling policy (default FCFS ->
  HRRN) behind a fixed router; designs ``replica`` (cluster randomisation) and
  ``switchback`` (request-level randomisation is ill-defined inside one shared queue), and
  (not in the defaults) ``replica_block`` (replica x block: the replica split re-drawn every
  block; definitions in :mod:`asrsched.abtest.fleet_experiment`).

Workloads: ``librispeech`` (real test-clean durations), ``uniform`` (5-30 s) and
``drift`` (LibriSpeech -> uniform during the run), Poisson arrivals at ``rho`` x fleet
capacity (:func:`asrsched.sim.fleet.fleet_trace`); the experiments are
:func:`asrsched.abtest.fleet_experiment.run_experiment`.

Metrics: E2EL and TTFT, each as the mean and the P90 over requests that arrive after
``warmup_s``. Estimators per design and statistic:

=============  ==============================  =========================================
design         mean                            P90
=============  ==============================  =========================================
bernoulli      naive, qdq, wdq, mixed_dq       naive (difference of the arms' P90s),
                                               wdq / mixed_dq on the P90 influence cost,
                                               qdq (unchanged: see below)
group/replica  group (difference of means)     group (difference of P90s)
switchback     switchback (burn-in)            switchback (difference of P90s, burn-in)
replica_block  switchback (burn-in)            switchback (difference of P90s, burn-in)
=============  ==============================  =========================================

The replica_block rows reuse the estimator name ``switchback``: the same function (the difference
of the arms' means over the requests past their block's first ``burn_in`` seconds, batch means
over groups of blocks), fed each request's own arm; the ``design`` column tells the two apart.

P90 and Little's law. DQ needs a per-request cost whose *mean* is the metric. For the P90
we use its influence function: ``c_j = q + (1{W_j > q} - 0.1) / f(q)`` with ``q`` the pooled
P90 and ``f(q)`` a difference-quotient density estimate; a difference of mean ``c`` between
arms is, to first order, the difference of their P90s, so wDQ on ``c`` targets the P90
effect. qDQ has no such version: its cost is the number of requests in the system divided by
the arrival rate, which Little's law ties to the *mean* latency only. Mixed DQ for P90 thus
blends a P90 estimate with a mean estimate -- its bias is ``(1 - alpha) x (mean effect - P90
effect)`` -- and the tables show how large that is.

Ground truth: separate full runs of each arm's setting everywhere (``truth_seeds`` traces
of the same length as the experiments, the same trace for every setting: common random
numbers); ``GTE = metric(treatment) - metric(control)``, averaged over the traces, with its
standard error. It is the estimand of a run of this length (which matters under drift).

Every trace is one task of :meth:`ASRStudyConfig.plan`, run by :func:`asrsched.sim.parallel.run_study` (joblib or Dask): the
designs of one replication replay the same trace (generated once per task), each design
seeded from ``(seed, workload, replication, design)``; the ground-truth settings of one truth
trace likewise. With ``cache_dir`` each finished task is kept as JSON and reused on a rerun.
The fleet runs compiled (:mod:`asrsched.sim.kernel`, identical records to the Python
fleet) whenever the policies and routers are built-in.

This module holds the configuration, the estimators applied to one run and the tasks. The tables and the operator's recommendation are
:mod:`asrsched.abtest.asr_fleet_report`; the figures :mod:`asrsched.figures.ab_asr`; the
interactive panel :func:`asrsched.figures.ab_widgets.ab_explorer`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import (
    Estimate,
    Trajectory,
    batch_ci,
    default_L,
    dq_sweep,
    group,
    littles_law,
    naive,
    switchback,
)
from asrsched.abtest.fleet_experiment import ABTest, fleet_trace, run_experiment
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.sim.fleet import replica_capacity
from asrsched.sim.parallel import StudyPlan, task_seed

__all__ = [
    "ASRStudyConfig",
    "ASRStudyResult",
    "run_replication",
    "run_replications",
    "run_truth",
    "run_truths",
    "estimate_run",
    "quantile_estimate",
    "p90_cost_trajectory",
    "WORKLOADS",
    "LARGE_STUDY",
    "AB_METRICS",
    "AB_STATS",
]

WORKLOADS = ("librispeech", "uniform", "drift")
#: the larger study (a parameter away in the notebook): ~10x the default's simulated requests, for a Dask cluster
#: or a long run
LARGE_STUDY = dict(reps=400, truth_seeds=50, n_requests=60_000)
AB_METRICS = ("e2el", "ttft")
AB_STATS = ("mean", "p90")


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ASRStudyConfig:
    """Parameters of the ASR A/B study (see the module docstring).

    ``rho`` is the offered load as a fraction of the fleet's capacity on the workload
    (:func:`asrsched.sim.fleet.replica_capacity`); ``n_requests`` per run (experiments and
    truth alike); ``L`` the DQ horizon in requests (``None``: ``30 x`` the total arrival
    rate, i.e. 30 s of arrivals); ``L_factors`` the ablation around it; ``block_s`` and
    ``burn_in_s`` the blocks of the switchback and replica_block designs; ``reps`` experiments
    per design and ``truth_seeds`` traces for the ground truth.
    """

    workloads: tuple = WORKLOADS
    n_replicas: int = 4
    rho: float = 0.95
    n_requests: int = 20_000
    warmup_s: float = 30.0
    p: float = 0.5
    routing_control: str = "random"
    routing_treatment: str = "least_work"
    routing_policy: str = "fcfs"
    routing_designs: tuple = ("bernoulli", "group", "switchback", "replica_block")
    scheduling_control: str = "fcfs"
    scheduling_treatment: str = "hrrn"
    scheduling_router: str = "random"
    scheduling_designs: tuple = ("replica", "switchback", "replica_block")
    block_s: float = 30.0
    burn_in_s: float = 5.0
    sb_burn_ins: tuple = (0.0, 5.0, 10.0, 15.0)
    L: int | None = None
    L_factors: tuple = (0.1, 0.3, 1.0, 3.0)
    n_batches: int = 20
    alpha_batches: int = 50
    reps: int = 100
    truth_seeds: int = 20
    max_num_seqs: int = 32
    seed: int = 0
    service: dict | None = None

    def replace(self, **kw) -> ASRStudyConfig:
        """A copy with some fields changed."""
        return replace(self, **kw)

    def service_model(self) -> ServiceModel:
        """The replicas' service model (``service`` dict, or the default)."""
        return ServiceModel.from_dict(self.service) if self.service else default_service_model()

    def test(self, factor: str, design: str = "control") -> ABTest:
        """The :class:`ABTest` of ``factor`` under ``design``."""
        if factor == "routing":
            return ABTest(
                factor="routing",
                control=self.routing_control,
                treatment=self.routing_treatment,
                design=design,
                p=self.p,
                block_s=self.block_s,
                alternate=True,
                policy=self.routing_policy,
                router=self.routing_control,
            )
        if factor == "scheduling":
            return ABTest(
                factor="scheduling",
                control=self.scheduling_control,
                treatment=self.scheduling_treatment,
                design=design,
                p=self.p,
                block_s=self.block_s,
                alternate=True,
                policy=self.scheduling_control,
                router=self.scheduling_router,
            )
        raise ValueError(f"factor: {factor!r} not in ('routing', 'scheduling')")

    def designs(self) -> list[tuple[str, str]]:
        """Every (factor, design) the study runs."""
        return [("routing", d) for d in self.routing_designs] + [("scheduling", d) for d in self.scheduling_designs]

    def validate(self) -> ASRStudyConfig:
        """Check every parameter before any simulation (errors name the parameter)."""
        bad = [w for w in self.workloads if w not in ("librispeech", "uniform", "drift", "commonvoice_id", "mix")]
        if bad or not self.workloads:
            raise ValueError(
                f"workloads: {bad or '()'} not allowed; use librispeech, uniform, drift, commonvoice_id, mix"
            )
        if not (isinstance(self.rho, (int, float)) and 0 < self.rho < 1):
            raise ValueError(f"rho: offered load must be in (0, 1) of fleet capacity, got {self.rho!r}")
        if not isinstance(self.n_requests, (int, np.integer)) or self.n_requests < 500:
            raise ValueError(f"n_requests: need an integer >= 500 per run, got {self.n_requests!r}")
        if not (isinstance(self.warmup_s, (int, float)) and self.warmup_s >= 0):
            raise ValueError(f"warmup_s: need >= 0 seconds, got {self.warmup_s!r}")
        for name in ("reps", "truth_seeds"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 2:
                raise ValueError(f"{name}: need an integer >= 2, got {v!r}")
        if not isinstance(self.n_batches, (int, np.integer)) or self.n_batches < 2:
            raise ValueError(f"n_batches: need an integer >= 2, got {self.n_batches!r}")
        if not isinstance(self.alpha_batches, (int, np.integer)) or self.alpha_batches < 3:
            raise ValueError(f"alpha_batches: need an integer >= 3, got {self.alpha_batches!r}")
        if not (0 <= self.burn_in_s < self.block_s):
            raise ValueError(f"burn_in_s: need 0 <= burn_in_s < block_s ({self.block_s}), got {self.burn_in_s!r}")
        if any(not (0 <= b < self.block_s) for b in self.sb_burn_ins):
            raise ValueError(
                f"sb_burn_ins: every burn-in must be in [0, block_s={self.block_s}), got {self.sb_burn_ins!r}"
            )
        if self.L is not None and (
            not isinstance(self.L, (int, np.integer)) or isinstance(self.L, bool) or self.L <= 0
        ):
            raise ValueError(f"L: the DQ horizon must be a positive integer number of requests or None, got {self.L!r}")
        if not self.L_factors or any(not (f > 0) for f in self.L_factors):
            raise ValueError(f"L_factors: need positive factors, got {self.L_factors!r}")
        if not self.designs():
            raise ValueError("routing_designs, scheduling_designs: need at least one design")
        for factor, design in self.designs():
            self.test(factor, design).validate(self.n_replicas)
        self.service_model()
        # horizon vs run length, per workload
        for w in self.workloads:
            total_rate = self.total_rate(w)
            Lmax = max(self.L_for(total_rate, f) for f in (*self.L_factors, 1.0))
            n_meas = self.n_requests - self.warmup_s * total_rate
            if n_meas < 2 * Lmax + 2 * self.n_batches:
                raise ValueError(
                    f"n_requests: {self.n_requests} requests leave {n_meas:.0f} after the warm-up on {w}, too few for "
                    f"a DQ horizon of {Lmax} requests (need >= 2 L); raise n_requests or lower L / L_factors"
                )
            blocked = any(d in ("switchback", "replica_block") for _, d in self.designs())
            if self.n_requests / total_rate < 4 * self.block_s and blocked:
                raise ValueError(
                    f"block_s: a run of {self.n_requests / total_rate:.0f} s on {w} holds fewer than 4 "
                    f"blocks of {self.block_s} s (switchback, replica_block); lower block_s or raise n_requests"
                )
        return self

    def total_rate(self, workload: str) -> float:
        """Total arrival rate (req/s) of the fleet on ``workload``."""
        return (
            float(self.rho)
            * self.n_replicas
            * replica_capacity(workload, service=self.service_model(), max_num_seqs=self.max_num_seqs)
        )

    def L_for(self, total_rate: float, factor: float = 1.0) -> int:
        """DQ horizon (requests) at ``factor`` x the headline ``L``."""
        L0 = int(self.L) if self.L is not None else default_L(total_rate)
        return max(1, int(round(factor * L0)))

    def plan(self) -> StudyPlan:
        """The tasks for :func:`~asrsched.sim.parallel.run_study`: one per trace.

        The settings (truth) or designs (experiments) that replay a trace run together in its task.
        """
        sd = self.to_dict()
        settings = []
        for factor in {f for f, _ in self.designs()}:
            t = self.test(factor)
            for arm in ("control", "treatment"):
                if t.setting(arm) not in settings:
                    settings.append(t.setting(arm))
        truth = [
            dict(workload=w, k=k, settings=[list(x) for x in sorted(settings)], study=sd)
            for w in self.workloads
            for k in range(self.truth_seeds)
        ]
        reps = [
            dict(workload=w, rep=r, designs=[list(x) for x in self.designs()], study=sd)
            for w in self.workloads
            for r in range(self.reps)
        ]
        tasks = [dict(kind="truth", task=t) for t in truth] + [dict(kind="rep", task=t) for t in reps]
        return StudyPlan(_dispatch, tasks, prefix="abasr", desc="ASR A/B runs", context={"n_truth": len(truth)})

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> ASRStudyResult:
        """The :class:`ASRStudyResult` from the results of :meth:`plan`'s tasks, by workload, design and replication."""
        truth, reps = results[: plan.context["n_truth"]], results[plan.context["n_truth"] :]
        order = {w: i for i, w in enumerate(self.workloads)}
        truth_runs = pd.DataFrame([row for r in truth for row in r])
        truth_runs = truth_runs.sort_values(
            ["workload", "router", "policy", "k"],
            key=lambda s: s.map(order) if s.name == "workload" else s,
            kind="stable",
        ).reset_index(drop=True)
        est = pd.DataFrame([row for r in reps for row in r["rows"]])
        little = pd.DataFrame([row for r in reps for row in r["little"]])

        def in_order(df: pd.DataFrame) -> pd.DataFrame:  # by workload, design and replication
            return df.sort_values(
                ["workload", "factor", "design", "rep", "metric"],
                key=lambda s: s.map(order) if s.name == "workload" else s,
                kind="stable",
            ).reset_index(drop=True)

        est, little = in_order(est), in_order(little)
        return ASRStudyResult(self, est, truth_runs, _truth_table(truth_runs, self), little, seconds)

    def to_dict(self) -> dict:
        """JSON-friendly dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ASRStudyConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        for k in ("workloads", "routing_designs", "scheduling_designs", "L_factors", "sb_burn_ins"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


# ----------------------------------------------------------------------------- estimators on one run


def _quantile(x: np.ndarray, q: float) -> float:
    """``np.quantile(x, q)`` (method ``"linear"``), the same arithmetic on two partitioned order statistics.

    About 7x faster on the short batches of :func:`quantile_estimate`; bit-identical to numpy's
    (``tests/abtest/test_asr_fleet_study.py`` checks it on random arrays).
    """
    n = x.size
    v = (n - 1) * q
    lo = math.floor(v)
    hi = min(lo + 1, n - 1)
    p = np.partition(x, (lo, hi))
    a, b = p[lo], p[hi]
    g = v - lo
    d = b - a
    return float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g)


def _qdiff(w: np.ndarray, z: np.ndarray, q: float = 0.9) -> float:
    t = z == 1
    if t.all() or not t.any():
        return float("nan")
    return _quantile(w[t], q) - _quantile(w[~t], q)


def quantile_estimate(
    traj: Trajectory, name: str, q: float = 0.9, burn_in: float = 0.0, n_batches: int = 20
) -> Estimate:
    """Difference of the arms' ``q``-quantiles of ``response`` with a batch-means CI.

    Switchback trajectories drop each block's first ``burn_in`` seconds and batch over
    groups of consecutive blocks; other designs batch over contiguous runs of requests.
    """
    w, z = traj.response, traj.z
    if traj.block is not None and traj.block_len:
        keep = (traj.arrival - traj.block * traj.block_len) >= burn_in
        w, z, blk = w[keep], z[keep], traj.block[keep]
        ub = np.unique(blk)
        nb = max(1, min(n_batches, ub.size // 2))
        groups = np.array_split(ub, nb)
        edges = [np.searchsorted(blk, g[0], side="left") for g in groups] + [blk.size]
    else:
        edges = np.linspace(0, w.size, n_batches + 1).astype(np.int64).tolist()
    bats = [_qdiff(w[a:b], z[a:b], q) for a, b in zip(edges[:-1], edges[1:]) if b - a >= 20]
    b = np.array(bats, float)
    return batch_ci(name, _qdiff(w, z, q), b[np.isfinite(b)])


def p90_cost_trajectory(traj: Trajectory, q: float = 0.9, band: float = 0.025) -> Trajectory:
    """The trajectory with ``response`` replaced by the P90 influence cost (module docstring).

    ``c_j = Q + (1{W_j > Q} - (1 - q)) / f``, ``Q`` the pooled ``q``-quantile and
    ``f = 2 band / (Q_{q+band} - Q_{q-band})``; the mean of ``c`` over an arm is that arm's
    ``q``-quantile to first order.
    """
    w = traj.response
    Q = float(np.quantile(w, q))
    lo, hi = np.quantile(w, [q - band, q + band])
    f = 2 * band / (hi - lo) if hi > lo else np.inf
    c = Q + ((w > Q).astype(float) - (1 - q)) / f if np.isfinite(f) else np.full_like(w, Q)
    return replace(traj, response=c, meta=dict(traj.meta, cost="p90_influence", q=q, density=f))


def _row(e: Estimate, **kw) -> dict:
    d = e.as_dict()
    d.pop("n_batches", None)
    d.update(kw)
    return d


def estimate_run(res, cfg: ASRStudyConfig) -> tuple[list[dict], list[dict]]:
    """Every estimator that applies to one experiment's design, for E2EL/TTFT x mean/P90.

    Returns ``(estimate rows, Little's-law rows)``. Bernoulli runs also give the DQ family
    at every ``L`` in ``cfg.L_factors`` (``headline`` marks ``L_factor == 1``).
    """
    rows, little = [], []
    design = res.test.design
    nb = cfg.n_batches
    for metric in AB_METRICS:
        tr = res.trajectory(metric)
        ll = littles_law(tr)
        little.append(dict(metric=metric, rel_gap=ll["rel_gap"], time_avg_n=ll["time_avg_n"], little_n=ll["little_n"]))
        base = dict(metric=metric, L=np.nan, L_factor=np.nan, burn_in=np.nan, headline=True)
        if design == "bernoulli":
            rows.append(_row(naive(tr, nb), stat="mean", **base))
            rows.append(_row(quantile_estimate(tr, "naive", n_batches=nb), stat="p90", **base))
            factors = sorted(set((*cfg.L_factors, 1.0)))
            Ls = [cfg.L_for(tr.total_rate, f) for f in factors]
            fams = {stat: dq_sweep(t, Ls, nb) for stat, t in (("mean", tr), ("p90", p90_cost_trajectory(tr)))}
            for f, L in zip(factors, Ls):
                kw = dict(metric=metric, L=L, L_factor=f, headline=f == 1.0)
                for stat, fam in fams.items():
                    for name in ("qdq", "wdq", "mixed_dq"):
                        rows.append(_row(fam[L][name], stat=stat, **kw))
        elif design in ("group", "replica"):
            rows.append(_row(group(tr, nb), stat="mean", **base))
            rows.append(_row(quantile_estimate(tr, "group", n_batches=nb), stat="p90", **base))
        elif design in ("switchback", "replica_block"):
            for b in sorted(set((*cfg.sb_burn_ins, cfg.burn_in_s))):
                kw = dict(base, burn_in=float(b), headline=b == cfg.burn_in_s)
                rows.append(_row(switchback(tr, b, nb), stat="mean", **kw))
                rows.append(_row(quantile_estimate(tr, "switchback", burn_in=b, n_batches=nb), stat="p90", **kw))
    return rows, little


# ----------------------------------------------------------------------------- tasks


def _trace(cfg: ASRStudyConfig, workload: str, *seed_parts):
    return fleet_trace(
        workload,
        n_replicas=cfg.n_replicas,
        rho=cfg.rho,
        n_requests=cfg.n_requests,
        seed=task_seed(cfg.seed, workload, *seed_parts),
        service=cfg.service_model(),
        max_num_seqs=cfg.max_num_seqs,
    )


def _replication(cfg: ASRStudyConfig, tr, total_rate: float, workload: str, rep: int, factor: str, design: str) -> dict:
    t0 = time.perf_counter()
    res = run_experiment(
        tr,
        cfg.test(factor, design),
        n_replicas=cfg.n_replicas,
        service=cfg.service_model(),
        max_num_seqs=cfg.max_num_seqs,
        seed=task_seed(cfg.seed, workload, "rep", rep, factor, design),
        warmup_s=cfg.warmup_s,
        total_rate=total_rate,
    )
    rows, little = estimate_run(res, cfg)
    share = float(res.measured["z"].mean())
    for r in rows + little:
        r.update(workload=workload, rep=rep, factor=factor, design=design)
    for r in little:
        r["treated_share"] = share
    return {"rows": rows, "little": little, "seconds": time.perf_counter() - t0}


def run_replication(workload: str, rep: int, factor: str, design: str, study: dict) -> dict:
    """One A/B experiment (one design, one replication): estimate rows and Little's-law checks."""
    cfg = ASRStudyConfig.from_dict(study)
    tr, total_rate = _trace(cfg, workload, "rep", rep)
    return _replication(cfg, tr, total_rate, workload, rep, factor, design)


def run_replications(workload: str, rep: int, designs: list, study: dict) -> dict:
    """Every design of replication ``rep`` on its one trace (generated once): rows and Little's-law checks.

    The same rows as :func:`run_replication` per design (the designs of a replication replay
    the same trace; each design has its own seed).
    """
    cfg = ASRStudyConfig.from_dict(study)
    t0 = time.perf_counter()
    tr, total_rate = _trace(cfg, workload, "rep", rep)
    rows, little = [], []
    for factor, design in designs:
        r = _replication(cfg, tr, total_rate, workload, rep, factor, design)
        rows += r["rows"]
        little += r["little"]
    return {"rows": rows, "little": little, "seconds": time.perf_counter() - t0}


def _truth(cfg: ASRStudyConfig, tr, total_rate: float, workload: str, router: str, policy: str, k: int) -> dict:
    t0 = time.perf_counter()
    # the whole fleet under one setting: the control arm of an experiment with that router and policy
    # (= asrsched.sim.fleet.simulate_fleet, with the trajectories of the A/B layer)
    setting = ABTest(factor="routing", control=router, treatment=router, design="control", policy=policy)
    res = run_experiment(
        tr,
        setting,
        n_replicas=cfg.n_replicas,
        service=cfg.service_model(),
        max_num_seqs=cfg.max_num_seqs,
        seed=task_seed(cfg.seed, workload, "truth", k),
        warmup_s=cfg.warmup_s,
        total_rate=total_rate,
    )
    m = res.measured
    out = {
        "workload": workload,
        "router": router,
        "policy": policy,
        "k": k,
        "total_rate": total_rate,
        "n": int(len(m)),
        "seconds": 0.0,
    }
    for metric in AB_METRICS:
        v = m[metric].to_numpy(float)
        out[f"mean_{metric}"] = float(v.mean())
        out[f"p90_{metric}"] = float(np.quantile(v, 0.9))
        out[f"little_gap_{metric}"] = littles_law(res.trajectory(metric))["rel_gap"]
    out["seconds"] = time.perf_counter() - t0
    return out


def run_truth(workload: str, router: str, policy: str, k: int, study: dict) -> dict:
    """One full run of a fleet setting (router, policy) on truth trace ``k``: mean/P90 of E2EL and TTFT."""
    cfg = ASRStudyConfig.from_dict(study)
    tr, total_rate = _trace(cfg, workload, "truth", k)
    return _truth(cfg, tr, total_rate, workload, router, policy, k)


def run_truths(workload: str, k: int, settings: list, study: dict) -> list[dict]:
    """Every setting ``(router, policy)`` on truth trace ``k`` (generated once): one :func:`run_truth` row each."""
    cfg = ASRStudyConfig.from_dict(study)
    tr, total_rate = _trace(cfg, workload, "truth", k)
    return [_truth(cfg, tr, total_rate, workload, r, p, k) for r, p in settings]


# ----------------------------------------------------------------------------- study


@dataclass
class ASRStudyResult:
    """Raw outputs of :func:`~asrsched.sim.parallel.run_study` (long tables) and its wall time."""

    config: ASRStudyConfig
    estimates: pd.DataFrame
    truth_runs: pd.DataFrame
    truth: pd.DataFrame
    little: pd.DataFrame
    seconds: float


def _truth_table(runs: pd.DataFrame, cfg: ASRStudyConfig) -> pd.DataFrame:
    out = []
    for w in cfg.workloads:
        g = runs[runs.workload == w]
        for factor in sorted({f for f, _ in cfg.designs()}, key=["routing", "scheduling"].index):
            t = cfg.test(factor)
            (rc, pc), (rt, pt) = t.setting("control"), t.setting("treatment")
            c = g[(g.router == rc) & (g.policy == pc)].set_index("k").sort_index()
            tt = g[(g.router == rt) & (g.policy == pt)].set_index("k").sort_index()
            for metric in AB_METRICS:
                for stat in AB_STATS:
                    col = f"{stat}_{metric}"
                    d = (tt[col] - c[col]).dropna()
                    out.append(
                        {
                            "workload": w,
                            "factor": factor,
                            "metric": metric,
                            "stat": stat,
                            "control": f"{rc}|{pc}",
                            "treatment": f"{rt}|{pt}",
                            "value_control": float(c[col].mean()),
                            "value_treatment": float(tt[col].mean()),
                            "gte": float(d.mean()),
                            "gte_se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else np.nan,
                            "truth_runs": int(len(d)),
                        }
                    )
    df = pd.DataFrame(out)
    df["gte_pct"] = 100 * df["gte"] / df["value_control"]
    return df


def _dispatch(kind: str, task: dict):
    return run_truths(**task) if kind == "truth" else run_replications(**task)
