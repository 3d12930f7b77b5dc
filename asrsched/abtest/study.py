"""The estimator study: scenarios x replications -> bias / standard deviation / MSE / coverage.

One *replication* of a scenario runs three independent experiments of the same length
(``n_jobs`` jobs after warm-up) on the same system:

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
(``truth_seeds`` runs of ``truth_jobs`` jobs per policy): ``GTE = W(treatment) -
W(control)`` with a batch-means standard error, also in its queue-length form
``(X_1 - X_0) / lam`` (equal by Little's law). Optionally (``slope_h``) the slope
``dW(p)/dp`` of the mixed system at the experiment's p is measured from runs at
``p +- h``: this is what DQ estimates (Farias et al.), so ``GTE - slope`` is the part of
DQ's bias due to the curvature of W(p), and ``slope - E[DQ]`` the part due to truncation.

Beyond the study's scoring: :func:`run_wp_curve` / :func:`wp_table` measure W(p), the mixed
system's mean response time against the treatment fraction, whose chord is the GTE and whose
tangent at p is what DQ estimates; :func:`scenario_search` / :func:`search_table` look for where
mixed DQ's variance gain over the better single DQ is largest, over (lambda, policy pair, L,
queue-length cost definition), with bootstrap CIs; :func:`claims_table` gives each claim a
verdict with CIs. ``python -m asrsched.abtest.study --full --out figures/05_ab_estimators/full``
(:func:`main`) writes all of it with a ``run.json`` of provenance (:func:`write_full_run`);
notebook 05 reads it back with :func:`load_full_run`.

Every task is a plain function of plain arguments, fanned out with
:func:`asrsched.sim.parallel.map_tasks` (joblib processes locally, or Dask), seeded from
``(seed, scenario, replication, experiment)``; with ``cache_dir`` each finished task is
stored as JSON so an interrupted study resumes without recomputing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import (
    COSTS,
    Trajectory,
    batch_ci,
    default_L,
    dq_sweep,
    littles_law,
    naive,
    optimal_alpha,
    q_values,
    switchback,
)
from asrsched.abtest.estimators import group as group_estimator
from asrsched.abtest.model import SystemConfig, simulate
from asrsched.sim.parallel import in_task_order, map_tasks

__all__ = [
    "SCENARIOS",
    "StudyConfig",
    "StudyResult",
    "scenario_config",
    "run_replication",
    "run_truth",
    "run_study",
    "shared_systems",
    "summarize",
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
    "json_default",
    "run_wp_curve",
    "FULL",
    "FullRun",
    "load_full_run",
    "write_full_run",
    "provenance",
    "wp_table",
    "scenario_search",
    "search_table",
    "SEARCH_GRID",
    "COST_LABELS",
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

ESTIMATOR_ORDER = ["naive", "group", "switchback", "qdq", "wdq", "mixed_dq", "mixed_dq_oracle", "qtdq", "mixed_dq_qt"]


def scenario_config(name: str, base: SystemConfig) -> SystemConfig:
    """The system of scenario ``name`` built on ``base`` (N, lam, policies, p, n_jobs)."""
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

    base: SystemConfig = field(default_factory=lambda: SystemConfig(
        n_servers=20, lam=0.8, control="random", treatment="pod2", p=0.5, n_jobs=500_000, warmup_jobs=20_000))
    scenarios: tuple = tuple(SCENARIOS)
    reps: int = 24
    L: int | None = None
    L_factors: tuple = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
    n_batches: int = 20
    alpha_batches: int = 100
    block_len: float = 200.0
    burn_in: float = 50.0
    sb_blocks: tuple = (50.0, 200.0, 800.0)
    truth_jobs: int = 4_000_000
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
        if max(int(round(f * L)) for f in (*self.L_factors, 1.0)) * 4 * self.n_batches > self.base.n_jobs:
            raise ValueError(
                f"n_jobs: {self.base.n_jobs} jobs is too short for L up to {max(self.L_factors) * L:g} with "
                f"{self.n_batches} batches (need n_jobs >= 4 * L * n_batches)")
        if not isinstance(self.n_batches, (int, np.integer)) or self.n_batches < 2:
            raise ValueError(f"n_batches: need an integer >= 2, got {self.n_batches!r}")
        if not isinstance(self.alpha_batches, (int, np.integer)) or self.alpha_batches < 3:
            raise ValueError(f"alpha_batches: need an integer >= 3, got {self.alpha_batches!r}")
        if not (self.block_len > 0 and 0 <= self.burn_in < self.block_len):
            raise ValueError(f"burn_in: need 0 <= burn_in < block_len, got burn_in={self.burn_in}, "
                             f"block_len={self.block_len}")
        if any(not (b > 0) for b in self.sb_blocks):
            raise ValueError(f"sb_blocks: block lengths must be > 0, got {self.sb_blocks!r}")
        if not isinstance(self.truth_jobs, (int, np.integer)) or self.truth_jobs < 10_000:
            raise ValueError(f"truth_jobs: need an integer >= 10000, got {self.truth_jobs!r}")
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


_HEAP_KEPT = False


def _keep_freed_memory() -> None:
    """Let glibc keep freed large blocks in the heap (once per process; Linux/glibc only, else no-op).

    Each experiment allocates ~40 MB of per-job arrays; by default glibc returns blocks over
    128 kB to the OS on free, so the next experiment page-faults all of it again (~5k faults,
    about 20 % of a 500k-job simulation). Raising the mmap and trim thresholds keeps them.
    """
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return
    _HEAP_KEPT = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: serve blocks up to 1 GiB from the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never trim the heap top back to the OS
    except (OSError, AttributeError):
        pass


def _seed(*parts) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(h, "little")


def _np_diff_means(v: np.ndarray, z: np.ndarray) -> float:
    t = z == 1
    nt = int(t.sum())
    if nt == 0 or nt == t.size:
        return float("nan")
    return float(v[t].mean() - v[~t].mean())


def _np_batch_diffs(v: np.ndarray, z: np.ndarray, n_batches: int) -> np.ndarray:
    edges = np.linspace(0, v.size, n_batches + 1).astype(np.int64)
    st = edges[:-1]
    t = z == 1
    s1 = np.add.reduceat(np.where(t, v, 0.0), st)
    n1 = np.add.reduceat(t.astype(np.int64), st)
    s = np.add.reduceat(v, st)
    n0 = np.diff(edges) - n1
    with np.errstate(divide="ignore", invalid="ignore"):
        d = s1 / n1 - (s - s1) / n0
    d[(n1 == 0) | (n0 == 0)] = np.nan
    return d


def _dq_pair(tr: Trajectory, L: int, n_batches: int, alpha_batches: int) -> dict:
    """wDQ, qDQ and mixed DQ at horizon L, with batch-means CIs and the in-experiment alpha.

    The reference (pre-optimisation) path: full numpy arrays of Q values for this one L, and
    numpy masks for the arm means; :func:`~asrsched.abtest.estimators.dq_sweep` gives the same
    numbers from one compiled O(n) pass per cost for every L.
    """
    Qw = q_values(tr, L, "w")
    Qq = q_values(tr, L, "q")
    z = tr.z[: Qw.size]
    k = max(3, min(int(alpha_batches), Qw.size // (5 * int(L))))
    a = optimal_alpha(_np_batch_diffs(Qw, z, k), _np_batch_diffs(Qq, z, k))
    out = {}
    bw = _np_batch_diffs(Qw, z, n_batches)
    bq = _np_batch_diffs(Qq, z, n_batches)
    vw, vq = _np_diff_means(Qw, z), _np_diff_means(Qq, z)
    out["wdq"] = batch_ci("wdq", vw, bw)
    out["qdq"] = batch_ci("qdq", vq, bq)
    out["mixed_dq"] = batch_ci("mixed_dq", a * vw + (1 - a) * vq, a * bw + (1 - a) * bq, alpha=a)
    return out


def _switchback_plan(scenario: str, sc: StudyConfig) -> list[tuple[float, float, bool]]:
    """``(block length, burn-in, headline)`` of every switchback estimate that ``scenario`` reports, in order."""
    if scenario != "switchback":
        return [(float(sc.block_len), float(sc.burn_in), True)]
    return [(float(b), float(burn), b == sc.block_len and (burn == sc.burn_in or burn == 0.25 * b))
            for b in sc.sb_blocks for burn in (0.0, 0.25 * b)]


def shared_systems(study: StudyConfig) -> dict[str, tuple[str, ...]]:
    """Scenarios that simulate the same system, grouped: ``{first scenario: (the others, ...)}``.

    Two scenarios whose :func:`scenario_config` are equal (``"homogeneous"`` and ``"switchback"``
    by default: the latter differs only in the switchback designs it compares) run the same
    experiments and have the same ground truth, so :func:`run_study` simulates each such system
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


