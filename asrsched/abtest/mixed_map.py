"""Where mixed DQ pays: its sd gain over wDQ and qDQ against the service-time law, the horizon's unit and
length, and the way its weight alpha is estimated.

The study's claim (Jia, Johari, Si & Zheng 2026, arXiv:2605.29641): mixed DQ ``alpha wDQ + (1 - alpha) qDQ``
has a 2-5x lower standard deviation than DQ (Farias et al. 2022, arXiv:2206.02371). The map checks it
cell by cell on the supermarket model (:mod:`asrsched.abtest.model`):

* service law (:data:`LAWS`, ordered by squared coefficient of variation): deterministic, Erlang-4,
  Pareto 2.5, exponential, hyperexponential with SCV 4 (:mod:`asrsched.abtest.service_laws`);
* horizon counted in jobs (``L``) or in time (``tau = L / total_rate``), :mod:`asrsched.abtest.dq`;
* ``L = factor x 30 N lambda`` for each factor of ``L_factors``;
* alpha from batch means (``"batch"``), from the per-decision Q values centred per arm (``"job"``,
  :func:`~asrsched.abtest.dq.arm_centred_alpha`), and, as a reference that no single experiment has,
  from the replications' covariance of wDQ and qDQ (``"oracle"``).

One task per (law, replication) simulates one Bernoulli experiment (seed
:func:`~asrsched.sim.parallel.task_seed` ``(seed, "mixed_map", law, rep)``) and computes every
estimator cell of that law from the same trajectory, so the cells of a law are paired.
:func:`map_table` gives per cell ``gain_better = min(sd wDQ, sd qDQ) / sd(mixed)`` and
``gain_worse = max(...) / sd(mixed)``, each with a 95 % bootstrap CI over replications (the same
resamples for every estimator), and the claim's verdict (:func:`asrsched.abtest.study_report.verdict`:
holds if the CI of ``gain_better`` lies in [2, 5]). ``python -m asrsched.abtest.mixed_map --out
figures/05_ab_estimators/mixed_map`` (:func:`main`) writes ``map.csv``, ``raw.csv.gz`` and ``run.json``;
:func:`asrsched.abtest.study_report.load_mixed_map` reads the table back for the claims.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.abtest.dq import ALPHAS, default_L, dq_family, dq_sweep
from asrsched.abtest.full_run import full_run_provenance
from asrsched.abtest.model import SystemConfig, simulate_supermarket
from asrsched.abtest.service_laws import service_scv
from asrsched.abtest.study_report import MIXED_MAP_FILE, verdict
from asrsched.core.stats import percentile_ci
from asrsched.sim.parallel import StudyPlan, json_default, keep_freed_memory, run_study, task_seed

__all__ = [
    "LAWS",
    "UNITS",
    "MixedMapConfig",
    "MixedMapResult",
    "run_map_rep",
    "dq_cells",
    "map_table",
    "write_map",
    "main",
]

#: service law name -> the system fields it sets (every law has mean 1), in the order of their SCV
LAWS = {
    "const": {"service": "const"},
    "erlang4": {"service": "erlang", "erlang_k": 4},
    "pareto2.5": {"service": "pareto", "pareto_shape": 2.5},
    "exp": {"service": "exp"},
    "h2": {"service": "h2", "h2_scv": 4.0},
}
#: the two ways to count the DQ horizon
UNITS = ("jobs", "time")


@dataclass
class MixedMapConfig:
    """The map's parameters: ``base`` (N, lambda, the two routers, p, experiment length) with each law of ``laws``
    applied; ``reps`` replications per law, or ``reps_by_law[law]`` where given (more where a verdict is close)."""

    base: SystemConfig = field(
        default_factory=lambda: SystemConfig(
            n_servers=20, lam=0.8, control="random", treatment="pod2", p=0.5, n_requests=500_000, warmup_requests=20_000
        )
    )
    laws: tuple = tuple(LAWS)
    units: tuple = UNITS
    L_factors: tuple = (0.3, 1.0, 3.0)
    alphas: tuple = ALPHAS
    reps: int = 200
    reps_by_law: dict = field(default_factory=dict)
    n_batches: int = 20
    alpha_batches: int = 100
    seed: int = 0

    def validate(self) -> MixedMapConfig:
        """Raise ``ValueError`` naming the parameter before any simulation."""
        for law in self.laws:
            if law not in LAWS:
                raise ValueError(f"laws: {law!r} not in {tuple(LAWS)}")
            self.system(law).validate()
        if not self.laws or len(set(self.laws)) != len(self.laws):
            raise ValueError(f"laws: need distinct service laws, got {self.laws!r}")
        if not self.units or any(u not in UNITS for u in self.units):
            raise ValueError(f"units: need some of {UNITS}, got {self.units!r}")
        if not self.alphas or any(a not in ALPHAS for a in self.alphas):
            raise ValueError(f"alphas: need some of {ALPHAS}, got {self.alphas!r}")
        if not self.L_factors or any(not (np.isfinite(f) and f > 0) for f in self.L_factors):
            raise ValueError(f"L_factors: every factor must be a positive number, got {self.L_factors!r}")
        for name, r in [("reps", self.reps), *((f"reps_by_law[{k!r}]", v) for k, v in self.reps_by_law.items())]:
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 3:
                raise ValueError(f"{name}: need an integer >= 3 replications, got {r!r}")
        if any(k not in self.laws for k in self.reps_by_law):
            raise ValueError(f"reps_by_law: laws not in laws={self.laws!r}: {sorted(self.reps_by_law)!r}")
        if not isinstance(self.n_batches, (int, np.integer)) or self.n_batches < 2:
            raise ValueError(f"n_batches: need an integer >= 2, got {self.n_batches!r}")
        if not isinstance(self.alpha_batches, (int, np.integer)) or self.alpha_batches < 3:
            raise ValueError(f"alpha_batches: need an integer >= 3, got {self.alpha_batches!r}")
        if max(self.Ls) * 4 * self.n_batches > self.base.n_requests:
            raise ValueError(
                f"n_requests: {self.base.n_requests} jobs is too short for L up to {max(self.Ls)} with "
                f"{self.n_batches} batches (need n_requests >= 4 * L * n_batches)"
            )
        return self

    @property
    def Ls(self) -> list[int]:
        """The horizons in jobs, ``round(factor * default L)`` (the time horizons are these over the total rate)."""
        L0 = default_L(self.base.total_rate)
        return [max(1, int(round(f * L0))) for f in self.L_factors]

    def system(self, law: str) -> SystemConfig:
        """The Bernoulli experiment of one service law."""
        return self.base.replace(design="bernoulli", **LAWS[law])

    def reps_of(self, law: str) -> int:
        """Replications of ``law``."""
        return int(self.reps_by_law.get(law, self.reps))

    def to_dict(self) -> dict:
        """JSON-friendly dict (the base system flattened)."""
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> MixedMapConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        base = dict(d.pop("base"))
        if base.get("rates") is not None:
            base["rates"] = tuple(base["rates"])
        for k in ("laws", "units", "L_factors", "alphas"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(base=SystemConfig(**base), **d)

    def plan(self) -> StudyPlan:
        """One task per (law, replication), for :func:`~asrsched.sim.parallel.run_study`."""
        sd = self.to_dict()
        tasks = [dict(law=law, rep=r, study=sd) for law in self.laws for r in range(self.reps_of(law))]
        return StudyPlan(run_map_rep, tasks, prefix="mixed_map", desc="mixed-DQ map replications")

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> MixedMapResult:
        """The :class:`MixedMapResult` from the tasks' rows."""
        raw = pd.DataFrame([row for rows in results for row in rows])
        return MixedMapResult(self, raw, seconds, float(raw.groupby(["law", "rep"]).cpu_seconds.first().sum()))


