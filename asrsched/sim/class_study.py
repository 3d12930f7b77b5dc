"""Interactive and batch traffic on one engine: what priority classes and an aging bound buy, and what they cost.

A share ``interactive_share`` of the requests is interactive (priority 0), the rest batch (priority 1), on one
workload at loads ρ of the engine's measured capacity. Each seed's trace runs under FCFS (no classes), under
strict classes (``class_<inner>``) and under classes with each aging bound (``class_<inner>_age<s>``,
:mod:`asrsched.core.priority`). Per run: the interactive class's P50 and P90 E2EL, the batch class's served
throughput (requests per second over the run) and its worst wait (the longest queueing delay of a batch request),
and how far past the bound the worst batch wait went. :func:`class_table` gives each against FCFS as a paired
change over seeds with a 95 % CI (:func:`asrsched.sim.sweep_report.change_ci`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from asrsched.core.priority import class_policy_name
from asrsched.core.service import as_service_model
from asrsched.core.workloads import Trace, check_rhos, make_trace, workload_names
from asrsched.sim.capacity import measure_capacity
from asrsched.sim.engine import simulate
from asrsched.sim.parallel import map_tasks
from asrsched.sim.sweep_report import change_ci

__all__ = ["ClassStudyConfig", "class_runs", "class_table", "CLASS_METRICS"]

#: per run: the interactive class's latency, the batch class's throughput and worst wait (s, req/s)
CLASS_METRICS = ("interactive_p50_e2el_ms", "interactive_p90_e2el_ms", "batch_throughput_rps", "batch_max_wait_ms")


@dataclass(frozen=True)
class ClassStudyConfig:
    """What :func:`class_runs` sweeps."""

    workload: str = "librispeech"
    rhos: tuple[float, ...] = (0.7, 0.9, 0.95)
    interactive_share: float = 0.3
    inner: str = "sjf"
    aging_s: tuple[float, ...] = (10.0, 30.0, 120.0)
    seeds: int = 8
    n_requests: int = 3000
    max_num_seqs: int = 4
    service: dict | None = None  # a ServiceModel's to_dict() form; None: the default (A100) model

    def __post_init__(self) -> None:
        if self.workload not in workload_names():
            raise ValueError(f"workload: unknown {self.workload!r} (known: {workload_names()})")
        check_rhos(self.rhos, "rhos")
        if not 0 < self.interactive_share < 1:
            raise ValueError(f"interactive_share: must lie in (0, 1), got {self.interactive_share!r}")
        if any(not (a >= 0 and math.isfinite(a)) for a in self.aging_s):
            raise ValueError(f"aging_s: bounds must be seconds >= 0, got {self.aging_s!r}")
        if int(self.seeds) < 2 or int(self.n_requests) < 200:
            raise ValueError("seeds: need at least 2 (and n_requests at least 200)")

    def policies(self) -> list[str]:
        """FCFS, strict classes and classes with each aging bound."""
        return ["fcfs", class_policy_name(self.inner)] + [class_policy_name(self.inner, a) for a in self.aging_s]


def _one(*, cfg: dict, rho: float, rate: float, seed: int) -> list[dict]:
    c = ClassStudyConfig(**{**cfg, "rhos": tuple(cfg["rhos"]), "aging_s": tuple(cfg["aging_s"])})
    sm = as_service_model(c.service)
    tr = make_trace(c.workload, rate=rate, n=c.n_requests, seed=seed, kappa=dict(sm.kappa))
    prio = (np.random.default_rng(seed + 7).random(len(tr)) >= c.interactive_share).astype(np.int64)
    tr = Trace(tr.arrival, tr.duration, tr.language, tr.tokens, extra=pd.DataFrame({"priority": prio}))
    rows = []
    for p in c.policies():
        r = simulate(tr, p, sm, max_num_seqs=c.max_num_seqs, warn_overload=False, timeline_points=0).records
        r = r.sort_values("rid")
        inter, batch = r[prio == 0], r[prio == 1]
        span = float(r.finish.max() - r.arrival.min())
        aging = next((a for a in c.aging_s if p == class_policy_name(c.inner, a)), math.nan)
        worst = float(batch.queue_delay.max())
        rows.append(
            dict(
                workload=c.workload,
                rho=float(rho),
                rate=float(rate),
                seed=int(seed),
                policy=p,
                aging_s=aging,
                n_requests=c.n_requests,
                regime="stable" if rho < 1 else "overload",
                interactive_p50_e2el_ms=1e3 * float(np.percentile(inter.e2el, 50)),
                interactive_p90_e2el_ms=1e3 * float(np.percentile(inter.e2el, 90)),
                batch_throughput_rps=len(batch) / span,
                batch_max_wait_ms=1e3 * worst,
                batch_max_wait_past_bound_s=worst - aging if math.isfinite(aging) else math.nan,
                max_service_s=float((r.finish - r.admit).max()),
            )
        )
    return rows


def class_runs(cfg: ClassStudyConfig, *, workers: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Every run: one row per (ρ, seed, policy)."""
    sm = as_service_model(cfg.service)
    cap = measure_capacity(cfg.workload, sm, max_num_seqs=cfg.max_num_seqs, cache_dir=None)
    d = asdict(cfg)
    tasks = [dict(cfg=d, rho=r, rate=r * cap.rate, seed=1000 + s) for r in cfg.rhos for s in range(int(cfg.seeds))]
    rows: list[dict] = []
    for _, got in map_tasks(_one, tasks, workers=workers, progress=progress, desc="classes"):
        rows.extend(got)
    return pd.DataFrame(rows).sort_values(["rho", "seed", "policy"], kind="stable").reset_index(drop=True)


def class_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (ρ, policy): each metric against FCFS (paired over seeds, 95 % ratio CI), the worst batch wait past the
    bound (max over seeds) and the largest service time seen."""
    t = change_ci(runs, CLASS_METRICS, baseline="fcfs")
    g = runs.groupby(["rate", "policy"])
    t = t.merge(g.batch_max_wait_past_bound_s.max().rename("worst_past_bound_s").reset_index(), on=["rate", "policy"])
    t = t.merge(g.max_service_s.max().rename("max_service_s").reset_index(), on=["rate", "policy"])
    t = t.merge(g.aging_s.first().reset_index(), on=["rate", "policy"])
    return t.sort_values(["rho", "aging_s"], na_position="first", kind="stable").reset_index(drop=True)
