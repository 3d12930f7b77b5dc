"""The estimator study: scenarios x replications -> bias / standard deviation / MSE / coverage.

One *replication* of a scenario runs three independent experiments of the same length
(``n_requests`` jobs after warm-up) on the same system:

* a job-level Bernoulli(p) experiment -> naive, qDQ, wDQ, mixed DQ (and the L ablation:
  the DQ family at every ``L`` in ``L_factors * default L``);
* a group experiment (servers split in two groups, :mod:`.model`) -> group;
* a switchback experiment (blocks of ``block_len``, burn-in ``burn_in``) -> switchback;
  the ``"switchback"`` scenario runs one switchback experiment per block length in
  ``sb_blocks`` (burn-in 0 and 25 % of the block) to compare designs.

Scenarios that simulate the same system (:func:`shared_systems`; by default ``"switchback"``
is the homogeneous system) share one replication task and one set of truth runs: every
experiment is simulated once and gives both scenarios their rows (the same numbers).

The ground truth of a scenario comes from long separate runs of each policy everywhere
(``truth_seeds`` runs of ``truth_requests`` jobs per policy): ``GTE = W(treatment) -
W(control)`` with a batch-means standard error, also in its queue-length form
``(X_1 - X_0) / (N lam)`` (equal by Little's law). Optionally (``slope_h``) the slope
``dW(p)/dp`` of the mixed system at the experiment's p is measured from runs at
``p +- h``: this is what DQ estimates (Farias et al.), so ``GTE - slope`` is the part of
DQ's bias due to the curvature of W(p), and ``slope - E[DQ]`` the part due to truncation.

Beyond the study's scoring: :func:`~asrsched.abtest.full_run.run_wp_curve` / :func:`~asrsched.abtest.full_run.wp_table` measure W(p), the mixed
system's mean response time against the treatment fraction, whose chord is the GTE and whose
tangent at p is what DQ estimates; :func:`~asrsched.abtest.full_run.scenario_search` / :func:`~asrsched.abtest.full_run.search_table` look for where
mixed DQ's variance gain over the better single DQ is largest, over (lambda, policy pair, L,
queue-length cost definition), with bootstrap CIs; :func:`claims_table` gives each claim a
verdict with CIs. ``python -m asrsched.abtest.full_run --full --out figures/05_ab_estimators/full``
(:func:`~asrsched.abtest.full_run.main`) writes all of it with a ``run.json`` of provenance (:func:`~asrsched.abtest.full_run.write_full_run`);
notebook 05 reads it back with :func:`~asrsched.abtest.full_run.load_full_run`.

This module holds the scenarios and the tasks (:meth:`StudyConfig.plan`, run by :func:`asrsched.sim.parallel.run_study`); the scoring tables and claims
are :mod:`asrsched.abtest.study_report` (re-exported here), the W(p) curve, the scenario search
and the committed full run :mod:`asrsched.abtest.full_run`.

Every task is a plain function of plain arguments, fanned out with
:func:`asrsched.sim.parallel.run_study` (joblib processes locally, or Dask), seeded from
``(seed, scenario, replication, experiment)``; with ``cache_dir`` each finished task is
stored as JSON so an interrupted study resumes without recomputing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import (
    COSTS,
    default_L,
    dq_sweep,
    littles_law,
    naive,
    switchback,
)
from asrsched.abtest.estimators import group as group_estimator
from asrsched.abtest.model import SystemConfig, simulate_supermarket
from asrsched.abtest.study_report import (  # noqa: F401  (the study's tables, importable from here)
    ESTIMATOR_LABELS,
    ESTIMATOR_ORDER,
    MSE_CANDIDATES,
    ablation_table,
    claims_markdown,
    claims_table,
    coverage_table,
    lowest_mse,
    paired_estimates,
    summary_table,
    switchback_table,
)
from asrsched.core.stats import batch_mean_se
from asrsched.sim.parallel import StudyPlan, keep_freed_memory, task_seed

__all__ = [
    "SCENARIOS",
    "StudyConfig",
    "StudyResult",
    "scenario_config",
    "run_replication",
    "run_truth",
    "shared_systems",
    "summary_table",
    "ablation_table",
    "claims_table",
    "coverage_table",
    "switchback_table",
    "ESTIMATOR_ORDER",
    "claims_markdown",
    "ESTIMATOR_LABELS",
    "lowest_mse",
    "paired_estimates",
    "MSE_CANDIDATES",
]

#: scenario name -> one-line description (the system changes applied to the base config)
SCENARIOS = {
    "homogeneous": "N identical servers, exponential service (rate 1)",
    "heterogeneous": "half the servers at rate 0.9, half at 1.3 (alternating), exponential service",
    "nonstationary": "cyclic arrival rate lam*(1 + 0.3 sin(2 pi t / 500))",
    "delayed": "dispatcher sees queue lengths 1 mean service time late",
    "constant": "deterministic service times (1)",
    "pareto": "Pareto service times, tail index 2.5, mean 1",
    "switchback": "homogeneous system; switchback designs with several block lengths",
    "small_effect": "homogeneous system, control Power-of-2 vs treatment Power-of-3 (a small effect)",
}


def scenario_config(name: str, base: SystemConfig) -> SystemConfig:
    """The system of scenario ``name`` built on ``base`` (N, lam, policies, p, n_requests)."""
    if name not in SCENARIOS:
        raise ValueError(f"scenario: {name!r} not in {tuple(SCENARIOS)}")
    n = base.n_servers
    if name in ("homogeneous", "switchback"):
        return base
    if name == "heterogeneous":
        return base.replace(rates=tuple(0.9 if i % 2 == 0 else 1.3 for i in range(n)))
    if name == "nonstationary":
        return base.replace(amp=0.3, period=500.0)
    if name == "delayed":
        return base.replace(delay=1.0)
    if name == "constant":
        return base.replace(service="const")
    if name == "small_effect":
        return base.replace(control="pod2", treatment="pod3")
    return base.replace(service="pareto", pareto_shape=2.5)


@dataclass
class StudyConfig:
    """Parameters of the estimator study (see the module docstring).

    ``base`` fixes N, lam, the two policies, p and the experiment length; each scenario
    modifies it via :func:`scenario_config`. ``L=None`` uses ``30 * N * lam``.
    """

    base: SystemConfig = field(
        default_factory=lambda: SystemConfig(
            n_servers=20, lam=0.8, control="random", treatment="pod2", p=0.5, n_requests=500_000, warmup_requests=20_000
        )
    )
    scenarios: tuple = tuple(SCENARIOS)
    reps: int = 24
    L: int | None = None
    L_factors: tuple = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
    n_batches: int = 20
    alpha_batches: int = 100
    block_len: float = 200.0
    burn_in: float = 50.0
    sb_blocks: tuple = (50.0, 200.0, 800.0)
    truth_requests: int = 4_000_000
    truth_seeds: int = 2
    slope_h: float | None = 0.05
    seed: int = 0
    costs: tuple = ("w", "q")

    def validate(self) -> StudyConfig:
        """Check every parameter (and every scenario's system) before any simulation."""
        self.base.validate()
        for s in self.scenarios:
            scenario_config(s, self.base).validate()
            for design in ("group", "switchback"):
                scenario_config(s, self.base).replace(design=design, block_len=self.block_len).validate()
        if not isinstance(self.reps, (int, np.integer)) or self.reps < 2:
            raise ValueError(f"reps: need an integer >= 2 replications, got {self.reps!r}")
        L = self.L if self.L is not None else default_L(self.base.total_rate)
        if not isinstance(L, (int, np.integer)) or L <= 0:
            raise ValueError(f"L: the truncation horizon must be a positive integer, got {self.L!r}")
        if any(not (f > 0) for f in self.L_factors):
            raise ValueError(f"L_factors: every factor must be > 0, got {self.L_factors!r}")
        if max(int(round(f * L)) for f in (*self.L_factors, 1.0)) * 4 * self.n_batches > self.base.n_requests:
            raise ValueError(
                f"n_requests: {self.base.n_requests} jobs is too short for L up to {max(self.L_factors) * L:g} with "
                f"{self.n_batches} batches (need n_requests >= 4 * L * n_batches)"
            )
        if not isinstance(self.n_batches, (int, np.integer)) or self.n_batches < 2:
            raise ValueError(f"n_batches: need an integer >= 2, got {self.n_batches!r}")
        if not isinstance(self.alpha_batches, (int, np.integer)) or self.alpha_batches < 3:
            raise ValueError(f"alpha_batches: need an integer >= 3, got {self.alpha_batches!r}")
        if not (self.block_len > 0 and 0 <= self.burn_in < self.block_len):
            raise ValueError(
                f"burn_in: need 0 <= burn_in < block_len, got burn_in={self.burn_in}, block_len={self.block_len}"
            )
        if any(not (b > 0) for b in self.sb_blocks):
            raise ValueError(f"sb_blocks: block lengths must be > 0, got {self.sb_blocks!r}")
        if not isinstance(self.truth_requests, (int, np.integer)) or self.truth_requests < 10_000:
            raise ValueError(f"truth_requests: need an integer >= 10000, got {self.truth_requests!r}")
        if not isinstance(self.truth_seeds, (int, np.integer)) or self.truth_seeds < 1:
            raise ValueError(f"truth_seeds: need an integer >= 1, got {self.truth_seeds!r}")
        if "w" not in self.costs or any(c not in COSTS for c in self.costs):
            raise ValueError(f"costs: need 'w' and any of {COSTS}, got {self.costs!r}")
        if self.slope_h is not None and not (0 < self.slope_h < min(self.base.p, 1 - self.base.p)):
            raise ValueError(f"slope_h: need 0 < h < min(p, 1-p), got {self.slope_h!r}")
        return self

    @property
    def L_default(self) -> int:
        """The truncation horizon used for the headline estimates."""
        return int(self.L) if self.L is not None else default_L(self.base.total_rate)

    def to_dict(self) -> dict:
        """JSON-friendly dict (the base system flattened)."""
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d

    def plan(self) -> StudyPlan:
        """The study's tasks for :func:`~asrsched.sim.parallel.run_study`: every system's truth runs, then its replications.

        One batch, the longer truth runs first, so the workers start once and stay busy to the end.
        Scenarios with the same system (:func:`shared_systems`) share one set of tasks.
        """
        sd = self.to_dict()
        groups = shared_systems(self)
        reps = [
            dict(scenario=s, rep=r, study=sd, **({"also": also} if also else {}))
            for s, also in groups.items()
            for r in range(self.reps)
        ]
        arms = ["control", "treatment"] + (["p_minus", "p_plus"] if self.slope_h else [])
        truth = [dict(scenario=s, arm=a, k=k, study=sd) for s in groups for a in arms for k in range(self.truth_seeds)]
        every = [
            dict(fn=fn.__name__, task=t) for fn, tlist in ((run_truth, truth), (run_replication, reps)) for t in tlist
        ]
        return StudyPlan(
            _study_task,
            every,
            prefix="abtest",
            desc="truth runs and replications",
            context={"groups": groups, "n_truth": len(truth)},
        )

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> StudyResult:
        """The :class:`StudyResult` of :func:`~asrsched.sim.parallel.run_study` from the tasks of :meth:`plan`."""
        groups, n_truth = plan.context["groups"], plan.context["n_truth"]
        truth, reps = results[:n_truth], results[n_truth:]
        rows = [r for res in reps for r in res["rows"]]
        little = [r for res in reps for r in res["little"]]
        est = pd.DataFrame(rows)
        est["scenario"] = pd.Categorical(est["scenario"], categories=list(self.scenarios), ordered=True)
        cpu = float(sum(r.get("cpu_seconds", np.nan) for r in reps) + sum(r.get("cpu_seconds", 0.0) for r in truth))
        # every scenario gets its system's truth runs, in the study's scenario order; ``system`` names the scenario
        # whose runs they are, and a shared run's CPU time is counted once (on its own scenario's rows)
        of = {s: first for first, also in groups.items() for s in (first, *also)}
        truth_runs = pd.DataFrame(
            [
                dict(r, scenario=s, system=of[s], cpu_seconds=r["cpu_seconds"] if s == of[s] else 0.0)
                for s in self.scenarios
                for r in truth
                if r["scenario"] == of[s]
            ]
        )
        return StudyResult(
            self,
            est.sort_values(["scenario", "rep"]).reset_index(drop=True),
            _truth_table(truth_runs, self),
            pd.DataFrame(little),
            truth_runs,
            seconds,
            cpu,
        )

    @classmethod
    def from_dict(cls, d: dict) -> StudyConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        base = dict(d.pop("base"))
        if base.get("rates") is not None:
            base["rates"] = tuple(base["rates"])
        for k in ("scenarios", "L_factors", "sb_blocks", "costs"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(base=SystemConfig(**base), **d)


def _switchback_plan(scenario: str, sc: StudyConfig) -> list[tuple[float, float, bool]]:
    """``(block length, burn-in, headline)`` of every switchback estimate that ``scenario`` reports, in order."""
    if scenario != "switchback":
        return [(float(sc.block_len), float(sc.burn_in), True)]
    return [
        (float(b), float(burn), b == sc.block_len and (burn == sc.burn_in or burn == 0.25 * b))
        for b in sc.sb_blocks
        for burn in (0.0, 0.25 * b)
    ]


def shared_systems(study: StudyConfig) -> dict[str, tuple[str, ...]]:
    """Scenarios that simulate the same system, grouped: ``{first scenario: (the others, ...)}``.

    Two scenarios whose :func:`scenario_config` are equal (``"homogeneous"`` and ``"switchback"``
    by default: the latter differs only in the switchback designs it compares) run the same
    experiments and have the same ground truth, so the study simulates each such system
    once per replication (and its truth runs once) and gives every scenario of the group the same
    job-level, group and shared switchback estimates. The first scenario's seeds are used: its
    results are the same as when it runs alone.
    """
    out: dict[str, list[str]] = {}
    cfgs = {}
    for s in study.scenarios:
        c = scenario_config(s, study.base)
        first = next((f for f, fc in cfgs.items() if fc == c), None)
        if first is None:
            cfgs[s] = c
            out[s] = []
        else:
            out[first].append(s)
    return {k: tuple(v) for k, v in out.items()}


def run_replication(scenario: str, rep: int, study: dict, also: tuple = (), *, _paths: tuple | None = None) -> dict:
    """One replication of one scenario: three experiments -> rows of estimates + Little checks.

    ``study`` is :meth:`StudyConfig.to_dict` (plain data, so the task pickles to any worker).
    ``_paths``: ``(simulate_supermarket, dq_sweep)`` to run instead of the package's (the tests' and the
    benchmark's reference path, ``tests/abtest_oracle.py``: same random numbers, same estimates
    to floating-point rounding).
    ``also``: other scenarios with the same system (:func:`shared_systems`); their rows come from
    the same experiments (seeded by ``scenario``), each switchback block length simulated once.
    """
    keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base)
    for o in also:
        if scenario_config(o, sc.base) != cfg:
            raise ValueError(
                f"also: scenario {o!r} simulates another system than {scenario!r}; "
                "only scenarios with the same system share a replication"
            )
    names = (scenario, *also)
    L0 = sc.L_default
    rows, little = [], []
    t0, c0 = time.perf_counter(), time.process_time()

    # 1. Bernoulli(p) job-level experiment
    simulate_, dq_sweep_ = _paths or (simulate_supermarket, dq_sweep)
    kw = dict(details=False, area_at=False)
    tr = simulate_(
        cfg.replace(design="bernoulli"),
        task_seed(sc.seed, scenario, rep, "bernoulli"),
        **(dict(kw, area_at=True) if "qt" in sc.costs else kw),
    )
    little.append(dict(littles_law(tr), design="bernoulli"))
    e = naive(tr, sc.n_batches)
    rows.append(dict(e.as_dict(), L=np.nan))
    factors = sorted(set((*sc.L_factors, 1.0)))
    Ls = [max(1, int(round(f * L0))) for f in factors]
    fam = dq_sweep_(
        tr, sorted(set(Ls)), sc.n_batches, sc.alpha_batches, costs=tuple(sc.costs)
    )  # one O(n) pass, every L
    for f, L in zip(factors, Ls):
        for est in fam[L].values():
            rows.append(dict(est.as_dict(), L=L, headline=f == 1.0))
    del tr

    # 2. group design
    tr = simulate_(cfg.replace(design="group"), task_seed(sc.seed, scenario, rep, "group"), **kw)
    little.append(dict(littles_law(tr), design="group"))
    rows.append(dict(group_estimator(tr, sc.n_batches).as_dict(), L=np.nan))
    del tr

    # 3. switchback: each block length that any of the scenarios asks for, simulated once
    plans = {n: _switchback_plan(n, sc) for n in names}
    sb_rows, sb_little = {}, {}
    for b in dict.fromkeys(b for n in names for b, _, _ in plans[n]):
        tr = simulate_(
            cfg.replace(design="switchback", block_len=b), task_seed(sc.seed, scenario, rep, "switchback", b), **kw
        )
        sb_little[b] = dict(littles_law(tr), design=f"switchback(b={b:g})")
        for burn in dict.fromkeys(burn for n in names for bb, burn, _ in plans[n] if bb == b):
            sb_rows[b, burn] = dict(switchback(tr, burn, sc.n_batches).as_dict(), L=np.nan, block_len=b, burn_in=burn)
        del tr
    out_rows, out_little = [], []
    for n in names:
        mine = [dict(r) for r in rows] + [dict(sb_rows[b, burn], headline=h) for b, burn, h in plans[n]]
        for r in mine:
            r.setdefault("headline", True)
            r.update(scenario=n, rep=rep)
        out_rows += mine
        mine_l = [dict(r) for r in little] + [dict(sb_little[b]) for b in dict.fromkeys(b for b, _, _ in plans[n])]
        for r in mine_l:
            r.update(scenario=n, rep=rep)
        out_little += mine_l
    return {
        "rows": out_rows,
        "little": out_little,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
    }


def run_truth(scenario: str, arm: str, k: int, study: dict) -> dict:
    """One long run of one arm: ``arm`` in control, treatment, p_minus, p_plus (slope runs)."""
    keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base).replace(n_requests=int(sc.truth_requests), warmup_requests=50_000)
    if arm in ("control", "treatment"):
        cfg = cfg.replace(design=arm)
    elif arm in ("p_minus", "p_plus"):
        h = sc.slope_h if arm == "p_plus" else -sc.slope_h
        cfg = cfg.replace(design="bernoulli", p=sc.base.p + h)
    else:
        raise ValueError(f"arm: {arm!r} not in control, treatment, p_minus, p_plus")
    c0 = time.process_time()
    tr = simulate_supermarket(cfg, task_seed(sc.seed, scenario, "truth", arm, k), details=False, area_at=False)
    ll = littles_law(tr)
    return {
        "scenario": scenario,
        "arm": arm,
        "k": k,
        "mean_w": ll["mean_response"],
        "se_w": batch_mean_se(tr.response),
        "time_avg_n": ll["time_avg_n"],
        "observed_rate": ll["observed_rate"],
        "little_rel_gap": ll["rel_gap"],
        "n_requests": len(tr),
        "cpu_seconds": time.process_time() - c0,
    }