@dataclass
class MixedMapResult:
    """The map's raw replications (one row per law, replication, unit and L factor) and its timing."""

    config: MixedMapConfig
    raw: pd.DataFrame
    seconds: float
    cpu_seconds: float


def dq_cells(
    traj, Ls, total_rate: float, units=UNITS, alphas=ALPHAS, n_batches: int = 20, alpha_batches: int = 100, **key
) -> list[dict]:
    """wDQ, qDQ and mixed DQ (each weight of ``alphas``) of one trajectory at every horizon unit and ``L`` of ``Ls``
    (jobs; the time horizon is ``tau = L / total_rate``): one row per (unit, L), each carrying ``key`` -- the rows
    :func:`map_table` reads. Shared by this map and the ASR fleet's (:mod:`asrsched.abtest.asr_mixed_map`)."""
    Ls = list(Ls)
    rows = [dict(key, unit=u, L=L, tau=L / total_rate) for u in units for L in Ls]
    for a in alphas:
        fams = []
        if "jobs" in units:
            sw = dq_sweep(traj, Ls, n_batches, alpha_batches, alpha=a)
            fams += [sw[L] for L in Ls]
        if "time" in units:
            kw = dict(n_batches=n_batches, alpha_batches=alpha_batches, alpha=a)
            fams += [dq_family(traj, tau=L / total_rate, **kw) for L in Ls]
        for row, fam in zip(rows, fams):
            row.update(wdq=fam["wdq"].value, qdq=fam["qdq"].value)
            row[f"mixed_{a}"], row[f"alpha_{a}"] = fam["mixed_dq"].value, fam["mixed_dq"].alpha
    return rows


