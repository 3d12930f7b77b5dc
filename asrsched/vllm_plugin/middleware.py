"""ASGI middleware for vLLM's OpenAI server: every audio upload carries its duration to the scheduler plug-in.

Stock clients send no size: the official ``openai`` client turns
``extra_body={"vllm_xargs": {...}}`` into bracketed form fields (``vllm_xargs[audio_duration_s]``)
that vLLM drops without a word, and ``vllm bench serve`` sends no metadata at all. The
:mod:`asrsched.vllm_plugin.scheduler` then sees no duration and treats every request as a full
30 s window, so SJF and HRRN behave like FCFS. This middleware fixes that on the server::

    python -m vllm.entrypoints.openai.api_server --model <whisper dir> \\
        --scheduler-cls asrsched.vllm_plugin.scheduler.DurationAwareScheduler \\
        --middleware asrsched.vllm_plugin.middleware.DurationMiddleware

(vLLM's ``--middleware`` takes an import path; a class is added with ``app.add_middleware``).
For ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` with a multipart body it:

1. buffers the body and finds its parts (the upload is not decoded);
2. reads the audio duration from the ``file`` part's container header
   (:func:`asrsched.whisper.audio.audio_info`: RIFF chunks for WAV, libsndfile's header parse
   otherwise);
3. merges the request's metadata: the ``vllm_xargs`` JSON string if any, then the bracketed
   fields ``vllm_xargs[key]`` (and ``vllm_xargs[key][]`` lists) the ``openai`` client makes of
   a dict — numbers arrive as text and are turned back into numbers;
4. moves a form field ``priority`` into it (vLLM's transcription API has none; the plug-in's class policies
   read it there, :func:`asrsched.vllm_plugin.request_queue.request_priority`), adds ``audio_duration_s``
   (unless the client sent one), for audio longer than one window an ``upload_id`` and the
   ``upload_duration_s`` (the plug-in's ``upload_sizing`` reads them) and, when asked, the speech duration
   after voice-activity detection as ``speech_duration_s`` (``ASRSCHED_MIDDLEWARE_VAD=energy``
   or ``silero`` for every request, or ``vllm_xargs`` key ``asrsched_vad`` per request; this one
   decodes the samples and costs more);
5. passes the request on with one ``vllm_xargs`` JSON field in place of the bracketed ones
   (vLLM parses it into ``sampling_params.extra_args``), the other parts byte for byte.

With a request log (``request_log=`` or ``ASRSCHED_REQUEST_LOG``, :mod:`asrsched.vllm_plugin.request_log`)
every audio request also leaves one JSON line (arrival, durations, language, priority, chunks, status, E2EL;
no audio), written off the request path.

Each answer carries ``x-asrsched-audio-duration-s`` (what was injected; absent when nothing
was) and ``x-asrsched-middleware-us`` (this middleware's own time for the request).
:data:`STATS` keeps the count, total and largest cost. A body that is not multipart, has no
readable audio or exceeds ``ASRSCHED_MIDDLEWARE_MAX_MB`` (default 64) goes through unchanged,
so vLLM answers it as it would without the middleware. Nothing here imports vLLM.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asrsched.vllm_plugin.request_log import RequestLog
from asrsched.vllm_plugin.request_log import from_env as request_log_from_env

__all__ = ["DurationMiddleware", "STATS", "AUDIO_PATHS", "rewrite_multipart", "parse_multipart", "MiddlewareStats"]

AUDIO_PATHS = ("/v1/audio/transcriptions", "/v1/audio/translations")
VAD_ENV = "ASRSCHED_MIDDLEWARE_VAD"
MAX_MB_ENV = "ASRSCHED_MIDDLEWARE_MAX_MB"
XARG_VAD = "asrsched_vad"
_WINDOW_S = 30.0  # Whisper's window: the request log's n_chunks

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


class MiddlewareStats:
    """Requests rewritten and the middleware's cost (seconds), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.n = 0
        self.total_s = 0.0
        self.max_s = 0.0
        self.passed_through = 0

    def add(self, seconds: float, rewritten: bool) -> None:
        with self._lock:
            if rewritten:
                self.n += 1
                self.total_s += seconds
                self.max_s = max(self.max_s, seconds)
            else:
                self.passed_through += 1

    def summary(self) -> dict[str, float]:
        """``requests``, ``mean_us``, ``max_us`` of rewritten requests, and ``passed_through``."""
        with self._lock:
            return {
                "requests": self.n,
                "mean_us": 1e6 * self.total_s / self.n if self.n else float("nan"),
                "max_us": 1e6 * self.max_s,
                "passed_through": self.passed_through,
            }


STATS = MiddlewareStats()

