"""A/B-testing ASR routing and scheduling policies on a multi-replica cluster: which estimator to trust.

The study joins the two source papers: the cluster of :mod:`asrsched.sim.fleet` (N
continuous-batching Whisper replicas from :mod:`asrsched.sim.engine` behind a router) is the
queueing system, and the estimators of :mod:`asrsched.abtest.estimators` (naive, group,
switchback, qDQ, wDQ, mixed DQ) are applied to its trajectories.

Two A/B tests per workload (:class:`ASRStudyConfig`):

* **routing** -- control router vs treatment router (default ``random`` -> ``least_work``,
  the duration-aware router), every replica FCFS; designs ``bernoulli`` (request-level),
  ``group`` (replica split) and ``switchback``;
* **scheduling** -- control vs treatment per-replica scheduling policy (default FCFS ->
  HRRN) behind a fixed router; designs ``replica`` (cluster randomisation) and
  ``switchback`` (request-level randomisation is ill-defined inside one shared queue).

Workloads: ``librispeech`` (real test-clean durations), ``uniform`` (5-30 s) and
``drift`` (LibriSpeech -> uniform during the run), Poisson arrivals at ``load`` x fleet
capacity (:func:`asrsched.sim.fleet.cluster_trace`).

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
=============  ==============================  =========================================

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

Every run is one task for :func:`asrsched.sim.parallel.map_tasks` (joblib or Dask), seeded from
``(seed, workload, replication, design)``; the designs of one replication replay the same
trace. With ``cache_dir`` each finished task is kept as JSON and reused on a rerun.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from scipy import stats

from asrsched.abtest.estimators import (
    Estimate,
    Trajectory,
    default_L,
    group,
    littles_law,
    mixed_dq,
    naive,
    qdq,
    switchback,
    wdq,
)
from asrsched.abtest.study import _json_default
from asrsched.sim.fleet import ABTest, cluster_trace, run_cluster, run_experiment
from asrsched.sim.parallel import map_tasks
from asrsched.figures.style import policy_color
from asrsched.core.service import ServiceModel, default_service_model

__all__ = [
    "ASRStudyConfig",
    "ASRStudyResult",
    "run_study",
    "summary_table",
    "best_table",
    "ablation_table",
    "burn_in_table",
    "truth_table",
    "tail_table",
    "recommendation",
    "fig_truth",
    "fig_estimates",
    "fig_rmse",
    "fig_tail",
    "fig_ablation",
    "ab_explorer",
    "p90_cost_trajectory",
    "WORKLOADS",
    "LARGE_STUDY",
    "ESTIMATOR_ORDER",
]

WORKLOADS = ("librispeech", "uniform", "drift")
#: the larger study (a parameter away in the notebook): ~10x the default's runs, for a Dask cluster or a long run
LARGE_STUDY = dict(reps=40, truth_seeds=20, n_requests=60_000)
ESTIMATOR_ORDER = ["naive", "group", "switchback", "qdq", "wdq", "mixed_dq"]
METRICS = ("e2el", "ttft")
STATS = ("mean", "p90")
_MLABEL = {"e2el": "E2EL", "ttft": "TTFT"}


def _label(metric: str, stat: str) -> str:
    return f"{'mean' if stat == 'mean' else 'P90'} {_MLABEL[metric]}"


# ----------------------------------------------------------------------------- config

@dataclass(frozen=True)
class ASRStudyConfig:
    """Parameters of the ASR A/B study (see the module docstring).

    ``load`` is the offered load as a fraction of the fleet's capacity on the workload
    (:func:`asrsched.sim.fleet.replica_capacity`); ``n_requests`` per run (experiments and
    truth alike); ``L`` the DQ horizon in requests (``None``: ``30 x`` the total arrival
    rate, i.e. 30 s of arrivals); ``L_factors`` the ablation around it; ``block_s`` and
    ``burn_in_s`` the switchback blocks; ``reps`` experiments per design and
    ``truth_seeds`` traces for the ground truth.
    """

    workloads: tuple = WORKLOADS
    n_replicas: int = 4
    load: float = 0.95
    n_requests: int = 20_000
    warmup_s: float = 30.0
    p: float = 0.5
    routing_control: str = "random"
    routing_treatment: str = "least_work"
    routing_policy: str = "fcfs"
    routing_designs: tuple = ("bernoulli", "group", "switchback")
    scheduling_control: str = "fcfs"
    scheduling_treatment: str = "hrrn"
    scheduling_router: str = "random"
    scheduling_designs: tuple = ("replica", "switchback")
    block_s: float = 30.0
    burn_in_s: float = 5.0
    sb_burn_ins: tuple = (0.0, 5.0, 10.0, 15.0)
    L: int | None = None
    L_factors: tuple = (0.1, 0.3, 1.0, 3.0)
    n_batches: int = 20
    alpha_batches: int = 50
    reps: int = 10
    truth_seeds: int = 8
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
            return ABTest(factor="routing", control=self.routing_control, treatment=self.routing_treatment,
                          design=design, p=self.p, block_s=self.block_s, alternate=True, policy=self.routing_policy,
                          router=self.routing_control)
        if factor == "scheduling":
            return ABTest(factor="scheduling", control=self.scheduling_control, treatment=self.scheduling_treatment,
                          design=design, p=self.p, block_s=self.block_s, alternate=True, policy=self.scheduling_control,
                          router=self.scheduling_router)
        raise ValueError(f"factor: {factor!r} not in ('routing', 'scheduling')")

    def designs(self) -> list[tuple[str, str]]:
        """Every (factor, design) the study runs."""
        return [("routing", d) for d in self.routing_designs] + [("scheduling", d) for d in self.scheduling_designs]

    def validate(self) -> ASRStudyConfig:
        """Check every parameter before any simulation (errors name the parameter)."""
        bad = [w for w in self.workloads if w not in ("librispeech", "uniform", "drift", "commonvoice_id", "mix")]
        if bad or not self.workloads:
            raise ValueError(f"workloads: {bad or '()'} not allowed; use librispeech, uniform, drift, "
                             "commonvoice_id, mix")
        if not (isinstance(self.load, (int, float)) and 0 < self.load < 1):
            raise ValueError(f"load: offered load must be in (0, 1) of fleet capacity, got {self.load!r}")
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
            raise ValueError(f"sb_burn_ins: every burn-in must be in [0, block_s={self.block_s}), got "
                             f"{self.sb_burn_ins!r}")
        if self.L is not None and (not isinstance(self.L, (int, np.integer)) or isinstance(self.L, bool)
                                   or self.L <= 0):
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
            lam = self.total_rate(w)
            Lmax = max(self.L_for(lam, f) for f in (*self.L_factors, 1.0))
            n_meas = self.n_requests - self.warmup_s * lam
            if n_meas < 2 * Lmax + 2 * self.n_batches:
                raise ValueError(
                    f"n_requests: {self.n_requests} requests leave {n_meas:.0f} after the warm-up on {w}, too few for "
                    f"a DQ horizon of {Lmax} requests (need >= 2 L); raise n_requests or lower L / L_factors")
            if self.n_requests / lam < 4 * self.block_s and any(d == "switchback" for _, d in self.designs()):
                raise ValueError(f"block_s: a run of {self.n_requests / lam:.0f} s on {w} holds fewer than 4 "
                                 f"switchback blocks of {self.block_s} s; lower block_s or raise n_requests")
        return self

    def total_rate(self, workload: str) -> float:
        """Total arrival rate (req/s) of the fleet on ``workload``."""
        from asrsched.sim.fleet import replica_capacity

        return float(self.load) * self.n_replicas * replica_capacity(workload, service=self.service_model(),
                                                                     max_num_seqs=self.max_num_seqs)

    def L_for(self, lam: float, factor: float = 1.0) -> int:
        """DQ horizon (requests) at ``factor`` x the headline ``L``."""
        L0 = int(self.L) if self.L is not None else default_L(lam)
        return max(1, int(round(factor * L0)))

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


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=4).digest(), "little")


# ----------------------------------------------------------------------------- estimators on one run

def _ci(name: str, value: float, batches: np.ndarray, level: float = 0.95) -> Estimate:
    b = np.asarray(batches, float)
    b = b[np.isfinite(b)]
    if b.size >= 2:
        se = float(b.std(ddof=1) / math.sqrt(b.size))
        h = float(stats.t.ppf(0.5 + level / 2, b.size - 1)) * se
    else:
        se = h = float("nan")
    return Estimate(name, float(value), se, float(value - h), float(value + h), int(b.size), None, b)


def _qdiff(w: np.ndarray, z: np.ndarray, q: float = 0.9) -> float:
    t = z == 1
    if t.all() or not t.any():
        return float("nan")
    return float(np.quantile(w[t], q) - np.quantile(w[~t], q))


def quantile_estimate(traj: Trajectory, name: str, q: float = 0.9, burn_in: float = 0.0,
                      n_batches: int = 20) -> Estimate:
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
    return _ci(name, _qdiff(w, z, q), np.array(bats, float))


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
    for metric in METRICS:
        tr = res.trajectory(metric)
        ll = littles_law(tr)
        little.append(dict(metric=metric, rel_gap=ll["rel_gap"], time_avg_n=ll["time_avg_n"], lam_w=ll["lam_w"]))
        base = dict(metric=metric, L=np.nan, L_factor=np.nan, burn_in=np.nan, headline=True)
        if design == "bernoulli":
            rows.append(_row(naive(tr, nb), stat="mean", **base))
            rows.append(_row(quantile_estimate(tr, "naive", n_batches=nb), stat="p90", **base))
            trc = p90_cost_trajectory(tr)
            for f in sorted(set((*cfg.L_factors, 1.0))):
                L = cfg.L_for(tr.lam, f)
                kw = dict(metric=metric, L=L, L_factor=f, headline=f == 1.0)
                for stat, t in (("mean", tr), ("p90", trc)):
                    a = mixed_dq(t, L, alpha="batch", n_batches=cfg.alpha_batches).alpha
                    rows.append(_row(qdq(t, L, nb), stat=stat, **kw))
                    rows.append(_row(wdq(t, L, nb), stat=stat, **kw))
                    rows.append(_row(mixed_dq(t, L, alpha=a, n_batches=nb), stat=stat, **kw))
        elif design in ("group", "replica"):
            rows.append(_row(group(tr, nb), stat="mean", **base))
            rows.append(_row(quantile_estimate(tr, "group", n_batches=nb), stat="p90", **base))
        elif design == "switchback":
            for b in sorted(set((*cfg.sb_burn_ins, cfg.burn_in_s))):
                kw = dict(base, burn_in=float(b), headline=b == cfg.burn_in_s)
                rows.append(_row(switchback(tr, b, nb), stat="mean", **kw))
                rows.append(_row(quantile_estimate(tr, "switchback", burn_in=b, n_batches=nb), stat="p90", **kw))
    return rows, little


# ----------------------------------------------------------------------------- tasks

def run_replication(workload: str, rep: int, factor: str, design: str, study: dict) -> dict:
    """One A/B experiment (one design, one replication): estimate rows and Little's-law checks."""
    cfg = ASRStudyConfig.from_dict(study)
    t0 = time.perf_counter()
    svc = cfg.service_model()
    tr, lam = cluster_trace(workload, n_replicas=cfg.n_replicas, load=cfg.load, n_requests=cfg.n_requests,
                            seed=_seed(cfg.seed, workload, "rep", rep), service=svc, max_num_seqs=cfg.max_num_seqs)
    res = run_experiment(tr, cfg.test(factor, design), n_replicas=cfg.n_replicas, service=svc,
                         max_num_seqs=cfg.max_num_seqs, seed=_seed(cfg.seed, workload, "rep", rep, factor, design),
                         warmup_s=cfg.warmup_s, lam=lam)
    rows, little = estimate_run(res, cfg)
    share = float(res.measured["z"].mean())
    for r in rows + little:
        r.update(workload=workload, rep=rep, factor=factor, design=design)
    for r in little:
        r["treated_share"] = share
    return {"rows": rows, "little": little, "seconds": time.perf_counter() - t0}


