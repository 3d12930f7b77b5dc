"""A policy-ordered, OpenAI-compatible transcription server (CPU reference, or a front for any engine).

``POST /v1/audio/transcriptions`` takes the OpenAI multipart form (``file``, ``model``,
``language``, ``response_format`` = ``json`` | ``text`` | ``verbose_json``, ``stream``,
``temperature`` and vLLM's ``vllm_xargs``, both accepted). With ``stream=true`` the
answer is server-sent events shaped as vLLM's: ``transcription.chunk`` objects with
``choices[0].delta.content``, a last chunk with ``finish_reason`` and ``usage``, then
``data: [DONE]``.

How a request travels:

1. **Arrival** (event loop, no decode, no inference): the upload is checked (size,
   model, language, format) and the audio duration read from the container header
   (:func:`asrsched.whisper.audio.audio_info`); the size estimate is
   ``ServiceModel.service_time(duration, language)``. A bad upload gets a 4xx JSON
   error ``{"error": {"message", "type", "param", "code"}}`` at once.
2. **Queue**: the request waits in the policy's queue (:func:`asrsched.core.policies.make_queue`:
   FCFS, SJF, HRRN, ...). With ``queue_limit`` set, a request that finds the queue
   full is refused with **503** and a ``Retry-After`` header (seconds, from the
   estimated work ahead of it) — refused up front, never dropped later.
3. **Service**: when a worker is free the policy picks the next request. Locally a
   worker runs faster-whisper on CPU (:class:`WhisperEngine`: greedy, no timestamps,
   no temperature fallback — the setting of vLLM's endpoint — with the first token
   generated separately so that it streams as soon as it exists). In *upstream*
   mode the worker slot forwards the request to another OpenAI-compatible server
   (e.g. stock vLLM) instead, at most ``max_concurrency`` at a time, with the
   duration in ``vllm_xargs`` for an engine that can use it.
4. **Answer**: every accepted request completes, or ends with an explicit error:
   ``504`` when it exceeds ``request_timeout_s`` (waiting or running), ``502`` when
   the upstream fails. A client that disconnects frees its place: a queued request
   is removed, a running one is cancelled at its next decode call (local) or its
   upstream call is closed.

``GET /health`` (200 when ready), ``GET /metrics`` (Prometheus text: queue depth,
in-flight, queued work, outcomes, per-policy histograms of E2EL, TTFT, queue delay
and service time, scheduling overhead), ``GET /v1/models``, and
``GET /debug/requests`` (the server-side per-request records, in the simulator's
columns: ``rid, arrival, duration, language, est_service, tokens, admit,
first_token, finish`` plus outcome, timings and overhead; times in seconds since
the server started).

CLI: ``asrsched serve --policy sjf --model tiny.en --port 8000 [--workers 1]
[--upstream URL --max-concurrency N] [--queue-limit N] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asrsched.whisper.audio import AudioError, audio_info, load_audio
from asrsched.serving.loadgen import transcription_url
from asrsched.core.policies import Job, make_queue, policy_names
from asrsched.core.service import ServiceModel

__all__ = [
    "ServerConfig",
    "PolicyServer",
    "WhisperEngine",
    "Cancelled",
    "create_app",
    "run_in_thread",
    "ServerHandle",
    "cpu_service_model",
    "transcription_url",
    "RESPONSE_FORMATS",
    "OUTCOMES",
    "main",
]

RESPONSE_FORMATS = ("json", "text", "verbose_json")
OUTCOMES = ("ok", "rejected", "timeout", "cancelled", "bad_request", "error")
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
SR = 16_000
CHUNK_OBJECT = "transcription.chunk"


class Cancelled(Exception):
    """The request was cancelled (client gone or timed out) while it ran."""


# ----------------------------------------------------------------------------- service model

def cpu_service_model(model: str = "tiny.en", profile: str | os.PathLike | None = None) -> ServiceModel:
    """The size-estimate model for ``model`` on this CPU.

    ``profile`` (a ``asrsched.service_model/1`` JSON) wins; otherwise the packaged
    measured profile (:func:`asrsched.profiling.run.packaged_profile`) if there is one; otherwise
    the field-note figures for faster-whisper on 2 cores (tiny.en: 0.5 s per 30 s
    window, 10 ms per token; base: 0.9 s, 18 ms; kappa 3.5 text tokens/s for English).
    Only the *order* of estimates matters to SJF; HRRN also uses their scale.
    """
    if profile:
        return ServiceModel.from_json(profile)
    with contextlib.suppress(ImportError, ValueError, FileNotFoundError):
        from asrsched.profiling.run import packaged_profile

        return packaged_profile(model)
    enc, tok = (0.9, 0.018) if model == "base" else (0.5, 0.010)
    return ServiceModel(encode_s_per_window=enc, decode_s_per_token=tok, overhead_s=0.05,
                        kappa={"en": 3.5, "es": 4.8, "de": 4.5, "id": 4.0},
                        name=f"whisper-{model}/faster-whisper/cpu (field notes)",
                        source="field notes: faster-whisper on a 2-core CPU, beam 1",
                        assumptions="assumed until a measured profile is given (--profile)")


# ----------------------------------------------------------------------------- engine

_MODEL_CACHE: dict[tuple, Any] = {}
_MODEL_LOCK = threading.Lock()


class WhisperEngine:
    """faster-whisper (CTranslate2) on CPU, decoding as vLLM's transcription endpoint does.

    Greedy (beam 1), no timestamp tokens, no temperature fallback, audio cut into
    30 s windows with the previous window's text as prompt. In each request the
    first token is generated by its own ``generate`` call (``max_length`` = prompt + 1)
    and the rest by a second call with that token forced as prefix, so the first
    token streams as soon as it exists (TTFT = features + encoder + one decode step,
    as in vLLM); the extra cost is one prompt prefill. ``num_workers`` requests can
    run at once from as many threads (CTranslate2 ``inter_threads``); the weights
    are loaded once per configuration and shared.
    """

    def __init__(self, model: str = "tiny.en", *, compute_type: str = "int8", cpu_threads: int = 2,
                 num_workers: int = 1):
        from asrsched.whisper.weights import MODELS, load_whisper

        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {model!r}")
        key = (model, compute_type, int(cpu_threads), int(num_workers))
        with _MODEL_LOCK:
            wm = _MODEL_CACHE.get(key)
            if wm is None:
                wm = load_whisper(model, compute_type=compute_type, cpu_threads=int(cpu_threads),
                                  num_workers=int(num_workers))
                _MODEL_CACHE[key] = wm
        self.model = model
        self.wm = wm
        self.multilingual = bool(wm.model.is_multilingual)
        self.eot = wm.hf_tokenizer.token_to_id("<|endoftext|>")
        self.languages = set(wm.supported_languages) if self.multilingual else {"en"}

    def transcribe(self, audio: np.ndarray, language: str | None = None, *,
                   on_delta: Callable[[str], None] | None = None,
                   cancelled: Callable[[], bool] | None = None) -> dict:
        """Transcribe 16 kHz mono float32 ``audio``; ``on_delta(text)`` gets the text as it comes.

        Returns ``text, language, tokens`` (text tokens), ``decode_steps`` (tokens + one
        end-of-text step per window), ``windows``, ``features_s, encode_s, decode_s,
        first_token_s, total_s``. ``cancelled()`` is checked before every encoder and
        decoder call; when it returns true :class:`Cancelled` is raised.
        """
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer

        wm = self.wm
        check = cancelled or (lambda: False)
        t0 = time.perf_counter()
        feats = wm.feature_extractor(np.ascontiguousarray(audio, dtype=np.float32))
        t_feat = time.perf_counter() - t0
        content = feats.shape[-1] - 1
        n_max = wm.feature_extractor.nb_max_frames
        lang = language if self.multilingual else "en"
        tok = None
        seek, enc_s, dec_s, windows, steps = 0, 0.0, 0.0, 0, 0
        first_at = math.nan
        all_tokens: list[int] = []
        pieces: list[str] = []
        while seek < content:
            size = min(n_max, content - seek)
            seg = pad_or_trim(feats[:, seek:seek + size])
            if check():
                raise Cancelled()
            t = time.perf_counter()
            enc = wm.encode(seg)
            enc_s += time.perf_counter() - t
            windows += 1
            if tok is None:
                if self.multilingual and not lang:
                    lang = wm.model.detect_language(enc)[0][0][0][2:-2]
                tok = Tokenizer(wm.hf_tokenizer, self.multilingual, task="transcribe", language=lang or "en")
            prompt = wm.get_prompt(tok, all_tokens[-(wm.max_length // 2 - 1):], without_timestamps=True)
            opts = dict(beam_size=1, suppress_tokens=[-1], max_length=wm.max_length)
            if check():
                raise Cancelled()
            t = time.perf_counter()
            if not pieces and math.isnan(first_at):
                head = wm.model.generate(enc, [prompt], max_length=len(prompt) + 1, beam_size=1,
                                         suppress_blank=True, suppress_tokens=[-1])[0].sequences_ids[0]
                first_at = time.perf_counter() - t0
                head = [x for x in head if x < self.eot]
                dec_s += time.perf_counter() - t
                if head:
                    text = tok.decode(head).lstrip()
                    if text and on_delta:
                        on_delta(text)
                    pieces.append(text)
                    if check():
                        raise Cancelled()
                    t = time.perf_counter()
                    res = wm.model.generate(enc, [prompt + head], suppress_blank=False, **opts)[0]
                    dec_s += time.perf_counter() - t
                    toks = [x for x in res.sequences_ids[0] if x < self.eot]  # includes the forced head
                    rest = tok.decode(toks)
                    done = tok.decode(head)
                    delta = rest[len(done):] if rest.startswith(done) else rest[len(text):]
                else:
                    toks, delta = [], ""
            else:
                res = wm.model.generate(enc, [prompt], suppress_blank=True, **opts)[0]
                dec_s += time.perf_counter() - t
                toks = [x for x in res.sequences_ids[0] if x < self.eot]
                delta = tok.decode(toks)
                if not pieces:
                    delta = delta.lstrip()
            if delta:
                if on_delta:
                    on_delta(delta)
                pieces.append(delta)
            all_tokens.extend(toks)
            steps += len(toks) + 1
            seek += size
        text = "".join(pieces)
        return {"text": text, "language": lang or "en", "tokens": len(all_tokens), "decode_steps": steps,
                "windows": windows, "features_s": t_feat, "encode_s": enc_s, "decode_s": dec_s,
                "first_token_s": first_at, "total_s": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- config

@dataclass
class ServerConfig:
    """Everything the server needs; :meth:`validate` names a bad field and its allowed values.

    ``workers``: local faster-whisper workers (requests transcribed at once); ``cpu_threads``
    per worker (default: the cores divided by the workers). ``upstream`` switches to
    forwarding mode with ``max_concurrency`` requests in flight upstream
    (``upstream_model`` renames the model for the upstream). ``queue_limit``: most
    requests waiting (0 = no limit). ``request_timeout_s``: the longest a request may
    take from arrival to its last byte. ``profile``: ServiceModel JSON for the size
    estimate (default: :func:`cpu_service_model` locally, the study's GPU model
    :func:`asrsched.core.service.default_service_model` in upstream mode). ``served_model_names``: more names
    accepted in the ``model`` field (e.g. ``whisper-1``).
    """

    policy: str = "fcfs"
    model: str = "tiny.en"
    workers: int = 1
    cpu_threads: int | None = None
    compute_type: str = "int8"
    upstream: str | None = None
    upstream_model: str | None = None
    max_concurrency: int = 4
    queue_limit: int = 0
    request_timeout_s: float = 600.0
    max_upload_mb: float = 25.0
    profile: str | None = None
    policy_params: dict = field(default_factory=dict)
    served_model_names: tuple = ()
    default_language: str = "en"
    warmup: bool = True
    upstream_timeout_s: float = 600.0
    keep_records: int = 100_000

    def validate(self) -> ServerConfig:
        from asrsched.whisper.backends import COMPUTE_TYPES
        from asrsched.whisper.weights import MODELS

        if str(self.policy).lower() not in policy_names():
            raise ValueError(f"policy must be one of {', '.join(policy_names())}; got {self.policy!r}")
        self.policy = str(self.policy).lower()
        make_queue(self.policy, **self.policy_params)  # bad policy_params fail here
        if self.upstream is None and self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)} (or use --upstream); got {self.model!r}")
        if self.upstream is not None:
            transcription_url(self.upstream)
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}; got {self.compute_type!r}")
        for name, lo in (("workers", 1), ("max_concurrency", 1), ("queue_limit", 0), ("keep_records", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
            setattr(self, name, int(v))
        if self.cpu_threads is not None and (int(self.cpu_threads) != self.cpu_threads or self.cpu_threads < 1):
            raise ValueError(f"cpu_threads must be an integer >= 1 (or None), got {self.cpu_threads!r}")
        for name in ("request_timeout_s", "max_upload_mb", "upstream_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.profile is not None and not os.path.exists(self.profile):
            raise ValueError(f"profile {self.profile!r} does not exist (a asrsched.service_model/1 JSON)")
        return self

    @property
    def slots(self) -> int:
        return self.max_concurrency if self.upstream else self.workers

    @property
    def threads_per_worker(self) -> int:
        return int(self.cpu_threads or max(1, (os.cpu_count() or 1) // self.workers))

    @property
    def model_names(self) -> set[str]:
        return {self.model, *self.served_model_names}


# ----------------------------------------------------------------------------- requests

class _Request:
    """One accepted request's state (owned by the event loop)."""

    __slots__ = ("rid", "job", "data", "filename", "content_type", "model", "language", "response_format",
                 "stream", "arrival_wall", "t_arrival", "t_admit", "t_first", "t_finish", "outcome", "status",
                 "error", "text", "result", "events", "cancel_flag", "task", "sched_s", "worker", "upstream_tokens",
                 "id")

    def __init__(self, rid: int, job: Job, data: bytes, **kw):
        self.rid = rid
        self.id = f"trsc-{uuid.uuid4().hex[:24]}"
        self.job = job
        self.data = data
        self.filename = kw.get("filename") or "audio.wav"
        self.content_type = kw.get("content_type") or "application/octet-stream"
        self.model = kw["model"]
        self.language = kw["language"]
        self.response_format = kw["response_format"]
        self.stream = kw["stream"]
        self.t_arrival = job.arrival
        self.arrival_wall = time.time()
        self.t_admit = self.t_first = self.t_finish = math.nan
        self.outcome: str | None = None
        self.status = 0
        self.error = ""
        self.text = ""
        self.result: dict = {}
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancel_flag = threading.Event()
        self.task: asyncio.Task | None = None
        self.sched_s = 0.0
        self.worker = -1
        self.upstream_tokens = None

    @property
    def finished(self) -> bool:
        return self.outcome is not None