def run_replication(scenario: str, rep: int, study: dict, reference: bool = False, also: tuple = ()) -> dict:
    """One replication of one scenario: three experiments -> rows of estimates + Little checks.

    ``study`` is :meth:`StudyConfig.to_dict` (plain data, so the task pickles to any worker).
    ``reference=True`` runs the pre-optimisation path, kept as the benchmark's baseline and as
    a check: the reference kernel with every per-job output, and the DQ estimators from the
    full numpy arrays of Q values, one horizon at a time (:func:`_dq_pair`). Same random
    numbers, same estimates (to floating-point rounding, ~1e-12 relative).
    ``also``: other scenarios with the same system (:func:`shared_systems`); their rows come from
    the same experiments (seeded by ``scenario``), each switchback block length simulated once.
    """
    _keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base)
    for o in also:
        if scenario_config(o, sc.base) != cfg:
            raise ValueError(f"also: scenario {o!r} simulates another system than {scenario!r}; "
                             "only scenarios with the same system share a replication")
    names = (scenario, *also)
    L0 = sc.L_default
    rows, little = [], []
    t0, c0 = time.perf_counter(), time.process_time()

    # 1. Bernoulli(p) job-level experiment
    kw = dict(details=False, area_at=False) if not reference else dict(_kernel="reference")
    tr = simulate(cfg.replace(design="bernoulli"), _seed(sc.seed, scenario, rep, "bernoulli"),
                  **(dict(kw, area_at=True) if "qt" in sc.costs else kw))
    little.append(dict(littles_law(tr), design="bernoulli"))
    e = naive(tr, sc.n_batches)
    rows.append(dict(e.as_dict(), L=np.nan))
    factors = sorted(set((*sc.L_factors, 1.0)))
    Ls = [max(1, int(round(f * L0))) for f in factors]
    if reference:
        fam = {L: _dq_pair(tr, L, sc.n_batches, sc.alpha_batches) for L in sorted(set(Ls))}
    else:
        fam = dq_sweep(tr, sorted(set(Ls)), sc.n_batches, sc.alpha_batches, costs=tuple(sc.costs))  # one O(n) pass, every L
    for f, L in zip(factors, Ls):
        for est in fam[L].values():
            rows.append(dict(est.as_dict(), L=L, headline=f == 1.0))
    del tr

    # 2. group design
    tr = simulate(cfg.replace(design="group"), _seed(sc.seed, scenario, rep, "group"), **kw)
    little.append(dict(littles_law(tr), design="group"))
    rows.append(dict(group_estimator(tr, sc.n_batches).as_dict(), L=np.nan))
    del tr

    # 3. switchback: each block length that any of the scenarios asks for, simulated once
    plans = {n: _switchback_plan(n, sc) for n in names}
    sb_rows, sb_little = {}, {}
    for b in dict.fromkeys(b for n in names for b, _, _ in plans[n]):
        tr = simulate(cfg.replace(design="switchback", block_len=b), _seed(sc.seed, scenario, rep, "switchback", b),
                      **kw)
        sb_little[b] = dict(littles_law(tr), design=f"switchback(b={b:g})")
        for burn in dict.fromkeys(burn for n in names for bb, burn, _ in plans[n] if bb == b):
            sb_rows[b, burn] = dict(switchback(tr, burn, sc.n_batches).as_dict(), L=np.nan, block_len=b,
                                    burn_in=burn)
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
    return {"rows": out_rows, "little": out_little, "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0}


def _batch_mean_se(x: np.ndarray, n_batches: int = 50) -> float:
    b = np.array([v.mean() for v in np.array_split(x, n_batches)])
    return float(b.std(ddof=1) / np.sqrt(n_batches))


def run_truth(scenario: str, arm: str, k: int, study: dict) -> dict:
    """One long run of one arm: ``arm`` in control, treatment, p_minus, p_plus (slope runs)."""
    _keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base).replace(n_jobs=int(sc.truth_jobs), warmup_jobs=50_000)
    if arm in ("control", "treatment"):
        cfg = cfg.replace(design=arm)
    elif arm in ("p_minus", "p_plus"):
        h = sc.slope_h if arm == "p_plus" else -sc.slope_h
        cfg = cfg.replace(design="bernoulli", p=sc.base.p + h)
    else:
        raise ValueError(f"arm: {arm!r} not in control, treatment, p_minus, p_plus")
    c0 = time.process_time()
    tr = simulate(cfg, _seed(sc.seed, scenario, "truth", arm, k), details=False, area_at=False)
    ll = littles_law(tr)
    return {"scenario": scenario, "arm": arm, "k": k, "mean_w": ll["mean_response"],
            "se_w": _batch_mean_se(tr.response), "time_avg_n": ll["time_avg_n"], "lam_hat": ll["lam_hat"],
            "little_rel_gap": ll["rel_gap"], "n_jobs": len(tr), "cpu_seconds": time.process_time() - c0}


