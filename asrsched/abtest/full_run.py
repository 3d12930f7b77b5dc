"""Beyond the study's scoring, and the committed full run.

* :func:`run_wp_curve` / :func:`wp_table`: W(p), the mixed system's mean response time against
  the treatment fraction, whose chord is the GTE and whose tangent at p is what DQ estimates;
* :func:`scenario_search` / :func:`search_table`: where mixed DQ's variance gain over the better
  single DQ is largest, over (lambda, policy pair, L, queue-length cost definition), with
  bootstrap CIs;
* :func:`write_full_run` / :func:`load_full_run` / :func:`main`: the full study with W(p) and the
  search, written with a ``run.json`` of provenance (``python -m asrsched.abtest.full_run --full``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.abtest.estimators import COSTS, default_L, dq_sweep
from asrsched.abtest.model import simulate_supermarket
from asrsched.abtest.study import (
    StudyConfig,
    StudyResult,
    scenario_config,
)
from asrsched.abtest.study_report import (
    ablation_table,
    claims_markdown,
    claims_table,
    coverage_table,
    summary_table,
    switchback_table,
)
from asrsched.core.stats import batch_mean_se, gain_bound, percentile_ci
from asrsched.sim.parallel import json_default, keep_freed_memory, run_study, run_tasks, task_seed

__all__ = [
    "run_wp_curve",
    "FULL",
    "FullRun",
    "load_full_run",
    "write_full_run",
    "full_run_provenance",
    "wp_table",
    "scenario_search",
    "search_table",
    "SEARCH_GRID",
    "COST_LABELS",
    "main",
]


# ----------------------------------------------------------------------------- W(p): why DQ is biased


def run_wp_point(scenario: str, p: float, k: int, study: dict, n_requests: int) -> dict:
    """Mean response time of the mixed system with a fraction ``p`` of jobs on the treatment policy.

    ``p = 0`` runs the control policy everywhere, ``p = 1`` the treatment everywhere, otherwise a
    Bernoulli(p) assignment; ``n_requests`` jobs after a 50k-job warm-up, batch-means standard error.
    """
    keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = scenario_config(scenario, sc.base).replace(n_requests=int(n_requests), warmup_requests=50_000)
    if p <= 0:
        cfg = cfg.replace(design="control")
    elif p >= 1:
        cfg = cfg.replace(design="treatment")
    else:
        cfg = cfg.replace(design="bernoulli", p=float(p))
    c0 = time.process_time()
    tr = simulate_supermarket(cfg, task_seed(sc.seed, scenario, "wp", float(p), k), details=False, area_at=False)
    return {
        "scenario": scenario,
        "p": float(p),
        "k": k,
        "mean_w": float(tr.response.mean()),
        "se_w": batch_mean_se(tr.response),
        "n_requests": len(tr),
        "cpu_seconds": time.process_time() - c0,
    }


def run_wp_curve(
    study: StudyConfig,
    ps=(0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0),
    *,
    requests_per_point: int = 1_000_000,
    seeds: int = 1,
    workers: int | None = None,
    address=None,
    progress: bool = True,
) -> pd.DataFrame:
    """W(p) for every scenario of ``study`` at the treatment fractions ``ps`` (see :func:`run_wp_point`).

    Returns one row per (scenario, p): ``mean_w``, ``se_w`` (over ``seeds`` runs of
    ``requests_per_point`` jobs), ``workers``. The chord from p = 0 to p = 1 has slope GTE; DQ with
    Bernoulli(p) assignment estimates the tangent slope dW/dp at the experiment's p.
    """
    study.validate()
    if any(not (0 <= p <= 1) for p in ps) or len(ps) < 3:
        raise ValueError(f"ps: need at least 3 treatment fractions in [0, 1], got {ps!r}")
    if not isinstance(requests_per_point, (int, np.integer)) or requests_per_point < 10_000:
        raise ValueError(f"requests_per_point: need an integer >= 10000, got {requests_per_point!r}")
    sd = study.to_dict()
    tasks = [
        dict(scenario=s, p=float(p), k=k, study=sd, n_requests=int(requests_per_point))
        for s in study.scenarios
        for p in ps
        for k in range(int(seeds))
    ]
    rows = run_tasks(run_wp_point, tasks, workers=workers, address=address, progress=progress, desc="W(p) curve")
    d = pd.DataFrame(rows)
    g = d.groupby(["scenario", "p"], sort=False)
    out = g.agg(mean_w=("mean_w", "mean"), n_requests=("n_requests", "sum"), cpu_seconds=("cpu_seconds", "sum"))
    out["se_w"] = g["se_w"].apply(lambda x: float(np.sqrt((x**2).sum()) / len(x)))
    out = out.reset_index()
    out["scenario"] = pd.Categorical(out["scenario"], categories=list(study.scenarios), ordered=True)
    return out.sort_values(["scenario", "p"]).reset_index(drop=True)


def wp_table(
    curve: pd.DataFrame, truth: pd.DataFrame, summary: pd.DataFrame | None = None, p: float = 0.5
) -> pd.DataFrame:
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
        row = {
            "scenario": s,
            "w0": w0.mean_w,
            "w1": w1.mean_w,
            "chord": w1.mean_w - w0.mean_w,
            "chord_se": float(np.hypot(w0.se_w, w1.se_w)),
        }
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


def run_search_rep(
    lam: float, control: str, treatment: str, rep: int, study: dict, L_factors: tuple, costs: tuple
) -> list[dict]:
    """One Bernoulli experiment of the search: wDQ, each queue-length DQ and each mixed DQ at every L."""
    keep_freed_memory()
    sc = StudyConfig.from_dict(study)
    cfg = sc.base.replace(lam=float(lam), control=control, treatment=treatment, design="bernoulli")
    L0 = default_L(cfg.total_rate)
    tr = simulate_supermarket(
        cfg, task_seed(sc.seed, "search", float(lam), control, treatment, rep), details=False, area_at="qt" in costs
    )
    fac = {max(1, int(round(f * L0))): float(f) for f in L_factors}  # L -> its nominal factor
    rows = []
    for L, fam in dq_sweep(tr, sorted(fac), sc.n_batches, sc.alpha_batches, costs=("w", *costs)).items():
        for name, e in fam.items():
            rows.append(
                {
                    "lam": float(lam),
                    "control": control,
                    "treatment": treatment,
                    "rep": rep,
                    "L": L,
                    "L_factor": fac[L],
                    "estimator": name,
                    "estimate": e.value,
                    "alpha": e.alpha,
                }
            )
    return rows


def scenario_search(
    study: StudyConfig,
    *,
    lams=None,
    pairs=None,
    L_factors=None,
    costs=None,
    reps: int = 30,
    workers: int | None = None,
    address=None,
    progress: bool = True,
) -> pd.DataFrame:
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
            raise ValueError(
                f"costs: queue-length costs must be among {tuple(x for x in COSTS if x != 'w')}, got {c!r}"
            )
    for lam in g["lams"]:
        for c, t in g["pairs"]:
            study.base.replace(lam=float(lam), control=c, treatment=t).validate()
    sd = study.to_dict()
    tasks = [
        dict(
            lam=float(lam),
            control=c,
            treatment=t,
            rep=r,
            study=sd,
            L_factors=tuple(g["L_factors"]),
            costs=tuple(g["costs"]),
        )
        for lam in g["lams"]
        for c, t in g["pairs"]
        for r in range(reps)
    ]
    done = run_tasks(run_search_rep, tasks, workers=workers, address=address, progress=progress, desc="scenario search")
    rows = [row for res in done for row in res]
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
            sds = X[idx].std(axis=1, ddof=1)  # (n_boot, 3)
            with np.errstate(divide="ignore", invalid="ignore"):
                lo, hi = percentile_ci(np.minimum(sds[:, 0], sds[:, 1]) / sds[:, 2])
            s = X.std(axis=0, ddof=1)
            cv = np.cov(X[:, 0], X[:, 1], ddof=1)
            out.append(
                {
                    "lam": lam,
                    "control": c,
                    "treatment": t,
                    "L": int(L),
                    "L_factor": float(g.L_factor.iloc[0]),
                    "cost": cost,
                    "sd_wdq": s[0],
                    "sd_qdq": s[1],
                    "sd_mixed": s[2],
                    "gain": min(s[0], s[1]) / s[2],
                    "gain_ci_lo": lo,
                    "gain_ci_hi": hi,
                    "corr": float(cv[0, 1] / np.sqrt(cv[0, 0] * cv[1, 1])),
                    "gain_bound": gain_bound(cv),
                    "alpha_mean": float(g[g.estimator == mix].alpha.mean()),
                    "reps": R,
                }
            )
    return pd.DataFrame(out).sort_values("gain", ascending=False).reset_index(drop=True)


# ----------------------------------------------------------------------------- the committed full run

#: the full study of notebook 05 (``QUICK = False``): what ``python -m asrsched.abtest.full_run --full`` runs
FULL = {
    "reps": 100,
    "truth_requests": 4_000_000,
    "n_requests": 500_000,
    "wp_requests": 2_000_000,
    "wp_seeds": 2,
    "search_reps": 40,
    "search_requests": 500_000,
}


def full_run_provenance(command: str | None = None, params: dict | None = None, load_start=None) -> dict:
    """Commit (and whether ``asrsched/`` was clean), UTC date, CPU model and count, load average, Python,
    the parameters and the exact command: what a committed result needs to be trusted
    (:func:`asrsched.core.provenance.provenance`, watching ``asrsched/``)."""
    import shlex
    import sys

    from asrsched.core.provenance import provenance as _provenance

    return _provenance(
        command or " ".join(shlex.quote(a) for a in ["python", "-m", "asrsched.abtest.full_run", *sys.argv[1:]]),
        params,
        load_start=load_start,
        paths=("asrsched",),
    )


def write_full_run(
    out,
    study: StudyConfig,
    *,
    wp_requests: int,
    wp_seeds: int,
    search_reps: int,
    search_requests: int,
    workers: int | None = None,
    progress: bool = True,
    command: str | None = None,
) -> Path:
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
    res = run_study(study, workers=workers, progress=progress)
    timings.update(study_seconds=res.seconds, study_cpu_seconds=res.cpu_seconds)
    t = time.perf_counter()
    curve = run_wp_curve(study, requests_per_point=wp_requests, seeds=wp_seeds, workers=workers, progress=progress)
    timings["wp_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    sbase = dataclass_replace(study, base=study.base.replace(n_requests=int(search_requests)))
    raw = scenario_search(sbase, reps=search_reps, workers=workers, progress=progress)
    timings["search_seconds"] = time.perf_counter() - t
    summary = summary_table(res)
    claims = claims_table(summary, res)
    wp = wp_table(curve, res.truth, summary, study.base.p)
    search = search_table(raw)
    tables = {
        "summary": summary,
        "claims": claims,
        "truth": res.truth,
        "truth_runs": res.truth_runs,
        "ablation": ablation_table(res),
        "switchback": switchback_table(res),
        "coverage": coverage_table(summary),
        "little": res.little,
        "wp_curve": curve,
        "wp": wp,
        "search": search,
    }
    for name, df in tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
    res.estimates.to_csv(out / "estimates.csv.gz", index=False)
    raw.to_csv(out / "search_raw.csv.gz", index=False)
    (out / "claims.md").write_text(claims_markdown(claims, summary, res.truth, wp) + "\n")
    params = {
        "study": study.to_dict(),
        "wp_requests": wp_requests,
        "wp_seeds": wp_seeds,
        "search_reps": search_reps,
        "search_requests": search_requests,
        "search_grid": {k: list(v) for k, v in SEARCH_GRID.items()},
        "workers": workers,
    }
    run = full_run_provenance(command, params, load0)
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
    need = [
        "run.json",
        "estimates.csv.gz",
        "truth.csv",
        "truth_runs.csv",
        "little.csv",
        "summary.csv",
        "claims.csv",
        "wp_curve.csv",
        "wp.csv",
        "search.csv",
    ]
    missing = [f for f in need if not (folder / f).exists()]
    if missing:
        raise FileNotFoundError(
            f"{folder}: no committed full run here (missing {', '.join(missing)}); "
            "write one with `python -m asrsched.abtest.full_run --full --out <folder>`"
        )
    run = json.loads((folder / "run.json").read_text())
    sc = StudyConfig.from_dict(run["parameters"]["study"])
    est = pd.read_csv(folder / "estimates.csv.gz")
    est["scenario"] = pd.Categorical(est["scenario"], categories=list(sc.scenarios), ordered=True)
    est["headline"] = est["headline"].astype(bool)
    rd = lambda n: pd.read_csv(folder / f"{n}.csv")  # noqa: E731
    t = run.get("timings", {})
    res = StudyResult(
        sc,
        est,
        rd("truth"),
        rd("little"),
        rd("truth_runs"),
        float(t.get("study_seconds", np.nan)),
        float(t.get("study_cpu_seconds", np.nan)),
    )
    return FullRun(folder, run, res, rd("summary"), rd("claims"), rd("wp_curve"), rd("wp"), rd("search"))


def main(argv=None) -> int:
    """``python -m asrsched.abtest.full_run --full --out figures/05_ab_estimators/full`` (see ``--help``)."""
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m asrsched.abtest.full_run",
        description="Run notebook 05's estimator study with W(p) curves and the scenario "
        "search, and write its tables plus run.json (provenance) to --out.",
    )
    ap.add_argument("--full", action="store_true", help=f"the full study: {FULL}")
    ap.add_argument("--out", required=True, help="output folder (e.g. figures/05_ab_estimators/full)")
    ap.add_argument("--reps", type=int, help="replications per scenario (default 100 with --full, else 10)")
    ap.add_argument("--truth-requests", type=int, help="jobs per truth run (default 4M with --full, else 1M)")
    ap.add_argument("--n-requests", type=int, help="jobs per experiment (default 500k)")
    ap.add_argument("--wp-requests", type=int, help="jobs per W(p) point and seed")
    ap.add_argument("--search-reps", type=int, help="replications per scenario-search cell")
    ap.add_argument("--search-requests", type=int, help="jobs per scenario-search experiment")
    ap.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    a = ap.parse_args(argv)
    small = {
        "reps": 10,
        "truth_requests": 1_000_000,
        "n_requests": 500_000,
        "wp_requests": 500_000,
        "wp_seeds": 1,
        "search_reps": 10,
        "search_requests": 200_000,
    }
    d = dict(FULL if a.full else small)
    for k in ("reps", "truth_requests", "n_requests", "wp_requests", "search_reps", "search_requests"):
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    base = StudyConfig().base.replace(n_requests=int(d["n_requests"]))
    study = StudyConfig(base=base, reps=int(d["reps"]), truth_requests=int(d["truth_requests"]), seed=a.seed)
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.abtest.full_run", *(argv or sys.argv[1:])])
    out = write_full_run(
        a.out,
        study,
        wp_requests=int(d["wp_requests"]),
        wp_seeds=int(d["wp_seeds"]),
        search_reps=int(d["search_reps"]),
        search_requests=int(d["search_requests"]),
        workers=a.workers,
        progress=not a.quiet,
        command=cmd,
    )
    run = json.loads((out / "run.json").read_text())
    print(
        f"wrote {out}: study {run['timings']['study_seconds']:.1f} s wall, "
        f"{run['timings']['study_cpu_seconds']:.0f} CPU-s"
    )
    return 0


if __name__ == "__main__":
    # run the importable module's main, so worker processes find the task functions by their module name
    from asrsched.abtest.full_run import main as _main

    raise SystemExit(_main())
