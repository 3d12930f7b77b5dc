"""Policy sweeps: loads ρ (or rates) x policies x workloads x seeds, parallel, cached and resumable.

Every point of a sweep is one simulator run of ``n_requests`` requests (as
``vllm bench serve --num-prompts`` sends a fixed number at a given rate); all
policies at the same (workload, rate, seed) replay the *same* trace (common
random numbers), so differences between policies are not sampling noise.

Load is stated as a fraction of measured capacity: every row carries
``rho = rate / capacity_rps`` (:mod:`asrsched.sim.capacity`, the engine's saturation
throughput for that workload, service model and ``max_num_seqs``) and a ``regime``:

* ``stable`` (``rho < 1`` and no growing queue): latency metrics are computed after
  dropping the first ``warmup_frac`` of the requests (warm-up), and a cell is summarised
  by the geometric mean of its seeds' paired ratios with a 95 % ratio CI
  (:func:`asrsched.sim.sweep_report.change_ci`);
* ``overload`` (``rho >= 1``, or the simulator's ``overloaded`` flag): the queue grows for
  as long as requests arrive, so latencies are *finite-run transients* that depend on
  ``n_requests`` (:func:`asrsched.sim.sweep_report.run_length_effect` shows how). A sweep with such points warns
  once with :class:`~asrsched.sim.overload.OverloadWarning`.

Points fan out through :func:`asrsched.sim.parallel.map_tasks` — joblib locally, or a
Dask cluster when ``address`` is given (one code path). Each finished point is
written at once to ``cache_dir/<hash>.parquet`` (atomic rename), keyed by every
parameter that affects it and the simulator version, so an interrupted sweep
resumes where it stopped and a repeated sweep is free.

>>> df = run_sweep(rates=[4.0], policies=["fcfs", "sjf"], workloads=["uniform"], n_requests=200,
...                cache_dir=None, workers=1, progress=False)
>>> sorted(df.policy), bool((df.completed == 200).all())
(['fcfs', 'sjf'], True)
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.metrics import summarize
from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, as_service_model, check_kappa
from asrsched.core.workloads import check_rate, check_rhos, make_source, make_trace
from asrsched.sim.capacity import Capacity, measure_capacity, regime
from asrsched.sim.engine import simulate
from asrsched.sim.overload import OverloadWarning, check_queue_can_form
from asrsched.sim.parallel import map_tasks

__all__ = [
    "run_sweep",
    "run_point",
    "point_records",
    "SIM_VERSION",
    "check_sweep",
    "check_sweep_params",
    "capacities",
    "WARMUP_FRAC",
]

WARMUP_FRAC = 0.1  # share of each run's first requests left out of the latency metrics

SIM_VERSION = "sim-1"


def check_sweep_params(rates, policies, workloads, seeds, n_requests, max_num_seqs, kappa=None) -> None:
    """Validate a sweep's parameters before any work starts (clear ``ValueError`` otherwise; a run too short
    for a queue to form warns, :func:`asrsched.sim.overload.check_queue_can_form`)."""
    if not len(rates):
        raise ValueError("rates must list at least one arrival rate (req/s)")
    for r in rates:
        check_rate(r, "rate")
    validate_policies(list(policies))
    for w in workloads:
        make_source(w)
    if not len(seeds):
        raise ValueError("seeds must list at least one seed")
    if int(n_requests) < 1:
        raise ValueError(f"n_requests must be >= 1, got {n_requests!r}")
    if int(max_num_seqs) < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs!r}")
    if kappa is not None:
        check_kappa(kappa)
    check_queue_can_form(n_requests, max_num_seqs)


def check_sweep(
    rates, rhos, policies, workloads, seeds, n_requests, max_num_seqs, kappa=None, warmup_frac=WARMUP_FRAC
) -> None:
    """Every check of :func:`run_sweep`, before any work: rates or loads (one of them), then
    :func:`check_sweep_params` and the warm-up share."""
    if (rates is None) == (rhos is None):
        raise ValueError("give either rates (req/s) or rhos (loads, fractions of capacity), not both")
    if rhos is not None:
        check_rhos(rhos)
    check_sweep_params(
        rates if rates is not None else [1.0], policies, workloads, seeds, n_requests, max_num_seqs, kappa
    )
    if not 0.0 <= float(warmup_frac) < 1.0:
        raise ValueError(f"warmup_frac must be in [0, 1), got {warmup_frac!r}")


def run_point(
    *,
    workload: str,
    rate: float,
    policy: str,
    seed: int = 0,
    n_requests: int = 2000,
    max_num_seqs: int = 32,
    service: dict | None = None,
    kappa: float | None = None,
    arrival: str = "poisson",
    arrival_kw: dict | None = None,
    noise_cv: float = 0.15,
    policy_params: dict | None = None,
    warmup_frac: float = WARMUP_FRAC,
) -> dict:
    """One simulator run; returns its parameters and :func:`~asrsched.core.metrics.summarize` metrics.

    Latency metrics (TTFT, E2EL, queueing delay) leave out the first ``warmup_frac`` of the
    requests (by arrival): the run starts from an empty server. ``completed``,
    ``request_throughput`` (the served rate) and ``rtfx`` count the whole run;
    ``measured_requests`` is how many requests the latency metrics cover. The simulator's
    overload check is reported in ``overloaded`` (the sweep warns once for all its points).
    """
    if not 0.0 <= float(warmup_frac) < 1.0:
        raise ValueError(f"warmup_frac must be in [0, 1), got {warmup_frac!r}")
    sm = as_service_model(service, kappa)
    tr = make_trace(
        workload,
        rate=rate,
        n=n_requests,
        seed=seed,
        arrival=arrival,
        arrival_kw=arrival_kw,
        kappa=dict(sm.kappa),
        noise_cv=noise_cv,
    )
    res = simulate(tr, policy, sm, max_num_seqs=max_num_seqs, policy_params=policy_params, warn_overload=False)
    out = dict(
        workload=workload,
        rate=float(rate),
        policy=policy,
        seed=int(seed),
        n_requests=int(n_requests),
        max_num_seqs=int(max_num_seqs),
        kappa=float(kappa) if kappa is not None else np.nan,
        arrival=arrival,
        service=sm.name,
        overloaded=res.overloaded,
        queue_growth_per_s=res.queue_growth_per_s,
        max_waiting=int(res.timeline["waiting"].max()),
        mean_running=float(res.timeline["running"].mean()),
        warmup_frac=float(warmup_frac),
    )
    if policy_params:
        out["policy_params"] = json.dumps(policy_params, sort_keys=True)
    whole = res.summary()
    rec = res.records
    skip = int(np.floor(float(warmup_frac) * int(n_requests)))
    measured = summarize(rec[rec["rid"].to_numpy() >= skip]) if skip else whole
    out.update(measured)
    for k in ("completed", "failed", "duration_s", "request_throughput", "rtfx"):
        if k in whole:
            out[k] = whole[k]
    out["measured_requests"] = int(measured.get("completed", 0))
    return out


def point_records(
    workload: str,
    rate: float,
    policies: Sequence[str],
    *,
    seed: int = 0,
    n_requests: int = 2000,
    max_num_seqs: int = 32,
    service: ServiceModel | dict | str | None = None,
    kappa: float | None = None,
    policy_params: dict | None = None,
    **trace_kw,
) -> dict[str, Any]:
    """Per-request records of each policy on one shared trace: ``{policy: SimResult}``.

    Each :class:`~asrsched.sim.engine.SimResult` carries the simulator's ``overloaded`` flag;
    an overloaded run warns (:class:`~asrsched.sim.overload.OverloadWarning`).
    """
    check_sweep_params([rate], policies, [workload], [seed], n_requests, max_num_seqs, kappa)
    sm = as_service_model(service, kappa)
    tr = make_trace(workload, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa), **trace_kw)
    out = {}
    for p in policies:
        out[p] = simulate(
            tr, p, sm, max_num_seqs=max_num_seqs, policy_params=(policy_params or {}).get(p) if policy_params else None
        )
    return out


def _key(task: dict) -> str:
    """Cache key of one point: hash of the code that computes it (this module and every ``asrsched``
    module it imports, :func:`asrsched.sim.cache.code_key`) + the task's parameters and seed."""
    from asrsched.sim.cache import cache_key, code_key

    return cache_key({"v": SIM_VERSION, **task}, code=code_key(__name__))


