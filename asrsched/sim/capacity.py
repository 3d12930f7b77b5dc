"""Server capacity: the saturation throughput of one engine, and the load ``rho`` it defines.

Loads are stated as a fraction of measured capacity, ``rho = arrival rate / capacity``,
where *capacity* is the request throughput (req/s) of one continuous-batching engine
whose queue never runs empty, for a given workload (duration distribution),
:class:`~asrsched.core.service.ServiceModel` and ``max_num_seqs``.

How it is measured (:func:`measure_capacity`): ``n_requests`` requests of the workload all
arrive at once (an always-full queue) and are served FCFS, so the served mix is the
workload's mix; the served rate is counted between the ``max_num_seqs``-th and the
``(n - max_num_seqs)``-th completion (the batch is full there: no ramp-up, no drain). One
value per seed; the estimate is their mean with a 95 % t-interval. Below capacity
(``rho < 1``) a run has a steady state; at or above it (``rho >= 1``) the queue grows
for as long as requests keep arriving, and latencies are finite-run transients.

Results are cached in memory and, when ``cache_dir`` is given, as JSON keyed by every
parameter and by a hash of the source code that computes them (:mod:`asrsched.sim.cache`).

>>> from asrsched.core.service import default_service_model
>>> cap = measure_capacity("librispeech", default_service_model(), n_requests=3000, seeds=(0, 1), cache_dir=None)
>>> 10 < cap.rate < 20 and cap.ci_low <= cap.rate <= cap.ci_high
True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from scipy import stats

from asrsched.core.estimate_error import estimate_error as as_estimate_error
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import Drift, DurationSource, Trace, make_source, make_trace
from asrsched.sim.cache import cache_key, code_key

__all__ = [
    "trace_capacity",
    "Capacity",
    "measure_capacity",
    "capacity_code_hash",
    "regime",
    "CAPACITY_N",
    "CAPACITY_SEEDS",
    "replica_capacity",
    "fleet_trace",
    "FLEET_WORKLOADS",
]

CAPACITY_N = 20_000
CAPACITY_SEEDS = (0, 1, 2)
_MEMO: dict[str, Capacity] = {}


@dataclass(frozen=True)
class Capacity:
    """Measured saturation throughput of one engine for a workload (see module docstring)."""

    workload: str
    rate: float  # req/s, mean over seeds
    ci_low: float
    ci_high: float
    per_seed: tuple[float, ...]
    n_requests: int
    max_num_seqs: int
    service: str  # the service model's name
    analytic: float  # ServiceModel.saturation_rate on the same traces (cross-check)
    key: str = ""

    def rho(self, rate: float | np.ndarray) -> float | np.ndarray:
        """Load as a fraction of capacity: ``rate / capacity``."""
        r = np.asarray(rate, dtype=float) / self.rate
        return float(r) if r.ndim == 0 else r

    def rate_at(self, rho: float | np.ndarray) -> float | np.ndarray:
        """Arrival rate (req/s) that puts load ``rho`` on the engine."""
        r = np.asarray(rho, dtype=float) * self.rate
        return float(r) if r.ndim == 0 else r

    def describe(self) -> str:
        """One line: the capacity with its CI and how it was measured."""
        return (
            f"{self.workload}: capacity {self.rate:.2f} req/s (95 % CI {self.ci_low:.2f}-{self.ci_high:.2f}; "
            f"{len(self.per_seed)} seeds x {self.n_requests} requests, always-full queue, "
            f"max_num_seqs={self.max_num_seqs}, service model {self.service})"
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["per_seed"] = list(self.per_seed)
        return d


def regime(rho: float | np.ndarray, overloaded: Any = False) -> str | np.ndarray:
    """``"stable"`` for ``rho < 1``, ``"overload"`` otherwise (vectorised): the one regime rule.

    ``overloaded``: runs whose queue was seen to grow without bound (a finite run can overload
    below ``rho = 1`` when capacity was measured on another mix) count as overload too.
    """
    r = np.asarray(rho, dtype=float)
    out = np.where((r < 1.0) & ~np.asarray(overloaded, bool), "stable", "overload")
    return str(out) if out.ndim == 0 else out


def capacity_code_hash() -> str:
    """Hash of the source of this module and of every ``asrsched`` module it imports (engine,
    kernels, workloads, service model, policies; :func:`asrsched.sim.cache.code_key`), so a code
    change misses the cache."""
    return code_key(__name__)


def _served_rate(finish: np.ndarray, M: int) -> float:
    f = np.sort(np.asarray(finish, float))
    n = len(f)
    lo, hi = M, n - M - 1
    if hi - lo < max(10, M):
        raise ValueError(
            f"n_requests={n} is too small to measure capacity with max_num_seqs={M}: need at least {3 * M + 11}"
        )
    return (hi - lo) / (f[hi] - f[lo])


def trace_capacity(trace: Trace, service: ServiceModel, *, max_num_seqs: int = 32, burst: bool = False) -> float:
    """Saturation throughput (req/s) of one engine on ``trace``'s requests, FCFS: the served rate while the batch
    is full (:func:`measure_capacity` runs this per seed on a trace whose requests all arrive within a
    millisecond). ``burst=True`` first moves the arrivals of any trace so (its durations, languages and tokens
    kept, ``n / (1e6 x max_num_seqs)`` s apart)."""
    from asrsched.sim.engine import simulate

    M = int(max_num_seqs)
    if burst:
        trace = Trace(np.arange(len(trace)) / (1e6 * max(M, 1)), trace.duration, trace.language, trace.tokens)
    res = simulate(trace, "fcfs", service, max_num_seqs=M, warn_overload=False, timeline_points=10)
    return _served_rate(res.records["finish"].to_numpy(), M)


def measure_capacity(
    workload: str,
    service: ServiceModel | None = None,
    *,
    max_num_seqs: int = 32,
    kappa: float | None = None,
    noise_cv: float = 0.15,
    estimate_error=None,
    n_requests: int = CAPACITY_N,
    seeds: Sequence[int] = CAPACITY_SEEDS,
    cache_dir: str | os.PathLike | None = "runs/capacity-cache",
) -> Capacity:
    """Saturation throughput (req/s) of one engine for ``workload`` (see module docstring).

    ``kappa`` overrides the service model's kappa for every language (as in a sweep);
    ``noise_cv`` is the trace's token noise, unless ``estimate_error`` gives another law
    (:func:`asrsched.core.estimate_error.estimate_error`). Cached in memory and, unless ``cache_dir`` is
    ``None``, as ``cache_dir/<key>.json``.
    """

    sm = service or default_service_model()
    if kappa is not None:
        sm = sm.with_kappa(kappa)
    if not isinstance(workload, str):
        raise ValueError(f"workload must be a workload name (str), got {type(workload).__name__}")
    M = int(max_num_seqs)
    if M < 1:
        raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
    if not len(seeds):
        raise ValueError("seeds must list at least one seed")
    key = cache_key(
        {
            "workload": workload,
            "service": sm.to_dict(),
            "max_num_seqs": M,
            "noise_cv": float(noise_cv),
            "n_requests": int(n_requests),
            "seeds": [int(s) for s in seeds],
            **({} if estimate_error is None else {"estimate_error": as_estimate_error(estimate_error).spec()}),
        },
        code=capacity_code_hash(),
    )
    if key in _MEMO:
        return _MEMO[key]
    path = Path(cache_dir) / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.exists():
        d = json.loads(path.read_text())
        d["per_seed"] = tuple(d["per_seed"])
        cap = Capacity(**d)
        _MEMO[key] = cap
        return cap
    rates, analytic = [], []
    for s in seeds:
        # every request arrives within the first millisecond: the queue is never empty
        tr = make_trace(
            workload,
            rate=1e6 * max(M, 1),
            n=int(n_requests),
            seed=int(s),
            kappa=dict(sm.kappa),
            noise_cv=noise_cv,
            estimate_error=estimate_error,
        )
        rates.append(trace_capacity(tr, sm, max_num_seqs=M))
        analytic.append(sm.saturation_rate(tr.duration, tr.language, max_num_seqs=M, tokens=tr.tokens))
    r = np.asarray(rates)
    mean = float(r.mean())
    if len(r) > 1:
        half = float(stats.t.ppf(0.975, len(r) - 1) * r.std(ddof=1) / math.sqrt(len(r)))
    else:
        half = math.nan
    cap = Capacity(
        workload=workload,
        rate=mean,
        ci_low=mean - half,
        ci_high=mean + half,
        per_seed=tuple(float(x) for x in r),
        n_requests=int(n_requests),
        max_num_seqs=M,
        service=sm.name,
        analytic=float(np.mean(analytic)),
        key=key,
    )
    _MEMO[key] = cap
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cap.to_dict(), indent=1) + "\n")
        tmp.replace(path)
    return cap


# ----------------------------------------------------------------------------- a fleet at a load

FLEET_WORKLOADS = ("librispeech", "uniform", "commonvoice_id", "mix", "drift")


def replica_capacity(
    workload: str = "librispeech", *, service: ServiceModel | None = None, max_num_seqs: int = 32
) -> float:
    """Capacity (req/s) of one replica on ``workload``: :func:`measure_capacity`'s rate (kept in memory).

    For ``"drift"`` it is the capacity of the heavier phase (uniform 5-30 s), so a drifting
    fleet stays stable throughout.
    """
    if workload not in FLEET_WORKLOADS:
        raise ValueError(f"workload: {workload!r} not in {', '.join(FLEET_WORKLOADS)}")
    src = "uniform" if workload == "drift" else workload
    return measure_capacity(src, service or default_service_model(), max_num_seqs=max_num_seqs, cache_dir=None).rate


def fleet_trace(
    workload: str,
    *,
    n_replicas: int,
    rho: float,
    n_requests: int,
    seed: int,
    service: ServiceModel | None = None,
    max_num_seqs: int = 32,
) -> tuple[Trace, float]:
    """A Poisson trace at ``rho`` x fleet capacity; returns ``(trace, total rate)``.

    ``"drift"``: LibriSpeech durations for the first third of the run, a linear ramp over
    the second third, uniform 5-30 s for the last third (the arrival rate stays constant, so
    the offered load rises from ~60 % to ``rho`` of capacity).
    """
    if not (isinstance(rho, (int, float)) and 0 < rho < 1):
        raise ValueError(f"rho: offered load must be in (0, 1) of the fleet's capacity, got {rho!r}")
    if not isinstance(n_requests, (int, np.integer)) or n_requests < 10:
        raise ValueError(f"n_requests: need an integer >= 10, got {n_requests!r}")
    service = service or default_service_model()
    total_rate = float(rho) * int(n_replicas) * replica_capacity(workload, service=service, max_num_seqs=max_num_seqs)
    if workload == "drift":
        T = n_requests / total_rate
        phases = [
            (0.0, cast(DurationSource, make_source("librispeech"))),
            (T / 3, cast(DurationSource, make_source("uniform"))),
        ]
        src: Any = Drift(phases, ramp_s=T / 3)
    else:
        src = workload
    tr = make_trace(src, rate=total_rate, n=int(n_requests), seed=int(seed), kappa=dict(service.kappa))
    tr.meta["workload"] = workload
    return tr, total_rate
