"""What a policy sweep says: changes vs FCFS with CIs, the served rate, and the study's headline claims beside ours.

Notebook 02's analysis of :func:`asrsched.sim.sweep.run_sweep` output (one row per seed):

* :func:`change_ci`: the paired percent change vs a baseline policy per (workload, rate, policy),
  the geometric mean of the per-seed ratios with a ratio interval (a t-interval on the log scale); :func:`common_seeds` and :func:`throughput_spread` for the
  served rate across policies;
* :func:`headline`: the scheduling study's headline claims (:data:`PAPER_HEADLINES`, Makwana et
  al. 2026) next to this sweep's numbers, each matched at a stated load ``rho`` (never the extreme
  over all rates); :func:`refine_headline` adds seeds until each claim's CI is narrow enough;
* :func:`run_length_effect`: how the change moves with the run length (settles below capacity,
  keeps moving above it: a finite-run transient);
* :func:`tradeoff_study`: the P50/P90 trade-off of SJF, HRRN and the adaptive policy's caps at one
  load, over seeds, with ratio CIs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from asrsched.sim.overload import one_overload_warning
from asrsched.sim.sweep import run_sweep

__all__ = [
    "change_ci",
    "common_seeds",
    "throughput_spread",
    "PAPER_HEADLINES",
    "HEADLINE_COLUMNS",
    "EXTREME_COLUMNS",
    "headline",
    "refine_headline",
    "run_length_effect",
    "tradeoff_study",
    "check_tradeoff",
]


def change_ci(
    df: pd.DataFrame,
    metrics: Sequence[str] = ("p50_e2el_ms", "p90_e2el_ms", "mean_ttft_ms", "p50_ttft_ms"),
    *,
    baseline: str = "fcfs",
    level: float = 0.95,
) -> pd.DataFrame:
    """Percent change vs ``baseline`` per (workload, rate, policy), over seeds, with a ratio interval.

    Each seed's change is paired (the policy and the baseline replay the same trace): the ratio
    ``metric / baseline_metric``. The cell's change is the geometric mean of these ratios, in percent,
    ``100 * (exp(mean(log ratio)) - 1)``, and ``<metric>_change_ci_low/_high`` is the ``level``
    t-interval of the mean log ratio taken back the same way (NaN with one seed): a ratio interval,
    so a latency change never reaches -100 % (it read -147 % to +2 % as a t-interval of percent
    changes over three seeds). ``n_seeds`` is the number of pairs. Carries ``rho``, ``regime``,
    ``capacity_rps``, ``n_requests`` and the served rate (``request_throughput``, mean over seeds)
    when present.
    """
    metrics = [m for m in metrics if m in df]
    if baseline not in set(df.policy):
        raise ValueError(f"baseline policy {baseline!r} is not in the table (has {sorted(set(df.policy))})")
    keys = ["workload", "rate", "seed"]
    base = df[df.policy == baseline][keys + metrics].rename(columns={m: f"{m}_base" for m in metrics})
    m = df.merge(base, on=keys, how="inner")
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in metrics:
            m[f"{k}_log_ratio"] = np.log(m[k].to_numpy(float) / m[f"{k}_base"].to_numpy(float))
    extra = [c for c in ("rho", "regime", "capacity_rps", "n_requests", "service") if c in m]
    g = m.groupby(["workload", "rate", "policy"], sort=False)
    out = g[metrics].mean()
    out["n_seeds"] = g.size()
    if "request_throughput" in m:
        out["request_throughput"] = g["request_throughput"].mean()
    for c in extra:
        out[c] = g[c].first()
    n = out["n_seeds"].to_numpy()
    tq = np.where(n > 1, stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)), np.nan)
    for k in metrics:
        mean = g[f"{k}_log_ratio"].mean().to_numpy()
        half = tq * g[f"{k}_log_ratio"].std(ddof=1).to_numpy() / np.sqrt(n)
        with np.errstate(invalid="ignore"):
            out[f"{k}_change_pct"] = 100.0 * np.expm1(mean)
            out[f"{k}_change_ci_low"] = 100.0 * np.expm1(mean - half)
            out[f"{k}_change_ci_high"] = 100.0 * np.expm1(mean + half)
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
        **({"regime": ("regime", "first")} if "regime" in df else {}),
    )
    rows = []
    for (w, r), c in g.groupby(["workload", "rate"]):
        t = c.set_index("policy").request_throughput
        rows.append(
            {
                "workload": w,
                "rate": r,
                "rho": c["rho"].iloc[0] if "rho" in c else np.nan,
                "regime": c["regime"].iloc[0] if "regime" in c else "",
                "spread_pct": float((t.max() - t.min()) / t.mean() * 100),
                "lowest": t.idxmin(),
                "highest": t.idxmax(),
            }
        )
    return pd.DataFrame(rows)


# The headline numbers of the scheduling study (Makwana et al. 2026), for side-by-side comparison. The study reports them as
# "up to" over its 1-25 req/s sweep on its GPU; here each is matched at a stated load rho.
PAPER_HEADLINES = [
    # (policy, workload, metric, paper value %, claim)
    ("sjf", "librispeech", "p50_e2el_ms", -73.0, "SJF, LibriSpeech, high load: P50 E2EL down by up to 73 %"),
    (
        "sjf",
        "librispeech",
        "mean_ttft_ms",
        -93.0,
        "SJF, LibriSpeech, high load: TTFT down by up to 93 % (ours: mean TTFT)",
    ),
    (
        "sjf",
        "librispeech",
        "p50_ttft_ms",
        -93.0,
        "SJF, LibriSpeech, high load: TTFT down by up to 93 % (ours: P50 TTFT)",
    ),
    ("sjf", "librispeech", "p90_e2el_ms", 97.0, "SJF, LibriSpeech, extreme load: P90 E2EL up by up to 97 %"),
    ("sjf", "uniform", "p50_e2el_ms", -67.0, "SJF, uniform 5-30 s: P50 E2EL down by 67 %"),
    # HRRN: the abstract states these for LibriSpeech test-clean, the source summary for the synthetic split
    ("hrrn", "librispeech", "p50_e2el_ms", -28.0, "HRRN, LibriSpeech (abstract): P50 E2EL down by up to 28 %"),
    ("hrrn", "librispeech", "p90_e2el_ms", 24.0, "HRRN, LibriSpeech (abstract): P90 degradation at most 24 %"),
    ("hrrn", "uniform", "p50_e2el_ms", -28.0, "HRRN, uniform (source summary): P50 E2EL down by up to 28 %"),
    ("hrrn", "uniform", "p90_e2el_ms", 24.0, "HRRN, uniform (source summary): P90 degradation capped at 24 %"),
]

HEADLINE_COLUMNS = ["claim", "paper_pct", "ours_pct", "ours_ci_low", "ours_ci_high", "rho", "regime", "n_requests"]
#: the extreme over the swept grid beside each matched row ("up to", as the study reports)
EXTREME_COLUMNS = ["extreme_pct", "extreme_ci_low", "extreme_ci_high", "extreme_rho", "extreme_regime"]


def _nearest_cell(cells: pd.DataFrame, target: float) -> pd.Series | None:
    if cells.empty:
        return None
    return cells.loc[(cells.rho - float(target)).abs().idxmin()]


def headline(
    df: pd.DataFrame, *, rho: float = 0.95, overload_rho: float | None = 1.3, claims: Sequence[tuple] = PAPER_HEADLINES
) -> pd.DataFrame:
    """The study's headline claims next to this sweep's numbers, each matched at a stated load.

    ``df`` is :func:`run_sweep` output (one row per seed). For each claim:

    * a ``stable`` row at the swept stable load (``rho < 1``) nearest to ``rho``: the mean over
      seeds of the paired change vs FCFS, with its 95 % CI (:func:`change_ci`);
    * where the sweep reaches overload, an ``overload`` row at the swept load ``>= 1`` nearest to
      ``overload_rho`` (``None`` skips these): a finite-run transient of ``n_requests`` requests.

    The matched rows are never the extreme over all rates; since the study reports "up to" over its
    own sweep, each row also carries that extreme over this sweep's grid (every swept load, stable
    and overload): ``extreme_pct`` (the change furthest in the claim's direction: the least for a
    claimed decrease, the most for an increase), with its CI, ``extreme_rho`` and ``extreme_regime``.
    Columns: ``claim, paper_pct, ours_pct, ours_ci_low, ours_ci_high, rho, regime, n_requests``
    then ``policy, workload, metric, rate, n_seeds, service_model`` and the ``extreme_*`` columns.
    """
    if "rho" not in df or "regime" not in df:
        raise ValueError("headline needs run_sweep output with the columns rho and regime")
    rc = change_ci(df, metrics=sorted({c[2] for c in claims}))
    rows = []
    for pol, wl, m, paper, claim in claims:
        d = rc[(rc.policy == pol) & (rc.workload == wl)]
        if d.empty or f"{m}_change_pct" not in d:
            continue
        col = d[f"{m}_change_pct"]
        ext = d.loc[col.idxmin() if paper < 0 else col.idxmax()]
        extreme = {
            "extreme_pct": float(ext[f"{m}_change_pct"]),
            "extreme_ci_low": float(ext[f"{m}_change_ci_low"]),
            "extreme_ci_high": float(ext[f"{m}_change_ci_high"]),
            "extreme_rho": float(ext.rho),
            "extreme_regime": ext.regime,
        }
        picks = [_nearest_cell(d[d.regime == "stable"], rho)]
        if overload_rho is not None:
            picks.append(_nearest_cell(d[d.regime == "overload"], overload_rho))
        for c in picks:
            if c is None:
                continue
            rows.append(
                {
                    "claim": claim,
                    "paper_pct": paper,
                    "ours_pct": float(c[f"{m}_change_pct"]),
                    "ours_ci_low": float(c[f"{m}_change_ci_low"]),
                    "ours_ci_high": float(c[f"{m}_change_ci_high"]),
                    "rho": float(c.rho),
                    "regime": c.regime,
                    "n_requests": int(c.n_requests),
                    "policy": pol,
                    "workload": wl,
                    "metric": m,
                    "rate": float(c.rate),
                    "n_seeds": int(c.n_seeds),
                    "service_model": c.get("service", ""),
                    **extreme,
                }
            )
    return pd.DataFrame(
        rows,
        columns=HEADLINE_COLUMNS
        + ["policy", "workload", "metric", "rate", "n_seeds", "service_model", *EXTREME_COLUMNS],
    )


def refine_headline(
    df: pd.DataFrame,
    *,
    rho: float = 0.95,
    claims: Sequence[tuple] = PAPER_HEADLINES,
    target_halfwidth_pp: float = 5.0,
    max_seeds: int = 64,
    **sweep_kw,
) -> pd.DataFrame:
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
            half = max(  # the wider side: a ratio interval is wider above the change than below it
                float(
                    (ci.loc[ci.policy == p, f"{m}_change_ci_high"] - ci.loc[ci.policy == p, f"{m}_change_pct"])
                    .fillna(np.inf)
                    .max()
                )
                for p, _, m, _, _ in mine
            )
            if half < target_halfwidth_pp or n >= max_seeds:
                if half >= target_halfwidth_pp:
                    warnings.warn(
                        f"{wl} at rho {cell.rho.iloc[0]:.2f}: CI half-width {half:.1f} pp after {n} seeds "
                        f"(target {target_halfwidth_pp:g} pp, max_seeds={max_seeds})",
                        UserWarning,
                        stacklevel=2,
                    )
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


def run_length_effect(
    workload: str = "librispeech",
    *,
    rhos: Sequence[float] = (0.95, 1.3),
    n_list: Sequence[int] = (500, 1000, 2000, 4000, 8000),
    policy: str = "sjf",
    metrics: Sequence[str] = ("p50_e2el_ms", "p90_e2el_ms"),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    **sweep_kw,
) -> pd.DataFrame:
    """How the change vs FCFS moves with the run length ``n_requests``, at each load.

    Below capacity it settles as ``n`` grows; above it, it keeps moving (a finite-run
    transient). One :func:`run_sweep` per ``n``; returns :func:`change_ci` rows of ``policy``
    with an ``n_requests`` column.
    """
    if not len(n_list):
        raise ValueError("n_list must list at least one run length")
    sweep_kw = {
        k: v for k, v in sweep_kw.items() if k not in ("rates", "rhos", "seeds", "policies", "workloads", "n_requests")
    }
    parts = []
    with one_overload_warning(f"run-length study of {workload}"):
        for n in n_list:
            d = run_sweep(
                None, ["fcfs", policy], [workload], list(seeds), rhos=list(rhos), n_requests=int(n), **sweep_kw
            )
            parts.append(change_ci(d, metrics=metrics).query("policy == @policy"))
    return pd.concat(parts, ignore_index=True)


def check_tradeoff(ratio_caps: Sequence[float], seeds: Sequence[int]) -> None:
    """``ValueError`` naming the argument unless every cap is a number > 0 and there are two seeds or more."""
    bad = [c for c in ratio_caps if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0]
    if bad:
        raise ValueError(f"ratio_caps: each cap must be a number > 0, got {bad}")
    if len(set(seeds)) < 2:
        raise ValueError(f"seeds: a trade-off CI needs at least two seeds, got {list(seeds)}")


def tradeoff_study(
    workload: str = "librispeech",
    *,
    rho: float = 0.95,
    ratio_caps: Sequence[float] = (5, 20, 50, 200),
    seeds: Sequence[int] = tuple(range(8)),
    metrics: Sequence[str] = ("p50_e2el_ms", "p90_e2el_ms"),
    **sweep_kw,
) -> pd.DataFrame:
    """P50 against P90 E2EL change vs FCFS for SJF, HRRN and the adaptive policy at each ``ratio_cap``,
    at load ``rho``, over ``seeds`` (paired: every variant replays FCFS's traces), with ratio CIs.

    One :func:`run_sweep` per cap (SJF and HRRN run once); returns :func:`change_ci` rows with
    ``label`` (``"SJF"``, ``"adaptive cap=50"``) and ``ratio_cap`` (NaN for SJF and HRRN). ``ratio_caps``
    must be positive numbers and ``seeds`` at least two (a CI needs two pairs), else ``ValueError``
    naming them, before any run.
    """
    caps = list(ratio_caps)
    check_tradeoff(caps, seeds)
    sweep_kw = {
        k: v
        for k, v in sweep_kw.items()
        if k not in ("rates", "rhos", "seeds", "policies", "workloads", "policy_params")
    }
    runs = [(["fcfs", "sjf", "hrrn"], None)] + [(["fcfs", "adaptive"], c) for c in caps]
    parts = []
    with one_overload_warning(f"trade-off study of {workload}"):
        for policies, cap in runs:
            d = run_sweep(
                None,
                policies,
                [workload],
                list(seeds),
                rhos=[rho],
                policy_params={"adaptive": {"ratio_cap": cap}} if cap is not None else None,
                **sweep_kw,
            )
            t = change_ci(d, metrics=metrics).query("policy != 'fcfs'").copy()
            t["ratio_cap"] = float(cap) if cap is not None else np.nan
            t["label"] = [f"adaptive cap={cap:g}" if cap is not None else p.upper() for p in t.policy]
            parts.append(t)
    return pd.concat(parts, ignore_index=True)