@dataclass
class StudyResult:
    """Raw outputs of :func:`~asrsched.sim.parallel.run_study` (long DataFrames) plus timing.

    ``seconds``: wall clock of the whole study; ``cpu_seconds``: CPU time summed over all
    tasks (what the study costs on any number of cores, noisy machines included).
    """

    config: StudyConfig
    estimates: pd.DataFrame
    truth: pd.DataFrame
    little: pd.DataFrame
    truth_runs: pd.DataFrame
    seconds: float
    cpu_seconds: float = float("nan")


def _truth_table(runs: pd.DataFrame, sc: StudyConfig) -> pd.DataFrame:
    out = []
    total_rate = sc.base.total_rate
    for s, g in runs.groupby("scenario", sort=False):
        arm = {a: gg for a, gg in g.groupby("arm")}

        def m(a, col="mean_w", arm=arm):
            return float(arm[a][col].mean())

        def se(a, arm=arm):
            x = arm[a]
            return float(np.sqrt((x["se_w"] ** 2).sum()) / len(x))

        row = {
            "scenario": s,
            "w_control": m("control"),
            "w_treatment": m("treatment"),
            "gte": m("treatment") - m("control"),
            "gte_se": float(np.hypot(se("treatment"), se("control"))),
            "gte_q": (m("treatment", "time_avg_n") - m("control", "time_avg_n")) / total_rate,
        }
        if "p_plus" in arm:
            row["slope"] = (m("p_plus") - m("p_minus")) / (2 * sc.slope_h)
            row["slope_se"] = float(np.hypot(se("p_plus"), se("p_minus")) / (2 * sc.slope_h))
        out.append(row)
    return pd.DataFrame(out)


def _study_task(fn: str, task: dict) -> dict:
    """One task of the study by name (``run_truth`` or ``run_replication``), so both kinds share one batch."""
    return {"run_truth": run_truth, "run_replication": run_replication}[fn](**task)


if __name__ == "__main__":  # the command recorded by runs before the split
    raise SystemExit("the full run is `python -m asrsched.abtest.full_run --full --out <folder>`")
