"""Does mixed DQ pay on the ASR fleet? The mixed-DQ map of :mod:`asrsched.abtest.mixed_map`, on notebook 06's tests.

The supermarket map finds mixed DQ's gain over the better DQ largest when service times vary least.
Given its duration, an ASR request's service time is nearly deterministic, so this module asks the
same question on the fleet of :mod:`asrsched.sim.fleet`: the Bernoulli routing test of notebook 06
(control router -> treatment router, every replica running ``routing_policy``), per workload, with
the horizon counted in requests (``L``) or in seconds (``tau = L / total rate``), at each ``L_factors``
multiple of the study's ``L`` (30 s of arrivals), and mixed DQ's weight from batch means, from the
per-request Q values centred per arm, or (reference) from the replications' covariance. The cells of
one experiment come from one trajectory (:func:`~asrsched.abtest.mixed_map.dq_cells`) and the table is
:func:`~asrsched.abtest.mixed_map.map_table` (``law`` is the workload), so both maps compute their
gains, CIs and verdicts the same way.

The scheduling test has no cell here: request-level randomisation of a per-replica scheduling
policy is not defined (:mod:`asrsched.abtest.fleet_experiment`), and DQ needs it.

``python -m asrsched.abtest.asr_mixed_map --out figures/06_ab_asr_policies/mixed_map`` writes
``map.csv``, ``raw.csv.gz`` and ``run.json`` (provenance).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import pandas as pd

from asrsched.abtest.asr_fleet import ASRStudyConfig
from asrsched.abtest.dq import ALPHAS
from asrsched.abtest.fleet_experiment import fleet_trace, run_experiment
from asrsched.abtest.mixed_map import UNITS, dq_cells, write_map
from asrsched.sim.parallel import StudyPlan, keep_freed_memory, task_seed

__all__ = ["ASRMixedMapConfig", "ASRMixedMapResult", "run_asr_map_rep", "asr_map_statement", "main"]


@dataclass
class ASRMixedMapConfig:
    """The fleet (an :class:`~asrsched.abtest.asr_fleet.ASRStudyConfig`: workloads, replicas, rho, the routing
    pair, requests per experiment, warm-up, batches) and the map's cells; ``reps`` experiments per workload."""

    fleet: ASRStudyConfig = field(
        default_factory=lambda: ASRStudyConfig(n_requests=60_000, routing_designs=("bernoulli",))
    )
    units: tuple = UNITS
    L_factors: tuple = (0.3, 1.0, 3.0)
    alphas: tuple = ALPHAS
    reps: int = 400
    seed: int = 0

    def validate(self) -> ASRMixedMapConfig:
        """Raise ``ValueError`` naming the parameter before any simulation."""
        if not self.units or any(u not in UNITS for u in self.units):
            raise ValueError(f"units: need some of {UNITS}, got {self.units!r}")
        if not self.alphas or any(a not in ALPHAS for a in self.alphas):
            raise ValueError(f"alphas: need some of {ALPHAS}, got {self.alphas!r}")
        if isinstance(self.reps, bool) or not isinstance(self.reps, int) or self.reps < 3:
            raise ValueError(f"reps: need an integer >= 3 experiments per workload, got {self.reps!r}")
        self.fleet.replace(L_factors=tuple(self.L_factors), routing_designs=("bernoulli",)).validate()
        return self

    def Ls(self, total_rate: float) -> list[int]:
        """The horizons in requests at ``total_rate``."""
        return [self.fleet.L_for(total_rate, f) for f in self.L_factors]

    def to_dict(self) -> dict:
        """JSON-friendly dict (the fleet flattened)."""
        d = asdict(self)
        d["fleet"] = self.fleet.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ASRMixedMapConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        fleet = ASRStudyConfig.from_dict(d.pop("fleet"))
        for k in ("units", "L_factors", "alphas"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(fleet=fleet, **d)

    def plan(self) -> StudyPlan:
        """One task per (workload, experiment)."""
        sd = self.to_dict()
        tasks = [dict(workload=w, rep=r, study=sd) for w in self.fleet.workloads for r in range(self.reps)]
        return StudyPlan(run_asr_map_rep, tasks, prefix="asr_mixed_map", desc="ASR mixed-DQ map experiments")

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> ASRMixedMapResult:
        """The raw rows of every experiment."""
        raw = pd.DataFrame([row for rows in results for row in rows])
        return ASRMixedMapResult(self, raw, seconds, float(raw.groupby(["law", "rep"]).cpu_seconds.first().sum()))


@dataclass
class ASRMixedMapResult:
    """One row per workload, experiment, horizon unit and L (``law`` = the workload), and the timings."""

    config: ASRMixedMapConfig
    raw: pd.DataFrame
    seconds: float
    cpu_seconds: float


def run_asr_map_rep(workload: str, rep: int, study: dict) -> list[dict]:
    """One Bernoulli routing experiment on the fleet: wDQ, qDQ and mixed DQ of its mean E2EL at every cell."""
    keep_freed_memory()
    mm = ASRMixedMapConfig.from_dict(study)
    c = mm.fleet
    c0 = time.process_time()
    tr, total_rate = fleet_trace(
        workload,
        n_replicas=c.n_replicas,
        rho=c.rho,
        n_requests=c.n_requests,
        seed=task_seed(mm.seed, "asr_mixed_map", workload, rep),
        service=c.service_model(),
        max_num_seqs=c.max_num_seqs,
    )
    res = run_experiment(
        tr,
        c.test("routing", "bernoulli"),
        n_replicas=c.n_replicas,
        service=c.service_model(),
        max_num_seqs=c.max_num_seqs,
        seed=task_seed(mm.seed, "asr_mixed_map", workload, rep, "design"),
        warmup_s=c.warmup_s,
        total_rate=total_rate,
    )
    Ls = mm.Ls(total_rate)
    rows = dq_cells(
        res.trajectory("e2el"), Ls, total_rate, mm.units, mm.alphas, c.n_batches, c.alpha_batches, law=workload, rep=rep
    )
    factor = dict(zip(Ls, mm.L_factors))
    cpu = time.process_time() - c0
    for row in rows:
        row["L_factor"] = float(factor[row["L"]])
        row["cpu_seconds"] = cpu
    return rows


def asr_map_statement(table: pd.DataFrame, L_factor: float = 1.0) -> str:
    """Whether mixed DQ pays on the fleet, per workload (Markdown, computed from a :func:`map_table` of this map)."""
    at = table[(table.L_factor == L_factor) & (table.alpha != "oracle")]
    if at.empty:
        return f"The ASR mixed-DQ map has no cell at L factor {L_factor:g}."
    lines = [
        f"**Mixed DQ on the ASR fleet** (Bernoulli routing test, mean E2EL, {int(at.reps.min())} experiments per "
        f"workload, L = {L_factor:g} × 30 s of arrivals): its sd over the better DQ's, per workload and horizon unit "
        "(batch / per-request weight):"
    ]
    for (w, unit), g in at.groupby(["law", "unit"], sort=False):
        cells = " / ".join(
            f"{r.gain_better:.2f}× [{r.gain_better_ci_lo:.2f}, {r.gain_better_ci_hi:.2f}]" for r in g.itertuples()
        )
        lines.append(f"- {w}, horizon in {'requests' if unit == 'jobs' else 'seconds'}: {cells}")
    pays = at[at.gain_better_ci_lo > 1]
    hurts = at[at.gain_better_ci_hi < 1]
    best = at.loc[at.gain_better.idxmax()]
    lines.append(
        f"Mixed DQ beats the better DQ (CI above 1) in {len(pays)} of {len(at)} cells and loses (CI below 1) in "
        f"{len(hurts)}; the largest gain is {best.gain_better:.2f}× ({best.law}, horizon in {best.unit}, weight "
        f"{best.alpha}); the study's 2–5× claim holds in {int((at.verdict == 'holds').sum())} of them."
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m asrsched.abtest.asr_mixed_map --out figures/06_ab_asr_policies/mixed_map``."""
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m asrsched.abtest.asr_mixed_map",
        description="Mixed DQ's sd gain over wDQ/qDQ on the ASR fleet's Bernoulli routing test, per workload, "
        "horizon unit, L and weight; writes map.csv, raw.csv.gz and run.json (provenance) to --out.",
    )
    ap.add_argument("--out", required=True, help="output folder (e.g. figures/06_ab_asr_policies/mixed_map)")
    ap.add_argument("--reps", type=int, default=ASRMixedMapConfig.reps, help="experiments per workload")
    ap.add_argument("--n-requests", type=int, default=60_000, help="requests per experiment")
    ap.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    a = ap.parse_args(argv)
    mm = ASRMixedMapConfig(
        fleet=ASRStudyConfig(n_requests=a.n_requests, routing_designs=("bernoulli",)), reps=a.reps, seed=a.seed
    )
    try:
        mm.validate()
    except ValueError as e:
        print(f"asr_mixed_map: error: {e}", file=sys.stderr)
        return 2
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.abtest.asr_mixed_map", *(argv or sys.argv[1:])])
    out = write_map(a.out, mm, workers=a.workers, progress=not a.quiet, command=cmd, name="asr_mixed_map")
    run = json.loads((out / "run.json").read_text())
    print(f"wrote {out}: {run['timings']['seconds']:.1f} s wall, {run['timings']['cpu_seconds']:.0f} CPU-s")
    print(asr_map_statement(pd.read_csv(out / "map.csv")))
    return 0


if __name__ == "__main__":
    # run the importable module's main, so worker processes find the task function by its module name
    from asrsched.abtest.asr_mixed_map import main as _main

    raise SystemExit(_main())
