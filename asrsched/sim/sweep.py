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
  as a mean over seeds with a 95 % CI (:func:`change_ci`);
* ``overload`` (``rho >= 1``, or the simulator's ``overloaded`` flag): the queue grows for
  as long as requests arrive, so latencies are *finite-run transients* that depend on
  ``n_requests`` (:func:`run_length_effect` shows how). A sweep with such points warns
  once with :class:`~asrsched.sim.engine.OverloadWarning`.

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

import contextlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from asrsched.core.metrics import summarize
from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel, check_kappa, default_service_model
from asrsched.core.workloads import check_rate, make_source, make_trace
from asrsched.sim.capacity import Capacity, measure_capacity, regime
from asrsched.sim.engine import OverloadWarning, simulate
from asrsched.sim.parallel import map_tasks

__all__ = ["run_sweep", "run_point", "point_records", "SIM_VERSION", "check_sweep_params", "capacities",
           "change_ci", "headline", "refine_headline", "run_length_effect", "throughput_spread", "PAPER_HEADLINES",
           "WARMUP_FRAC", "HEADLINE_COLUMNS", "common_seeds", "phase_loads", "drift_records", "phase_table"]

WARMUP_FRAC = 0.1  # share of each run's first requests left out of the latency metrics

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
    sm = _service(service, kappa)
    tr = make_trace(workload, rate=rate, n=n_requests, seed=seed, arrival=arrival, arrival_kw=arrival_kw,
                    kappa=dict(sm.kappa), noise_cv=noise_cv)
    res = simulate(tr, policy, sm, max_num_seqs=max_num_seqs, policy_params=policy_params, warn_overload=False)
    out = dict(workload=workload, rate=float(rate), policy=policy, seed=int(seed), n_requests=int(n_requests),
               max_num_seqs=int(max_num_seqs), kappa=float(kappa) if kappa is not None else np.nan,
               arrival=arrival, service=sm.name, overloaded=res.overloaded,
               queue_growth_per_s=res.queue_growth_per_s, max_waiting=int(res.timeline["waiting"].max()),
               mean_running=float(res.timeline["running"].mean()), warmup_frac=float(warmup_frac))
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


def point_records(workload: str, rate: float, policies: Sequence[str], *, seed: int = 0, n_requests: int = 2000,
                  max_num_seqs: int = 32, service: ServiceModel | dict | str | None = None,
                  kappa: float | None = None, policy_params: dict | None = None, **trace_kw) -> dict[str, Any]:
    """Per-request records of each policy on one shared trace: ``{policy: SimResult}``.

    Each :class:`~asrsched.sim.engine.SimResult` carries the simulator's ``overloaded`` flag;
    an overloaded run warns (:class:`~asrsched.sim.engine.OverloadWarning`).
    """
    check_sweep_params([rate], policies, [workload], [seed], n_requests, max_num_seqs, kappa)
    sm = _service(service, kappa)
    tr = make_trace(workload, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa), **trace_kw)
    out = {}
    for p in policies:
        out[p] = simulate(tr, p, sm, max_num_seqs=max_num_seqs,
                          policy_params=(policy_params or {}).get(p) if policy_params else None)
    return out


def _key(task: dict) -> str:
    """Cache key of one point: hash of the code that computes it (this module and every ``asrsched``
    module it imports, :func:`asrsched.sim.cache.code_key`) + the task's parameters and seed."""
    from asrsched.sim.cache import cache_key, code_key

    return cache_key({"v": SIM_VERSION, **task}, code=code_key(__name__))