def run_truth(workload: str, router: str, policy: str, k: int, study: dict) -> dict:
    """One full run of a fleet setting (router, policy) on truth trace ``k``: mean/P90 of E2EL and TTFT."""
    cfg = ASRStudyConfig.from_dict(study)
    t0 = time.perf_counter()
    svc = cfg.service_model()
    tr, lam = cluster_trace(workload, n_replicas=cfg.n_replicas, load=cfg.load, n_requests=cfg.n_requests,
                            seed=_seed(cfg.seed, workload, "truth", k), service=svc, max_num_seqs=cfg.max_num_seqs)
    res = run_cluster(tr, n_replicas=cfg.n_replicas, router=router, policy=policy, service=svc,
                      max_num_seqs=cfg.max_num_seqs, seed=_seed(cfg.seed, workload, "truth", k), warmup_s=cfg.warmup_s)
    res.lam = lam
    m = res.measured
    out = {"workload": workload, "router": router, "policy": policy, "k": k, "lam": lam,
           "n": int(len(m)), "seconds": 0.0}
    for metric in METRICS:
        v = m[metric].to_numpy(float)
        out[f"mean_{metric}"] = float(v.mean())
        out[f"p90_{metric}"] = float(np.quantile(v, 0.9))
        out[f"little_gap_{metric}"] = littles_law(res.trajectory(metric))["rel_gap"]
    out["seconds"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------- study

@dataclass
class ASRStudyResult:
    """Raw outputs of :func:`run_study` (long tables) and its wall time."""

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
            for metric in METRICS:
                for stat in STATS:
                    col = f"{stat}_{metric}"
                    d = (tt[col] - c[col]).dropna()
                    out.append({"workload": w, "factor": factor, "metric": metric, "stat": stat,
                                "control": f"{rc}|{pc}", "treatment": f"{rt}|{pt}",
                                "value_control": float(c[col].mean()), "value_treatment": float(tt[col].mean()),
                                "gte": float(d.mean()), "gte_se": float(d.std(ddof=1) / np.sqrt(len(d)))
                                if len(d) > 1 else np.nan, "truth_runs": int(len(d))})
    df = pd.DataFrame(out)
    df["gte_pct"] = 100 * df["gte"] / df["value_control"]
    return df


def run_study(cfg: ASRStudyConfig, *, n_jobs: int | None = None, address=None, cache_dir=None,
              progress: bool = True) -> ASRStudyResult:
    """Run every (workload, design, replication) experiment and the ground-truth runs.

    Validated first (nothing runs on bad input). Tasks fan out with
    :func:`asrsched.sim.parallel.map_tasks`; with ``cache_dir`` each finished task is stored as
    JSON at once, so an interrupted study resumes where it stopped.
    """
    cfg.validate()
    sd = cfg.to_dict()
    t0 = time.perf_counter()
    settings = []
    for factor in {f for f, _ in cfg.designs()}:
        t = cfg.test(factor)
        for arm in ("control", "treatment"):
            if t.setting(arm) not in settings:
                settings.append(t.setting(arm))
    ttasks = [dict(workload=w, router=r, policy=p, k=k, study=sd) for w in cfg.workloads for r, p in sorted(settings)
              for k in range(cfg.truth_seeds)]
    etasks = [dict(workload=w, rep=r, factor=f, design=d, study=sd) for w in cfg.workloads for r in range(cfg.reps)
              for f, d in cfg.designs()]
    tasks = [("truth", t) for t in ttasks] + [("rep", t) for t in etasks]
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)

    def path(kind, t):
        key = hashlib.sha1(json.dumps({"kind": kind, **t}, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return cache / f"abasr-{kind}-{key}.json"

    results = {"truth": [], "rep": []}
    todo = []
    for kind, t in tasks:
        p = path(kind, t) if cache else None
        if p is not None and p.exists():
            results[kind].append(json.loads(p.read_text()))
        else:
            todo.append(dict(kind=kind, task=t))
    for task, r in map_tasks(_dispatch, todo, n_jobs=n_jobs, address=address, progress=progress,
                             desc="ASR A/B runs"):
        if cache:
            tmp = path(task["kind"], task["task"]).with_suffix(".tmp")
            tmp.write_text(json.dumps(r, default=_json_default))
            tmp.rename(path(task["kind"], task["task"]))
        results[task["kind"]].append(r)
    truth_runs = pd.DataFrame(results["truth"])
    est = pd.DataFrame([row for r in results["rep"] for row in r["rows"]])
    little = pd.DataFrame([row for r in results["rep"] for row in r["little"]])
    order = {w: i for i, w in enumerate(cfg.workloads)}
    est = est.sort_values(["workload", "factor", "design", "rep", "metric"], key=lambda s: s.map(order)
                          if s.name == "workload" else s, kind="stable").reset_index(drop=True)
    return ASRStudyResult(cfg, est, truth_runs, _truth_table(truth_runs, cfg), little, time.perf_counter() - t0)


def _dispatch(kind: str, task: dict) -> dict:
    return run_truth(**task) if kind == "truth" else run_replication(**task)


# ----------------------------------------------------------------------------- tables

_KEYS = ["workload", "factor", "metric", "stat"]


def summary_table(res: ASRStudyResult) -> pd.DataFrame:
    """Per workload x factor x design x estimator x metric x statistic: truth, bias, sd, RMSE, MSE, coverage.

    ``bias_pct``/``rmse_pct`` are relative to ``|truth|``; ``recovered_pct`` is the share of
    the true effect the estimator recovers on average (100 = unbiased). ``coverage`` is the
    share of replications whose 95 % batch-means CI holds the truth.
    """
    e = res.estimates
    e = e[e["headline"].astype(bool)]
    tt = res.truth.set_index(_KEYS)
    rows = []
    for (w, f, d, name, m, s), g in e.groupby(["workload", "factor", "design", "estimator", "metric", "stat"],
                                                sort=False):
        t = tt.loc[(w, f, m, s)]
        gte = float(t["gte"])
        v = g["estimate"].to_numpy(float)
        v = v[np.isfinite(v)]
        if not v.size:
            continue
        lo, hi = g["ci_lo"].to_numpy(float), g["ci_hi"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        r = {"workload": w, "factor": f, "design": d, "estimator": name, "metric": m, "stat": s,
             "truth": gte, "truth_se": float(t["gte_se"]), "mean": float(v.mean()), "bias": float(v.mean() - gte),
             "sd": float(v.std(ddof=1)) if v.size > 1 else np.nan,
             "mse": float(np.mean((v - gte) ** 2)), "reps": int(v.size),
             "coverage": float(np.mean((lo[ok] <= gte) & (gte <= hi[ok]))) if ok.any() else np.nan,
             "alpha": float(np.nanmean(g["alpha"].astype(float))) if g["alpha"].notna().any() else np.nan}
        r["rmse"] = math.sqrt(r["mse"])
        r["bias_se"] = r["sd"] / math.sqrt(v.size) if v.size > 1 else np.nan
        den = abs(gte) if abs(gte) > 0 else np.nan
        r["bias_pct"] = 100 * r["bias"] / den
        r["rmse_pct"] = 100 * r["rmse"] / den
        r["recovered_pct"] = 100 * r["mean"] / gte if gte != 0 else np.nan
        rows.append(r)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    out["_e"] = out["estimator"].map({n: i for i, n in enumerate(ESTIMATOR_ORDER)})
    out["_f"] = out["factor"].map({"routing": 0, "scheduling": 1})
    out["_m"] = out["metric"].map({"e2el": 0, "ttft": 1}) * 2 + out["stat"].map({"mean": 0, "p90": 1})
    out = out.sort_values(["_w", "_f", "_m", "_e"]).drop(columns=["_w", "_e", "_f", "_m"]).reset_index(drop=True)
    return out


def truth_table(res: ASRStudyResult) -> pd.DataFrame:
    """Ground truth per workload x factor x metric: control, treatment, GTE (s and %), its SE."""
    return res.truth.copy()


def best_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload x factor x metric x statistic: the lowest-MSE estimator, next to naive and the truth."""
    out = []
    for keys, g in summary.groupby(_KEYS, sort=False):
        b = g.loc[g["mse"].idxmin()]
        nv = g[g.estimator.isin(["naive"])]
        row = dict(zip(_KEYS, keys), truth=b["truth"], truth_se=b["truth_se"], best=f"{b.design}/{b.estimator}",
                   best_rmse=b["rmse"], best_bias=b["bias"], best_sd=b["sd"])
        if len(nv):
            row.update(naive_recovered_pct=float(nv["recovered_pct"].iloc[0]), naive_rmse=float(nv["rmse"].iloc[0]))
        for name in ("mixed_dq", "wdq", "qdq", "group", "switchback"):
            s = g[g.estimator == name]
            if len(s):
                row[f"{name}_rmse"] = float(s["rmse"].iloc[0])
        out.append(row)
    return pd.DataFrame(out)


def tail_table(summary: pd.DataFrame, res: ASRStudyResult | None = None) -> pd.DataFrame:
    """The DQ family (Bernoulli routing test) for mean vs P90: where Little's law stops helping.

    ``predicted_mixed_bias`` = ``(1 - alpha) x (mean truth - P90 truth)`` for the P90 rows: the
    part of mixed DQ's bias that comes from its queue-length term estimating the mean effect.
    With ``res``, ``corr_wq`` is the correlation of wDQ and qDQ across experiments (Little's law
    makes it ~1 for means; it is what lets the minimum-variance weight cancel noise without
    touching the signal) and ``sd_vs_wdq`` the estimator's sd over wDQ's.
    """
    s = summary[(summary.design == "bernoulli") & summary.estimator.isin(["naive", "qdq", "wdq", "mixed_dq"])]
    cols = ["workload", "metric", "stat", "estimator", "truth", "mean", "recovered_pct", "bias", "sd", "rmse",
            "coverage", "alpha"]
    t = s[cols].copy()
    mean_truth = s[s.stat == "mean"].groupby(["workload", "metric"])["truth"].first()
    t["mean_effect"] = [mean_truth.get((w, m), np.nan) for w, m in zip(t.workload, t.metric)]
    t["predicted_mixed_bias"] = np.where((t.stat == "p90") & (t.estimator == "mixed_dq"),
                                         (1 - t["alpha"]) * (t["mean_effect"] - t["truth"]), np.nan)
    wsd = s[s.estimator == "wdq"].set_index(["workload", "metric", "stat"])["sd"]
    t["sd_vs_wdq"] = [r.sd / wsd.get((r.workload, r.metric, r.stat), np.nan) for r in t.itertuples()]
    if res is not None:
        e = res.estimates
        e = e[(e.design == "bernoulli") & e.headline.astype(bool) & e.estimator.isin(["wdq", "qdq"])]
        corr = {}
        for k, g in e.groupby(["workload", "metric", "stat"]):
            p = g.pivot_table(index="rep", columns="estimator", values="estimate")
            corr[k] = float(np.corrcoef(p["wdq"], p["qdq"])[0, 1]) if len(p) > 2 else np.nan
        t["corr_wq"] = [corr.get((r.workload, r.metric, r.stat), np.nan) for r in t.itertuples()]
    return t.reset_index(drop=True)


def burn_in_table(res: ASRStudyResult) -> pd.DataFrame:
    """Switchback estimators at every burn-in (both tests): bias, sd, RMSE, coverage."""
    e = res.estimates
    if "burn_in" not in e:
        return pd.DataFrame()
    e = e[e.estimator.eq("switchback") & e["burn_in"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, f, m, s, b), g in e.groupby(["workload", "factor", "metric", "stat", "burn_in"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, f, m, s)])
        rows.append({"workload": w, "factor": f, "metric": m, "stat": s, "burn_in_s": b, "mean": v.mean(),
                     "bias": v.mean() - gte, "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                     "coverage": float(np.mean((g.ci_lo <= gte) & (gte <= g.ci_hi)))})
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    return out.sort_values(["_w", "factor", "metric", "stat", "burn_in_s"]).drop(columns="_w").reset_index(drop=True)


def ablation_table(res: ASRStudyResult) -> pd.DataFrame:
    """Bias, sd and RMSE of qDQ, wDQ and mixed DQ at every horizon ``L`` (Bernoulli routing test)."""
    e = res.estimates
    e = e[e.estimator.isin(["qdq", "wdq", "mixed_dq"]) & e["L"].notna()]
    tt = res.truth.set_index(_KEYS)["gte"]
    rows = []
    for (w, m, s, name, L), g in e.groupby(["workload", "metric", "stat", "estimator", "L"], sort=False):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[(w, "routing", m, s)])
        rows.append({"workload": w, "metric": m, "stat": s, "estimator": name, "L": int(L),
                     "L_factor": float(g["L_factor"].iloc[0]), "mean": v.mean(), "bias": v.mean() - gte,
                     "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2)))})
    out = pd.DataFrame(rows)
    out["_w"] = out["workload"].map({w: i for i, w in enumerate(res.config.workloads)})
    return out.sort_values(["_w", "metric", "stat", "estimator", "L"]).drop(columns="_w").reset_index(drop=True)


# ----------------------------------------------------------------------------- recommendation

def _fmt_s(x: float) -> str:
    return f"{x * 1e3:+.0f} ms" if abs(x) < 1 else f"{x:+.2f} s"


def _abs_s(x: float) -> str:
    return _fmt_s(abs(x))[1:]


def _how(design: str, estimator: str, cfg: ASRStudyConfig) -> str:
    """How an operator runs and analyses a (design, estimator) pair, in words."""
    if design == "switchback":
        return (f"a switchback test (the whole fleet alternates every {cfg.block_s:g} s, first "
                f"{cfg.burn_in_s:g} s of each block dropped)")
    if design == "group":
        return "a replica-split test (each arm routes its requests over its own half of the fleet)"
    if design == "replica":
        return "replica-level randomisation (a random subset of replicas runs the new policy)"
    names = {"naive": "the naive difference of arm means", "qdq": "qDQ", "wdq": "wDQ", "mixed_dq": "mixed DQ"}
    return f"a request-level randomised test analysed with {names.get(estimator, estimator)}"


def recommendation(res: ASRStudyResult, summary: pd.DataFrame | None = None) -> str:
    """A plain-language recommendation for an operator, derived from the study's numbers (markdown)."""
    s = summary if summary is not None else summary_table(res)
    cfg = res.config
    lines = []
    verdict = {}
    for factor in ("routing", "scheduling"):
        sf = s[s.factor == factor]
        if sf.empty:
            continue
        t = cfg.test(factor)
        fixed = f"every replica {t.policy.upper()}" if factor == "routing" else f"router {t.router}"
        lines.append(f"**{factor.capitalize()} test: {t.control} → {t.treatment} ({fixed}; {cfg.n_replicas} "
                     f"replicas, load {cfg.load:g}, {cfg.reps} experiments of {cfg.n_requests} requests per "
                     f"design).**")
        cells = []
        for (m, st), g in sf.groupby(["metric", "stat"], sort=False):
            tr = res.truth[(res.truth.factor == factor) & (res.truth.metric == m) & (res.truth.stat == st)]
            eff = ", ".join(f"{r.workload} {_fmt_s(r.gte)} ({r.gte_pct:+.0f} %)" for r in tr.itertuples())
            wins = g.loc[g.groupby("workload", sort=False)["mse"].idxmin()]
            count = (wins.design + "/" + wins.estimator).value_counts()
            d, e = count.index[0].split("/")
            sel = g[(g.design == d) & (g.estimator == e)]
            rel = float(np.median(sel["rmse_pct"]))
            cells.append((m, st, d, e, rel))
            line = (f"- {_label(m, st)}: true effect {eff}. Lowest MSE: **{e}** ({d} design) on {count.iloc[0]} of "
                    f"{g.workload.nunique()} workloads (RMSE " + ", ".join(_abs_s(r.rmse) for r in sel.itertuples())
                    + f", {rel:.0f} % of the effect).")
            nv = g[g.estimator == "naive"]
            if len(nv):
                line += (" The naive request-level comparison recovers "
                         + ", ".join(f"{r.recovered_pct:.0f} %" for r in nv.itertuples()) + " of the true effect"
                         + (" (negative: the wrong sign)" if (nv.recovered_pct < 0).any() else "") + ".")
            if not any(abs(r.gte) > 3 * r.gte_se for r in tr.itertuples() if np.isfinite(r.gte_se)):
                line += " The true effect is within noise of zero: no design can detect it here."
            elif rel > 50:
                line += " Even the best design's error exceeds half the effect at this experiment length."
            lines.append(line)
        verdict[factor] = cells
        if factor == "routing":
            tl = tail_table(s)
            mp = tl[(tl.stat == "p90") & (tl.estimator == "mixed_dq")]
            wp = tl[(tl.stat == "p90") & (tl.estimator == "wdq")]
            mm = tl[(tl.stat == "mean") & (tl.estimator == "mixed_dq")]
            if len(mp) and len(wp) and len(mm):
                lines.append(
                    f"- Tail metrics break Little's law. For means, wDQ and qDQ estimate the same quantity, so mixed "
                    f"DQ's weight (median α = {np.nanmedian(mm.alpha):.2f}) only trades noise. For P90, qDQ still "
                    f"estimates the *mean* effect; the minimum-variance weight (median α = "
                    f"{np.nanmedian(mp.alpha):.2f}) then cancels the fluctuation the two share, and the signal with "
                    f"it: mixed DQ on P90 is {np.median(wp.sd.to_numpy() / mp.sd.to_numpy()):.0f}x less spread "
                    f"than wDQ but recovers {np.median(mp.recovered_pct):.0f} % of the P90 effect (median), and its "
                    f"95 % interval holds the truth in {100 * mp.coverage.mean():.0f} % of experiments "
                    "— precise and wrong.")
    lines.append("")
    lines.append("**For an operator:**")
    for factor, what in (("routing", "a routing change"), ("scheduling", "a per-replica scheduling change")):
        cells = verdict.get(factor)
        if not cells:
            continue
        for stat, lab in (("mean", "mean latency"), ("p90", "P90 latency")):
            c = [x for x in cells if x[1] == stat]
            if not c:
                continue
            top = pd.Series([f"{d}/{e}" for _, _, d, e, _ in c]).value_counts()
            d, e = top.index[0].split("/")
            rel = np.median([r for *_, r in c])
            line = (f"- For {what} judged on {lab}: run {_how(d, e, cfg)} — the lowest error in {top.iloc[0]} of "
                    f"{len(c)} metric cells (median RMSE {rel:.0f} % of the effect).")
            if factor == "routing" and stat == "mean":
                line += (" Do not read the naive difference between request-level arms: both arms share the "
                         "replicas, so each arm's routing changes the queues the other arm sees.")
            if factor == "scheduling" and stat == "mean":
                line += (" Request-level randomisation is not available for it (one queue orders both arms), and "
                         f"with {cfg.n_replicas} replicas the replica-level design has only "
                         f"{int(round(cfg.p * cfg.n_replicas))} treated units.")
            lines.append(line)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- figures

def _wl_subplots(workloads, **kw):
    return make_subplots(rows=1, cols=len(workloads), subplot_titles=list(workloads), **kw)


def fig_truth(res: ASRStudyResult, metric: str = "e2el", stat: str = "mean") -> go.Figure:
    """Ground truth: each setting's metric per workload (control vs treatment of both tests)."""
    t = res.truth[(res.truth.metric == metric) & (res.truth.stat == stat)]
    fig = go.Figure()
    seen = set()
    names, vals = [], []
    for r in t.itertuples():
        for arm in ("control", "treatment"):
            setting = getattr(r, arm)
            key = (r.workload, setting)
            if key in seen:
                continue
            seen.add(key)
            names.append((r.workload, setting))
            vals.append(getattr(r, f"value_{arm}"))
    df = pd.DataFrame(names, columns=["workload", "setting"]).assign(value=vals)
    for setting, g in df.groupby("setting", sort=False):
        router, policy = setting.split("|")
        fig.add_trace(go.Bar(x=g.workload, y=g.value, name=f"router {router}, {policy.upper()}",
                             marker_color=policy_color(router if router != "random" or policy == "fcfs" else policy),
                             marker_pattern_shape="" if policy == "fcfs" else "/"))
    rt = t[t.factor == "routing"]
    st = t[t.factor == "scheduling"]
    parts = []
    if len(rt):
        parts.append(f"{rt.treatment.iloc[0].split('|')[0]} routing {rt.gte_pct.mean():+.0f} %")
    if len(st):
        parts.append(f"{st.treatment.iloc[0].split('|')[1].upper()} {st.gte_pct.mean():+.0f} %")
    fig.update_layout(barmode="group", title=f"Ground truth, {_label(metric, stat)}: " + ", ".join(parts)
                      + " (mean over workloads)", yaxis_title=f"{_label(metric, stat)} (s)", xaxis_title="workload",
                      height=460)
    return fig


_DQ = ("qdq", "wdq", "mixed_dq")
_SHORT = {"naive": "naive", "group": "group", "switchback": "switchback", "qdq": "qDQ", "wdq": "wDQ",
          "mixed_dq": "mixed DQ"}


def fig_estimates(res: ASRStudyResult, factor: str = "routing", metric: str = "e2el", stat: str = "mean",
                  summary: pd.DataFrame | None = None) -> go.Figure:
    """Every experiment's estimate per design/estimator (one column per workload), truth as a dashed line.

    The DQ family gets its own row (its spread is often 10-100x the others'), so the
    design-based estimators stay readable.
    """
    s = summary if summary is not None else summary_table(res)
    e = res.estimates
    e = e[(e.factor == factor) & (e.metric == metric) & (e.stat == stat) & e["headline"].astype(bool)]
    wls = [w for w in res.config.workloads if w in set(e.workload)]
    has_dq = e.estimator.isin(_DQ).any()
    rows = 2 if has_dq and (~e.estimator.isin(_DQ)).any() else 1
    fig = make_subplots(rows=rows, cols=len(wls), shared_yaxes=True, vertical_spacing=0.12,
                        subplot_titles=list(wls) + ([""] * len(wls) if rows == 2 else []))
    shown = set()
    for j, w in enumerate(wls, start=1):
        ew = e[e.workload == w]
        tr = res.truth[(res.truth.workload == w) & (res.truth.factor == factor) & (res.truth.metric == metric)
                       & (res.truth.stat == stat)]
        cats: dict[int, list] = {1: [], 2: []}
        for (d, name), g in ew.groupby(["design", "estimator"], sort=False):
            row = 2 if rows == 2 and name in _DQ else 1
            lab = "replica" if d == "replica" else _SHORT.get(name, name)
            cats[row].append(lab)
            fig.add_trace(go.Box(x=[lab] * len(g), y=g.estimate, name=f"{_SHORT.get(name, name)} ({d})",
                                 legendgroup=name, showlegend=name not in shown, boxpoints="all", jitter=0.4,
                                 pointpos=0, marker=dict(color=policy_color(name), size=5),
                                 line=dict(color=policy_color(name))), row=row, col=j)
            shown.add(name)
        for row in range(1, rows + 1):
            if len(tr) and cats[row]:
                fig.add_trace(go.Scatter(x=cats[row], y=[float(tr.gte.iloc[0])] * len(cats[row]), mode="lines",
                                         name="truth (GTE)", legendgroup="truth", showlegend="truth" not in shown,
                                         line=dict(color=policy_color("truth"), width=3, dash="dash")),
                              row=row, col=j)
                shown.add("truth")
            fig.add_hline(y=0, line=dict(color="#888", dash="dot", width=1), row=row, col=j)
    lab = f"effect on {_label(metric, stat)} (s)"
    fig.update_yaxes(title_text=lab, row=1, col=1)
    if rows == 2:
        fig.update_yaxes(title_text="DQ family: " + lab, row=2, col=1)
    ss = s[(s.factor == factor) & (s.metric == metric) & (s.stat == stat)]
    title = f"{factor.capitalize()} A/B, {_label(metric, stat)}"
    if len(ss):
        best = ss.loc[ss.groupby("workload", sort=False)["mse"].idxmin()]
        top = best.estimator.value_counts()
        name = "replica design" if top.index[0] == "group" and factor == "scheduling" else _SHORT[top.index[0]]
        title += f": {name} has the lowest MSE on {top.iloc[0]} of {len(best)} workloads"
        nv = ss[ss.estimator == "naive"]
        if len(nv) and stat == "mean":
            title += f"; naive recovers {nv.recovered_pct.mean():.0f} % of the effect"
    fig.update_layout(title=title, height=560 if rows == 1 else 760, showlegend=True)
    return fig


def fig_rmse(summary: pd.DataFrame, factor: str = "routing") -> go.Figure:
    """RMSE relative to |truth| per design/estimator, grouped by metric, one panel per workload."""
    s = summary[summary.factor == factor].copy()
    s["cell"] = s.metric.map(_MLABEL) + " " + s.stat
    wls = list(dict.fromkeys(s.workload))
    fig = _wl_subplots(wls, shared_yaxes=True)
    for j, w in enumerate(wls, start=1):
        sw = s[s.workload == w]
        for (d, name), g in sw.groupby(["design", "estimator"], sort=False):
            fig.add_trace(go.Bar(x=g.cell, y=g.rmse_pct, name=f"{name} ({d})", legendgroup=f"{name}{d}",
                                 showlegend=j == 1, marker_color=policy_color(name),
                                 marker_pattern_shape="/" if d in ("group", "replica") else ""), row=1, col=j)
    fig.update_yaxes(type="log", tickvals=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000])
    fig.update_yaxes(title_text="RMSE (% of |true effect|)", row=1, col=1)
    best = s.loc[s.groupby(["workload", "cell"], sort=False)["mse"].idxmin()]
    top = best.estimator.value_counts()
    fig.update_layout(barmode="group", height=520,
                      title=f"{factor.capitalize()} A/B: {top.index[0]} has the lowest error in {top.iloc[0]} of "
                            f"{len(best)} workload × metric cells")
    return fig


def fig_tail(summary: pd.DataFrame) -> go.Figure:
    """Share of the true effect that wDQ, qDQ and mixed DQ recover, for means vs P90 (Bernoulli routing test).

    Bars: mean estimate / truth (1 = unbiased); error bars: the standard error of that mean over the
    experiments (sd / sqrt(reps)), relative to the truth. The axis is clipped to [-3, 3].
    """
    t = tail_table(summary)
    t = t[t.estimator.isin(["qdq", "wdq", "mixed_dq"])].copy()
    t["cell"] = t.workload + "<br>" + t.metric.map(_MLABEL)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["mean (Little's law holds)", "P90 (no Little's law)"],
                        shared_yaxes=True)
    for j, st in enumerate(STATS, start=1):
        ts = t[t.stat == st]
        for name, g in ts.groupby("estimator", sort=False):
            den = g.truth.abs().replace(0, np.nan)
            rec = g["mean"] / g.truth
            fig.add_trace(go.Bar(x=g.cell, y=rec.clip(-3, 3), name=_SHORT[name], legendgroup=name, showlegend=j == 1,
                                 marker_color=policy_color(name),
                                 error_y=dict(type="data", array=(g.sd / den / np.sqrt(_reps(summary))).clip(upper=3),
                                              visible=True,
                                              thickness=1.2, width=3)), row=1, col=j)
        fig.add_hline(y=1, line=dict(color=policy_color("truth"), dash="dash", width=2), row=1, col=j)
        fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=1, col=j)
    fig.update_yaxes(range=[-3.2, 3.2], title_text="mean estimate / true effect (1 = unbiased)", row=1, col=1)
    mp = t[(t.stat == "p90") & (t.estimator == "mixed_dq")]
    wp = t[(t.stat == "p90") & (t.estimator == "wdq")]
    title = "Mixed DQ on P90"
    if len(mp) and len(wp):
        title += (f": {np.median(wp.sd.to_numpy() / mp.sd.to_numpy()):.0f}x less spread than wDQ but recovers "
                  f"{100 * np.median(mp['mean'] / mp.truth):.0f} % of the effect (median); CI coverage "
                  f"{100 * mp.coverage.mean():.0f} %")
    fig.update_layout(barmode="group", title=title, height=520)
    return fig


