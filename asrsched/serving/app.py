"""The HTTP application: an OpenAI-compatible transcription endpoint in front of the policy-ordered scheduler.

``POST /v1/audio/transcriptions`` takes the OpenAI multipart form (``file``, ``model``,
``language``, ``prompt``, ``response_format`` = ``json`` | ``text`` | ``verbose_json``, ``stream``,
``temperature``, ``timestamp_granularities[]``, ``include[]`` and vLLM's ``vllm_xargs``, as a JSON
string or as the bracketed fields ``vllm_xargs[key]`` the ``openai`` client makes of a dict).
``prompt`` conditions every window (Whisper's initial prompt); ``timestamp_granularities``
``segment`` gives ``verbose_json`` segments with their start and end (one per decoded window);
``word`` and any ``include`` value are refused with a 400 that names the value (this engine
decodes without timestamp tokens and keeps no log-probabilities) — nothing is silently
ignored. ``POST /v1/audio/translations`` translates into English (multilingual models; an
English-only model gets a 400 naming it). With ``stream=true`` the answer is server-sent
events shaped as vLLM's: ``transcription.chunk`` objects with ``choices[0].delta.content``, a
last chunk with ``finish_reason`` and ``usage``, then ``data: [DONE]``. Unknown paths and
methods get OpenAI-style JSON errors (404/405), not plain text.

How a request travels:

1. **Arrival** (event loop, no decode, no inference): the upload is checked (size,
   model, language, format) and the audio duration read from the container header
   (:func:`asrsched.whisper.audio.audio_info`); the size estimate is
   ``windows x encode + kappa x duration x step + overhead``
   (:meth:`asrsched.core.service.ServiceModel.est_service`, called by
   :meth:`asrsched.serving.policy_server.PolicyServer.make_request`), where for audio longer than one window
   ``windows`` is the engine's real number of windows (the samples are read off the event
   loop and cut as the engine will cut them), not ``ceil(duration / 30 s)``. A bad upload gets a 4xx JSON
   error ``{"error": {"message", "type", "param", "code"}}`` at once.
2. **Queue**: the request waits in the policy's queue (:func:`asrsched.core.policies.make_queue`:
   FCFS, SJF, HRRN, ...) kept by :class:`asrsched.serving.policy_server.PolicyServer`. With
   ``queue_limit`` set, a request that finds the queue full is refused with **503** and a
   ``Retry-After`` header (seconds, from the estimated work ahead of it) — refused up
   front, never dropped later.
3. **Service**: when a worker is free the policy picks the next request. Locally a
   worker runs faster-whisper on CPU (:class:`asrsched.serving.whisper_engine.WhisperEngine`:
   greedy, no timestamps, no temperature fallback — the setting of vLLM's endpoint — with
   the first token generated separately so that it streams as soon as it exists). In
   *upstream* mode the worker slot forwards the request to another OpenAI-compatible
   server (e.g. stock vLLM) instead, at most ``max_concurrency`` at a time, with the
   duration in ``vllm_xargs`` for an engine that can use it.
4. **Answer**: every accepted request completes, or ends with an explicit error:
   ``504`` when it exceeds ``request_timeout_s`` counted from its arrival (upload parsing,
   waiting or running), ``502`` when
   the upstream fails; ``500`` with code ``hallucination_loop`` when the decoder repeats itself
   (:class:`asrsched.serving.whisper_engine.HallucinationLoop`). A client that disconnects frees its place: a queued request
   is removed, a running one is cancelled at its next decode call (local) or its
   upstream call is closed.

``GET /health`` (200 when ready), ``GET /metrics`` (Prometheus text, see
:mod:`asrsched.serving.prometheus`: queue depth, in-flight, queued work, outcomes,
per-policy histograms of E2EL, TTFT, queue delay and service time, scheduling overhead),
``GET /v1/models``, and ``GET /debug/requests`` (the server-side per-request records, in
the simulator's columns: ``rid, arrival, duration, language, est_service, tokens, admit,
first_token, finish`` plus outcome, timings and overhead; times in seconds since the
server started).

:mod:`asrsched.serving.form` checks the upload's form. :func:`create_app` builds the Starlette application for a
:class:`~asrsched.serving.config.ServerConfig`; :func:`run_in_thread` serves it with
uvicorn from a background thread (tests, benchmarks, notebooks) and returns a
:class:`ServerHandle`. The command line is :mod:`asrsched.serving.cli`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from asrsched.serving.config import ServerConfig
from asrsched.serving.form import error_response, parse_form
from asrsched.serving.policy_server import PolicyServer, QueueFull, TranscriptionRequest
from asrsched.whisper.audio import AudioError, load_audio

__all__ = ["CHUNK_OBJECT", "create_app", "run_in_thread", "ServerHandle", "bind_socket"]

CHUNK_OBJECT = "transcription.chunk"


# ----------------------------------------------------------------------------- HTTP app


def _sse(obj: Any) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


async def _watch_disconnect(receive) -> None:
    """Returns when the client has gone (an ``http.disconnect`` message)."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