def capacities(workloads: Sequence[str], *, service: ServiceModel | dict | str | None = None,
               kappa: float | None = None, max_num_seqs: int = 32,
               cache_dir: str | os.PathLike | None = None) -> dict[str, Capacity]:
    """Measured capacity (:func:`asrsched.sim.capacity.measure_capacity`) of each workload."""
    sm = _service(service, None)
    return {w: measure_capacity(w, sm, max_num_seqs=max_num_seqs, kappa=kappa, cache_dir=cache_dir)
            for w in workloads}


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
    if (rates is None) == (rhos is None):
        raise ValueError("give either rates (req/s) or rhos (loads, fractions of capacity), not both")
    if rhos is not None:
        if not len(rhos):
            raise ValueError("rhos must list at least one load (fraction of capacity, > 0)")
        for x in rhos:
            if not (isinstance(x, (int, float, np.integer, np.floating)) and np.isfinite(x) and x > 0):
                raise ValueError(f"rhos must be positive fractions of capacity (rho), got {x!r}")
    check_sweep_params(rates if rates is not None else [1.0], policies, workloads, seeds, n_requests,
                       max_num_seqs, kappa)
    if not 0.0 <= float(warmup_frac) < 1.0:
        raise ValueError(f"warmup_frac must be in [0, 1), got {warmup_frac!r}")
    sm = _service(service, None)
    sdict = sm.to_dict()
    cache = Path(cache_dir) if cache_dir is not None else None
    caps = capacities(workloads, service=sm, kappa=kappa, max_num_seqs=max_num_seqs,
                      cache_dir=cache / "capacity" if cache is not None else None)
    tasks = []
    for w in workloads:
        wl_rates = [float(r) for r in rates] if rates is not None else [float(caps[w].rate_at(x)) for x in rhos or ()]
        for r in wl_rates:
            for s in seeds:
                for p in policies:
                    t = dict(workload=w, rate=float(r), policy=p, seed=int(s), n_requests=int(n_requests),
                             max_num_seqs=int(max_num_seqs), service=sdict, kappa=kappa, arrival=arrival,
                             arrival_kw=arrival_kw, policy_params=(policy_params or {}).get(p),
                             warmup_frac=float(warmup_frac))
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
    for t, res in map_tasks(run_point, todo, workers=workers, address=address, progress=progress,
                            desc=f"sweep ({len(tasks) - len(todo)} cached)"):
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
            f"'overload')", OverloadWarning, stacklevel=2)
    return df


def change_ci(df: pd.DataFrame, metrics: Sequence[str] = ("p50_e2el_ms", "p90_e2el_ms", "mean_ttft_ms",
                                                          "p50_ttft_ms"),
              *, baseline: str = "fcfs", level: float = 0.95) -> pd.DataFrame:
    """Percent change vs ``baseline`` per (workload, rate, policy): mean over seeds with a t-interval.

    Each seed's change is paired (the policy and the baseline replay the same trace):
    ``100 * (metric / baseline_metric - 1)``; the cell's value is the mean of these, with
    ``<metric>_change_ci_low/_high`` the ``level`` t-interval (NaN with one seed) and
    ``n_seeds`` the number of pairs. Carries ``rho``, ``regime``, ``capacity_rps``,
    ``n_requests`` and the served rate (``request_throughput``, mean over seeds) when present.
    """
    metrics = [m for m in metrics if m in df]
    if baseline not in set(df.policy):
        raise ValueError(f"baseline policy {baseline!r} is not in the table (has {sorted(set(df.policy))})")
    keys = ["workload", "rate", "seed"]
    base = df[df.policy == baseline][keys + metrics].rename(columns={m: f"{m}_base" for m in metrics})
    m = df.merge(base, on=keys, how="inner")
    for k in metrics:
        m[f"{k}_change_pct"] = 100.0 * (m[k] / m[f"{k}_base"] - 1.0)
    extra = [c for c in ("rho", "regime", "capacity_rps", "n_requests", "service") if c in m]
    g = m.groupby(["workload", "rate", "policy"], sort=False)
    out = g[[*metrics, *[f"{k}_change_pct" for k in metrics]]].mean()
    out["n_seeds"] = g.size()
    if "request_throughput" in m:
        out["request_throughput"] = g["request_throughput"].mean()
    for c in extra:
        out[c] = g[c].first()
    n = out["n_seeds"].to_numpy()
    tq = np.where(n > 1, stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)), np.nan)
    for k in metrics:
        sd = g[f"{k}_change_pct"].std(ddof=1).to_numpy()
        half = tq * sd / np.sqrt(n)
        out[f"{k}_change_ci_low"] = out[f"{k}_change_pct"].to_numpy() - half
        out[f"{k}_change_ci_high"] = out[f"{k}_change_pct"].to_numpy() + half
    return out.reset_index()