class QueueFull(Exception):
    def __init__(self, retry_after: int, depth: int):
        self.retry_after, self.depth = retry_after, depth


class _Histogram:
    def __init__(self, buckets=LATENCY_BUCKETS):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        if not math.isfinite(v):
            return
        i = 0
        while i < len(self.buckets) and v > self.buckets[i]:
            i += 1
        self.counts[i] += 1
        self.sum += v
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, c = [], 0
        for b, k in zip(self.buckets, self.counts):
            c += k
            out.append(f'{name}_bucket{{{labels},le="{b:g}"}} {c}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.sum:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


# ----------------------------------------------------------------------------- the scheduler

class PolicyServer:
    """The policy-ordered queue and worker slots behind the HTTP app (all state on one event loop)."""

    def __init__(self, config: ServerConfig):
        self.config = config.validate()
        if config.upstream and not config.profile:
            from asrsched.core.service import default_service_model

            self.service = default_service_model()  # an engine elsewhere: the study's GPU setting
        else:
            self.service = cpu_service_model(config.model, config.profile)
        self.queue = make_queue(config.policy, **config.policy_params)
        self.t0 = time.monotonic()
        self.free_slots = list(range(config.slots))[::-1]
        self.running: dict[int, _Request] = {}
        self.records: deque = deque(maxlen=config.keep_records)
        self.outcomes = {o: 0 for o in OUTCOMES}
        self.hist = {m: _Histogram() for m in ("e2el", "ttft", "queue_delay", "service")}
        self.audio_s_total = 0.0
        self.sched_s_total = 0.0
        self.sched_n = 0
        self.queued_est = 0.0
        self._rid = 0
        self.engine: WhisperEngine | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.client = None
        self.ready = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        """Load the model (local) or open the upstream client; warm up; mark ready."""
        self.loop = asyncio.get_running_loop()
        c = self.config
        if c.upstream:
            import httpx

            self.client = httpx.AsyncClient(timeout=httpx.Timeout(c.upstream_timeout_s, connect=10.0),
                                            limits=httpx.Limits(max_connections=c.max_concurrency + 4))
        else:
            self.pool = ThreadPoolExecutor(max_workers=c.workers, thread_name_prefix="asrsched-worker")
            self.engine = await self.loop.run_in_executor(
                self.pool, lambda: WhisperEngine(c.model, compute_type=c.compute_type,
                                                 cpu_threads=c.threads_per_worker, num_workers=c.workers))
            if c.warmup:  # the first call pays one-off initialisation: not a user's request
                rng = np.random.default_rng(0)
                noise = (0.01 * rng.standard_normal(SR)).astype(np.float32)
                await self.loop.run_in_executor(self.pool, lambda: self.engine.transcribe(noise, "en"))
        # a policy's first decisions may compile its ranking (numba): pay that before the first request
        wq = make_queue(c.policy, **c.policy_params)
        for i in range(12):
            wq.push(Job(rid=-i - 1, arrival=0.01 * i, est_service=0.5 + 0.1 * i))
        while len(wq):
            wq.peek(1.0)
            wq.pop(1.0)
        self.t0 = time.monotonic()
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        for r in list(self.running.values()):
            r.cancel_flag.set()
            if r.task is not None and self.config.upstream:
                r.task.cancel()
        if self.client is not None:
            await self.client.aclose()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- arrival ----------------------------------------------------------------
    def make_request(self, data: bytes, duration: float, *, language: str, sched_s: float, **kw) -> _Request:
        t = time.perf_counter()
        try:
            est = float(self.service.service_time(duration, language))
        except ValueError:  # no kappa for this language (or not known yet): the first known one
            est = float(self.service.service_time(duration, next(iter(self.service.kappa))))
        self._rid += 1
        job = Job(rid=self._rid, arrival=self.now(), est_service=est, duration=float(duration),
                  language=language or "")
        req = _Request(self._rid, job, data, language=language, **kw)
        job.payload = req
        req.sched_s = sched_s + (time.perf_counter() - t)
        return req

    def retry_after(self) -> int:
        """Seconds until a queued request would likely start: estimated work ahead over the slots."""
        running = sum(r.job.est_service for r in self.running.values())
        return max(1, int(math.ceil((self.queued_est + running) / max(self.config.slots, 1))))

    def submit(self, req: _Request) -> None:
        """Queue ``req`` (``QueueFull`` when the queue limit is reached) and dispatch."""
        c = self.config
        if c.queue_limit and len(self.queue) >= c.queue_limit:
            self.outcomes["rejected"] += 1
            raise QueueFull(self.retry_after(), len(self.queue))
        t = time.perf_counter()
        self.queue.push(req.job)
        self.queued_est += req.job.est_service
        req.sched_s += time.perf_counter() - t
        self.dispatch()

    def dispatch(self) -> None:
        """Start the policy's next requests while a slot is free."""
        while self.free_slots and len(self.queue):
            t = time.perf_counter()
            job = self.queue.pop(self.now())
            self.queued_est -= job.est_service
            req: _Request = job.payload
            req.sched_s += time.perf_counter() - t
            req.worker = self.free_slots.pop()
            req.t_admit = self.now()
            self.running[req.rid] = req
            req.task = asyncio.ensure_future(self._serve(req))

    def cancel(self, req: _Request, outcome: str, message: str, status: int) -> None:
        """End ``req`` early: removed from the queue, or its running work cancelled."""
        if req.finished:
            return
        if req.rid in self.running:
            req.cancel_flag.set()
            if self.config.upstream and req.task is not None:
                req.task.cancel()
        elif self.queue.remove(req.job):
            self.queued_est -= req.job.est_service
        self._finish(req, outcome, status, message)

    # -- service ----------------------------------------------------------------
    def _emit(self, req: _Request, kind: str, value: Any = None) -> None:
        if kind == "delta" and math.isnan(req.t_first):
            req.t_first = self.now()
        req.events.put_nowait((kind, value))

    async def _serve(self, req: _Request) -> None:
        try:
            if self.config.upstream:
                await self._forward(req)
            else:
                await self._transcribe_local(req)
            if not req.finished:
                self._finish(req, "ok", 200, "")
        except (Cancelled, asyncio.CancelledError):
            if not req.finished:
                self._finish(req, "cancelled", 499, "cancelled while running")
        except AudioError as e:
            if not req.finished:
                self._finish(req, "bad_request", 400, str(e), code=e.reason)
        except _UpstreamError as e:
            if not req.finished:
                self._finish(req, "error", e.status, e.message)
        except Exception as e:  # an engine failure ends this request only
            if not req.finished:
                self._finish(req, "error", 500, f"{type(e).__name__}: {e}")
        finally:
            self.running.pop(req.rid, None)
            self.free_slots.append(req.worker)
            self.dispatch()

    async def _transcribe_local(self, req: _Request) -> None:
        loop = self.loop
        engine = self.engine

        def on_delta(text: str) -> None:
            loop.call_soon_threadsafe(self._emit, req, "delta", text)

        def work() -> dict:
            if req.cancel_flag.is_set():
                raise Cancelled()
            audio = load_audio(req.data, mono="mix", resample=True)
            return engine.transcribe(audio, req.language, on_delta=on_delta, cancelled=req.cancel_flag.is_set)

        res = await loop.run_in_executor(self.pool, work)
        await asyncio.sleep(0)  # let the deltas scheduled from the worker land first
        req.result = res
        req.text = res["text"]

    async def _forward(self, req: _Request) -> None:
        c = self.config
        import httpx

        url = transcription_url(c.upstream)
        verbose = req.response_format == "verbose_json"
        data = {"model": c.upstream_model or req.model, "language": req.language,
                "response_format": "json" if not verbose else "verbose_json",
                "stream": "false" if verbose else "true", "stream_include_usage": "true",
                "vllm_xargs": json.dumps({"audio_duration_s": req.job.duration, "language": req.language})}
        files = {"file": (req.filename, req.data, req.content_type)}
        t = time.perf_counter()
        try:
            if verbose:
                r = await self.client.post(url, data=data, files=files)
                if r.status_code != 200:
                    raise _UpstreamError(r.status_code, _error_text(r.text))
                body = r.json()
                req.text = body.get("text", "")
                self._emit(req, "delta", req.text)
                req.result = {"upstream": body}
            else:
                pieces = []
                async with self.client.stream("POST", url, data=data, files=files) as r:
                    if r.status_code != 200:
                        raise _UpstreamError(r.status_code, _error_text((await r.aread()).decode(errors="replace")))
                    async for line in r.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            break
                        obj = json.loads(payload)
                        if "error" in obj or obj.get("object") == "error":
                            err = obj.get("error", obj)
                            raise _UpstreamError(int(err.get("code") or 502) if str(err.get("code", "")).isdigit()
                                                 else 502, str(err.get("message", err)))
                        if obj.get("usage"):
                            req.upstream_tokens = obj["usage"].get("completion_tokens")
                        for ch in obj.get("choices") or []:
                            delta = (ch.get("delta") or {}).get("content") or ""
                            if delta:
                                pieces.append(delta)
                                self._emit(req, "delta", delta)
                req.text = "".join(pieces)
                req.result = {"tokens": req.upstream_tokens}
        except httpx.HTTPError as e:
            raise _UpstreamError(502, f"upstream {url} failed: {type(e).__name__}: {e}") from None
        req.result.setdefault("total_s", time.perf_counter() - t)

    # -- completion --------------------------------------------------------------
    def _finish(self, req: _Request, outcome: str, status: int, message: str, code: str | None = None) -> None:
        req.outcome, req.status, req.error = outcome, status, message
        req.t_finish = self.now()
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome == "ok":
            self.hist["e2el"].observe(req.t_finish - req.t_arrival)
            self.hist["ttft"].observe(req.t_first - req.t_arrival)
            self.hist["queue_delay"].observe(req.t_admit - req.t_arrival)
            self.hist["service"].observe(req.t_finish - req.t_admit)
            self.audio_s_total += req.job.duration
            self.events_done(req)
        else:
            req.events.put_nowait(("error", (status, message, outcome, code)))
        self.sched_s_total += req.sched_s
        self.sched_n += 1
        self.records.append(self.record(req))

    def events_done(self, req: _Request) -> None:
        req.events.put_nowait(("done", None))

    def record(self, req: _Request) -> dict:
        """Server-side record of ``req`` in the simulator's columns (+ outcome and timings)."""
        r, j = req.result or {}, req.job
        tokens = r.get("decode_steps", r.get("tokens", req.upstream_tokens))
        return {
            "rid": req.rid, "arrival": req.t_arrival, "duration": j.duration, "language": j.language,
            "est_service": j.est_service, "tokens": tokens if tokens is not None else math.nan,
            "admit": req.t_admit, "first_token": req.t_first,
            "finish": req.t_finish if req.outcome == "ok" else math.nan, "end": req.t_finish,
            "outcome": req.outcome, "status": req.status, "error": req.error, "policy": self.config.policy,
            "worker": req.worker, "stream": req.stream, "text_tokens": r.get("tokens", math.nan),
            "windows": r.get("windows", math.nan), "engine_s": r.get("total_s", math.nan),
            "encode_s": r.get("encode_s", math.nan), "decode_s": r.get("decode_s", math.nan),
            "features_s": r.get("features_s", math.nan), "sched_s": req.sched_s, "text_len": len(req.text),
        }

    # -- metrics -----------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        p = f'policy="{self.config.policy}"'
        out = []

        def metric(name, kind, help_, rows):
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(rows)

        metric("asrsched_queue_depth", "gauge", "Requests waiting in the policy-ordered queue.",
               [f"asrsched_queue_depth{{{p}}} {len(self.queue)}"])
        metric("asrsched_in_flight", "gauge", "Requests being served (worker or upstream slots in use).",
               [f"asrsched_in_flight{{{p}}} {len(self.running)}"])
        metric("asrsched_slots", "gauge", "Worker (or upstream concurrency) slots.",
               [f"asrsched_slots{{{p}}} {self.config.slots}"])
        metric("asrsched_queued_work_seconds", "gauge", "Estimated service time of the waiting requests.",
               [f"asrsched_queued_work_seconds{{{p}}} {self.queued_est:.6f}"])
        metric("asrsched_requests_total", "counter", "Requests by outcome.",
               [f'asrsched_requests_total{{{p},outcome="{o}"}} {n}' for o, n in self.outcomes.items()])
        metric("asrsched_audio_seconds_total", "counter", "Seconds of audio transcribed.",
               [f"asrsched_audio_seconds_total{{{p}}} {self.audio_s_total:.6f}"])
        metric("asrsched_scheduling_seconds_total", "counter",
               "Time spent on header reads, size estimates and queue operations.",
               [f"asrsched_scheduling_seconds_total{{{p}}} {self.sched_s_total:.6f}",
                ])
        metric("asrsched_scheduled_requests_total", "counter", "Requests that went through scheduling.",
               [f"asrsched_scheduled_requests_total{{{p}}} {self.sched_n}"])
        names = {"e2el": ("asrsched_e2e_latency_seconds", "Arrival to last byte (E2EL) of completed requests."),
                 "ttft": ("asrsched_ttft_seconds", "Arrival to first transcribed text (TTFT)."),
                 "queue_delay": ("asrsched_queue_delay_seconds", "Arrival to start of service."),
                 "service": ("asrsched_service_seconds", "Start of service to completion.")}
        for k, (name, help_) in names.items():
            metric(name, "histogram", help_, self.hist[k].lines(name, p))
        return "\n".join(out) + "\n"


class _UpstreamError(Exception):
    def __init__(self, status: int, message: str):
        self.status, self.message = int(status), message


def _error_text(body: str) -> str:
    with contextlib.suppress(Exception):
        obj = json.loads(body)
        err = obj.get("error", obj)
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    return body[:500]


# ----------------------------------------------------------------------------- HTTP app

def _err(status: int, message: str, *, type_: str = "invalid_request_error", param: str | None = None,
         code: str | None = None, headers: dict | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code or status}},
                        status_code=status, headers=headers)