def create_app(config: ServerConfig | None = None, **kw):
    """The Starlette application for ``config`` (or keyword fields of :class:`ServerConfig`)."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    config = (config or ServerConfig(**kw)).validate()
    srv = PolicyServer(config)
    max_bytes = int(config.max_upload_mb * 1024 * 1024)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await srv.start()
        hook = app.state.on_ready
        if hook is not None:
            hook(srv)
        try:
            yield
        finally:
            await srv.stop()

    async def health(request):
        if not srv.ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "policy": config.policy,
                "model": config.model,
                "mode": "upstream" if config.upstream else "local",
                "slots": config.slots,
                "queue_depth": len(srv.queue),
                "in_flight": len(srv.running),
            }
        )

    async def metrics(request):
        return PlainTextResponse(srv.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(request):
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "asrsched"} for m in sorted(config.model_names)],
            }
        )

    async def debug_requests(request):
        return JSONResponse(
            [
                {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                for r in srv.records
            ]
        )

    async def transcriptions(request):
        return await _handle(request, "transcribe")

    async def translations(request):
        return await _handle(request, "translate")

    async def _handle(request, task: str):
        t_sched = time.perf_counter()
        deadline = time.monotonic() + config.request_timeout_s  # counted from arrival: upload parsing counts
        if not srv.ready:
            return error_response(503, "server is starting", type_="server_error", headers={"Retry-After": "1"})
        cl = request.headers.get("content-length")
        if cl and cl.isdigit() and int(cl) > max_bytes + 64 * 1024:
            srv.outcomes["bad_request"] += 1
            return error_response(
                413,
                f"upload of {int(cl)} bytes exceeds the {config.max_upload_mb:g} MB limit",
                param="file",
                code="too_large",
            )
        try:
            form = await request.form(max_files=1, max_fields=32, max_part_size=max_bytes + 1)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as e:  # malformed multipart, or a part over the limit
            srv.outcomes["bad_request"] += 1
            msg = str(getattr(e, "detail", "") or e)
            if "exceed" in msg.lower() or "too large" in msg.lower():
                return error_response(
                    413, f"upload exceeds the {config.max_upload_mb:g} MB limit ({msg})", param="file", code="too_large"
                )
            return error_response(400, f"the body must be multipart/form-data with a 'file' part ({msg})", param="file")
        try:
            bad = await parse_form(form, task, config, srv.engine)
        finally:
            await form.close()
        if isinstance(bad, Response):
            srv.outcomes["bad_request"] += 1
            return bad
        data, duration, fields = bad
        eng = srv.engine
        if eng is not None and duration > eng.max_window_s:  # long audio: count the windows it will really take
            try:
                audio = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: load_audio(data, mono="mix", resample=True)
                )
            except AudioError as e:
                srv.outcomes["bad_request"] += 1
                return error_response(
                    400, f"{fields.get('filename') or 'file'}: {e.reason}: {e.detail}", param="file", code=e.reason
                )
            fields["windows"] = eng.plan(audio)
            del audio
        req = srv.make_request(data, duration, sched_s=time.perf_counter() - t_sched, **fields)
        try:
            srv.submit(req)
        except QueueFull as e:
            return error_response(
                503,
                f"queue full ({e.depth} requests waiting, limit {config.queue_limit}); retry after {e.retry_after} s",
                type_="server_overloaded",
                code="queue_full",
                headers={"Retry-After": str(e.retry_after)},
            )
        watcher = asyncio.ensure_future(_watch_disconnect(request.receive))
        try:
            first = await _next_event(req, watcher, deadline)
            if first is None:  # client gone
                srv.cancel(req, "cancelled", "client disconnected", 499)
                return Response(status_code=499)
            if first[0] == "error":
                return _error_response(first[1], config)
            if req.stream:
                watcher.cancel()
                return StreamingResponse(
                    _stream(req, first, deadline),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            ev = first
            while ev[0] == "delta":
                ev = await _next_event(req, watcher, deadline)
                if ev is None:
                    srv.cancel(req, "cancelled", "client disconnected", 499)
                    return Response(status_code=499)
            if ev[0] == "error":
                return _error_response(ev[1], config)
            return _final_response(req)
        finally:
            if not watcher.done():
                watcher.cancel()

    async def _next_event(req: TranscriptionRequest, watcher: asyncio.Future, deadline: float):
        """The request's next event; ``None`` if the client left; an error event on timeout."""
        get = asyncio.ensure_future(req.events.get())
        timeout = deadline - time.monotonic()
        done, _ = await asyncio.wait({get, watcher}, timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        if watcher in done:
            return None
        srv.cancel(
            req,
            "timeout",
            f"request timed out after {config.request_timeout_s:g} s "
            f"({'running' if req.rid in srv.running else 'waiting in the queue'})",
            504,
        )
        return await req.events.get()

    def _error_response(err, config):
        status, message, outcome, code = err
        if outcome == "timeout":
            return error_response(504, message, type_="timeout", code="timeout")
        if outcome == "bad_request":
            return error_response(status, message, param="file", code=code)
        return error_response(
            status, message, type_="server_error" if status >= 500 else "invalid_request_error", code=code or outcome
        )

    def _extra(req: TranscriptionRequest) -> dict:
        r = req.result or {}
        return {
            "rid": req.rid,
            "policy": config.policy,
            "audio_s": req.job.duration,
            "est_service_s": req.job.est_service,
            "queue_s": req.t_admit - req.t_arrival,
            "service_s": req.t_finish - req.t_admit,
            "engine_s": r.get("total_s"),
            "tokens": r.get("tokens", req.upstream_tokens),
            "decode_steps": r.get("decode_steps"),
            "worker": req.worker,
        }

    def _final_response(req: TranscriptionRequest):
        if req.response_format == "text":
            return PlainTextResponse(req.text)
        r = req.result or {}
        if req.response_format == "verbose_json":
            if "upstream" in r:
                return JSONResponse({**r["upstream"], "asrsched": _extra(req)})
            segs = r.get("segments") or [
                {"id": 0, "seek": 0, "start": 0.0, "end": req.job.duration, "text": req.text.strip(), "tokens": []}
            ]
            body = {
                "task": "translate" if req.job_task == "translate" else "transcribe",
                "language": r.get("language", req.language),
                "duration": req.job.duration,
                "text": req.text,
                "segments": [{**sg, "temperature": 0.0} for sg in segs],
                "usage": {"type": "duration", "seconds": int(math.ceil(req.job.duration))},
                "asrsched": _extra(req),
            }
            return JSONResponse(body)
        toks = r.get("tokens", req.upstream_tokens)
        return JSONResponse(
            {
                "text": req.text,
                "usage": {
                    "type": "tokens",
                    "input_tokens": 0,
                    "output_tokens": toks,
                    "total_tokens": toks,
                    "seconds": req.job.duration,
                },
                "asrsched": _extra(req),
            }
        )

    async def _stream(req: TranscriptionRequest, first, deadline):
        created = int(time.time())

        def chunk(content: str | None, finish: str | None = None, usage: dict | None = None) -> bytes:
            obj = {
                "id": req.id,
                "object": CHUNK_OBJECT,
                "created": created,
                "model": req.model,
                "choices": [
                    {
                        "delta": {"content": content} if content is not None else {},
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
            }
            if usage is not None:
                obj["usage"] = usage
                obj["asrsched"] = _extra(req)
            return _sse(obj)

        ev = first
        try:
            while True:
                if ev[0] == "delta":
                    yield chunk(ev[1])
                elif ev[0] == "done":
                    toks = (req.result or {}).get("tokens", req.upstream_tokens) or 0
                    yield chunk("", "stop", {"prompt_tokens": 0, "completion_tokens": toks, "total_tokens": toks})
                    yield _sse("[DONE]")
                    return
                else:
                    status, message, outcome, code = ev[1]
                    yield _sse({"error": {"message": message, "type": outcome, "param": None, "code": status}})
                    yield _sse("[DONE]")
                    return
                timeout = deadline - time.monotonic()
                try:
                    ev = await asyncio.wait_for(req.events.get(), max(timeout, 0))
                except TimeoutError:
                    srv.cancel(
                        req, "timeout", f"request timed out after {config.request_timeout_s:g} s (while streaming)", 504
                    )
                    ev = await req.events.get()
        finally:  # the client went away mid-stream (or we are done): free the slot
            if not req.finished:
                srv.cancel(req, "cancelled", "client disconnected while streaming", 499)

    async def not_found(request, exc):
        status = getattr(exc, "status_code", 404)
        if status == 405:
            return error_response(
                405, f"method {request.method} is not allowed on {request.url.path}", code="method_not_allowed"
            )
        return error_response(
            status,
            f"no such endpoint: {request.method} {request.url.path} (this server serves "
            "POST /v1/audio/transcriptions, POST /v1/audio/translations, GET /v1/models, /health, "
            "/metrics)",
            type_="NotFoundError",
            code="not_found",
        )

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/debug/requests", debug_requests, methods=["GET"]),
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
            Route("/v1/audio/translations", translations, methods=["POST"]),
        ],
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: not_found},
    )
    app.state.server = srv
    app.state.config = config
    app.state.on_ready = None
    return app


# ----------------------------------------------------------------------------- running it


@dataclass
class ServerHandle:
    """A server running in a background thread (see :func:`run_in_thread`)."""

    url: str
    app: Any
    thread: threading.Thread
    server: Any

    @property
    def policy_server(self) -> PolicyServer:
        return self.app.state.server

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv6 when ``host`` has a colon; 0 = any free port), ready for uvicorn."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def run_in_thread(
    config: ServerConfig | None = None, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 120.0, **kw
) -> ServerHandle:
    """Start the server on ``host:port`` (0 = any free port) in a daemon thread; returns when ready."""
    import uvicorn

    app = create_app(config, **kw)
    sock = bind_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="asrsched-server")
    th.start()
    t_end = time.monotonic() + start_timeout
    while not server.started:
        if not th.is_alive():
            raise RuntimeError("the server thread exited during start-up (see the log above)")
        if time.monotonic() > t_end:
            server.should_exit = True
            raise TimeoutError(f"server not ready after {start_timeout} s")
        time.sleep(0.02)
    h, p = sock.getsockname()[:2]
    return ServerHandle(f"http://{host}:{p}", app, th, server)
