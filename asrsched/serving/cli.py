"""A policy-ordered, OpenAI-compatible transcription server (CPU reference, or a front for any engine).

The command line: ``asrsched serve`` and ``python -m asrsched.serving.cli`` run :func:`main`,
which validates a :class:`~asrsched.serving.config.ServerConfig` from the flags
(:func:`build_parser`), binds the port and serves :func:`asrsched.serving.app.create_app`
with uvicorn until interrupted (the HTTP API and how a request travels:
:mod:`asrsched.serving.app`).

``asrsched serve --policy sjf --model tiny.en --port 8000 [--slots 1]
[--upstream URL --max-concurrency N] [--queue-limit N] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import json
import sys

from asrsched.core.policies import allowed_policies_text
from asrsched.serving.app import bind_socket, create_app
from asrsched.serving.config import ServerConfig
from asrsched.serving.policy_server import PolicyServer

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``asrsched serve`` argument parser."""
    ap = argparse.ArgumentParser(prog="asrsched serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="fcfs", help=f"one of {allowed_policies_text()}")
    ap.add_argument("--policy-params", default="{}", help="JSON object of policy parameters")
    ap.add_argument("--model", default="tiny.en", help="tiny.en or base (local mode); the served name upstream")
    ap.add_argument("--served-model-name", action="append", default=[], help="another accepted model name")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--slots", type=int, default=1, help="requests transcribed at once (faster-whisper workers)")
    ap.add_argument("--cpu-threads", type=int, default=None, help="threads per slot (default cores/slots)")
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--upstream", default=None, help="forward admitted requests to this OpenAI-compatible URL")
    ap.add_argument("--upstream-model", default=None, help="model name to send upstream")
    ap.add_argument("--max-concurrency", type=int, default=4, help="requests in flight upstream")
    ap.add_argument("--queue-limit", type=int, default=0, help="most waiting requests; more get 503 (0 = none)")
    ap.add_argument("--timeout", type=float, default=600.0, help="request timeout in seconds (504 after)")
    ap.add_argument("--max-upload-mb", type=float, default=25.0)
    ap.add_argument("--profile", default=None, help="ServiceModel JSON for the size estimate")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--log-level", default="warning")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``asrsched serve``: run the policy-ordered transcription server until interrupted."""
    import uvicorn

    a = build_parser().parse_args(argv)
    try:
        params = json.loads(a.policy_params)
        if not isinstance(params, dict):
            raise ValueError
    except ValueError:
        print(f"asrsched serve: error: --policy-params must be a JSON object, got {a.policy_params!r}", file=sys.stderr)
        return 2
    cfg = ServerConfig(
        policy=a.policy,
        model=a.model,
        local_slots=a.slots,
        cpu_threads=a.cpu_threads,
        compute_type=a.compute_type,
        upstream=a.upstream,
        upstream_model=a.upstream_model,
        max_concurrency=a.max_concurrency,
        queue_limit=a.queue_limit,
        request_timeout_s=a.timeout,
        max_upload_mb=a.max_upload_mb,
        profile=a.profile,
        policy_params=params,
        served_model_names=tuple(a.served_model_name),
        warmup=not a.no_warmup,
    )
    try:
        cfg.validate()
        if not (0 <= a.port < 65536):
            raise ValueError(f"port must be in 0..65535, got {a.port}")
        sock = bind_socket(a.host, a.port)
    except (ValueError, OSError) as e:
        print(f"asrsched serve: error: {e}", file=sys.stderr)
        return 2
    app = create_app(cfg)
    port = sock.getsockname()[1]
    url = f"http://{a.host}:{port}"

    def ready(srv: PolicyServer) -> None:
        mode = (
            f"upstream {cfg.upstream} (max {cfg.max_concurrency} in flight)"
            if cfg.upstream
            else f"{cfg.local_slots} slot(s) x {cfg.threads_per_slot} thread(s), {cfg.model}"
        )
        print(f"asrsched serve: listening on {url} policy={cfg.policy} {mode}", flush=True)

    app.state.on_ready = ready
    server = uvicorn.Server(uvicorn.Config(app, log_level=a.log_level, lifespan="on", timeout_graceful_shutdown=5))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