def _sse(obj: Any) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


async def _watch_disconnect(receive) -> None:
    """Returns when the client has gone (an ``http.disconnect`` message)."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


def _truthy(v: Any) -> bool | None:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off", ""):
        return False
    return None


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
        return JSONResponse({"status": "ok", "policy": config.policy, "model": config.model,
                             "mode": "upstream" if config.upstream else "local", "slots": config.slots,
                             "queue_depth": len(srv.queue), "in_flight": len(srv.running)})

    async def metrics(request):
        return PlainTextResponse(srv.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(request):
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "owned_by": "asrsched"} for m in sorted(config.model_names)]})

    async def debug_requests(request):
        return JSONResponse([{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                              for k, v in r.items()} for r in srv.records])

    async def transcriptions(request):
        t_sched = time.perf_counter()
        if not srv.ready:
            return _err(503, "server is starting", type_="server_error", headers={"Retry-After": "1"})
        cl = request.headers.get("content-length")
        if cl and cl.isdigit() and int(cl) > max_bytes + 64 * 1024:
            srv.outcomes["bad_request"] += 1
            return _err(413, f"upload of {int(cl)} bytes exceeds the {config.max_upload_mb:g} MB limit",
                        param="file", code="too_large")
        try:
            form = await request.form(max_files=1, max_fields=32, max_part_size=max_bytes + 1)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as e:  # malformed multipart, or a part over the limit
            srv.outcomes["bad_request"] += 1
            msg = str(getattr(e, "detail", "") or e)
            if "exceed" in msg.lower() or "too large" in msg.lower():
                return _err(413, f"upload exceeds the {config.max_upload_mb:g} MB limit ({msg})", param="file",
                            code="too_large")
            return _err(400, f"the body must be multipart/form-data with a 'file' part ({msg})", param="file")
        try:
            bad = await _parse(form)
        finally:
            await form.close()
        if isinstance(bad, Response):
            srv.outcomes["bad_request"] += 1
            return bad
        data, duration, fields = bad
        req = srv.make_request(data, duration, sched_s=time.perf_counter() - t_sched, **fields)
        try:
            srv.submit(req)
        except QueueFull as e:
            return _err(503, f"queue full ({e.depth} requests waiting, limit {config.queue_limit}); "
                             f"retry after {e.retry_after} s", type_="server_overloaded", code="queue_full",
                        headers={"Retry-After": str(e.retry_after)})
        deadline = time.monotonic() + config.request_timeout_s
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
                return StreamingResponse(_stream(req, first, deadline), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
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

    async def _parse(form):
        up = form.get("file")
        if up is None or isinstance(up, str):
            return _err(400, "missing 'file': send the audio as a multipart file part named 'file'", param="file",
                        code="missing_file")
        data = await up.read()
        if len(data) > max_bytes:
            return _err(413, f"upload of {len(data)} bytes exceeds the {config.max_upload_mb:g} MB limit",
                        param="file", code="too_large")
        model = str(form.get("model") or config.model)
        if model not in config.model_names:
            return _err(404, f"The model `{model}` does not exist; this server serves: "
                             f"{', '.join(sorted(config.model_names))}", type_="NotFoundError", param="model",
                        code="model_not_found")
        fmt = str(form.get("response_format") or "json")
        if fmt not in RESPONSE_FORMATS:
            return _err(400, f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {fmt!r}",
                        param="response_format")
        stream = _truthy(form.get("stream", "false"))
        if stream is None:
            return _err(400, f"stream must be true or false; got {form.get('stream')!r}", param="stream")
        if stream and fmt == "verbose_json":
            return _err(400, "stream=true supports response_format json or text, not verbose_json",
                        param="response_format")
        language = str(form.get("language") or "").strip().lower() or None
        if srv.engine is not None:
            if not srv.engine.multilingual and language not in (None, "en"):
                return _err(400, f"model {config.model!r} is English-only; language must be 'en', got {language!r}",
                            param="language")
            if language is not None and language not in srv.engine.languages:
                return _err(400, f"language {language!r} is not supported by {config.model!r} "
                                 f"(ISO 639-1 codes such as en, es, de, id)", param="language")
        xargs = form.get("vllm_xargs")
        if xargs:
            try:
                if not isinstance(json.loads(str(xargs)), dict):
                    raise ValueError
            except ValueError:
                return _err(400, f"vllm_xargs must be a JSON object, got {str(xargs)[:80]!r}", param="vllm_xargs")
        temp = form.get("temperature")
        if temp not in (None, ""):
            try:
                tv = float(str(temp))
                if not (0.0 <= tv <= 2.0):
                    raise ValueError
            except ValueError:
                return _err(400, f"temperature must be a number in [0, 2], got {temp!r}", param="temperature")
        try:
            info = audio_info(data)
        except AudioError as e:
            name = getattr(up, "filename", None) or "file"
            return _err(400, f"{name}: {e.reason}: {e.detail}", param="file", code=e.reason)
        if srv.engine is not None and info.channels > 8:
            return _err(400, f"{info.channels} audio channels; at most 8 are mixed to mono", param="file",
                        code="channels")
        lang = language or (config.default_language if (srv.engine is None or not srv.engine.multilingual)
                            else None)
        return data, float(info.duration_s), dict(
            language=lang, model=model, response_format=fmt, stream=bool(stream),
            filename=getattr(up, "filename", None), content_type=getattr(up, "content_type", None))

    async def _next_event(req: _Request, watcher: asyncio.Future, deadline: float):
        """The request's next event; ``None`` if the client left; an error event on timeout."""
        get = asyncio.ensure_future(req.events.get())
        timeout = deadline - time.monotonic()
        done, _ = await asyncio.wait({get, watcher}, timeout=max(timeout, 0),
                                     return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        if watcher in done:
            return None
        srv.cancel(req, "timeout", f"request timed out after {config.request_timeout_s:g} s "
                                   f"({'running' if req.rid in srv.running else 'waiting in the queue'})", 504)
        return await req.events.get()

    def _error_response(err, config):
        status, message, outcome, code = err
        if outcome == "timeout":
            return _err(504, message, type_="timeout", code="timeout")
        if outcome == "bad_request":
            return _err(status, message, param="file", code=code)
        return _err(status, message, type_="server_error" if status >= 500 else "invalid_request_error",
                    code=outcome)

    def _extra(req: _Request) -> dict:
        r = req.result or {}
        return {"rid": req.rid, "policy": config.policy, "audio_s": req.job.duration,
                "est_service_s": req.job.est_service, "queue_s": req.t_admit - req.t_arrival,
                "service_s": req.t_finish - req.t_admit, "engine_s": r.get("total_s"),
                "tokens": r.get("tokens", req.upstream_tokens),
                "decode_steps": r.get("decode_steps"), "worker": req.worker}

    def _final_response(req: _Request):
        if req.response_format == "text":
            return PlainTextResponse(req.text)
        r = req.result or {}
        if req.response_format == "verbose_json":
            if "upstream" in r:
                return JSONResponse({**r["upstream"], "asrsched": _extra(req)})
            body = {"task": "transcribe", "language": r.get("language", req.language), "duration": req.job.duration,
                    "text": req.text,
                    "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": req.job.duration, "text": req.text,
                                  "tokens": [], "temperature": 0.0}],
                    "usage": {"type": "duration", "seconds": int(math.ceil(req.job.duration))},
                    "asrsched": _extra(req)}
            return JSONResponse(body)
        toks = r.get("tokens", req.upstream_tokens)
        return JSONResponse({"text": req.text, "usage": {
            "type": "tokens", "input_tokens": 0, "output_tokens": toks, "total_tokens": toks,
            "seconds": req.job.duration}, "asrsched": _extra(req)})

    async def _stream(req: _Request, first, deadline):
        created = int(time.time())

        def chunk(content: str | None, finish: str | None = None, usage: dict | None = None) -> bytes:
            obj = {"id": req.id, "object": CHUNK_OBJECT, "created": created, "model": req.model,
                   "choices": [{"delta": {"content": content} if content is not None else {},
                                "finish_reason": finish, "stop_reason": None}]}
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
                    srv.cancel(req, "timeout", f"request timed out after {config.request_timeout_s:g} s "
                                               "(while streaming)", 504)
                    ev = await req.events.get()
        finally:  # the client went away mid-stream (or we are done): free the slot
            if not req.finished:
                srv.cancel(req, "cancelled", "client disconnected while streaming", 499)

    app = Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/debug/requests", debug_requests, methods=["GET"]),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
    ], lifespan=lifespan)
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


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def run_in_thread(config: ServerConfig | None = None, *, host: str = "127.0.0.1", port: int = 0,
                  start_timeout: float = 120.0, **kw) -> ServerHandle:
    """Start the server on ``host:port`` (0 = any free port) in a daemon thread; returns when ready."""
    import uvicorn

    app = create_app(config, **kw)
    sock = _bind(host, port)
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="asrsched serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="fcfs", help=f"one of {', '.join(policy_names())}")
    ap.add_argument("--policy-params", default="{}", help="JSON object of policy parameters")
    ap.add_argument("--model", default="tiny.en", help="tiny.en or base (local mode); the served name upstream")
    ap.add_argument("--served-model-name", action="append", default=[], help="another accepted model name")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--workers", type=int, default=1, help="local faster-whisper workers")
    ap.add_argument("--cpu-threads", type=int, default=None, help="threads per worker (default cores/workers)")
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
        print(f"asrsched serve: error: --policy-params must be a JSON object, got {a.policy_params!r}",
              file=sys.stderr)
        return 2
    cfg = ServerConfig(policy=a.policy, model=a.model, workers=a.workers, cpu_threads=a.cpu_threads,
                       compute_type=a.compute_type, upstream=a.upstream, upstream_model=a.upstream_model,
                       max_concurrency=a.max_concurrency, queue_limit=a.queue_limit, request_timeout_s=a.timeout,
                       max_upload_mb=a.max_upload_mb, profile=a.profile, policy_params=params,
                       served_model_names=tuple(a.served_model_name), warmup=not a.no_warmup)
    try:
        cfg.validate()
        if not (0 <= a.port < 65536):
            raise ValueError(f"port must be in 0..65535, got {a.port}")
        sock = _bind(a.host, a.port)
    except (ValueError, OSError) as e:
        print(f"asrsched serve: error: {e}", file=sys.stderr)
        return 2
    app = create_app(cfg)
    port = sock.getsockname()[1]
    url = f"http://{a.host}:{port}"

    def ready(srv: PolicyServer) -> None:
        mode = f"upstream {cfg.upstream} (max {cfg.max_concurrency} in flight)" if cfg.upstream else \
            f"{cfg.workers} worker(s) x {cfg.threads_per_worker} thread(s), {cfg.model}"
        print(f"asrsched serve: listening on {url} policy={cfg.policy} {mode}", flush=True)

    app.state.on_ready = ready
    server = uvicorn.Server(uvicorn.Config(app, log_level=a.log_level, lifespan="on", timeout_graceful_shutdown=5))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
