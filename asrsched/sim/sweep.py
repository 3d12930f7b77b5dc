"""Policy sweeps: rates x policies x workloads x seeds, parallel, cached and resumable.

Every point of a sweep is one simulator run of ``n_requests`` requests (as
``vllm bench serve --num-prompts`` sends a fixed number at a given rate); all
policies at the same (workload, rate, seed) replay the *same* trace (common
random numbers), so differences between policies are not sampling noise.

Points fan out through :func:`asrsched.sim.parallel.map_tasks` — joblib locally, or a
Dask cluster when ``address`` is given (one code path). Each finished point is
written at once to ``cache_dir/<hash>.parquet`` (atomic rename), keyed by every
parameter that affects it and the simulator version, so an interrupted sweep
resumes where it stopped and a repeated sweep is free.

>>> df = run_sweep(rates=[4.0], policies=["fcfs", "sjf"], workloads=["uniform"], n_requests=200,
...                cache_dir=None, n_jobs=1, progress=False)
>>> sorted(df.policy), bool((df.completed == 200).all())
(['fcfs', 'sjf'], True)
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, check_kappa, default_service_model
from asrsched.core.workloads import check_rate, make_source, make_trace
from asrsched.sim.engine import OverloadWarning, simulate
from asrsched.sim.parallel import map_tasks

__all__ = ["run_sweep", "run_point", "point_records", "SIM_VERSION", "check_sweep_params"]

SIM_VERSION = "sim-1"


def check_sweep_params(rates, policies, workloads, seeds, n_requests, max_num_seqs, kappa=None) -> None:
    """Validate a sweep's parameters before any work starts (clear ``ValueError`` otherwise)."""
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


def _service(service: ServiceModel | dict | str | None, kappa: float | None) -> ServiceModel:
    if service is None:
        sm = default_service_model()
    elif isinstance(service, ServiceModel):
        sm = service
    elif isinstance(service, dict):
        sm = ServiceModel.from_dict(service)
    else:
        sm = ServiceModel.from_json(service)
    return sm.with_kappa(kappa) if kappa is not None else sm


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
) -> dict:
    """One simulator run; returns its parameters and :func:`~asrsched.core.metrics.summarize` metrics."""
    sm = _service(service, kappa)
    tr = make_trace(workload, rate=rate, n=n_requests, seed=seed, arrival=arrival, arrival_kw=arrival_kw,
                    kappa=dict(sm.kappa), noise_cv=noise_cv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        res = simulate(tr, policy, sm, max_num_seqs=max_num_seqs, policy_params=policy_params)
    out = dict(workload=workload, rate=float(rate), policy=policy, seed=int(seed), n_requests=int(n_requests),
               max_num_seqs=int(max_num_seqs), kappa=float(kappa) if kappa is not None else np.nan,
               arrival=arrival, service=sm.name, overloaded=res.overloaded,
               queue_growth_per_s=res.queue_growth_per_s, max_waiting=int(res.timeline["waiting"].max()),
               mean_running=float(res.timeline["running"].mean()))
    if policy_params:
        out["policy_params"] = json.dumps(policy_params, sort_keys=True)
    out.update(res.summary())
    return out


def point_records(workload: str, rate: float, policies: Sequence[str], *, seed: int = 0, n_requests: int = 2000,
                  max_num_seqs: int = 32, service: ServiceModel | dict | str | None = None,
                  kappa: float | None = None, policy_params: dict | None = None, **trace_kw) -> dict[str, Any]:
    """Per-request records of each policy on one shared trace: ``{policy: SimResult}``."""
    check_sweep_params([rate], policies, [workload], [seed], n_requests, max_num_seqs, kappa)
    sm = _service(service, kappa)
    tr = make_trace(workload, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa), **trace_kw)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        for p in policies:
            out[p] = simulate(tr, p, sm, max_num_seqs=max_num_seqs,
                              policy_params=(policy_params or {}).get(p) if policy_params else None)
    return out


