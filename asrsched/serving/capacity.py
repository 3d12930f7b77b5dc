"""A real engine's capacity, in the simulator's vocabulary (:class:`asrsched.sim.capacity.Capacity`).

Two ways to a capacity, both a :class:`ServingCapacity` (a ``Capacity``: ``rate`` in req/s,
``rho(rate)``, ``rate_at(rho)``, ``to_dict()``; the regime of a load is
:func:`asrsched.sim.capacity.regime`):

* :func:`measure_saturation` measures it on the running server: a closed loop keeps the engine
  full and the served rate is counted where it is full. This is what the real-engine study states
  its loads ``rho`` against.
* :func:`capacity_rps` computes it from a service model: ``slots`` independent slots serving
  the workload's requests one at a time, ``slots / E[est_service]``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.serving.loadgen import run_coro, run_load
from asrsched.serving.request_plan import plan_requests
from asrsched.sim.capacity import Capacity

__all__ = ["ServingCapacity", "capacity_rps", "measure_saturation"]


@dataclass(frozen=True)
class ServingCapacity(Capacity):
    """The capacity of a real engine: a :class:`~asrsched.sim.capacity.Capacity` and how it was obtained.

    The fields of ``Capacity`` keep their meaning: ``workload``; ``rate`` (req/s); ``ci_low``,
    ``ci_high`` (NaN: one closed-loop run, or a closed form, gives no interval); ``per_seed`` (the
    rate of each run: one for :func:`measure_saturation`, none for :func:`capacity_rps`);
    ``n_requests`` (requests sent, or durations averaged over); ``max_num_seqs`` (requests the
    engine serves at once: its slots); ``service`` (what was measured: the served model, or the
    service model's name); ``analytic`` (the closed form: the rate itself for
    :func:`capacity_rps`, NaN for a measured server); ``key`` (empty: nothing is cached).

    Added: ``method`` (how the rate was obtained), ``completed`` (requests that completed in the
    measuring run; ``None`` for a closed form) and ``mean_duration_s`` (of the requests).
    """

    method: str = ""
    completed: int | None = None
    mean_duration_s: float = math.nan

    def describe(self) -> str:
        """One line: the capacity, how it was obtained, and of what."""
        ci = (
            f", 95 % CI {self.ci_low:.2f}-{self.ci_high:.2f}"
            if math.isfinite(self.ci_low) and math.isfinite(self.ci_high)
            else ""
        )
        done = f"{self.completed} of {self.n_requests} requests, " if self.completed is not None else ""
        return (
            f"{self.workload}: capacity {self.rate:.3f} req/s{ci} ({done}{self.method}; "
            f"{self.max_num_seqs} at once, {self.service})"
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ServingCapacity | None:
        """The inverse of :meth:`to_dict`; also reads the older form of committed results
        (``{"rate_rps", "n", "completed", "method", "mean_duration_s"}``). ``None`` for an empty one."""
        if not d:
            return None
        if "rate" not in d and "rate_rps" in d:  # a study run before the capacity was a Capacity
            r = float(d["rate_rps"])
            return cls(
                workload=str(d.get("workload", "")),
                rate=r,
                ci_low=math.nan,
                ci_high=math.nan,
                per_seed=(r,),
                n_requests=int(d.get("n", 0)),
                max_num_seqs=int(d.get("max_num_seqs", 0)),
                service=str(d.get("service", "")),
                analytic=math.nan,
                method=str(d.get("method", "")),
                completed=d.get("completed"),
                mean_duration_s=float(d.get("mean_duration_s", math.nan)),
            )
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["per_seed"] = tuple(kw.get("per_seed", ()))
        return cls(**kw)


def capacity_rps(
    service: ServiceModel,
    durations: np.ndarray,
    languages: np.ndarray | str = "en",
    slots: int = 1,
    *,
    workload: str = "custom",
) -> ServingCapacity:
    """Requests per second ``slots`` independent slots sustain on these durations: ``slots / mean
    est_service`` (:meth:`~asrsched.core.service.ServiceModel.est_service`, one request per worker at a
    time, as this package's CPU server serves them).

    ``languages``: one for all, or one per duration; a language ``service`` has no kappa for raises
    ``ValueError`` naming it (no fallback: a capacity in another language's kappa would be a
    different workload's).
    """
    d = np.asarray(durations, float)
    lang = languages if isinstance(languages, str) else np.broadcast_to(np.asarray(languages, dtype=object), d.shape)
    s = np.broadcast_to(service.est_service(d, lang), d.shape)
    rate = float(int(slots) / s.mean())
    return ServingCapacity(
        workload=workload,
        rate=rate,
        ci_low=math.nan,
        ci_high=math.nan,
        per_seed=(),
        n_requests=int(d.size),
        max_num_seqs=int(slots),
        service=service.name,
        analytic=rate,
        method=f"model: {int(slots)} worker(s) / mean estimated service time",
        mean_duration_s=float(d.mean()) if d.size else math.nan,
    )


def measure_saturation(
    url: str,
    workload: str = "librispeech",
    *,
    n: int = 8,
    slots: int = 1,
    seed: int = 0,
    model: str = "tiny.en",
    pool_size: int = 24,
    cache=None,
    stream: bool = True,
    timeout_s: float = 600.0,
    progress: bool = True,
    records_out: str | os.PathLike | None = None,
) -> ServingCapacity:
    """The engine's measured saturation throughput on ``workload``: a closed loop that keeps it full.

    ``n`` requests drawn from the workload (seeded) are all due at once; ``2 x slots`` are kept in
    flight (the engine always has work, the server's own queue stays short), served in the
    server's order (run it FCFS). The rate is counted between the ``slots``-th and the
    ``(completed - slots)``-th completion, where the engine is full (no ramp-up, no drain);
    with too few completions for that, completed / (last finish - first send). Returns a
    :class:`ServingCapacity` (``rate``, ``completed``, ``method``, ``mean_duration_s``; one run:
    no CI, ``analytic`` NaN). ``records_out``: a CSV path for the run's client records (the load
    generator's columns), written before the rate is computed.
    """
    if int(n) < 3:
        raise ValueError(f"n (saturation requests) must be an integer >= 3, got {n!r}")
    tr = make_trace(workload, rate=1.0, n=int(n), seed=seed + 104729)
    plan = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress).assign(scheduled=0.0)
    rec = run_coro(
        run_load(
            url,
            plan,
            model=model,
            stream=stream,
            max_concurrency=2 * int(slots),
            timeout_s=timeout_s,
            label="saturation",
            progress=progress,
        )
    )
    if records_out is not None:
        rec.to_csv(records_out, index=False)
    fin = np.sort(rec["finish"].to_numpy(float)[np.isfinite(rec["finish"].to_numpy(float))])
    m, c = int(slots), len(fin)
    if c - m - 1 > m - 1 and c >= 2 * m + 2:
        lo, hi = m - 1, c - m - 1
        rate, method = (hi - lo) / (fin[hi] - fin[lo]), f"completions {lo + 1}..{hi + 1} of {c} (engine full)"
    elif c:
        rate, method = c / (fin[-1] - float(np.nanmin(rec["arrival"]))), "completed / makespan"
    else:
        raise RuntimeError(f"no request of the saturation run completed: {rec['error'].dropna().unique()[:3]}")
    rate = float(rate)
    return ServingCapacity(
        workload=workload,
        rate=rate,
        ci_low=math.nan,
        ci_high=math.nan,
        per_seed=(rate,),
        n_requests=int(n),
        max_num_seqs=m,
        service=f"{model}, measured on the server",
        analytic=math.nan,
        method=f"closed loop, {2 * m} in flight: {method}",
        completed=int(c),
        mean_duration_s=float(plan["duration"].mean()),
    )