@dataclass
class StudyResult:
    """Raw outputs of :func:`run_study` (long DataFrames) plus timing.

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
    lam = sc.base.total_rate
    for s, g in runs.groupby("scenario", sort=False):
        arm = {a: gg for a, gg in g.groupby("arm")}

        def m(a, col="mean_w", arm=arm):
            return float(arm[a][col].mean())

        def se(a, arm=arm):
            x = arm[a]
            return float(np.sqrt((x["se_w"] ** 2).sum()) / len(x))

        row = {"scenario": s, "w_control": m("control"), "w_treatment": m("treatment"),
               "gte": m("treatment") - m("control"),
               "gte_se": float(np.hypot(se("treatment"), se("control"))),
               "gte_q": (m("treatment", "time_avg_n") - m("control", "time_avg_n")) / lam}
        if "p_plus" in arm:
            row["slope"] = (m("p_plus") - m("p_minus")) / (2 * sc.slope_h)
            row["slope_se"] = float(np.hypot(se("p_plus"), se("p_minus")) / (2 * sc.slope_h))
        out.append(row)
    return pd.DataFrame(out)


def _study_task(fn: str, task: dict) -> dict:
    """One task of :func:`run_study` by name (``run_truth`` or ``run_replication``), so both kinds share one batch."""
    return {"run_truth": run_truth, "run_replication": run_replication}[fn](**task)


def run_study(study: StudyConfig, *, n_jobs: int | None = None, address=None, cache_dir=None,
              progress: bool = True) -> StudyResult:
    """Run every scenario's replications and ground truth (validated first; nothing runs on bad input).

    Tasks fan out with :func:`asrsched.sim.parallel.map_tasks` (``n_jobs`` local processes or
    a Dask ``address``). With ``cache_dir`` each finished task is kept as JSON and reused.
    """
    study.validate()
    sd = study.to_dict()
    t0 = time.perf_counter()
    groups = shared_systems(study)  # scenarios with the same system: one set of experiments and truth runs
    tasks = [dict(scenario=s, rep=r, study=sd, **({"also": also} if also else {}))
             for s, also in groups.items() for r in range(study.reps)]
    arms = ["control", "treatment"] + (["p_minus", "p_plus"] if study.slope_h else [])
    ttasks = [dict(scenario=s, arm=a, k=k, study=sd) for s in groups for a in arms
              for k in range(study.truth_seeds)]
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)

    from asrsched.sim.cache import cache_key, code_key

    code = code_key(__name__)  # this module and every asrsched module it imports: new code, new key

    def key(t):
        return cache_key(t, code=code)

    # one batch of tasks, the longer truth runs first, so the workers start once and stay busy to the end
    every = [dict(fn=fn.__name__, task=t) for fn, tlist in ((run_truth, ttasks), (run_replication, tasks))
             for t in tlist]
    done, todo = [], []
    for t in every:
        p = cache / f"{t['fn']}-{key(t['task'])}.json" if cache else None
        if p is not None and p.exists():
            done.append((t, json.loads(p.read_text())))
        else:
            todo.append(t)
    for t, r in map_tasks(_study_task, todo, n_jobs=n_jobs, address=address, progress=progress,
                          desc="truth runs and replications"):
        if cache:  # each result kept as it arrives: an interrupted study resumes from here
            (cache / f"{t['fn']}-{key(t['task'])}.json").write_text(json.dumps(r, default=json_default))
        done.append((t, r))
    results = in_task_order(done, every)  # the tasks' order, not the completion order: reproducible to the bit
    truth, reps = results[: len(ttasks)], results[len(ttasks):]
    rows = [r for res in reps for r in res["rows"]]
    little = [r for res in reps for r in res["little"]]
    est = pd.DataFrame(rows)
    est["scenario"] = pd.Categorical(est["scenario"], categories=list(study.scenarios), ordered=True)
    cpu = float(sum(r.get("cpu_seconds", np.nan) for r in reps) + sum(r.get("cpu_seconds", 0.0) for r in truth))
    # every scenario gets its system's truth runs, in the study's scenario order; ``system`` names the scenario
    # whose runs they are, and a shared run's CPU time is counted once (on its own scenario's rows)
    of = {s: first for first, also in groups.items() for s in (first, *also)}
    truth_runs = pd.DataFrame([dict(r, scenario=s, system=of[s], cpu_seconds=r["cpu_seconds"] if s == of[s] else 0.0)
                               for s in study.scenarios for r in truth if r["scenario"] == of[s]])
    return StudyResult(study, est.sort_values(["scenario", "rep"]).reset_index(drop=True),
                       _truth_table(truth_runs, study), pd.DataFrame(little), truth_runs,
                       time.perf_counter() - t0, cpu)


def json_default(o):
    """``json.dumps(..., default=json_default)``: numpy scalars and arrays as plain JSON values."""
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def _headline(res: StudyResult) -> pd.DataFrame:
    e = res.estimates
    return e[e["headline"].astype(bool)].copy()


def _oracle_rows(h: pd.DataFrame) -> pd.DataFrame:
    """Mixed DQ with alpha from the across-replication (co)variance of wDQ and qDQ (not deployable)."""
    out = []
    for s, g in h.groupby("scenario", observed=True):
        w = g[g.estimator == "wdq"].set_index("rep")["estimate"]
        q = g[g.estimator == "qdq"].set_index("rep")["estimate"]
        w, q = w.align(q, join="inner")
        if len(w) < 3:
            continue
        a = optimal_alpha(w.values, q.values)
        for rep, v in (a * w + (1 - a) * q).items():
            out.append({"scenario": s, "rep": rep, "estimator": "mixed_dq_oracle", "estimate": v, "alpha": a})
    return pd.DataFrame(out)


def _boot_rmse_ci(v: np.ndarray, truth: float, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap percentile CI of the RMSE of the replications ``v`` around ``truth``."""
    if v.size < 3:
        return float("nan"), float("nan")
    e2 = (v - truth) ** 2
    b = np.sqrt(e2[np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))].mean(axis=1))
    return float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))


def summarize(res: StudyResult) -> pd.DataFrame:
    """Per scenario and estimator: truth, mean, bias, sd, RMSE, MSE, sd ratio to naive, CI coverage.

    ``bias_ci_lo/hi``: 95 % CI of the bias (replication spread and the truth's SE);
    ``rmse_ci_lo/hi``: 95 % bootstrap CI of the RMSE over the replications.
    ``mixed_dq_oracle`` (alpha from the replications' covariance, not available in one
    experiment) is added as a reference ceiling for the variance reduction.
    """
    h = _headline(res)
    h = pd.concat([h, _oracle_rows(h)], ignore_index=True)
    tt = res.truth.set_index("scenario")
    rows = []
    for (s, name), g in h.groupby(["scenario", "estimator"], observed=True, sort=False):
        gte = float(tt.loc[s, "gte"])
        v = g["estimate"].to_numpy(float)
        r = {"scenario": s, "estimator": name, "truth": gte, "truth_se": float(tt.loc[s, "gte_se"]),
             "mean": v.mean(), "bias": v.mean() - gte, "sd": v.std(ddof=1), "rmse": np.sqrt(np.mean((v - gte) ** 2)),
             "mse": np.mean((v - gte) ** 2), "reps": len(v)}
        r["bias_se"] = r["sd"] / np.sqrt(len(v))
        h95 = 1.96 * float(np.hypot(r["bias_se"], r["truth_se"]))
        r["bias_ci_lo"], r["bias_ci_hi"] = r["bias"] - h95, r["bias"] + h95
        r["rmse_ci_lo"], r["rmse_ci_hi"] = _boot_rmse_ci(v, gte)
        if "ci_lo" in g and g["ci_lo"].notna().any():
            lo, hi = g["ci_lo"].to_numpy(float), g["ci_hi"].to_numpy(float)
            r["coverage"] = float(np.mean((lo <= gte) & (gte <= hi)))
            r["coverage_of_mean"] = float(np.mean((lo <= v.mean()) & (v.mean() <= hi)))
            r["se_ratio"] = float(np.nanmean(g["se"].to_numpy(float)) / r["sd"]) if r["sd"] > 0 else np.nan
        if g["alpha"].notna().any():
            r["alpha_mean"] = float(np.nanmean(g["alpha"].astype(float)))
            r["alpha_sd"] = float(np.nanstd(g["alpha"].astype(float)))
        rows.append(r)
    out = pd.DataFrame(rows)
    nsd = out[out.estimator == "naive"].set_index("scenario")["sd"]
    out["sd_vs_naive"] = out["sd"] / out["scenario"].map(nsd).astype(float)
    order = {n: i for i, n in enumerate(ESTIMATOR_ORDER)}
    out["_o"] = out["estimator"].map(order).fillna(99)
    out["_s"] = out["scenario"].map({s: i for i, s in enumerate(res.config.scenarios)})
    return out.sort_values(["_s", "_o"]).drop(columns=["_o", "_s"]).reset_index(drop=True)


