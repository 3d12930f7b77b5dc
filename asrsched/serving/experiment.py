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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
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
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.serving.loadgen import plan_requests, run_coro, run_load

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
]

TABLE_METRICS = ("p50_e2el_ms", "p90_e2el_ms", "p50_ttft_ms", "p90_ttft_ms", "request_throughput")


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


class _suppress_http:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        import httpx

        return et is not None and issubclass(et, httpx.HTTPError)


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
    sim: pd.DataFrame  # simulated runs, same keys; mode "sim" (probe-calibrated, tokens = kappa x d), "profile"
    # (a profile measured elsewhere, e.g. the packaged one) or "replay" (each request's measured service time)
    table: pd.DataFrame  # comparison_table(records, sim)
    service: ServiceModel
    capacity_rps: float
    probe_records: pd.DataFrame
    probe_server: pd.DataFrame
    rates: dict
    params: dict
    timings: dict = field(default_factory=dict)

    def summary(self) -> str:
        """A few lines: capacity, calibration, the median absolute prediction error."""
        sm = self.service
        err = self.table[[c for c in self.table if c.endswith("_err_pct")]].abs()
        lines = [f"capacity {self.capacity_rps:.2f} req/s ({self.params['slots']} slot(s)); calibrated "
                 f"encode {sm.encode_s_per_window:.3f} s/window, step {1e3 * sm.decode_s_per_token:.1f} ms, "
                 f"kappa {', '.join(f'{k} {v:.2f}' for k, v in sm.kappa.items())} steps/s, "
                 f"overhead {1e3 * sm.overhead_s:.0f} ms",
                 "rates: " + ", ".join(f"{k}: {v:.2f} req/s" for k, v in self.rates.items())]
        for c in err:
            mode, _, m = c[:-8].partition("_")
            what = {"sim": "prediction (probe-calibrated)", "profile": "prediction (packaged profile)",
                    "replay": "replay (measured service times)"}.get(mode, mode)
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
    loads: Sequence[float] = (0.5, 0.9, 1.3),
    *,
    rates: Sequence[float] | None = None,
    n_requests: int = 12,
    n_probe: int = 6,
    workload: str = "librispeech",
    seed: int = 0,
    model: str = "tiny.en",
    workers: int = 1,
    target_url: str | None = None,
    upstream_concurrency: int = 4,
    stream: bool = True,
    profile: str | None = "packaged",
    pool_size: int = 24,
    timeout_s: float = 300.0,
    out_dir: str | os.PathLike | None = None,
    cache=None,
    progress: bool = True,
) -> ServingExperiment:
    """Calibrate, then run every policy at every load on real servers, and simulate the same runs.

    ``profile``: a second a-priori prediction from a service model measured elsewhere
    (``"packaged"``: the profile shipped for ``model``, :func:`asrsched.profiling.run.packaged_profile`;
    a path: a ``asrsched.service_model/1`` JSON; ``None``: skip), mode ``"profile"`` in
    :attr:`ServingExperiment.sim`.
    ``loads`` are fractions of the probed capacity (below, near, above 1); ``rates``
    (req/s) replaces them when given. With ``target_url`` the servers front that
    endpoint (upstream mode, ``upstream_concurrency`` in flight; the simulator then uses
    that many slots). Records, the calibrated model and the table go to ``out_dir``
    when given. See the module docstring.
    """
    rates = list(rates or [])
    _check_params(policies, loads, rates, n_requests, n_probe, workers)
    policies = validate_policies(list(policies))
    prof_model = None
    if profile == "packaged":
        if not target_url:
            from asrsched.profiling.run import packaged_profile

            with contextlib.suppress(ValueError):
                prof_model = packaged_profile(model)
    elif profile:
        prof_model = ServiceModel.from_json(profile)
    slots = int(upstream_concurrency) if target_url else int(workers)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="asrsched-serving-"))
    out.mkdir(parents=True, exist_ok=True)
    skw = dict(model=model, workers=workers, upstream=target_url or None, max_concurrency=upstream_concurrency)
    if target_url:
        skw["args"] = ["--served-model-name", model]
    timings: dict[str, float] = {}

    # 1. probe + calibration
    t = time.perf_counter()
    with ServerProcess("fcfs", log=out / "server-probe.log", **skw) as sp:
        probe_rec, probe_srv = probe(sp.url, workload, n=n_probe, seed=seed, slots=1, model=model,
                                     pool_size=pool_size, cache=cache, stream=stream, progress=progress)
    if probe_srv.empty or probe_srv["tokens"].isna().all():
        # an upstream that reports no decoder steps: use the text tokens the client saw
        probe_srv = probe_rec.assign(service=probe_rec["e2el"], tokens=probe_rec["text_tokens"])
    service = calibrate(probe_srv, name=f"{model} behind asrsched serve ({'upstream' if target_url else 'local'})")
    prof = service.to_json(out / "calibrated_service_model.json")
    wl_trace = make_trace(workload, rate=1.0, n=2000, seed=seed)
    cap = capacity_rps(service, wl_trace.duration, wl_trace.language, slots=slots)
    timings["probe_s"] = time.perf_counter() - t

    # 2. traces per load level (the same trace for every policy)
    levels = {f"{r:g} req/s": float(r) for r in rates} if rates else {f"{x:g}x": float(x) * cap for x in loads}
    plans = {}
    for i, (lvl, rate) in enumerate(levels.items()):
        tr = make_trace(workload, rate=rate, n=int(n_requests), seed=seed + 1000 * (i + 1))
        plans[lvl] = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress)

    # 3. real runs and their simulation. One server per policy, all started at once and idle
    # between their runs; load levels outside, policies inside in alternating order, so that a
    # shared machine whose speed drifts during the experiment affects every policy alike.
    real, sims = [], []
    with contextlib.ExitStack() as stack:
        t = time.perf_counter()
        servers = {pol: ServerProcess(pol, profile=prof, log=out / f"server-{pol}.log", **skw).launch()
                   for pol in policies}
        for sp in servers.values():
            stack.callback(sp.stop)
        for sp in servers.values():
            sp.wait_ready()
        timings["start_servers_s"] = time.perf_counter() - t
        for i, (lvl, rate) in enumerate(levels.items()):
            t = time.perf_counter()
            for pol in (policies if i % 2 == 0 else policies[::-1]):
                rec = run_coro(run_load(servers[pol].url, plans[lvl], model=model, stream=stream,
                                        timeout_s=timeout_s, label=pol, progress=progress))
                load = rate / cap
                rec = rec.assign(policy=pol, level=lvl, rate=rate, load=round(load, 3))
                real.append(rec)
                modes = [("sim", service, "kappa")]
                if service.decode_s_per_token > 0:  # a probe too small to fit a decode cost cannot replay
                    modes.append(("replay", service, "service"))
                if prof_model is not None:
                    modes.insert(1, ("profile", prof_model, "kappa"))
                for mode, sm, tok in modes:
                    sim = simulate_run(rec, pol, sm, slots=slots, tokens=tok)
                    sims.append(sim.assign(policy=pol, level=lvl, rate=rate, load=round(load, 3), mode=mode))
            timings[f"runs_{lvl}_s"] = time.perf_counter() - t
    records = pd.concat(real, ignore_index=True)
    sim = pd.concat(sims, ignore_index=True)
    params = dict(policies=policies, loads=list(loads), rates=rates, n_requests=n_requests, n_probe=n_probe,
                  workload=workload, seed=seed, model=model, workers=workers, target_url=target_url,
                  upstream_concurrency=upstream_concurrency, stream=stream, slots=slots,
                  profile=getattr(prof_model, "name", None),
                  out_dir=str(out))
    records.to_parquet(out / "real_records.parquet", index=False)
    sim.to_parquet(out / "sim_records.parquet", index=False)
    table = comparison_table(records, sim)
    table.to_csv(out / "comparison.csv", index=False)
    (out / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    return ServingExperiment(records, sim, table, service, cap, probe_rec, probe_srv, levels, params, timings)
