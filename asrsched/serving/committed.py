"""The committed real-engine study (``figures/04_real_serving``), read back with its provenance.

``python -m asrsched.serving.engine_study --setting full`` writes the study
(:class:`asrsched.serving.engine_study.ServingStudy`); notebook 04 shows it with :func:`load_committed_study`, which reads every file
the study left (results, provenance of each invocation, the vLLM step times, their fitted service model
and the load-tool comparison) and gives the summary lines the notebook prints, so that the notebook
holds calls only and every number shown is read from those files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.serving.engine_study import LOAD_TOOLS_CSV, RESULTS_CSV, RUN_JSON, STEP_MODEL_JSON, STEP_TIMES_CSV
from asrsched.serving.study_stats import sim_error_summary

__all__ = ["CommittedStudy", "load_committed_study"]


@dataclass
class CommittedStudy:
    """The files of one committed real-engine study (``None`` where the study wrote none)."""

    folder: Path
    #: ``real_engine_results.csv``: one row per (engine, policy, rho) with CIs, verdicts and the simulator's prediction
    results: pd.DataFrame
    #: the provenance record of every invocation that wrote rows (``real_engine_run.json``)
    runs: list[dict]
    step_times: pd.DataFrame | None = None
    step_model: ServiceModel | None = None
    load_tools: pd.DataFrame | None = None

    @cached_property
    def errors(self) -> pd.DataFrame:
        """The simulator's error against the real runs (:func:`asrsched.serving.study_stats.sim_error_summary`)."""
        return sim_error_summary(self.results)

    def run_lines(self) -> list[str]:
        """One line per invocation: its engines, setting, provenance and wall time."""
        from asrsched.core.provenance import describe

        out = []
        for run in self.runs:
            pp = run["parameters"]
            out.append(
                f"{', '.join(pp.get('engines', []))}: setting {pp.get('setting')}, {describe(run)}, "
                f"{pp.get('elapsed_s', float('nan')) / 60:.0f} min"
            )
        return out

    def error_lines(self, metrics: tuple[str, ...] = ("p50_e2el", "p90_e2el")) -> list[str]:
        """The simulator's median absolute error per engine and metric over all cells, with its spread."""
        e = self.errors
        return [
            f"simulator vs real, {r.group}, {r.metric}: median |error| {r.median_abs_err_pct:.0f} % "
            f"(P25-P75 {r.p25_abs_err_pct:.0f}-{r.p75_abs_err_pct:.0f} %, max {r.max_abs_err_pct:.0f} %, "
            f"{r.cells} cells)"
            for r in e[(e.regime == "all") & e.metric.isin(list(metrics))].itertuples()
        ]

    def load_tool_lines(self) -> list[str]:
        """``vllm bench serve`` against this package's load generator, per metric (none without the comparison)."""
        if self.load_tools is None:
            return []
        return [
            f"vllm bench serve / our load generator, {r.metric}: {r.ratio:.2f} [{r.ratio_ci_low:.2f}, "
            f"{r.ratio_ci_high:.2f}] ({'agree' if r.agree else 'differ'}; n={r.n_bench} and {r.n_loadgen})"
            for r in self.load_tools.itertuples()
        ]


def load_committed_study(folder: str | Path | None) -> CommittedStudy | None:
    """The study in ``folder``, or ``None`` when there is none (no folder, or no results and provenance in it)."""
    if folder is None:
        return None
    d = Path(folder)
    if not (d / RESULTS_CSV).exists() or not (d / RUN_JSON).exists():
        return None
    steps = pd.read_csv(d / STEP_TIMES_CSV) if (d / STEP_TIMES_CSV).exists() else None
    model = (
        ServiceModel.from_json(d / STEP_MODEL_JSON) if steps is not None and (d / STEP_MODEL_JSON).exists() else None
    )
    tools = pd.read_csv(d / LOAD_TOOLS_CSV) if (d / LOAD_TOOLS_CSV).exists() else None
    return CommittedStudy(
        folder=d,
        results=pd.read_csv(d / RESULTS_CSV),
        runs=json.loads((d / RUN_JSON).read_text())["runs"],
        step_times=steps,
        step_model=model,
        load_tools=tools,
    )