def _reps(summary: pd.DataFrame) -> int:
    return int(summary["reps"].max()) if len(summary) else 0


def fig_ablation(ab: pd.DataFrame, metric: str = "e2el", stat: str = "mean") -> go.Figure:
    """RMSE of qDQ, wDQ and mixed DQ against the horizon L (one panel per workload)."""
    a = ab[(ab.metric == metric) & (ab.stat == stat)]
    wls = list(dict.fromkeys(a.workload))
    fig = _wl_subplots(wls, shared_yaxes=True)
    for j, w in enumerate(wls, start=1):
        for name, g in a[a.workload == w].groupby("estimator", sort=False):
            fig.add_trace(go.Scatter(x=g.L_factor, y=g.rmse, mode="lines+markers", name=_SHORT[name], legendgroup=name,
                                     showlegend=j == 1, line=dict(color=policy_color(name), width=2.5)), row=1, col=j)
        fig.update_xaxes(title_text="L / default L", type="log", row=1, col=j)
    fig.update_yaxes(type="log", tickvals=[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100])
    fig.update_yaxes(title_text=f"RMSE of the {_label(metric, stat)} effect (s)", row=1, col=1)
    best = a.loc[a.groupby(["workload", "estimator"], sort=False)["rmse"].idxmin()]
    title = f"DQ horizon, {_label(metric, stat)}: best L / default " + ", ".join(
        f"{w} {g.loc[g.rmse.idxmin(), 'L_factor']:g}" for w, g in best.groupby("workload", sort=False))
    fig.update_layout(title=title, height=480)
    return fig


