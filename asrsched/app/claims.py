"""The claims index: each claim of the two studies beside our number, its CI, load and regime, a verdict,
and links to the figure and table that show it. It opens the gallery's ``figures/README.md``.

Every number is read from a results table in the figures root, never typed in:

* the scheduling study (Makwana et al. 2026, arXiv 2603.11273) in the simulator:
  ``02_policy_sweep/headline_vs_paper.csv`` (:func:`asrsched.sim.sweep_report.headline`, this run);
* the same policies on real engines: ``04_real_serving/real_engine_results.csv`` (committed, with
  ``real_engine_run.json``);
* the A/B estimator study (Jia, Johari, Si & Zheng 2026, arXiv 2605.29641; DQ from Farias et al. 2022):
  ``05_ab_estimators/full/claims.csv`` (the committed 100-replication study, with ``run.json``).

A table that is missing (a partial run, a notebook that failed) leaves its rows out and says so.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.core.labels import metric_label

__all__ = ["headline_verdict", "claims_rows", "claims_index_markdown"]

HEADLINE_TABLE = "02_policy_sweep/headline_vs_paper.csv"
ENGINE_TABLE = "04_real_serving/real_engine_results.csv"
AB_CLAIMS_TABLE = "05_ab_estimators/full/claims.csv"
MIXED_MAP_TABLE = "05_ab_estimators/mixed_map/map.csv"

#: what the A/B study states for each claim (its source summary: see shared/papers)
AB_PAPER = {
    "verdict_naive_low": "biased low",
    "verdict_dq_50_500x": "50–500×",
    "verdict_mixed_2_5x": "2–5×",
    "verdict_mixed_lowest_mse": "mixed DQ",
}
#: the A/B study's claims as its committed table checks them: (verdict column, claim, value column, CI columns, unit)
AB_CLAIMS = [
    (
        "verdict_naive_low",
        "Naive under-estimates the effect",
        "naive_share",
        ("naive_share_ci_lo", "naive_share_ci_hi"),
        "share",
    ),
    (
        "verdict_dq_50_500x",
        "qDQ / wDQ: sd 50–500× naive's",
        "dq_sd_x_naive_min",
        ("dq_sd_x_naive_ci_lo", "dq_sd_x_naive_ci_hi"),
        "x",
    ),
    (
        "verdict_mixed_2_5x",
        "Mixed DQ: 2–5× lower sd than the better DQ",
        "mixed_sd_reduction",
        ("mixed_sd_reduction_ci_lo", "mixed_sd_reduction_ci_hi"),
        "x",
    ),
    ("verdict_mixed_lowest_mse", "Mixed DQ has the lowest MSE", None, None, ""),
]


def headline_verdict(paper: float, lo: float, hi: float, claim: str = "") -> str:
    """How our 95 % CI ``[lo, hi]`` (percent change) stands to the paper's value.

    A cap ("capped at", "at most") holds when the whole CI lies at or below it. Otherwise the paper's
    value inside the CI is ``matches``; a CI on the paper's side of zero but short of (or past) it is
    ``smaller here`` (``larger here``); a CI that holds zero is ``no change here``; the other side is
    ``opposite here``.
    """
    if not all(math.isfinite(v) for v in (paper, lo, hi)):
        return "no estimate"
    if "capped" in claim or "at most" in claim:
        return "holds (below the cap)" if hi <= paper else "fails (above the cap)" if lo > paper else "inconclusive"
    if lo <= paper <= hi:
        return "matches"
    if lo <= 0 <= hi:
        return "no change here"
    if (lo > 0) != (paper > 0):
        return "opposite here"
    return "smaller here" if abs(hi if paper < 0 else lo) < abs(paper) else "larger here"


def _link(root: Path, rel: str, text: str) -> str | None:
    return f"[{text}]({rel})" if (root / rel).exists() else None


def _pct(v: float) -> str:
    return f"{v:+.1f} %".replace("-", "−")


def _headline_rows(root: Path) -> list[dict]:
    df = pd.read_csv(root / HEADLINE_TABLE)
    rows = []
    for _, r in df.iterrows():
        links = [
            _link(root, f"02_policy_sweep/relative_change_{r.workload}.html", "figure"),
            _link(root, HEADLINE_TABLE, "table"),
        ]
        rows.append(
            {
                "study": "scheduling (simulator)",
                "claim": r.claim,
                "paper": _pct(r.paper_pct),
                "here": f"{_pct(r.ours_pct)} [{_pct(r.ours_ci_low)}, {_pct(r.ours_ci_high)}]",
                "setting": f"ρ {r.rho:g}, **{r.regime}**, {int(r.n_seeds)} seeds × {int(r.n_requests)} requests"
                + (
                    f"; up to {_pct(r.extreme_pct)} over the swept grid (ρ {r.extreme_rho:g}, {r.extreme_regime})"
                    if "extreme_pct" in df and np.isfinite(r.extreme_pct)
                    else ""
                ),
                "verdict": headline_verdict(r.paper_pct, r.ours_ci_low, r.ours_ci_high, r.claim),
                "links": " · ".join(x for x in links if x),
            }
        )
    return rows


def _engine_rows(root: Path) -> list[dict]:
    from asrsched.sim.sweep_report import PAPER_HEADLINES  # the study's numbers, written once (scipy: imported here)

    df = pd.read_csv(root / ENGINE_TABLE)
    rows = []
    for (eng, pol), g in df[df.policy.isin(["sjf", "hrrn"])].groupby(["engine", "policy"], sort=True):
        stable = g[g.regime == "stable"]
        if stable.empty:
            continue
        r = stable.loc[stable.rho.idxmax()]
        for m in ("p50_e2el", "p90_e2el"):
            # the study's claim for this policy and metric (its first, on whichever workload it states it)
            paper, text = next((c[3], c[4]) for c in PAPER_HEADLINES if c[0] == pol and c[2] == m + "_ms")
            lo, hi = r[f"d_{m}_pct_ci_low"], r[f"d_{m}_pct_ci_high"]
            claim = f"{pol.upper()} vs FCFS on a real engine: {metric_label(m + '_ms')}"
            cap = " (capped)" if "capped" in text else ""
            rows.append(
                {
                    "study": f"scheduling ({eng})",
                    "claim": claim,
                    "paper": _pct(paper) + (" cap" if cap else ""),
                    "here": f"{_pct(r[f'd_{m}_pct'])} [{_pct(lo)}, {_pct(hi)}]",
                    "setting": f"ρ {r.rho:g}, **{r.regime}**, {int(r.n_requests)} requests",
                    "verdict": headline_verdict(paper, lo, hi, claim + cap),
                    "links": " · ".join(
                        x
                        for x in (
                            _link(root, f"04_real_serving/full_study_{m}.html", "figure"),
                            _link(root, ENGINE_TABLE, "table"),
                            _link(root, "04_real_serving/real_engine_run.json", "provenance"),
                        )
                        if x
                    ),
                }
            )
    return rows


def _range(c: pd.DataFrame, col: str, ci: tuple[str, str], unit: str) -> str:
    if unit == "share":
        v, lo, hi = 100 * c[col], 100 * c[ci[0]], 100 * c[ci[1]]
        return f"{v.min():.0f}–{v.max():.0f} % of the effect (CI {lo.min():.0f}–{hi.max():.0f} %)"
    return f"{c[col].min():.2f}–{c[col].max():.2f}× (CI {c[ci[0]].min():.2f}–{c[ci[1]].max():.2f}×)"


def _ab_rows(root: Path) -> list[dict]:
    c = pd.read_csv(root / AB_CLAIMS_TABLE)
    run_path = root / AB_CLAIMS_TABLE.replace("claims.csv", "run.json")
    base = json.loads(run_path.read_text())["parameters"]["study"]["base"] if run_path.exists() else {}
    setting = (
        f"N {base['n_servers']}, λ {base['lam']:g} per server (ρ {base['lam']:g}), **stable**, "
        f"{int(c.reps.min())} replications × {len(c)} scenarios"
        if base
        else f"{int(c.reps.min())} replications × {len(c)} scenarios"
    )
    links = " · ".join(
        x
        for x in (
            _link(root, "05_ab_estimators/full_study_overview.html", "figure"),
            _link(root, AB_CLAIMS_TABLE, "table"),
            _link(root, "05_ab_estimators/full/claims.md", "reading"),
            _link(root, "05_ab_estimators/full/run.json", "provenance"),
        )
        if x
    )
    rows = []
    for vcol, claim, col, ci, unit in AB_CLAIMS:
        counts = c[vcol].value_counts()
        verdict = ", ".join(f"{k} in {counts[k]}" for k in ("holds", "fails", "inconclusive") if k in counts)
        here = (
            _range(c, col, ci, unit)
            if col
            else "lowest MSE: " + ", ".join(f"{k} ({n})" for k, n in c.lowest_mse.value_counts().items())
        )
        rows.append(
            {
                "study": "A/B estimators",
                "claim": claim,
                "paper": AB_PAPER[vcol],
                "here": here,
                "setting": setting,
                "verdict": f"{verdict} of {len(c)} scenarios",
                "links": links,
            }
        )
    return rows


def _mixed_map_rows(root: Path) -> list[dict]:
    """The 2–5× claim cell by cell in the committed mixed-DQ map (default L, in-experiment weights)."""
    m = pd.read_csv(root / MIXED_MAP_TABLE)
    t = m[np.isclose(m.L_factor, 1.0) & (m.alpha != "oracle")]
    counts = t.verdict.value_counts()
    holds = t[t.verdict == "holds"]
    where = sorted({f"{r.law} / horizon in {r.unit}" for r in holds.itertuples()})
    links = " · ".join(
        x
        for x in (
            _link(root, MIXED_MAP_TABLE, "table"),
            _link(root, MIXED_MAP_TABLE.replace("map.csv", "run.json"), "provenance"),
        )
        if x
    )
    return [
        {
            "study": "A/B estimators (mixed-DQ map)",
            "claim": "Mixed DQ: 2–5× lower sd than the better DQ, by service law and horizon unit",
            "paper": AB_PAPER["verdict_mixed_2_5x"],
            "here": f"{t.gain_better.min():.2f}–{t.gain_better.max():.2f}× "
            f"(CI {t.gain_better_ci_lo.min():.2f}–{t.gain_better_ci_hi.max():.2f}×)",
            "setting": f"{m.law.nunique()} service laws × horizon in jobs or time × {t.alpha.nunique()} weights, "
            f"default L, {int(m.reps.min())}–{int(m.reps.max())} replications",
            "verdict": ", ".join(f"{k} in {counts[k]}" for k in ("holds", "fails", "inconclusive") if k in counts)
            + f" of {len(t)} cells"
            + (f"; holds with {', '.join(where)}" if where else ""),
            "links": links,
        }
    ]


def claims_rows(figures_root: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """``(rows, missing)``: one row per claim from the tables present, and the tables that are not."""
    root = Path(figures_root)
    rows: list[dict] = []
    missing: list[str] = []
    for rel, build in (
        (HEADLINE_TABLE, _headline_rows),
        (ENGINE_TABLE, _engine_rows),
        (AB_CLAIMS_TABLE, _ab_rows),
        (MIXED_MAP_TABLE, _mixed_map_rows),
    ):
        if (root / rel).is_file():
            rows += build(root)
        else:
            missing.append(rel)
    return rows, missing


def claims_index_markdown(figures_root: str | os.PathLike) -> list[str]:
    """The claims index as markdown lines (a heading, a note on how to read it, a table)."""
    rows, missing = claims_rows(figures_root)
    lines = [
        "## Claims index",
        "",
        "Each claim of the two studies beside our number (95 % CI), the load it is read at (ρ = arrival rate /",
        "measured capacity; **overload** marks a finite-run transient) and a verdict computed from the CI. The",
        'papers\' numbers are "up to" over their sweeps; ours are read at a stated load. Made from the tables',
        "linked in each row (this run's, or committed results with their provenance); nothing here is typed in.",
        "",
    ]
    if rows:
        lines += [
            "| study | claim | paper | here (95 % CI) | setting | verdict | shown in |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            cells = [
                str(r[k]).replace("|", "\\|")
                for k in ("study", "claim", "paper", "here", "setting", "verdict", "links")
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if missing:
        lines += [
            "Not in this gallery (run the notebook to add its rows): " + ", ".join(f"`{m}`" for m in missing) + ".",
            "",
        ]
    return lines