def _key(task: dict) -> str:
    blob = json.dumps({"v": SIM_VERSION, **task}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


def run_sweep(
    rates: Sequence[float],
    policies: Sequence[str] = ("fcfs", "sjf", "hrrn"),
    workloads: Sequence[str] = ("librispeech", "uniform"),
    seeds: Sequence[int] = (0,),
    *,
    n_requests: int = 2000,
    max_num_seqs: int = 32,
    service: ServiceModel | dict | str | None = None,
    kappa: float | None = None,
    arrival: str = "poisson",
    arrival_kw: dict | None = None,
    policy_params: dict[str, dict] | None = None,
    cache_dir: str | os.PathLike | None = "runs/sweep-cache",
    n_jobs: int | None = None,
    address: Any = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Run (or load from cache) every point; one row per (workload, rate, policy, seed).

    ``policy_params`` maps a policy name to its parameters (e.g.
    ``{"adaptive": {"ratio_cap": 50}}``). ``cache_dir=None`` disables caching.
    """
    check_sweep_params(rates, policies, workloads, seeds, n_requests, max_num_seqs, kappa)
    sm = _service(service, None)
    sdict = sm.to_dict()
    tasks = []
    for w in workloads:
        for r in rates:
            for s in seeds:
                for p in policies:
                    t = dict(workload=w, rate=float(r), policy=p, seed=int(s), n_requests=int(n_requests),
                             max_num_seqs=int(max_num_seqs), service=sdict, kappa=kappa, arrival=arrival,
                             arrival_kw=arrival_kw, policy_params=(policy_params or {}).get(p))
                    tasks.append(t)
    rows: list[dict] = []
    todo = []
    cache = Path(cache_dir) if cache_dir is not None else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        f = cache / f"{_key(t)}.parquet" if cache is not None else None
        if f is not None and f.exists():
            rows.append(pd.read_parquet(f).iloc[0].to_dict())
        else:
            todo.append(t)
    for t, res in map_tasks(run_point, todo, n_jobs=n_jobs, address=address, progress=progress,
                            desc=f"sweep ({len(tasks) - len(todo)} cached)"):
        if cache is not None:
            f = cache / f"{_key(t)}.parquet"
            tmp = f.with_suffix(".tmp")
            pd.DataFrame([res]).to_parquet(tmp, index=False)
            tmp.replace(f)
        rows.append(res)
    df = pd.DataFrame(rows)
    order = {p: i for i, p in enumerate(policies)}
    df["_o"] = df["policy"].map(order)
    return df.sort_values(["workload", "rate", "seed", "_o"]).drop(columns="_o").reset_index(drop=True)


# The study's headline numbers (paper 1), for side-by-side comparison.
PAPER_HEADLINES = [
    # (policy, workload, metric, direction, paper value %, claim)
    ("sjf", "librispeech", "p50_e2el_ms", "min", -73.0, "SJF, LibriSpeech, high load: P50 E2EL down by up to 73 %"),
    ("sjf", "librispeech", "mean_ttft_ms", "min", -93.0, "SJF, LibriSpeech, high load: TTFT down by up to 93 %"),
    ("sjf", "librispeech", "p90_e2el_ms", "max", 97.0, "SJF, LibriSpeech, extreme load: P90 E2EL up by up to 97 %"),
    ("sjf", "uniform", "p50_e2el_ms", "min", -67.0, "SJF, uniform 5-30 s: P50 E2EL down by 67 %"),
    ("hrrn", "uniform", "p50_e2el_ms", "min", -28.0, "HRRN, uniform: P50 E2EL down by up to 28 %"),
    ("hrrn", "uniform", "p90_e2el_ms", "max", 24.0, "HRRN, uniform: P90 degradation capped at 24 %"),
]


def headline(rc: pd.DataFrame) -> pd.DataFrame:
    """The study's headline claims next to this sweep's numbers (extreme over the swept rates).

    ``rc`` is :func:`asrsched.core.metrics.relative_change` output. TTFT is compared on the
    mean and on P50 (the study does not say which statistic it reports).
    """
    rows = []
    for pol, wl, m, how, paper, claim in PAPER_HEADLINES:
        d = rc[(rc.policy == pol) & (rc.workload == wl)]
        col = f"{m}_change_pct"
        if d.empty or col not in d:
            continue
        i = d[col].idxmin() if how == "min" else d[col].idxmax()
        row = {"claim": claim, "paper_pct": paper, "ours_pct": round(float(d.loc[i, col]), 1),
               "at_rate": float(d.loc[i, "rate"])}
        if m == "mean_ttft_ms" and "p50_ttft_ms_change_pct" in d:
            j = d["p50_ttft_ms_change_pct"].idxmin()
            row["ours_p50_ttft_pct"] = round(float(d.loc[j, "p50_ttft_ms_change_pct"]), 1)
        rows.append(row)
    return pd.DataFrame(rows)


def drift_records(drift, rate: float, policies: Sequence[str], *, n_requests: int = 6000, seed: int = 0,
                  max_num_seqs: int = 32, service: ServiceModel | dict | str | None = None) -> dict[str, pd.DataFrame]:
    """Per-request records of each policy on one drifting trace, with the ``phase`` each request came from."""
    from asrsched.core.workloads import Drift

    if not isinstance(drift, Drift):
        raise ValueError(f"drift must be an asrsched.core.workloads.Drift schedule, got {type(drift).__name__}")
    check_sweep_params([rate], policies, [], [seed], n_requests, max_num_seqs)
    sm = _service(service, None)
    tr = make_trace(drift, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa))
    phase = tr.extra["phase"].to_numpy() if "phase" in tr.extra else np.zeros(len(tr), int)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        for p in policies:
            rec = simulate(tr, p, sm, max_num_seqs=max_num_seqs).records
            out[p] = rec.assign(phase=phase[rec["rid"].to_numpy()])
    return out


def phase_table(results: dict[str, pd.DataFrame], phase_names: Sequence[str] | None = None) -> pd.DataFrame:
    """P50/P90 E2EL and P50 TTFT (s) per policy and drift phase."""
    rows = []
    for pol, df in results.items():
        for ph, g in df.groupby("phase"):
            rows.append({"policy": pol, "phase": phase_names[ph] if phase_names else ph, "requests": len(g),
                         "mean_audio_s": g.duration.mean(), "p50_e2el_s": g.e2el.median(),
                         "p90_e2el_s": g.e2el.quantile(0.9), "p50_ttft_s": g.ttft.median()})
    return pd.DataFrame(rows)