def capacities(
    workloads: Sequence[str],
    *,
    service: ServiceModel | dict | str | None = None,
    kappa: float | None = None,
    max_num_seqs: int = 32,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Capacity]:
    """Measured capacity (:func:`asrsched.sim.capacity.measure_capacity`) of each workload."""
    sm = as_service_model(service)
    return {w: measure_capacity(w, sm, max_num_seqs=max_num_seqs, kappa=kappa, cache_dir=cache_dir) for w in workloads}


def run_sweep(
    rates: Sequence[float] | None = None,
    policies: Sequence[str] = ("fcfs", "sjf", "hrrn"),
    workloads: Sequence[str] = ("librispeech", "uniform"),
    seeds: Sequence[int] = (0,),
    *,
    rhos: Sequence[float] | None = None,
    n_requests: int = 2000,
    max_num_seqs: int = 32,
    service: ServiceModel | dict | str | None = None,
    kappa: float | None = None,
    arrival: str = "poisson",
    arrival_kw: dict | None = None,
    policy_params: dict[str, dict] | None = None,
    warmup_frac: float = WARMUP_FRAC,
    cache_dir: str | os.PathLike | None = "runs/sweep-cache",
    workers: int | None = None,
    address: Any = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Run (or load from cache) every point; one row per (workload, rate, policy, seed).

    Give arrival ``rates`` (req/s) or ``rhos`` (loads ``rho``, fractions of each workload's measured
    capacity; the rate is then ``rho x capacity`` per workload), not both. Every row carries
    ``capacity_rps`` (with its 95 % CI), ``rho`` and ``regime`` (see the module docstring).
    ``policy_params`` maps a policy name to its parameters (e.g. ``{"adaptive": {"ratio_cap": 50}}``).
    ``cache_dir=None`` disables caching (of the points and of the capacities).
    """
    check_sweep(rates, rhos, policies, workloads, seeds, n_requests, max_num_seqs, kappa, warmup_frac)
    sm = as_service_model(service)
    sdict = sm.to_dict()
    cache = Path(cache_dir) if cache_dir is not None else None
    caps = capacities(
        workloads,
        service=sm,
        kappa=kappa,
        max_num_seqs=max_num_seqs,
        cache_dir=cache / "capacity" if cache is not None else None,
    )
    tasks = []
    for w in workloads:
        wl_rates = [float(r) for r in rates] if rates is not None else [float(caps[w].rate_at(x)) for x in rhos or ()]
        for r in wl_rates:
            for s in seeds:
                for p in policies:
                    t = dict(
                        workload=w,
                        rate=float(r),
                        policy=p,
                        seed=int(s),
                        n_requests=int(n_requests),
                        max_num_seqs=int(max_num_seqs),
                        service=sdict,
                        kappa=kappa,
                        arrival=arrival,
                        arrival_kw=arrival_kw,
                        policy_params=(policy_params or {}).get(p),
                        warmup_frac=float(warmup_frac),
                    )
                    tasks.append(t)
    rows: list[dict] = []
    todo = []
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        f = cache / f"{_key(t)}.parquet" if cache is not None else None
        if f is not None and f.exists():
            rows.append(pd.read_parquet(f).iloc[0].to_dict())
        else:
            todo.append(t)
    for t, res in map_tasks(
        run_point,
        todo,
        workers=workers,
        address=address,
        progress=progress,
        desc=f"sweep ({len(tasks) - len(todo)} cached)",
    ):
        if cache is not None:
            f = cache / f"{_key(t)}.parquet"
            tmp = f.with_suffix(".tmp")
            pd.DataFrame([res]).to_parquet(tmp, index=False)
            tmp.replace(f)
        rows.append(res)
    df = pd.DataFrame(rows)
    df["capacity_rps"] = df.workload.map(lambda w: caps[w].rate)
    df["capacity_ci_low"] = df.workload.map(lambda w: caps[w].ci_low)
    df["capacity_ci_high"] = df.workload.map(lambda w: caps[w].ci_high)
    df["rho"] = df.rate / df.capacity_rps
    if rhos is not None:  # the requested load, exactly (not rate / capacity after rounding)
        exact = {(w, round(float(caps[w].rate_at(x)), 9)): float(x) for w in workloads for x in rhos}
        df["rho"] = [exact.get((w, round(r, 9)), q) for w, r, q in zip(df.workload, df.rate, df.rho)]
    # a cell's regime is that of all its policies: any overloaded run (or rho >= 1) makes it a transient
    cell_ovl = df.groupby(["workload", "rate"]).overloaded.transform("any").to_numpy(bool)
    df["regime"] = regime(df.rho.to_numpy(), cell_ovl)
    order = {p: i for i, p in enumerate(policies)}
    df["_o"] = df["policy"].map(order)
    df = df.sort_values(["workload", "rate", "seed", "_o"]).drop(columns="_o").reset_index(drop=True)
    over = df[df.regime == "overload"]
    if len(over):
        cells = over.groupby(["workload", "rate"]).rho.first()
        warnings.warn(
            f"{len(cells)} of {df.groupby(['workload', 'rate']).ngroups} swept (workload, rate) cells are at or "
            f"above capacity (rho {cells.min():.2f}-{cells.max():.2f}, or a growing queue): their latencies are "
            f"finite-run transients of n_requests={int(n_requests)} and grow with it (column 'regime' = "
            f"'overload')",
            OverloadWarning,
            stacklevel=2,
        )
    return df
