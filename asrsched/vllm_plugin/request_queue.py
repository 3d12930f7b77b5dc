"""The waiting queue of the vLLM plug-in: :class:`PolicyRequestQueue`, vLLM's ``RequestQueue`` contract in policy order.

Each request gets a :class:`~asrsched.core.policies.Job` sized by
:class:`~asrsched.vllm_plugin.size_estimate.SizeEstimator` once, when it is first queued; the
order is that of any :mod:`asrsched.core.policies` policy; preempted requests go back to the
front. Nothing here imports vLLM (:mod:`asrsched.vllm_plugin.scheduler` registers the class with
vLLM's ``RequestQueue`` when it builds the scheduler).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from asrsched.core.policies import Job, WaitingQueue, make_queue, policy_names
from asrsched.core.priority import check_priority
from asrsched.vllm_plugin.config import DEFAULT_POLICY
from asrsched.vllm_plugin.size_estimate import SizeEstimator

__all__ = ["PolicyRequestQueue", "is_preempted", "request_priority"]

log = logging.getLogger("asrsched.vllm_plugin.scheduler")


def request_priority(request: Any) -> int:
    """A vLLM request's class for the class policies (:mod:`asrsched.core.priority`): its ``priority`` (the chat
    and completion APIs set it), else ``vllm_xargs``'s ``priority`` (the transcription API has no such field; the
    middleware moves a form field there). A value that is not a whole number is logged and taken as 0: the
    request is never dropped."""
    p = getattr(request, "priority", 0) or 0
    if p:
        return int(p)
    sp = getattr(request, "sampling_params", None)
    xa = getattr(sp, "extra_args", None) or {}
    if "priority" not in xa:
        return 0
    try:
        return check_priority(xa["priority"])
    except ValueError as e:
        log.warning("asrsched: request %s: %s; served as priority 0", getattr(request, "request_id", "?"), e)
        return 0


def is_preempted(request: Any) -> bool:
    """Whether vLLM preempted ``request`` (its status is ``PREEMPTED``): it goes back to the front."""
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

    def __init__(
        self,
        policy: str | WaitingQueue = DEFAULT_POLICY,
        *,
        estimator: SizeEstimator | None = None,
        clock: Callable[[], float] = time.time,
        policy_params: Mapping[str, Any] | None = None,
    ):
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
            job = Job(
                rid=id(request),
                arrival=float(getattr(request, "arrival_time", self.clock())),
                est_service=est,
                duration=float(info["duration_s"] or 0.0),
                language=info["language"],
                payload=request,
                priority=request_priority(request),
            )
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
        if is_preempted(request):
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
