"""The scheduler behind the HTTP app: a policy-ordered queue in front of a few worker slots.

:class:`PolicyServer` holds every accepted :class:`TranscriptionRequest` on one event loop:
at arrival it sizes the request (:meth:`ServiceModel.est_service <asrsched.core.service.ServiceModel.est_service>`
of its duration, language and the engine's real number of windows) and queues it in the policy's queue (:func:`asrsched.core.policies.make_queue`), refusing it
with :class:`QueueFull` (with a retry-after estimate) when ``queue_limit`` is reached; when
a slot is free the policy picks the next request, which runs on a local
:class:`~asrsched.serving.whisper_engine.WhisperEngine` worker or is forwarded to an upstream
OpenAI-compatible server. Cancellation (client gone, timeout) removes a queued request or
stops a running one. Every finished request leaves a record in the simulator's columns
(``/debug/requests``) and feeds the outcome counters and latency histograms
(:mod:`asrsched.serving.prometheus`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from asrsched.core.policies import Job, make_queue
from asrsched.core.service import ServiceModel
from asrsched.serving.config import ServerConfig
from asrsched.serving.loadgen import transcription_url
from asrsched.serving.prometheus import HISTOGRAMS, Histogram
from asrsched.serving.prometheus import metrics_text as prometheus_text
from asrsched.serving.whisper_engine import Cancelled, HallucinationLoop, WhisperEngine, cpu_service_model
from asrsched.vllm_plugin.size_estimate import check_default_language
from asrsched.whisper.audio import TARGET_SR, AudioError, load_audio

__all__ = ["OUTCOMES", "PolicyServer", "QueueFull", "TranscriptionRequest"]

OUTCOMES = ("ok", "rejected", "timeout", "cancelled", "bad_request", "error")


class TranscriptionRequest:
    """One accepted request's state (owned by the event loop)."""

    __slots__ = (
        "rid",
        "job",
        "data",
        "filename",
        "content_type",
        "model",
        "language",
        "response_format",
        "stream",
        "arrival_wall",
        "t_arrival",
        "t_admit",
        "t_first",
        "t_finish",
        "outcome",
        "status",
        "error",
        "text",
        "result",
        "events",
        "cancel_flag",
        "task",
        "sched_s",
        "worker",
        "upstream_tokens",
        "id",
        "prompt",
        "job_task",
        "windows",
    )

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
        self.prompt: str | None = kw.get("prompt") or None
        self.job_task: str = kw.get("task") or "transcribe"
        self.windows: list[tuple[int, int]] | None = kw.get("windows")

    @property
    def finished(self) -> bool:
        return self.outcome is not None


class QueueFull(Exception):
    """The queue is at ``queue_limit``: refused up front, ``retry_after`` seconds suggested."""

    def __init__(self, retry_after: int, depth: int):
        self.retry_after, self.depth = retry_after, depth