def common_seeds(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` whose seed every policy of its (workload, rate) cell ran.

    :func:`refine_headline` adds seeds for some policies only; averages across policies compare
    like with like only on the shared seeds (the same traces).
    """
    keys = ["workload", "rate"]
    n_pol = df.groupby(keys).policy.transform("nunique")
    n_have = df.groupby([*keys, "seed"]).policy.transform("nunique")
    return df[n_have == n_pol]


def throughput_spread(df: pd.DataFrame) -> pd.DataFrame:
    """Spread of the served rate across policies per (workload, rate), in % of its mean over policies.

    Per-seed served rates are averaged over the seeds every policy ran (:func:`common_seeds`)
    first. Columns: ``workload, rate, rho, regime, spread_pct, lowest, highest`` (the policies at
    the two ends).
    """
    df = common_seeds(df)
    g = df.groupby(["workload", "rate", "policy"], as_index=False).agg(
        request_throughput=("request_throughput", "mean"),
        **({"rho": ("rho", "first")} if "rho" in df else {}),
        **({"regime": ("regime", "first")} if "regime" in df else {}))
    rows = []
    for (w, r), c in g.groupby(["workload", "rate"]):
        t = c.set_index("policy").request_throughput
        rows.append({"workload": w, "rate": r, "rho": c["rho"].iloc[0] if "rho" in c else np.nan,
                     "regime": c["regime"].iloc[0] if "regime" in c else "",
                     "spread_pct": float((t.max() - t.min()) / t.mean() * 100), "lowest": t.idxmin(),
                     "highest": t.idxmax()})
    return pd.DataFrame(rows)


# The headline numbers of the scheduling study (Makwana et al. 2026), for side-by-side comparison. The study reports them as
# "up to" over its 1-25 req/s sweep on its GPU; here each is matched at a stated load rho.
PAPER_HEADLINES = [
    # (policy, workload, metric, paper value %, claim)
    ("sjf", "librispeech", "p50_e2el_ms", -73.0, "SJF, LibriSpeech, high load: P50 E2EL down by up to 73 %"),
    ("sjf", "librispeech", "mean_ttft_ms", -93.0, "SJF, LibriSpeech, high load: TTFT down by up to 93 % (ours: mean TTFT)"),
    ("sjf", "librispeech", "p50_ttft_ms", -93.0, "SJF, LibriSpeech, high load: TTFT down by up to 93 % (ours: P50 TTFT)"),
    ("sjf", "librispeech", "p90_e2el_ms", 97.0, "SJF, LibriSpeech, extreme load: P90 E2EL up by up to 97 %"),
    ("sjf", "uniform", "p50_e2el_ms", -67.0, "SJF, uniform 5-30 s: P50 E2EL down by 67 %"),
    ("hrrn", "uniform", "p50_e2el_ms", -28.0, "HRRN, uniform: P50 E2EL down by up to 28 %"),
    ("hrrn", "uniform", "p90_e2el_ms", 24.0, "HRRN, uniform: P90 degradation capped at 24 %"),
]

HEADLINE_COLUMNS = ["claim", "paper_pct", "ours_pct", "ours_ci_low", "ours_ci_high", "rho", "regime", "n_requests"]


def _nearest_cell(cells: pd.DataFrame, target: float) -> pd.Series | None:
    if cells.empty:
        return None
    return cells.loc[(cells.rho - float(target)).abs().idxmin()]


def headline(df: pd.DataFrame, *, rho: float = 0.95, overload_rho: float | None = 1.3,
             claims: Sequence[tuple] = PAPER_HEADLINES) -> pd.DataFrame:
    """The study's headline claims next to this sweep's numbers, each matched at a stated load.

    ``df`` is :func:`run_sweep` output (one row per seed). For each claim:

    * a ``stable`` row at the swept stable load (``rho < 1``) nearest to ``rho``: the mean over
      seeds of the paired change vs FCFS, with its 95 % CI (:func:`change_ci`);
    * where the sweep reaches overload, an ``overload`` row at the swept load ``>= 1`` nearest to
      ``overload_rho`` (``None`` skips these): a finite-run transient of ``n_requests`` requests.

    Never the extreme over all rates. Columns: ``claim, paper_pct, ours_pct, ours_ci_low,
    ours_ci_high, rho, regime, n_requests`` then ``policy, workload, metric, rate, n_seeds,
    service_model``.
    """
    if "rho" not in df or "regime" not in df:
        raise ValueError("headline needs run_sweep output with the columns rho and regime")
    rc = change_ci(df, metrics=sorted({c[2] for c in claims}))
    rows = []
    for pol, wl, m, paper, claim in claims:
        d = rc[(rc.policy == pol) & (rc.workload == wl)]
        if d.empty or f"{m}_change_pct" not in d:
            continue
        picks = [_nearest_cell(d[d.regime == "stable"], rho)]
        if overload_rho is not None:
            picks.append(_nearest_cell(d[d.regime == "overload"], overload_rho))
        for c in picks:
            if c is None:
                continue
            rows.append({"claim": claim, "paper_pct": paper, "ours_pct": float(c[f"{m}_change_pct"]),
                         "ours_ci_low": float(c[f"{m}_change_ci_low"]), "ours_ci_high": float(c[f"{m}_change_ci_high"]),
                         "rho": float(c.rho), "regime": c.regime, "n_requests": int(c.n_requests),
                         "policy": pol, "workload": wl, "metric": m, "rate": float(c.rate), "n_seeds": int(c.n_seeds),
                         "service_model": c.get("service", "")})
    return pd.DataFrame(rows, columns=HEADLINE_COLUMNS + ["policy", "workload", "metric", "rate", "n_seeds",
                                                          "service_model"])


def refine_headline(df: pd.DataFrame, *, rho: float = 0.95, claims: Sequence[tuple] = PAPER_HEADLINES,
                    target_halfwidth_pp: float = 5.0, max_seeds: int = 64, **sweep_kw) -> pd.DataFrame:
    """Add seeds to the stable headline cells until each claim's 95 % CI half-width is below target.

    The cells are the ones :func:`headline` picks for ``rho``; only the claims' policies and
    FCFS are re-run, with the seeds doubling (0..k-1, cached points are reused) up to
    ``max_seeds``. ``sweep_kw`` are the :func:`run_sweep` keywords of the original sweep
    (``n_requests``, ``service``, ``cache_dir``, ...). Returns ``df`` with the new rows; a claim
    still above target at ``max_seeds`` is reported with :class:`UserWarning`.
    """
    if target_halfwidth_pp <= 0:
        raise ValueError(f"target_halfwidth_pp must be > 0, got {target_halfwidth_pp!r}")
    sweep_kw = {k: v for k, v in sweep_kw.items() if k not in ("rates", "rhos", "seeds", "policies", "workloads")}
    out = df
    for wl in dict.fromkeys(c[1] for c in claims):
        mine = [c for c in claims if c[1] == wl]
        st = df[(df.workload == wl) & (df.regime == "stable")]
        if st.empty:
            continue
        rate = float(st.loc[(st.rho - float(rho)).abs().idxmin(), "rate"])
        pols = ["fcfs", *dict.fromkeys(c[0] for c in mine)]
        n = int(df[(df.workload == wl) & (df.rate == rate) & (df.policy == "fcfs")].seed.nunique())
        while True:
            cell = out[(out.workload == wl) & (out.rate == rate) & out.policy.isin(pols)]
            ci = change_ci(cell, metrics=sorted({c[2] for c in mine}))
            half = max(float((ci.loc[ci.policy == p, f"{m}_change_ci_high"] - ci.loc[ci.policy == p, f"{m}_change_pct"])
                             .fillna(np.inf).max()) for p, _, m, _, _ in mine)
            if half < target_halfwidth_pp or n >= max_seeds:
                if half >= target_halfwidth_pp:
                    warnings.warn(f"{wl} at rho {cell.rho.iloc[0]:.2f}: CI half-width {half:.1f} pp after {n} seeds "
                                  f"(target {target_halfwidth_pp:g} pp, max_seeds={max_seeds})", UserWarning,
                                  stacklevel=2)
                break
            new_n = min(max(2 * n, n + 2), int(max_seeds))
            have = set(cell.seed)
            seeds = [s for s in range(new_n) if s not in have]
            add = run_sweep([rate], pols, [wl], seeds, **sweep_kw) if seeds else cell.iloc[:0]
            # the cell's regime and rho come from the original sweep (the same rate, the same capacity)
            add = add.assign(rho=cell.rho.iloc[0], regime=cell.regime.iloc[0])
            out = pd.concat([out, add], ignore_index=True)
            n = new_n
    return out


def run_length_effect(workload: str = "librispeech", *, rhos: Sequence[float] = (0.95, 1.3),
                      n_list: Sequence[int] = (500, 1000, 2000, 4000, 8000), policy: str = "sjf",
                      metrics: Sequence[str] = ("p50_e2el_ms", "p90_e2el_ms"), seeds: Sequence[int] = (0, 1, 2, 3, 4),
                      **sweep_kw) -> pd.DataFrame:
    """How the change vs FCFS moves with the run length ``n_requests``, at each load.

    Below capacity it settles as ``n`` grows; above it, it keeps moving (a finite-run
    transient). One :func:`run_sweep` per ``n``; returns :func:`change_ci` rows of ``policy``
    with an ``n_requests`` column.
    """
    if not len(n_list):
        raise ValueError("n_list must list at least one run length")
    sweep_kw = {k: v for k, v in sweep_kw.items() if k not in ("rates", "rhos", "seeds", "policies", "workloads",
                                                               "n_requests")}
    parts = []
    with _one_overload_warning(f"run-length study of {workload}"):
        for n in n_list:
            d = run_sweep(None, ["fcfs", policy], [workload], list(seeds), rhos=list(rhos), n_requests=int(n),
                          **sweep_kw)
            parts.append(change_ci(d, metrics=metrics).query("policy == @policy"))
    return pd.concat(parts, ignore_index=True)


@contextlib.contextmanager
def _one_overload_warning(what: str):
    """Collect the :class:`OverloadWarning` s raised inside and re-issue them as one; others pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    over = [w for w in caught if issubclass(w.category, OverloadWarning)]
    for w in caught:
        if not issubclass(w.category, OverloadWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if over:
        warnings.warn(f"{what}: {len(over)} overload warning(s); the first: {over[0].message}", OverloadWarning,
                      stacklevel=3)


def drift_records(drift, rate: float, policies: Sequence[str], *, n_requests: int = 6000, seed: int = 0,
                  max_num_seqs: int = 32, service: ServiceModel | dict | str | None = None) -> dict[str, pd.DataFrame]:
    """Per-request records of each policy on one drifting trace, with the ``phase`` each request came from.

    A phase above capacity makes the queue grow; such runs warn once
    (:class:`~asrsched.sim.engine.OverloadWarning`). :func:`phase_loads` states each phase's ``rho``.
    """
    from asrsched.core.workloads import Drift

    if not isinstance(drift, Drift):
        raise ValueError(f"drift must be an asrsched.core.workloads.Drift schedule, got {type(drift).__name__}")
    check_sweep_params([rate], policies, [], [seed], n_requests, max_num_seqs)
    sm = _service(service, None)
    tr = make_trace(drift, rate=rate, n=n_requests, seed=seed, kappa=dict(sm.kappa))
    phase = tr.extra["phase"].to_numpy() if "phase" in tr.extra else np.zeros(len(tr), int)
    out = {}
    with _one_overload_warning(f"drift at {float(rate):g} req/s"):
        for p in policies:
            rec = simulate(tr, p, sm, max_num_seqs=max_num_seqs).records
            out[p] = rec.assign(phase=phase[rec["rid"].to_numpy()])
    return out


def phase_loads(drift, rate: float, *, service: ServiceModel | dict | str | None = None, max_num_seqs: int = 32,
                phase_names: Sequence[str] | None = None, cache_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """Load ``rho`` of each phase of a drift schedule at ``rate``: rate / the phase workload's capacity.

    Columns ``phase, workload, capacity_rps, rho, regime``. A phase's workload must be a named
    duration source (its ``name``).
    """
    sm = _service(service, None)
    rows = []
    for i, (_, src) in enumerate(drift.phases):
        name = getattr(src, "name", None)
        if not isinstance(name, str):
            raise ValueError(f"phase {i} has no workload name; phase_loads needs named duration sources")
        cap = measure_capacity(name, sm, max_num_seqs=max_num_seqs, cache_dir=cache_dir)
        r = cap.rho(float(rate))
        rows.append({"phase": phase_names[i] if phase_names else i, "workload": name, "capacity_rps": cap.rate,
                     "rho": r, "regime": regime(r)})
    return pd.DataFrame(rows)


def phase_table(results: dict[str, pd.DataFrame], phase_names: Sequence[str] | None = None) -> pd.DataFrame:
    """P50/P90 E2EL and P50 TTFT (s) per policy and drift phase."""
    rows = []
    for pol, df in results.items():
        for ph, g in df.groupby("phase"):
            rows.append({"policy": pol, "phase": phase_names[ph] if phase_names else ph, "requests": len(g),
                         "mean_audio_s": g.duration.mean(), "p50_e2el_s": g.e2el.median(),
                         "p90_e2el_s": g.e2el.quantile(0.9), "p50_ttft_s": g.ttft.median()})
    return pd.DataFrame(rows)
