"""The simulator's accuracy against the real engines, as one table, regenerated from committed files.

Serving simulators publish one error figure over a stated grid (Vidur, LLMServingSim, Frontier); this module
makes this package's: every committed real-engine study (:data:`SOURCES`: the FCFS / SJF / HRRN study of
notebook 04 at ρ 0.7, 0.9, 1.2, and the frontier's policies at ρ 0.9 of notebook 02), each cell's simulator
prediction of the same requests (the ``sim_*`` columns, from the calibrated service model) against the
measurement, summarised per engine and regime by :func:`asrsched.serving.study_stats.sim_error_summary`:
median and mean absolute percentage error of P50 E2EL, P90 E2EL and P50 TTFT, and the number of cells.

    python -m asrsched.serving.accuracy           # print the table
    python -m asrsched.serving.accuracy --write   # and rewrite it in the README (between the accuracy markers)

``tests/project/test_accuracy_table.py`` fails when the README's table and the committed files disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from asrsched.core.provenance import ROOT
from asrsched.serving.study_stats import sim_error_summary

__all__ = ["SOURCES", "load_results", "accuracy_table", "accuracy_markdown", "main", "BEGIN", "END", "TARGET_PCT"]

#: the committed real-engine results, relative to the checkout
SOURCES = (
    "figures/04_real_serving/real_engine_results.csv",
    "figures/02_policy_sweep/frontier_real/real_engine_results.csv",
)
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
#: the stable regime's target for the median error of P50 and P90 E2EL (%)
TARGET_PCT = 10.0
_METRICS = {"p50_e2el": "P50 E2EL", "p90_e2el": "P90 E2EL", "p50_ttft": "P50 TTFT"}


def load_results(root: Path = ROOT) -> pd.DataFrame:
    """Every committed cell (:data:`SOURCES`), with its ``source``."""
    parts = []
    for rel in SOURCES:
        df = pd.read_csv(root / rel)
        parts.append(df.assign(source=rel))
    return pd.concat(parts, ignore_index=True)


def accuracy_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per engine and regime (and all engines): cells, and the median and mean absolute % error per metric."""
    s = sim_error_summary(results, tuple(_METRICS), by=("engine",))
    s = s[s.regime != "all"]
    wide = s.pivot_table(index=["group", "regime"], columns="metric", values=["median_abs_err_pct", "mean_abs_err_pct"])
    wide.columns = [f"{m}_{stat.replace('_abs_err_pct', '')}" for stat, m in wide.columns]
    cells = s.groupby(["group", "regime"]).cells.max()
    return wide.assign(cells=cells).reset_index()


def accuracy_markdown(table: pd.DataFrame, results: pd.DataFrame) -> str:
    """The README block: the grid, the table, and whether the stable regime meets :data:`TARGET_PCT`."""
    pols = sorted(set(results.policy))
    rhos = sorted(set(results.rho.round(2)))
    head = (
        f"Over {len(results)} committed cells ({', '.join(sorted(set(results.engine)))}; policies {', '.join(pols)}; "
        f"ρ {', '.join(f'{r:g}' for r in rhos)} of each engine's measured saturation; ≥ "
        f"{int(results.n_requests.min())} requests per cell; files: {', '.join(f'`{x}`' for x in SOURCES)}): "
        "absolute percentage error of the simulator's prediction of the same requests, median / mean."
    )
    lines = [
        head,
        "",
        "| engine | regime | cells | " + " | ".join(_METRICS.values()) + " |",
        "|---|---|---|---|---|---|",
    ]
    rank = table.assign(g=(table.group != "all").astype(int), r=(table.regime != "stable").astype(int))
    for _, r in rank.sort_values(["g", "group", "r"]).iterrows():
        vals = " | ".join(f"{r[f'{m}_median']:.1f} % / {r[f'{m}_mean']:.1f} %" for m in _METRICS)
        lines.append(f"| {r['group']} | {r['regime']} | {int(r['cells'])} | {vals} |")
    st = table[(table.group == "all") & (table.regime == "stable")].iloc[0]
    worst = max(st["p50_e2el_median"], st["p90_e2el_median"])
    lines += [
        "",
        f"Target: median ≤ {TARGET_PCT:g} % on P50 and P90 E2EL in the stable regime: "
        + ("met." if worst <= TARGET_PCT else f"**not met** ({worst:.1f} %)."),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m asrsched.serving.accuracy [--write]``; the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the README's accuracy table")
    a = ap.parse_args(argv)
    res = load_results()
    md = accuracy_markdown(accuracy_table(res), res)
    print(md)
    if a.write:
        readme = ROOT / "README.md"
        text = readme.read_text()
        if BEGIN not in text or END not in text:
            print(f"README.md has no {BEGIN} ... {END} block", file=sys.stderr)
            return 1
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        readme.write_text(f"{pre}{BEGIN}\n{md}\n{END}{post}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