def run_map_rep(law: str, rep: int, study: dict) -> list[dict]:
    """One replication of one law: wDQ, qDQ and mixed DQ (each alpha) at every unit and L, from one trajectory."""
    keep_freed_memory()
    mm = MixedMapConfig.from_dict(study)
    c0 = time.process_time()
    cfg = mm.system(law)
    tr = simulate_supermarket(cfg, task_seed(mm.seed, "mixed_map", law, rep), details=False, area_at=False)
    rows = dq_cells(tr, mm.Ls, cfg.total_rate, mm.units, mm.alphas, mm.n_batches, mm.alpha_batches, law=law, rep=rep)
    factor = dict(zip(mm.Ls, mm.L_factors))
    cpu = time.process_time() - c0
    for row in rows:
        row["L_factor"] = float(factor[row["L"]])
        row["cpu_seconds"] = cpu
    return rows


def _oracle_sd(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For resamples ``X`` of shape (B, R, 2) of (wDQ, qDQ): the minimum-variance weight of each resample and the
    sd of that mix (the oracle; :func:`~asrsched.abtest.dq.optimal_alpha` per resample)."""
    d = X - X.mean(axis=1, keepdims=True)
    r = X.shape[1] - 1
    vw, vq, c = (d[..., 0] ** 2).sum(1) / r, (d[..., 1] ** 2).sum(1) / r, (d[..., 0] * d[..., 1]).sum(1) / r
    den = vw + vq - 2 * c
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(den > 1e-300, (vq - c) / den, 0.5)
    var = a**2 * vw + (1 - a) ** 2 * vq + 2 * a * (1 - a) * c
    return a, np.sqrt(np.maximum(var, 0.0))


def map_table(raw: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per (law, unit, L factor, alpha) (``law`` may name any group of replications, e.g. a workload): the sds, ``gain_better``/``gain_worse`` with 95 % bootstrap CIs and the
    verdict of "2-5x lower sd" (over the better DQ, as the study checks it; ``verdict_worse`` over the worse);
    ``vs_batch`` = sd(mixed, batch alpha) / sd(this mix) with its CI (above 1: this weight beats the batch weight).

    The replications of a cell are resampled jointly (``n_boot`` times, one draw shared by every estimator of
    the cell). ``alpha = "oracle"`` mixes with the weight from the replications' covariance, recomputed in
    each resample (a ceiling no single experiment reaches). ``alpha_mean``/``alpha_sd`` are over replications;
    ``alpha_oracle`` the oracle weight; ``corr`` the correlation of wDQ and qDQ.
    """
    rng = np.random.default_rng(seed)
    out = []
    laws = list(dict.fromkeys(raw["law"]))
    for (law, unit, f), g in raw.groupby(["law", "unit", "L_factor"], sort=False):
        alphas = [a for a in ALPHAS if f"mixed_{a}" in g]
        cols = ["wdq", "qdq", *(f"mixed_{a}" for a in alphas)]
        X = g[cols].dropna().to_numpy(float)
        R = len(X)
        idx = rng.integers(0, R, size=(n_boot, R))
        B = X[idx]  # (n_boot, R, k)
        sdb = B.std(axis=1, ddof=1)
        a_or, sd_or_b = _oracle_sd(B[..., :2])
        best, worst = np.minimum(sdb[:, 0], sdb[:, 1]), np.maximum(sdb[:, 0], sdb[:, 1])
        s = X.std(axis=0, ddof=1)
        a_full, sd_or = _oracle_sd(X[None, :, :2])
        cv = np.cov(X[:, 0], X[:, 1], ddof=1)
        mixes = [(a, s[2 + i], sdb[:, 2 + i]) for i, a in enumerate(alphas)] + [("oracle", sd_or[0], sd_or_b)]
        ref = {a: (m, mb) for a, m, mb in mixes}.get("batch")  # the batch weight, which the others are compared with
        for a, sd_mix, sd_mix_b in mixes:
            with np.errstate(divide="ignore", invalid="ignore"):
                lo, hi = percentile_ci(best / sd_mix_b)
                wlo, whi = percentile_ci(worst / sd_mix_b)
                vlo, vhi = percentile_ci(ref[1] / sd_mix_b) if ref is not None else (np.nan, np.nan)
            al = g[f"alpha_{a}"].to_numpy(float) if a != "oracle" else np.array([a_full[0]])
            out.append(
                {
                    "law": law,
                    "scv": service_scv(**LAWS[law]) if law in LAWS else np.nan,
                    "unit": unit,
                    "L_factor": float(f),
                    "L": int(g.L.iloc[0]),
                    "tau": float(g.tau.iloc[0]),
                    "alpha": a,
                    "sd_wdq": s[0],
                    "sd_qdq": s[1],
                    "sd_mixed": sd_mix,
                    "gain_better": min(s[0], s[1]) / sd_mix,
                    "gain_better_ci_lo": lo,
                    "gain_better_ci_hi": hi,
                    "gain_worse": max(s[0], s[1]) / sd_mix,
                    "gain_worse_ci_lo": wlo,
                    "gain_worse_ci_hi": whi,
                    "verdict": verdict(lo, hi, 2, 5),
                    "verdict_worse": verdict(wlo, whi, 2, 5),
                    "vs_batch": ref[0] / sd_mix if ref is not None else np.nan,
                    "vs_batch_ci_lo": vlo,
                    "vs_batch_ci_hi": vhi,
                    "alpha_mean": float(np.mean(al)),
                    "alpha_sd": float(np.std(al, ddof=1)) if al.size > 1 else 0.0,
                    "alpha_oracle": float(a_full[0]),
                    "corr": float(cv[0, 1] / np.sqrt(cv[0, 0] * cv[1, 1])),
                    "reps": R,
                }
            )
    t = pd.DataFrame(out)
    t["_l"] = t.law.map({k: i for i, k in enumerate(laws)})
    t["_a"] = t.alpha.map({a: i for i, a in enumerate((*ALPHAS, "oracle"))})
    return t.sort_values(["_l", "unit", "L_factor", "_a"]).drop(columns=["_l", "_a"]).reset_index(drop=True)


def write_map(
    out,
    mm,
    *,
    workers: int | None = None,
    progress: bool = True,
    command: str | None = None,
    name: str = "mixed_map",
) -> Path:
    """Run a map study ``mm`` (:class:`MixedMapConfig`, or any study whose result has ``raw``, ``seconds`` and
    ``cpu_seconds``) and write ``map.csv`` (:func:`map_table`), ``raw.csv.gz`` (every replication) and ``run.json``
    (:func:`~asrsched.abtest.full_run.full_run_provenance`, its parameters under ``name``, with the timings)."""
    import os

    mm.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    res = run_study(mm, workers=workers, progress=progress)
    table = map_table(res.raw)
    table.to_csv(out / MIXED_MAP_FILE, index=False)
    res.raw.to_csv(out / "raw.csv.gz", index=False)
    run = full_run_provenance(command, {name: mm.to_dict(), "workers": workers}, load0)
    run["timings"] = {"seconds": res.seconds, "cpu_seconds": res.cpu_seconds}
    (out / "run.json").write_text(json.dumps(run, indent=2, default=json_default) + "\n")
    return out


def main(argv=None) -> int:
    """``python -m asrsched.abtest.mixed_map --out figures/05_ab_estimators/mixed_map`` (see ``--help``)."""
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m asrsched.abtest.mixed_map",
        description="Map mixed DQ's sd gain over wDQ/qDQ by service law, horizon unit, L and alpha; "
        "write map.csv, raw.csv.gz and run.json (provenance) to --out.",
    )
    ap.add_argument("--out", required=True, help="output folder (e.g. figures/05_ab_estimators/mixed_map)")
    ap.add_argument("--reps", type=int, default=MixedMapConfig.reps, help="replications per service law")
    ap.add_argument("--more-reps", action="append", default=[], metavar="LAW=REPS", help="replications of one law")
    ap.add_argument("--n-requests", type=int, help="jobs per experiment (default 500k)")
    ap.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    a = ap.parse_args(argv)
    more = {}
    for item in a.more_reps:
        law, _, r = item.partition("=")
        if not r.isdigit():
            raise SystemExit(f"--more-reps: need LAW=REPS, got {item!r}")
        more[law] = int(r)
    mm = MixedMapConfig(reps=a.reps, reps_by_law=more, seed=a.seed)
    if a.n_requests is not None:
        mm.base = mm.base.replace(n_requests=int(a.n_requests))
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.abtest.mixed_map", *(argv or sys.argv[1:])])
    out = write_map(a.out, mm, workers=a.workers, progress=not a.quiet, command=cmd)
    run = json.loads((out / "run.json").read_text())
    print(f"wrote {out}: {run['timings']['seconds']:.1f} s wall, {run['timings']['cpu_seconds']:.0f} CPU-s")
    return 0


if __name__ == "__main__":
    # run the importable module's main, so worker processes find the task function by its module name
    from asrsched.abtest.mixed_map import main as _main

    raise SystemExit(_main())