_NAME = re.compile(rb'(?i)\bname="((?:[^"\\]|\\.)*)"')
_FILENAME = re.compile(rb'(?i)\bfilename\*?="?')


def _boundary(content_type: str) -> bytes | None:
    m = re.search(r'(?i)boundary=(?:"([^"]+)"|([^;,\s]+))', content_type or "")
    if not m or not content_type.lower().startswith("multipart/form-data"):
        return None
    return (m.group(1) or m.group(2)).encode("latin-1")


def parse_multipart(body: bytes, boundary: bytes) -> list[dict[str, Any]] | None:
    """The parts of a ``multipart/form-data`` body: ``name``, ``is_file``, ``headers`` and ``start``/``end``
    of the content in ``body`` (no copies). ``None`` if the body is not well-formed."""
    delim = b"--" + boundary
    pos = body.find(delim)
    if pos < 0:
        return None
    parts = []
    while True:
        pos += len(delim)
        if body[pos : pos + 2] == b"--":
            return parts
        if body[pos : pos + 2] != b"\r\n":
            return None
        h0 = pos + 2
        h1 = body.find(b"\r\n\r\n", h0)
        if h1 < 0:
            return None
        headers = body[h0:h1]
        c0 = h1 + 4
        nxt = body.find(b"\r\n" + delim, c0)
        if nxt < 0:
            return None
        m = _NAME.search(headers)
        if m is None:
            return None
        parts.append(
            {
                "name": m.group(1).decode("utf-8", "replace"),
                "headers": headers,
                "start": c0,
                "end": nxt,
                "is_file": _FILENAME.search(headers) is not None,
            }
        )
        pos = nxt + 2


def _value(raw: str) -> Any:
    """A form value as the JSON scalar it spells (``"5.2"`` -> 5.2), else the text."""
    try:
        v = json.loads(raw)
    except ValueError:
        return raw
    return v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else raw