# ----------------------------------------------------------------------------- explorer

def ab_explorer(cfg: ASRStudyConfig | None = None, *, workload: str = "librispeech", reps: int = 4,
                n_requests: int = 8000, n_jobs: int = 1):
    """Sliders for fleet size, load, p and L over a small study of the routing and scheduling tests.

    Each change re-runs :func:`run_study` (the batch path) on one workload with ``reps``
    replications and shows every estimate against the truth. The first view is computed once
    when the panel is built; nothing waits for input (safe under papermill).
    """
    import ipywidgets as W

    base = (cfg or ASRStudyConfig()).replace(workloads=(workload,), reps=reps, truth_seeds=reps,
                                             n_requests=n_requests, L_factors=(1.0,))
    n_w = W.IntSlider(value=base.n_replicas, min=2, max=12, step=1, description="replicas", continuous_update=False)
    load_w = W.FloatSlider(value=base.load, min=0.5, max=0.98, step=0.01, description="load", continuous_update=False)
    p_w = W.FloatSlider(value=base.p, min=0.1, max=0.9, step=0.05, description="p", continuous_update=False)
    L_w = W.IntSlider(value=0, min=0, max=5000, step=50, description="L (0 = 30 s)", continuous_update=False)
    f_w = W.Dropdown(options=["routing", "scheduling"], value="routing", description="test")
    m_w = W.Dropdown(options=[("mean E2EL", ("e2el", "mean")), ("P90 E2EL", ("e2el", "p90")),
                              ("mean TTFT", ("ttft", "mean")), ("P90 TTFT", ("ttft", "p90"))],
                     value=("e2el", "mean"), description="metric")
    fig = go.FigureWidget()
    fig.update_layout(height=460, yaxis_title="estimated effect (s)")
    table = W.HTML()
    msg = W.HTML()
    state = {}

    def compute(*_):
        try:
            c = base.replace(n_replicas=int(n_w.value), load=float(load_w.value), p=float(p_w.value),
                             L=int(L_w.value) if L_w.value > 0 else None)
            lam = c.total_rate(workload)  # enough requests for 5 switchback blocks and a 2 L horizon
            span = c.warmup_s + max(5 * c.block_s, 2 * c.L_for(lam) / lam + 2 * c.n_batches / lam)
            c = c.replace(n_requests=max(int(n_requests), int(math.ceil(lam * span))))
            msg.value = f"<i>simulating {c.reps} experiments x {len(c.designs())} designs of {c.n_requests} requests</i>"
            state["res"] = run_study(c, n_jobs=n_jobs, progress=False)
            state["sum"] = summary_table(state["res"])
            msg.value = ""
        except ValueError as e:
            msg.value = f"<b style='color:#D55E00'>{e}</b>"
            return
        draw()

    def draw(*_):
        if "res" not in state:
            return
        metric, stat = m_w.value
        f = fig_estimates(state["res"], f_w.value, metric, stat, summary=state["sum"])
        with fig.batch_update():
            fig.data = []
            fig.add_traces(list(f.data))
            fig.layout = f.layout  # the whole layout: the figure has subplots (axes, domains, annotations)
            fig.layout.height = 460
        s = state["sum"]
        s = s[(s.factor == f_w.value) & (s.metric == metric) & (s.stat == stat)]
        table.value = s[["design", "estimator", "truth", "mean", "bias", "sd", "rmse"]].round(4).to_html(index=False)

    for w in (n_w, load_w, p_w, L_w):
        w.observe(compute, names="value")
    for w in (f_w, m_w):
        w.observe(draw, names="value")
    compute()
    return W.VBox([W.HBox([n_w, load_w, p_w]), W.HBox([L_w, f_w, m_w]), msg, fig, table])