def ablation_table(res: StudyResult) -> pd.DataFrame:
    """Bias, sd and RMSE of qDQ, wDQ and mixed DQ at every L (per scenario)."""
    e = res.estimates
    e = e[e.estimator.isin(["qdq", "wdq", "mixed_dq", "qtdq", "mixed_dq_qt"])]
    tt = res.truth.set_index("scenario")["gte"]
    rows = []
    for (s, name, L), g in e.groupby(["scenario", "estimator", "L"], observed=True):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[s])
        rows.append({"scenario": s, "estimator": name, "L": int(L), "L_factor": L / res.config.L_default,
                     "mean": v.mean(), "bias": v.mean() - gte, "bias_se": v.std(ddof=1) / np.sqrt(len(v)),
                     "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2))), "reps": len(v)})
    return pd.DataFrame(rows)


def switchback_table(res: StudyResult) -> pd.DataFrame:
    """Every switchback design run (block length x burn-in) per scenario: bias, sd, RMSE, coverage."""
    e = res.estimates
    e = e[e.estimator == "switchback"]
    tt = res.truth.set_index("scenario")["gte"]
    rows = []
    for (s, b, burn), g in e.groupby(["scenario", "block_len", "burn_in"], observed=True):
        v = g["estimate"].to_numpy(float)
        gte = float(tt.loc[s])
        rows.append({"scenario": s, "block_len": b, "burn_in": burn, "mean": v.mean(), "bias": v.mean() - gte,
                     "sd": v.std(ddof=1), "rmse": float(np.sqrt(np.mean((v - gte) ** 2))),
                     "coverage": float(np.mean((g.ci_lo <= gte) & (gte <= g.ci_hi))), "reps": len(v)})
    return pd.DataFrame(rows)


def coverage_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Coverage of the 95 % batch-means CI (of the truth, and of the estimator's own mean)."""
    c = summary.dropna(subset=["coverage"])
    return c[["scenario", "estimator", "coverage", "coverage_of_mean", "se_ratio", "reps"]].reset_index(drop=True)


def paired_estimates(res: StudyResult, scenario) -> pd.DataFrame:
    """Headline estimates of one scenario, one row per replication, one column per estimator."""
    h = _headline(res)
    h = h[h.scenario.astype(str) == str(scenario)]
    h = pd.concat([h, _oracle_rows(h)], ignore_index=True) if len(h) else h
    return h.pivot_table(index="rep", columns="estimator", values="estimate")


#: the candidates of "lowest MSE" (the oracle mixed DQ is not deployable)
MSE_CANDIDATES = ("naive", "group", "switchback", "qdq", "wdq", "mixed_dq")


def lowest_mse(paired: pd.DataFrame, truth: float, n_boot: int = 1000, seed: int = 0,
               candidates=MSE_CANDIDATES) -> tuple[list[str], dict[str, float]]:
    """Who has the lowest MSE, with the statistical tie made explicit.

    Replications are resampled jointly (``n_boot`` times); ``share[e]`` is the fraction of
    resamples in which ``e`` has the lowest MSE. Returns ``([winner], share)`` when one
    estimator wins in at least 95 % of them, else ``(tied, share)`` with every estimator that
    wins in at least 2.5 % (a statistical tie: no single winner is named).
    """
    cand = [c for c in candidates if c in paired]
    X = paired[cand].dropna().to_numpy(float)
    e2 = (X - truth) ** 2
    idx = np.random.default_rng(seed).integers(0, len(X), (n_boot, len(X)))
    wins = np.argmin(e2[idx].mean(axis=1), axis=1)
    share = {c: float(np.mean(wins == i)) for i, c in enumerate(cand)}
    best = max(share, key=share.get)
    if share[best] >= 0.95:
        return [best], share
    return [c for c in cand if share[c] >= 0.025], share


def _verdict(lo: float, hi: float, a: float, b: float) -> str:
    """``holds`` if the CI [lo, hi] lies inside [a, b], ``fails`` if outside, else ``inconclusive``."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive"
    if a <= lo and hi <= b:
        return "holds"
    if hi < a or lo > b:
        return "fails"
    return "inconclusive"


def claims_table(summary: pd.DataFrame, res: StudyResult | None = None, n_boot: int = 1000,
                 seed: int = 0) -> pd.DataFrame:
    """The study's four claims, checked per scenario from the numbers, with 95 % CIs and verdicts.

    * naive biased low: the naive estimate shrinks the effect toward zero
      (``|mean| < |GTE|``, same sign) by more than 3 standard errors; ``naive_share`` = mean
      naive / GTE with its CI;
    * DQ sd 50-500x naive: ``sd(qDQ)/sd(naive)`` and ``sd(wDQ)/sd(naive)``;
    * mixed DQ 2-5x lower sd than DQ: ``min(sd qDQ, sd wDQ) / sd(mixed)``; ``wq_corr`` is the
      correlation of wDQ and qDQ over replications and ``gain_bound`` the largest sd gain any
      fixed alpha can give from their covariance (the condition under which the claim can hold);
    * mixed DQ lowest MSE among naive, group, switchback, qDQ, wDQ, mixed DQ
      (:func:`lowest_mse`: a statistical tie is reported as such).

    With ``res`` the CIs come from a paired bootstrap over replications and each claim gets a
    verdict ``holds`` / ``fails`` / ``inconclusive`` (its CI straddles the claimed range);
    without it the point values only.
    """
    rows = []
    for s, g in summary.groupby("scenario", sort=False, observed=True):
        g = g.set_index("estimator")
        nv = g.loc["naive"]
        shrink = np.sign(nv["mean"]) == np.sign(nv["truth"]) and abs(nv["mean"]) < abs(nv["truth"])
        biased_low = bool(shrink and abs(nv["bias"]) > 3 * max(nv["bias_se"], nv["truth_se"]))
        rq, rw = g.loc["qdq", "sd"] / nv["sd"], g.loc["wdq", "sd"] / nv["sd"]
        red = min(g.loc["qdq", "sd"], g.loc["wdq", "sd"]) / g.loc["mixed_dq", "sd"]
        cand = [e for e in MSE_CANDIDATES if e in g.index]
        best = min(cand, key=lambda e: g.loc[e, "mse"])
        row = {
            "scenario": s,
            "naive_shrink_pct": 100 * (1 - nv["mean"] / nv["truth"]) if nv["truth"] != 0 else np.nan,
            "naive_biased_low": biased_low,
            "qdq_sd_x_naive": rq, "wdq_sd_x_naive": rw,
            "dq_sd_50_500x": bool(50 <= rq <= 500 and 50 <= rw <= 500),
            "mixed_sd_reduction": red,
            "mixed_2_5x_lower": bool(2 <= red <= 5),
            "oracle_sd_reduction": (min(g.loc["qdq", "sd"], g.loc["wdq", "sd"]) / g.loc["mixed_dq_oracle", "sd"]
                                    if "mixed_dq_oracle" in g.index else np.nan),
            "lowest_mse": best,
            "mixed_lowest_mse": best == "mixed_dq",
        }
        if res is not None:
            P = paired_estimates(res, s)
            truth = float(nv["truth"])
            X = P.dropna(subset=["naive", "qdq", "wdq", "mixed_dq"])
            R = len(X)
            idx = np.random.default_rng(seed).integers(0, R, (n_boot, R))

            B = {c: X[c].to_numpy(float)[idx] for c in ("naive", "qdq", "wdq", "mixed_dq")}  # (n_boot, R)
            sdb = {c: b.std(axis=1, ddof=1) for c, b in B.items()}
            dq_min = np.minimum(sdb["qdq"], sdb["wdq"])

            def ci(b):
                b = b[np.isfinite(b)]  # a resample of identical replications has sd 0
                return (float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))) if b.size else (np.nan, np.nan)

            with np.errstate(divide="ignore", invalid="ignore"):
                sh = ci(B["naive"].mean(axis=1) / truth)
                dq_n = ci(dq_min / sdb["naive"])
                mixr = ci(dq_min / sdb["mixed_dq"])
            cv = np.cov(X["wdq"], X["qdq"], ddof=1)
            det = cv[0, 0] * cv[1, 1] - cv[0, 1] ** 2
            winners, share = lowest_mse(P, truth, n_boot, seed)
            row.update({
                "naive_share": float(nv["mean"] / truth), "naive_share_ci_lo": sh[0], "naive_share_ci_hi": sh[1],
                "dq_sd_x_naive_min": min(rq, rw), "dq_sd_x_naive_ci_lo": dq_n[0], "dq_sd_x_naive_ci_hi": dq_n[1],
                "mixed_sd_reduction_ci_lo": mixr[0], "mixed_sd_reduction_ci_hi": mixr[1],
                "wq_corr": float(cv[0, 1] / np.sqrt(cv[0, 0] * cv[1, 1])),
                "gain_bound": float(np.sqrt(min(cv[0, 0], cv[1, 1]) * (cv[0, 0] + cv[1, 1] - 2 * cv[0, 1]) / det))
                if det > 0 else np.inf,
                "lowest_mse": winners[0] if len(winners) == 1 else "tie: " + ", ".join(winners),
                "lowest_mse_share": share.get("mixed_dq", 0.0),
                "verdict_naive_low": "holds" if biased_low and sh[1] < 1 else ("fails" if sh[0] >= 1 or sh[1] <= 0
                                                                               else "inconclusive"),
                "verdict_dq_50_500x": _verdict(dq_n[0], dq_n[1], 50, 500),
                "verdict_mixed_2_5x": _verdict(mixr[0], mixr[1], 2, 5),
                "verdict_mixed_lowest_mse": ("holds" if winners == ["mixed_dq"] else
                                             "fails" if "mixed_dq" not in winners else "inconclusive"),
                "reps": R,
            })
            row["mixed_lowest_mse"] = winners == ["mixed_dq"]
        rows.append(row)
    return pd.DataFrame(rows)


#: display names (one spelling in tables, figures and prose)
ESTIMATOR_LABELS = {"naive": "naive", "group": "group", "switchback": "switchback", "qdq": "qDQ", "wdq": "wDQ",
                    "qtdq": "qDQ (time-integral)", "mixed_dq": "mixed DQ", "mixed_dq_qt": "mixed DQ (time-integral)",
                    "mixed_dq_oracle": "mixed DQ (oracle α)"}


def _lab(e: str) -> str:
    if e.startswith("tie: "):
        return "tie (" + ", ".join(ESTIMATOR_LABELS.get(x, x) for x in e[5:].split(", ")) + ")"
    return ESTIMATOR_LABELS.get(e, e)


def _where(claims: pd.DataFrame, col: str, value: str) -> str:
    names = [str(s) for s in claims.loc[claims[col] == value, "scenario"]]
    return ", ".join(names) if names else "none"


def claims_markdown(claims: pd.DataFrame, summary: pd.DataFrame, truth: pd.DataFrame | None = None,
                    wp: pd.DataFrame | None = None) -> str:
    """A plain-language reading of :func:`claims_table` (Markdown), every number computed from the tables.

    With the verdict columns (``claims_table(summary, res)``) each claim lists the scenarios where it
    holds, fails or is inconclusive (95 % CI straddles the claimed range) and the computed condition
    that separates them; ``wp`` (:func:`wp_table`) adds the curvature reading of DQ's bias.
    """
    n = len(claims)
    lines = []
    ci = "naive_share_ci_lo" in claims
    reps = int(claims["reps"].max()) if "reps" in claims else int(summary["reps"].max())
    lines.append(f"Each verdict uses {reps} replications per scenario; ranges are over scenarios; "
                 "brackets are 95 % bootstrap CIs over replications.")
    lo, hi = claims.naive_shrink_pct.min(), claims.naive_shrink_pct.max()
    if ci:
        lines.append(f"- **Naive biased low** — holds in: {_where(claims, 'verdict_naive_low', 'holds')}; fails in: "
                     f"{_where(claims, 'verdict_naive_low', 'fails')}; inconclusive: "
                     f"{_where(claims, 'verdict_naive_low', 'inconclusive')}. Naive reports "
                     + "; ".join(f"{r.scenario} {100 * r.naive_share:.0f} % [{100 * r.naive_share_ci_lo:.0f}, "
                                 f"{100 * r.naive_share_ci_hi:.0f}]" for r in claims.itertuples())
                     + " of the true effect. Condition: the arms share the servers, so the better policy also "
                       "shortens the queues the control jobs see.")
    else:
        k = int(claims.naive_biased_low.sum())
        lines.append(f"- **Naive biased low**: holds in {k}/{n} scenarios; it reports {100 - hi:.0f}-{100 - lo:.0f} % "
                     "of the true effect.")
    r = pd.concat([claims.qdq_sd_x_naive, claims.wdq_sd_x_naive])
    if ci:
        lines.append(f"- **DQ sd 50–500× naive** (the smaller of qDQ's and wDQ's sd over naive's) — holds in: "
                     f"{_where(claims, 'verdict_dq_50_500x', 'holds')}; fails in: "
                     f"{_where(claims, 'verdict_dq_50_500x', 'fails')}; inconclusive: "
                     f"{_where(claims, 'verdict_dq_50_500x', 'inconclusive')}. Ratios: "
                     + "; ".join(f"{r.scenario} {r.dq_sd_x_naive_min:.0f}× [{r.dq_sd_x_naive_ci_lo:.0f}, "
                                 f"{r.dq_sd_x_naive_ci_hi:.0f}]" for r in claims.itertuples()) + ".")
    else:
        lines.append(f"- **DQ sd 50–500× naive**: qDQ/wDQ sd is {r.min():.0f}–{r.max():.0f}× the naive sd; inside "
                     f"50–500× in {int(claims.dq_sd_50_500x.sum())}/{n} scenarios.")
    if ci:
        lines.append(f"- **Mixed DQ 2–5× lower sd than the better DQ** — holds in: "
                     f"{_where(claims, 'verdict_mixed_2_5x', 'holds')}; fails in: "
                     f"{_where(claims, 'verdict_mixed_2_5x', 'fails')}; inconclusive: "
                     f"{_where(claims, 'verdict_mixed_2_5x', 'inconclusive')}. Reduction: "
                     + "; ".join(f"{r.scenario} {r.mixed_sd_reduction:.2f}× [{r.mixed_sd_reduction_ci_lo:.2f}, "
                                 f"{r.mixed_sd_reduction_ci_hi:.2f}]" for r in claims.itertuples())
                     + f". Condition: a fixed-α mix of two estimators can lower the sd by at most "
                       f"`gain_bound` = √(min(V_w, V_q)·(V_w+V_q−2C)/(V_w·V_q−C²)); here wDQ and qDQ are "
                       f"{claims.wq_corr.min():.3f}–{claims.wq_corr.max():.3f} correlated across replications, so "
                       f"the bound is {claims.gain_bound.min():.2f}–{claims.gain_bound.max():.2f}×: the claim "
                       "needs a bound of at least 2, i.e. two DQ estimates that are much less correlated or of "
                       "very different variance.")
    else:
        lines.append(f"- **Mixed DQ 2–5× lower sd than DQ**: the reduction is {claims.mixed_sd_reduction.min():.2f}–"
                     f"{claims.mixed_sd_reduction.max():.2f}×; inside 2–5× in {int(claims.mixed_2_5x_lower.sum())}/{n} "
                     "scenarios.")
    if "oracle_sd_reduction" in claims and claims.oracle_sd_reduction.notna().any():
        lines.append(f"  With α from the replications' covariance (an oracle, not deployable) the reduction is "
                     f"{claims.oracle_sd_reduction.min():.2f}–{claims.oracle_sd_reduction.max():.2f}×.")
    winners = claims.lowest_mse.value_counts()
    if ci:
        lines.append(f"- **Mixed DQ lowest MSE everywhere** — holds in: "
                     f"{_where(claims, 'verdict_mixed_lowest_mse', 'holds')}; fails in: "
                     f"{_where(claims, 'verdict_mixed_lowest_mse', 'fails')}; inconclusive (a statistical tie that "
                     f"includes mixed DQ): {_where(claims, 'verdict_mixed_lowest_mse', 'inconclusive')}. Lowest MSE "
                     "per scenario (a tie is named when no estimator wins in 95 % of bootstrap resamples): "
                     + "; ".join(f"{r.scenario} {_lab(r.lowest_mse)}" for r in claims.itertuples()) + ".")
    else:
        lines.append(f"- **Mixed DQ lowest MSE everywhere**: holds in {int(claims.mixed_lowest_mse.sum())}/{n} "
                     "scenarios; lowest MSE: " + ", ".join(f"{_lab(w)} ({c})" for w, c in winners.items()) + ".")
    if wp is not None and len(wp):
        parts = []
        for r in wp.itertuples():
            t = f"{r.scenario}: chord (GTE) {r.chord:.3f} ± {1.96 * r.chord_se:.3f}, tangent dW/dp {r.tangent:.3f}"
            if np.isfinite(r.tangent_se):
                t += f" ± {1.96 * r.tangent_se:.3f}"
            if hasattr(r, "wdq_mean"):
                t += f", wDQ mean {r.wdq_mean:.3f} ± {1.96 * r.wdq_mean_se:.3f}"
            parts.append(t)
        big = wp.loc[wp.curvature_share.abs().idxmax()]
        small = wp.loc[wp.curvature_share.abs().idxmin()]
        lines.append("- **Why DQ is biased here.** DQ estimates the tangent slope dW/dp of the mixed system at p; the "
                     "GTE is the chord from p = 0 to p = 1. They agree only where W(p) is straight. The share of the "
                     f"effect the tangent misses is largest in {big.scenario} ({100 * big.curvature_share:.0f} %) and "
                     f"smallest in {small.scenario} ({100 * small.curvature_share:.0f} %). " + "; ".join(parts) + ".")
    elif truth is not None and "slope" in truth:
        t = truth.set_index("scenario")
        w = summary[summary.estimator == "wdq"].set_index("scenario")
        parts = [f"{s}: GTE {t.loc[s, 'gte']:.2f}, dW/dp {t.loc[s, 'slope']:.2f}, wDQ {w.loc[s, 'mean']:.2f}"
                 for s in t.index if s in w.index and np.isfinite(t.loc[s, "slope"])]
        lines.append("- DQ targets the slope dW/dp of the mixed system at p, which equals the GTE only when W(p) is "
                     "linear: " + "; ".join(parts) + ".")
    cov = summary.dropna(subset=["coverage"])
    cm = cov.groupby("estimator").agg(cov_truth=("coverage", "median"), cov_mean=("coverage_of_mean", "median"),
                                      se_ratio=("se_ratio", "median"))
    lines.append(f"- 95 % batch-means CIs, median over scenarios, {reps} replications each (coverage of the truth / "
                 "of the estimator's own mean / mean SE over empirical sd): "
                 + "; ".join(f"{_lab(e)} {r.cov_truth:.0%} / {r.cov_mean:.0%} / {r.se_ratio:.2f}"
                             for e, r in cm.iterrows()) + ".")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- W(p): why DQ is biased

def run_wp_point(scenario: str, p: float, k: int, study: dict, n_jobs: int) -> dict:
    """Mean response time of the mixed system with a fraction ``p`` of jobs on the treatment policy.

    ``p = 0`` runs the control policy everywhere, ``p = 1`` the treatment everywhere, otherwise a
    Bernoulli(p) assignment; ``n_jobs`` jobs after a 50k-job warm-up, batch-means standard error.
    """
    _keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base).replace(n_jobs=int(n_jobs), warmup_jobs=50_000)
    if p <= 0:
        cfg = cfg.replace(design="control")
    elif p >= 1:
        cfg = cfg.replace(design="treatment")
    else:
        cfg = cfg.replace(design="bernoulli", p=float(p))
    c0 = time.process_time()
    tr = simulate(cfg, _seed(sc.seed, scenario, "wp", float(p), k), details=False, area_at=False)
    return {"scenario": scenario, "p": float(p), "k": k, "mean_w": float(tr.response.mean()),
            "se_w": _batch_mean_se(tr.response), "n_jobs": len(tr), "cpu_seconds": time.process_time() - c0}


def run_wp_curve(study: StudyConfig, ps=(0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0), *,
                 jobs_per_point: int = 1_000_000, seeds: int = 1, n_jobs: int | None = None, address=None,
                 progress: bool = True) -> pd.DataFrame:
    """W(p) for every scenario of ``study`` at the treatment fractions ``ps`` (see :func:`run_wp_point`).

    Returns one row per (scenario, p): ``mean_w``, ``se_w`` (over ``seeds`` runs of
    ``jobs_per_point`` jobs), ``n_jobs``. The chord from p = 0 to p = 1 has slope GTE; DQ with
    Bernoulli(p) assignment estimates the tangent slope dW/dp at the experiment's p.
    """
    study.validate()
    if any(not (0 <= p <= 1) for p in ps) or len(ps) < 3:
        raise ValueError(f"ps: need at least 3 treatment fractions in [0, 1], got {ps!r}")
    if not isinstance(jobs_per_point, (int, np.integer)) or jobs_per_point < 10_000:
        raise ValueError(f"jobs_per_point: need an integer >= 10000, got {jobs_per_point!r}")
    sd = study.to_dict()
    tasks = [dict(scenario=s, p=float(p), k=k, study=sd, n_jobs=int(jobs_per_point))
             for s in study.scenarios for p in ps for k in range(int(seeds))]
    rows = in_task_order(map_tasks(run_wp_point, tasks, n_jobs=n_jobs, address=address, progress=progress,
                                   desc="W(p) curve"), tasks)
    d = pd.DataFrame(rows)
    g = d.groupby(["scenario", "p"], sort=False)
    out = g.agg(mean_w=("mean_w", "mean"), n_jobs=("n_jobs", "sum"), cpu_seconds=("cpu_seconds", "sum"))
    out["se_w"] = g["se_w"].apply(lambda x: float(np.sqrt((x**2).sum()) / len(x)))
    out = out.reset_index()
    out["scenario"] = pd.Categorical(out["scenario"], categories=list(study.scenarios), ordered=True)
    return out.sort_values(["scenario", "p"]).reset_index(drop=True)


def wp_table(curve: pd.DataFrame, truth: pd.DataFrame, summary: pd.DataFrame | None = None,
             p: float = 0.5) -> pd.DataFrame:
    """Per scenario: the chord slope (GTE), the tangent slope dW/dp at ``p`` and DQ's mean estimates.

    ``chord`` = W(1) - W(0) from the curve (with its SE), ``tangent`` = the truth table's slope
    (runs at p +- h) or, without it, the derivative of a quadratic fit of the curve at ``p``;
    ``curvature_share`` = 1 - tangent / chord: the fraction of the effect DQ misses however long
    the run (its bias from the curvature of W(p)); ``wdq_mean`` / ``mixed_dq_mean`` from ``summary``.
    """
    rows = []
    t = truth.set_index("scenario")
    for s, g in curve.groupby("scenario", sort=False, observed=True):
        g = g.sort_values("p")
        w0, w1 = g.iloc[0], g.iloc[-1]
        row = {"scenario": s, "w0": w0.mean_w, "w1": w1.mean_w, "chord": w1.mean_w - w0.mean_w,
               "chord_se": float(np.hypot(w0.se_w, w1.se_w))}
        if s in t.index and "slope" in t and np.isfinite(t.loc[s].get("slope", np.nan)):
            row["tangent"], row["tangent_se"], row["tangent_from"] = t.loc[s, "slope"], t.loc[s, "slope_se"], "p±h runs"
        else:
            c = np.polyfit(g.p, g.mean_w, 2, w=1 / np.maximum(g.se_w, 1e-12))
            row["tangent"], row["tangent_se"], row["tangent_from"] = 2 * c[0] * p + c[1], np.nan, "quadratic fit"
        if s in t.index:
            row["gte"], row["gte_se"] = t.loc[s, "gte"], t.loc[s, "gte_se"]
        row["curvature_share"] = 1 - row["tangent"] / row["chord"] if row["chord"] != 0 else np.nan
        if summary is not None:
            sm = summary[summary.scenario.astype(str) == str(s)].set_index("estimator")
            for e in ("wdq", "qdq", "mixed_dq", "naive"):
                if e in sm.index:
                    row[f"{e}_mean"] = sm.loc[e, "mean"]
                    row[f"{e}_mean_se"] = sm.loc[e, "bias_se"]
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- where does mixed DQ gain most?

#: the default grid of :func:`scenario_search`
SEARCH_GRID = {
    "lams": (0.5, 0.7, 0.8, 0.9, 0.95),
    "pairs": (("random", "pod2"), ("pod2", "pod3"), ("random", "jsq"), ("pod2", "jsq")),
    "L_factors": (0.25, 1.0, 4.0),
    "costs": ("q", "qt"),
}

#: cost definition of the queue-length side of mixed DQ
COST_LABELS = {"q": "queue length at arrivals", "qt": "time-integral of queue length over the horizon"}


def run_search_rep(lam: float, control: str, treatment: str, rep: int, study: dict, L_factors: tuple,
                   costs: tuple) -> list[dict]:
    """One Bernoulli experiment of the search: wDQ, each queue-length DQ and each mixed DQ at every L."""
    _keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = sc.base.replace(lam=float(lam), control=control, treatment=treatment, design="bernoulli")
    L0 = default_L(cfg.total_rate)
    tr = simulate(cfg, _seed(sc.seed, "search", float(lam), control, treatment, rep), details=False,
                  area_at="qt" in costs)
    fac = {max(1, int(round(f * L0))): float(f) for f in L_factors}  # L -> its nominal factor
    rows = []
    for L, fam in dq_sweep(tr, sorted(fac), sc.n_batches, sc.alpha_batches, costs=("w", *costs)).items():
        for name, e in fam.items():
            rows.append({"lam": float(lam), "control": control, "treatment": treatment, "rep": rep, "L": L,
                         "L_factor": fac[L], "estimator": name, "estimate": e.value, "alpha": e.alpha})
    return rows


def scenario_search(study: StudyConfig, *, lams=None, pairs=None, L_factors=None, costs=None, reps: int = 30,
                    n_jobs: int | None = None, address=None, progress: bool = True) -> pd.DataFrame:
    """Replications of a Bernoulli experiment over (lambda, policy pair): raw DQ-family estimates.

    The system is ``study.base`` (N, p, experiment length) with the per-server load and the
    two policies replaced; each replication gives wDQ, qDQ with each cost definition in
    ``costs`` (``"q"``: queue length at arrivals, ``"qt"``: its time-integral over the horizon)
    and their mixed DQ, at every ``L = factor * 30 N lambda``. :func:`search_table` turns this
    into the variance gains with bootstrap CIs.
    """
    g = dict(SEARCH_GRID)
    g.update({k: v for k, v in dict(lams=lams, pairs=pairs, L_factors=L_factors, costs=costs).items() if v is not None})
    if not isinstance(reps, (int, np.integer)) or reps < 3:
        raise ValueError(f"reps: need an integer >= 3 replications per cell, got {reps!r}")
    for c in g["costs"]:
        if c not in COSTS or c == "w":
            raise ValueError(f"costs: queue-length costs must be among {tuple(x for x in COSTS if x != 'w')}, got {c!r}")
    for lam in g["lams"]:
        for c, t in g["pairs"]:
            study.base.replace(lam=float(lam), control=c, treatment=t).validate()
    sd = study.to_dict()
    tasks = [dict(lam=float(lam), control=c, treatment=t, rep=r, study=sd, L_factors=tuple(g["L_factors"]),
                  costs=tuple(g["costs"])) for lam in g["lams"] for c, t in g["pairs"] for r in range(reps)]
    done = map_tasks(run_search_rep, tasks, n_jobs=n_jobs, address=address, progress=progress, desc="scenario search")
    rows = [row for res in in_task_order(done, tasks) for row in res]
    return pd.DataFrame(rows)


def search_table(raw: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Mixed DQ's sd gain over the better single DQ, per (lambda, pair, L, cost), with 95 % bootstrap CIs.

    ``gain = min(sd wDQ, sd qDQ_cost) / sd(mixed DQ_cost)`` over the replications (resampled
    jointly, so the three estimators stay paired); ``corr`` is the correlation of wDQ and
    qDQ_cost across replications and ``gain_bound`` the largest gain any fixed alpha could give
    from that covariance, ``sqrt(min(V_w, V_q) * (V_w + V_q - 2C) / (V_w V_q - C^2))``.
    Sorted by gain, largest first.
    """
    rng = np.random.default_rng(seed)
    out = []
    keys = ["lam", "control", "treatment", "L"]
    for (lam, c, t, L), g in raw.groupby(keys, sort=False):
        p = g.pivot_table(index="rep", columns="estimator", values="estimate")
        for cost in [x for x in COSTS if x != "w" and f"{x}dq" in p]:
            mix = "mixed_dq" if cost == "q" else f"mixed_dq_{cost}"
            X = p[["wdq", f"{cost}dq", mix]].dropna().to_numpy(float)
            R = len(X)
            idx = rng.integers(0, R, size=(n_boot, R))
            B = X[idx]  # (n_boot, R, 3)
            sds = B.std(axis=1, ddof=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                gains = np.minimum(sds[:, 0], sds[:, 1]) / sds[:, 2]
            gains = gains[np.isfinite(gains)]  # a resample of identical replications has sd 0
            s = X.std(axis=0, ddof=1)
            cv = np.cov(X[:, 0], X[:, 1], ddof=1)
            det = cv[0, 0] * cv[1, 1] - cv[0, 1] ** 2
            bound = np.sqrt(min(cv[0, 0], cv[1, 1]) * (cv[0, 0] + cv[1, 1] - 2 * cv[0, 1]) / det) if det > 0 else np.inf
            out.append({"lam": lam, "control": c, "treatment": t, "L": int(L),
                        "L_factor": float(g.L_factor.iloc[0]), "cost": cost, "sd_wdq": s[0], "sd_qdq": s[1],
                        "sd_mixed": s[2], "gain": min(s[0], s[1]) / s[2],
                        "gain_ci_lo": float(np.quantile(gains, 0.025)), "gain_ci_hi": float(np.quantile(gains, 0.975)),
                        "corr": float(cv[0, 1] / np.sqrt(cv[0, 0] * cv[1, 1])), "gain_bound": float(bound),
                        "alpha_mean": float(g[g.estimator == mix].alpha.mean()), "reps": R})
    return pd.DataFrame(out).sort_values("gain", ascending=False).reset_index(drop=True)


# ----------------------------------------------------------------------------- the committed full run

#: the full study of notebook 05 (``QUICK = False``): what ``python -m asrsched.abtest.study --full`` runs
FULL = {"reps": 100, "truth_jobs": 4_000_000, "n_jobs": 500_000, "wp_jobs": 2_000_000, "wp_seeds": 2,
        "search_reps": 40, "search_jobs": 500_000}


def provenance(command: str | None = None, params: dict | None = None, load_start=None) -> dict:
    """Commit (and whether ``asrsched/`` was clean), UTC date, CPU model and count, load average, Python,
    the parameters and the exact command: what a committed result needs to be trusted
    (:func:`asrsched.core.provenance.provenance`, watching ``asrsched/``)."""
    import shlex
    import sys

    from asrsched.core.provenance import provenance as _provenance

    return _provenance(command or " ".join(shlex.quote(a) for a in ["python", "-m", "asrsched.abtest.study",
                                                                      *sys.argv[1:]]),
                       params, load_start=load_start, paths=("asrsched",))


def write_full_run(out, study: StudyConfig, *, wp_jobs: int, wp_seeds: int, search_reps: int, search_jobs: int,
                   n_jobs: int | None = None, progress: bool = True, command: str | None = None) -> Path:
    """Run the study, the W(p) curves and the scenario search; write every table and ``run.json`` into ``out``.

    Files: ``summary.csv``, ``claims.csv``, ``claims.md``, ``truth.csv``, ``truth_runs.csv``,
    ``ablation.csv``, ``switchback.csv``, ``coverage.csv``, ``little.csv``, ``estimates.csv.gz``
    (every replication's estimates), ``wp_curve.csv``, ``wp.csv``, ``search.csv``,
    ``search_raw.csv.gz`` and ``run.json`` (provenance, parameters, timings).
    """
    import os

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    study.validate()
    timings = {}
    t = time.perf_counter()
    res = run_study(study, n_jobs=n_jobs, progress=progress)
    timings.update(study_seconds=res.seconds, study_cpu_seconds=res.cpu_seconds)
    t = time.perf_counter()
    curve = run_wp_curve(study, jobs_per_point=wp_jobs, seeds=wp_seeds, n_jobs=n_jobs, progress=progress)
    timings["wp_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    sbase = dataclass_replace(study, base=study.base.replace(n_jobs=int(search_jobs)))
    raw = scenario_search(sbase, reps=search_reps, n_jobs=n_jobs, progress=progress)
    timings["search_seconds"] = time.perf_counter() - t
    summary = summarize(res)
    claims = claims_table(summary, res)
    wp = wp_table(curve, res.truth, summary, study.base.p)
    search = search_table(raw)
    tables = {"summary": summary, "claims": claims, "truth": res.truth, "truth_runs": res.truth_runs,
              "ablation": ablation_table(res), "switchback": switchback_table(res),
              "coverage": coverage_table(summary), "little": res.little, "wp_curve": curve, "wp": wp,
              "search": search}
    for name, df in tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
    res.estimates.to_csv(out / "estimates.csv.gz", index=False)
    raw.to_csv(out / "search_raw.csv.gz", index=False)
    (out / "claims.md").write_text(claims_markdown(claims, summary, res.truth, wp) + "\n")
    params = {"study": study.to_dict(), "wp_jobs": wp_jobs, "wp_seeds": wp_seeds, "search_reps": search_reps,
              "search_jobs": search_jobs, "search_grid": {k: list(v) for k, v in SEARCH_GRID.items()},
              "workers": n_jobs}
    run = provenance(command, params, load0)
    run["timings"] = timings
    (out / "run.json").write_text(json.dumps(run, indent=2, default=json_default) + "\n")
    return out


def dataclass_replace(obj, **kw):
    """``dataclasses.replace`` (a plain copy with some fields changed)."""
    from dataclasses import replace

    return replace(obj, **kw)


@dataclass
class FullRun:
    """A committed full run read back by :func:`load_full_run` (the notebook's "Reading" section)."""

    folder: Path
    run: dict
    res: StudyResult
    summary: pd.DataFrame
    claims: pd.DataFrame
    wp_curve: pd.DataFrame
    wp: pd.DataFrame
    search: pd.DataFrame


def load_full_run(folder) -> FullRun:
    """Read a folder written by :func:`write_full_run` (raises ``FileNotFoundError`` naming what is missing)."""
    folder = Path(folder)
    need = ["run.json", "estimates.csv.gz", "truth.csv", "truth_runs.csv", "little.csv", "summary.csv", "claims.csv",
            "wp_curve.csv", "wp.csv", "search.csv"]
    missing = [f for f in need if not (folder / f).exists()]
    if missing:
        raise FileNotFoundError(f"{folder}: no committed full run here (missing {', '.join(missing)}); "
                                "write one with `python -m asrsched.abtest.study --full --out <folder>`")
    run = json.loads((folder / "run.json").read_text())
    sc = StudyConfig.from_dict(run["parameters"]["study"])
    est = pd.read_csv(folder / "estimates.csv.gz")
    est["scenario"] = pd.Categorical(est["scenario"], categories=list(sc.scenarios), ordered=True)
    est["headline"] = est["headline"].astype(bool)
    rd = lambda n: pd.read_csv(folder / f"{n}.csv")  # noqa: E731
    t = run.get("timings", {})
    res = StudyResult(sc, est, rd("truth"), rd("little"), rd("truth_runs"), float(t.get("study_seconds", np.nan)),
                      float(t.get("study_cpu_seconds", np.nan)))
    return FullRun(folder, run, res, rd("summary"), rd("claims"), rd("wp_curve"), rd("wp"), rd("search"))


def main(argv=None) -> int:
    """``python -m asrsched.abtest.study --full --out figures/05_ab_estimators/full`` (see ``--help``)."""
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(prog="python -m asrsched.abtest.study",
                                 description="Run notebook 05's estimator study with W(p) curves and the scenario "
                                             "search, and write its tables plus run.json (provenance) to --out.")
    ap.add_argument("--full", action="store_true", help=f"the full study: {FULL}")
    ap.add_argument("--out", required=True, help="output folder (e.g. figures/05_ab_estimators/full)")
    ap.add_argument("--reps", type=int, help="replications per scenario (default 100 with --full, else 10)")
    ap.add_argument("--truth-jobs", type=int, help="jobs per truth run (default 4M with --full, else 1M)")
    ap.add_argument("--n-jobs", type=int, help="jobs per experiment (default 500k)")
    ap.add_argument("--wp-jobs", type=int, help="jobs per W(p) point and seed")
    ap.add_argument("--search-reps", type=int, help="replications per scenario-search cell")
    ap.add_argument("--search-jobs", type=int, help="jobs per scenario-search experiment")
    ap.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    a = ap.parse_args(argv)
    small = {"reps": 10, "truth_jobs": 1_000_000, "n_jobs": 500_000, "wp_jobs": 500_000, "wp_seeds": 1,
             "search_reps": 10, "search_jobs": 200_000}
    d = dict(FULL if a.full else small)
    for k in ("reps", "truth_jobs", "n_jobs", "wp_jobs", "search_reps", "search_jobs"):
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    base = StudyConfig().base.replace(n_jobs=int(d["n_jobs"]))
    study = StudyConfig(base=base, reps=int(d["reps"]), truth_jobs=int(d["truth_jobs"]), seed=a.seed)
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.abtest.study", *(argv or sys.argv[1:])])
    out = write_full_run(a.out, study, wp_jobs=int(d["wp_jobs"]), wp_seeds=int(d["wp_seeds"]),
                         search_reps=int(d["search_reps"]), search_jobs=int(d["search_jobs"]), n_jobs=a.workers,
                         progress=not a.quiet, command=cmd)
    run = json.loads((out / "run.json").read_text())
    print(f"wrote {out}: study {run['timings']['study_seconds']:.1f} s wall, "
          f"{run['timings']['study_cpu_seconds']:.0f} CPU-s")
    return 0


if __name__ == "__main__":
    # run the importable module's main, so worker processes find the task functions by their module name
    from asrsched.abtest.study import main as _main

    raise SystemExit(_main())