def rewrite_multipart(
    body: bytes, content_type: str, *, vad: str | None = None, fields: dict | None = None
) -> tuple[bytes, dict] | None:
    """The body with one merged ``vllm_xargs`` JSON part holding the audio duration; ``(new_body, xargs)``.

    ``None`` when there is nothing to do or it cannot be done safely (not multipart, no
    ``file`` part, audio header unreadable, ``vllm_xargs`` not a JSON object): the caller
    passes the original body on unchanged. ``fields``, when given, receives the form's ``language``
    and ``priority`` (the request log's).
    """
    from asrsched.whisper.audio import AudioError, audio_info

    b = _boundary(content_type)
    if b is None:
        return None
    parts = parse_multipart(body, b)
    if not parts:
        return None
    files = [p for p in parts if p["name"] == "file"]
    if len(files) != 1:
        return None
    xargs: dict[str, Any] = {}
    keep = []
    form_priority = None
    for p in parts:
        name = p["name"]
        if name == "vllm_xargs":
            try:
                obj = json.loads(body[p["start"] : p["end"]].decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                return None  # vLLM reports the bad JSON itself
            if not isinstance(obj, dict):
                return None
            xargs.update(obj)
        elif name == "priority":  # vLLM's transcription API has no priority field: it travels in vllm_xargs
            form_priority = _value(body[p["start"] : p["end"]].decode("utf-8", "replace"))
            if fields is not None:
                fields["priority"] = form_priority
        elif name.startswith("vllm_xargs[") and name.endswith("]"):
            val = _value(body[p["start"] : p["end"]].decode("utf-8", "replace"))
            if name.endswith("][]"):  # a list value: vllm_xargs[key][]
                xargs.setdefault(name[len("vllm_xargs[") : -3], []).append(val)
            else:
                xargs[name[len("vllm_xargs[") : -1]] = val
        else:
            keep.append(p)
            if fields is not None and name == "language":
                fields[name] = _value(body[p["start"] : p["end"]].decode("utf-8", "replace"))
    f = files[0]
    view = memoryview(body)
    audio = view[f["start"] : f["end"]]  # no copy: the header parse reads 64 KiB of it
    try:
        info = audio_info(audio)
    except AudioError:
        return None  # vLLM answers a bad upload with its own error
    xargs.setdefault("audio_duration_s", round(float(info.duration_s), 4))
    if float(info.duration_s) > _WINDOW_S:  # a long upload: vLLM cuts it into chunks that the plug-in may size together
        xargs.setdefault("upload_duration_s", xargs["audio_duration_s"])
        xargs.setdefault("upload_id", uuid.uuid4().hex)
    if form_priority is not None:
        xargs.setdefault("priority", form_priority)
    method = str(xargs.pop(XARG_VAD, "") or vad or "").strip().lower()
    if method and method != "none" and "speech_duration_s" not in xargs:
        from asrsched.whisper.audio import load_audio
        from asrsched.whisper.vad import VAD_METHODS, speech_duration

        if method not in VAD_METHODS:
            raise ValueError(
                f"{VAD_ENV} / vllm_xargs[{XARG_VAD}] must be one of {', '.join(VAD_METHODS)}, got {method!r}"
            )
        try:
            y = load_audio(audio, mono="mix", resample=True)
        except AudioError:
            y = None
        if y is not None:
            xargs["speech_duration_s"] = round(float(speech_duration(y, 16_000, method=method).speech_s), 4)
    delim = b"--" + b
    new_part = (
        delim + b'\r\nContent-Disposition: form-data; name="vllm_xargs"\r\n\r\n' + json.dumps(xargs).encode() + b"\r\n"
    )
    out = [view[: body.find(delim)]]
    for p in keep:
        out += [delim, b"\r\n", p["headers"], b"\r\n\r\n", view[p["start"] : p["end"]], b"\r\n"]
    out += [new_part, delim, b"--\r\n"]
    return b"".join(out), xargs


class DurationMiddleware:
    """ASGI middleware: inject the upload's audio duration into ``vllm_xargs`` (see the module docstring)."""

    def __init__(
        self,
        app: Callable[[Scope, Callable, Callable], Awaitable[None]],
        *,
        vad: str | None = None,
        max_mb: float | None = None,
        paths: tuple[str, ...] = AUDIO_PATHS,
        request_log: RequestLog | str | os.PathLike | None = None,
    ):
        self.app = app
        if request_log is None:
            request_log = request_log_from_env()
        self.request_log = RequestLog(request_log) if isinstance(request_log, (str, os.PathLike)) else request_log
        self.vad = vad if vad is not None else (os.environ.get(VAD_ENV) or None)
        self.max_bytes = int(float(max_mb if max_mb is not None else os.environ.get(MAX_MB_ENV, 64)) * 2**20)
        self.paths = tuple(paths)
        if self.vad is not None:
            from asrsched.whisper.vad import VAD_METHODS

            if self.vad not in VAD_METHODS:
                raise ValueError(f"{VAD_ENV} must be one of {', '.join(VAD_METHODS)}, got {self.vad!r}")

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or not str(scope.get("path", "")).rstrip("/").endswith(self.paths)
        ):
            await self.app(scope, receive, send)
            return
        arrival = time.time()  # the request log's arrival: before the body is read
        headers = scope.get("headers") or []
        ctype = next((v.decode("latin-1") for k, v in headers if k.lower() == b"content-type"), "")
        if _boundary(ctype) is None:
            await self.app(scope, receive, send)
            return
        chunks, size, more, disconnected = [], 0, True, False
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                disconnected = True
                break
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            more = msg.get("more_body", False)
            if size > self.max_bytes:
                break
        body = b"".join(chunks)
        t0 = time.perf_counter()
        out = None
        fields: dict[str, Any] = {}
        if not disconnected and not more:
            try:
                out = rewrite_multipart(body, ctype, vad=self.vad, fields=fields)
            except Exception:  # never fail a request on the way in: vLLM answers it as it would have
                out = None
        dt = time.perf_counter() - t0
        STATS.add(dt, out is not None)
        if out is not None:
            body, xargs = out
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in headers if k.lower() != b"content-length"] + [
                (b"content-length", str(len(body)).encode())
            ]
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                if disconnected:
                    return {"type": "http.disconnect"}
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        extra = [(b"x-asrsched-middleware-us", f"{dt * 1e6:.0f}".encode())]
        if out is not None:
            extra.append((b"x-asrsched-audio-duration-s", f"{out[1]['audio_duration_s']}".encode()))

        log = self.request_log
        entry: dict[str, Any] = {}
        if log is not None:
            xa = out[1] if out is not None else {}
            dur = xa.get("audio_duration_s")
            entry = {
                "arrival_unix_s": arrival,
                "audio_duration_s": dur,
                "speech_duration_s": xa.get("speech_duration_s"),
                "language": fields.get("language"),
                "priority": xa.get("priority", fields.get("priority")),
                "n_chunks": max(1, math.ceil(float(dur) / _WINDOW_S)) if isinstance(dur, (int, float)) else None,
                "path": str(scope.get("path", "")),
            }

        async def send_with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers") or []) + extra
                entry["status"] = message.get("status")
            await send(message)
            if log is not None and message.get("type") == "http.response.body" and not message.get("more_body"):
                entry["e2el_s"] = round(time.time() - arrival, 6)
                log.write(entry)

        await self.app(scope, replay, send_with_headers)
