"""The frontier's tables: changes against FCFS with CIs, the Pareto set, and the recommendation per cell.

A *cell* is (service, workload, ρ, estimate error). Per cell and policy, :func:`frontier_table` gives each
metric of :data:`asrsched.sim.frontier.RUN_METRICS` as the geometric mean of the seeds' paired ratios to
FCFS in percent, with its 95 % ratio CI (:func:`asrsched.sim.sweep_report.change_ci`, the one rule of the
package for a paired change), and marks:

* ``pareto``: no other policy of the cell has a lower (or equal) P50 *and* P90 change with one of them
  strictly lower (point estimates);
* ``p90_ok`` / ``p99_ok``: the P90 (P99) change is at most 0 (the geometric mean of the paired ratios is
  at most 1): no worse than FCFS on these seeds. Its CI is in the table beside it; requiring the CI's upper
  bound to be at most 0 instead would rule out every policy whose tail matches FCFS's within noise, and
  FCFS (change 0 by definition) would win every cell by default.

:func:`recommendations` then picks, per cell, the policy with the lowest P50 change among those with
``p90_ok`` (the ``"p90"`` rule) and among those with ``p99_ok`` (the ``"p99"`` rule), with the gain and its
CI; ``p50_gain_significant`` says whether the P50 change's CI lies below 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from asrsched.sim.frontier import RUN_METRICS
from asrsched.sim.sweep_report import change_ci

__all__ = ["CELL", "frontier_table", "recommendations", "RULES"]

#: the columns naming a cell
CELL = ["service", "workload", "rho", "error"]
#: a recommendation rule -> the metric whose change must not be worse than FCFS's
RULES = {"p90": "p90_e2el_ms", "p99": "p99_e2el_ms"}


def _pareto(p50: np.ndarray, p90: np.ndarray) -> np.ndarray:
    n = len(p50)
    out = np.ones(n, bool)
    for i in range(n):
        dom = (p50 <= p50[i]) & (p90 <= p90[i]) & ((p50 < p50[i]) | (p90 < p90[i]))
        out[i] = not dom.any()
    return out


def frontier_table(runs: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """One row per (cell, policy): mean metrics, ``<metric>_change_pct`` with ``_ci_low/_ci_high``, ``pareto``,
    ``p90_ok``, ``p99_ok``."""
    need = {*CELL, "seed", "policy", "rate", *RUN_METRICS}
    missing = sorted(need - set(runs.columns))
    if missing:
        raise ValueError(f"runs: missing column(s) {missing}")
    parts = []
    for (svc, err), g in runs.groupby(["service", "error"], sort=False):
        t = change_ci(g, RUN_METRICS, baseline="fcfs", level=level)
        t["service"], t["error"] = svc, err
        parts.append(t)
    tab = pd.concat(parts, ignore_index=True)
    tab["pareto"] = False
    for _, idx in tab.groupby(CELL, sort=False).groups.items():
        sub = tab.loc[idx]
        tab.loc[idx, "pareto"] = _pareto(
            sub["p50_e2el_ms_change_pct"].to_numpy(float), sub["p90_e2el_ms_change_pct"].to_numpy(float)
        )
    for rule, m in RULES.items():
        tab[f"{rule}_ok"] = (tab["policy"] == "fcfs").to_numpy() | (tab[f"{m}_change_pct"].to_numpy(float) <= 0)
    order = [*CELL, "policy"]
    return (
        tab[order + [c for c in tab.columns if c not in order]].sort_values(CELL, kind="stable").reset_index(drop=True)
    )


def recommendations(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell and rule (:data:`RULES`): the recommended policy, its P50/P90/P99 changes with CIs, how many
    policies qualified."""
    rows = []
    for cell, g in table.groupby(CELL, sort=False):
        for rule in RULES:
            ok = g[g[f"{rule}_ok"]]
            best = ok.loc[ok["p50_e2el_ms_change_pct"].idxmin()]
            row = dict(zip(CELL, cell))
            row.update(rule=rule, policy=best["policy"], n_qualified=int(len(ok)), n_policies=int(len(g)))
            for m in ("p50_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "max_wait_ms"):
                for s in ("change_pct", "change_ci_low", "change_ci_high"):
                    row[f"{m}_{s}"] = float(best[f"{m}_{s}"])
            row["p50_gain_significant"] = bool(row["p50_e2el_ms_change_ci_high"] < 0)
            row["regime"] = best.get("regime", "stable" if cell[2] < 1 else "overload")
            row["n_requests"] = int(best["n_requests"]) if "n_requests" in best else -1
            rows.append(row)
    return pd.DataFrame(rows)