class PolicyServer:
    """The policy-ordered queue and worker slots behind the HTTP app (all state on one event loop).

    ``service``: the size-estimate model (default: ``config.profile``, else
    :func:`~asrsched.serving.whisper_engine.cpu_service_model` locally and the study's GPU model
    :func:`~asrsched.core.service.default_service_model` in upstream mode). A request is sized with
    its :meth:`~asrsched.core.service.ServiceModel.est_service`; one whose language the model has no
    kappa for (none given to a multilingual engine, which detects it later, or one the profile did
    not measure) is sized with the kappa of ``config.default_language``: the server has accepted the
    request and must rank it, and the deployment's own language is the best guess. So
    ``default_language`` must be a language of the model (``ValueError`` naming it otherwise).
    """

    def __init__(self, config: ServerConfig, *, service: ServiceModel | None = None):
        self.config = config.validate()
        if service is not None:
            self.service = service
        elif config.upstream and not config.profile:
            from asrsched.core.service import default_service_model

            self.service = default_service_model()  # an engine elsewhere: the study's GPU setting
        else:
            self.service = cpu_service_model(config.model, config.profile)
        check_default_language(self.service, config.default_language)
        self.queue = make_queue(config.policy, **config.policy_params)
        self.t0 = time.monotonic()
        self.free_slots = list(range(config.slots))[::-1]
        self.running: dict[int, TranscriptionRequest] = {}
        self.records: deque = deque(maxlen=config.keep_records)
        self.outcomes = {o: 0 for o in OUTCOMES}
        self.hist = {m: Histogram() for m in HISTOGRAMS}
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

            self.client = httpx.AsyncClient(
                timeout=httpx.Timeout(c.upstream_timeout_s, connect=10.0),
                limits=httpx.Limits(max_connections=c.max_concurrency + 4),
            )
        else:
            self.pool = ThreadPoolExecutor(max_workers=c.local_slots, thread_name_prefix="asrsched-worker")
            self.engine = await self.loop.run_in_executor(
                self.pool,
                lambda: WhisperEngine(
                    c.model, compute_type=c.compute_type, cpu_threads=c.threads_per_slot, num_workers=c.local_slots
                ),
            )
            if c.warmup:  # the first call pays one-off initialisation: not a user's request
                rng = np.random.default_rng(0)
                noise = (0.01 * rng.standard_normal(TARGET_SR)).astype(np.float32)
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
    def make_request(
        self,
        data: bytes,
        duration: float,
        *,
        language: str,
        sched_s: float,
        windows: list[tuple[int, int]] | None = None,
        priority: int = 0,
        **kw,
    ) -> TranscriptionRequest:
        """A request sized from its duration and, for long audio, the engine's real number of windows."""
        t = time.perf_counter()
        est = float(
            self.service.est_service(
                duration,
                language or self.config.default_language,
                windows=len(windows) if windows else None,
                fallback=self.config.default_language,
            )
        )
        self._rid += 1
        job = Job(
            rid=self._rid,
            arrival=self.now(),
            est_service=est,
            duration=float(duration),
            language=language or "",
            priority=int(priority),
        )
        req = TranscriptionRequest(self._rid, job, data, language=language, windows=windows, **kw)
        job.payload = req
        req.sched_s = sched_s + (time.perf_counter() - t)
        return req

    def retry_after(self) -> int:
        """Seconds until a queued request would likely start: estimated work ahead over the slots."""
        running = sum(r.job.est_service for r in self.running.values())
        return max(1, int(math.ceil((self.queued_est + running) / max(self.config.slots, 1))))

    def submit(self, req: TranscriptionRequest) -> None:
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

    def _dequeued(self, job: Job) -> None:
        """Take ``job``'s estimate off the queued work (exactly zero once the queue is empty: no -0.000000)."""
        self.queued_est = self.queued_est - job.est_service if len(self.queue) else 0.0

    def dispatch(self) -> None:
        """Start the policy's next requests while a slot is free."""
        while self.free_slots and len(self.queue):
            t = time.perf_counter()
            job = self.queue.pop(self.now())
            self._dequeued(job)
            req: TranscriptionRequest = job.payload
            req.sched_s += time.perf_counter() - t
            req.worker = self.free_slots.pop()
            req.t_admit = self.now()
            self.running[req.rid] = req
            req.task = asyncio.ensure_future(self._serve(req))

    def cancel(self, req: TranscriptionRequest, outcome: str, message: str, status: int) -> None:
        """End ``req`` early: removed from the queue, or its running work cancelled."""
        if req.finished:
            return
        if req.rid in self.running:
            req.cancel_flag.set()
            if self.config.upstream and req.task is not None:
                req.task.cancel()
        elif self.queue.remove(req.job):
            self._dequeued(req.job)
        self._finish(req, outcome, status, message)

    # -- service ----------------------------------------------------------------
    def _emit(self, req: TranscriptionRequest, kind: str, value: Any = None) -> None:
        if kind == "delta" and math.isnan(req.t_first):
            req.t_first = self.now()
        req.events.put_nowait((kind, value))

    async def _serve(self, req: TranscriptionRequest) -> None:
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
        except HallucinationLoop as e:  # an error, never a 200 with the loop as its text
            if not req.finished:
                self._finish(req, "error", 500, str(e), code="hallucination_loop")
        except ValueError as e:  # a request the engine cannot serve (e.g. translate on an English-only model)
            if not req.finished:
                self._finish(req, "bad_request", 400, str(e), code="unsupported")
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

    async def _transcribe_local(self, req: TranscriptionRequest) -> None:
        loop = self.loop
        engine = self.engine

        def on_delta(text: str) -> None:
            loop.call_soon_threadsafe(self._emit, req, "delta", text)

        def work() -> dict:
            if req.cancel_flag.is_set():
                raise Cancelled()
            audio = load_audio(req.data, mono="mix", resample=True)
            return engine.transcribe(
                audio,
                req.language,
                on_delta=on_delta,
                cancelled=req.cancel_flag.is_set,
                prompt=req.prompt,
                task=req.job_task,
                windows=req.windows,
            )

        res = await loop.run_in_executor(self.pool, work)
        await asyncio.sleep(0)  # let the deltas scheduled from the worker land first
        req.result = res
        req.text = res["text"]

    async def _forward(self, req: TranscriptionRequest) -> None:
        c = self.config
        import httpx

        url = transcription_url(c.upstream)
        if req.job_task == "translate":
            url = url[: -len("transcriptions")] + "translations"
        verbose = req.response_format == "verbose_json"
        data = {
            "model": c.upstream_model or req.model,
            "language": req.language,
            **({"prompt": req.prompt} if req.prompt else {}),
            "response_format": "json" if not verbose else "verbose_json",
            "stream": "false" if verbose else "true",
            "stream_include_usage": "true",
            "vllm_xargs": json.dumps({"audio_duration_s": req.job.duration, "language": req.language}),
        }
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
                            raise _UpstreamError(
                                int(err.get("code") or 502) if str(err.get("code", "")).isdigit() else 502,
                                str(err.get("message", err)),
                            )
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
    def _finish(
        self, req: TranscriptionRequest, outcome: str, status: int, message: str, code: str | None = None
    ) -> None:
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

    def events_done(self, req: TranscriptionRequest) -> None:
        req.events.put_nowait(("done", None))

    def record(self, req: TranscriptionRequest) -> dict:
        """Server-side record of ``req`` in the simulator's columns (+ outcome and timings)."""
        r, j = req.result or {}, req.job
        tokens = r.get("decode_steps", r.get("tokens", req.upstream_tokens))
        return {
            "rid": req.rid,
            "arrival": req.t_arrival,
            "duration": j.duration,
            "language": j.language,
            "est_service": j.est_service,
            "tokens": tokens if tokens is not None else math.nan,
            "admit": req.t_admit,
            "first_token": req.t_first,
            "finish": req.t_finish if req.outcome == "ok" else math.nan,
            "end": req.t_finish,
            "outcome": req.outcome,
            "status": req.status,
            "error": req.error,
            "policy": self.config.policy,
            "worker": req.worker,
            "stream": req.stream,
            "text_tokens": r.get("tokens", math.nan),
            "windows": r.get("windows", math.nan),
            "engine_s": r.get("total_s", math.nan),
            "encode_s": r.get("encode_s", math.nan),
            "decode_s": r.get("decode_s", math.nan),
            "features_s": r.get("features_s", math.nan),
            "sched_s": req.sched_s,
            "text_len": len(req.text),
        }

    # -- metrics -----------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        return prometheus_text(
            policy=self.config.policy,
            queue_depth=len(self.queue),
            in_flight=len(self.running),
            slots=self.config.slots,
            queued_work_s=self.queued_est,
            outcomes=self.outcomes,
            audio_s_total=self.audio_s_total,
            sched_s_total=self.sched_s_total,
            sched_n=self.sched_n,
            histograms=self.hist,
        )


class _UpstreamError(Exception):
    def __init__(self, status: int, message: str):
        self.status, self.message = int(status), message


def _error_text(body: str) -> str:
    with contextlib.suppress(Exception):
        obj = json.loads(body)
        err = obj.get("error", obj)
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    return body[:500]
