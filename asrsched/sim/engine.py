"""Event-driven simulator of a continuous-batching ASR server (vLLM-like).

The server model, step by step:

* requests wait in a queue ordered by the policy (:mod:`asrsched.core.policies`),
  which sees only the *estimated* service time (kappa x duration through the
  :class:`~asrsched.core.service.ServiceModel`), never the true token count;
* at most ``max_num_seqs`` requests run at once. When a slot is free at a step
  boundary, the policy's next request is admitted and its encoder runs:
  ``windows x encode_s_per_window`` seconds during which the engine does
  nothing else (in vLLM the encoder runs inside the scheduled step and stalls
  the running decodes);
* every decode step advances each running request by one token and takes
  ``step_s(b)`` seconds for a batch of ``b`` (:meth:`ServiceModel.step_s`);
  a request finishes after its true token count; its first token comes out
  at the end of its first decode step (TTFT);
* the client sees completion ``overhead_s`` after the engine finishes
  (audio decode, resampling, detokenisation), so ``E2EL`` includes it and
  ``TTFT`` does not.

Between events (an admission or a completion, or an arrival when a slot is
free) the batch is constant, so the loop jumps over many decode steps at once.
Running requests live in a heap keyed by the global decode-step index at which
they finish, so each event costs O(log b) (the compiled engine keeps them in a row of slots).

With ``max_num_seqs = 1`` and ``decode_batch_slope`` irrelevant the server is an
M/G/1 queue with service time ``enc x windows + tokens x decode_s_per_token``
(tests check Pollaczek-Khinchine and the M/G/1 SJF formula).

Records (:mod:`asrsched.sim.records`): one row per request, ``rid, arrival, duration, language,
est_service, tokens, admit, first_token, finish`` plus ``queue_delay = admit - arrival``,
``ttft = first_token - arrival``, ``e2el = finish - arrival``. ``SimResult.timeline``
holds batch occupancy and queue depth sampled at decision points (thinned to
``timeline_points``), for plotting; time averages come exactly from the records
(:func:`occupancy`, :func:`time_average`, :meth:`SimResult.time_average`).
For very long runs pass a trace *iterator* (:func:`trace_chunks`) and a bounded
``sink`` (:class:`SummarySink` or :class:`ParquetSink`): memory then stays flat.

:class:`Engine` here is the readable specification of the server; the compiled engine
(:mod:`asrsched.sim.kernel`, which runs a single server as a fleet of one replica) makes the
same decisions (``tests/sim/test_compiled_engine.py`` and ``tests/sim/test_fleet_compiled.py`` compare the two
decision by decision). :func:`simulate` takes the compiled engine exactly when it implements
the policy (:func:`asrsched.sim.inputs.compiled_support`), the Python one otherwise.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.policies import Job, make_queue
from asrsched.core.service import WORK_TOKEN_GRID, ServiceModel, default_service_model, work_tokens
from asrsched.core.workloads import Trace, trace_chunks
from asrsched.sim.overload import OverloadWarning, check_offered_load, queue_growth
from asrsched.sim.records import (
    OCCUPANCY_QUANTITIES,
    RECORD_COLUMNS,
    CollectSink,
    ParquetSink,
    SimResult,
    SummarySink,
    ThinnedTimeline,
    column_writer,
    occupancy,
    time_average,
)

__all__ = [
    "simulate",
    "SimResult",
    "SimJob",
    "RECORD_COLUMNS",
    "WORK_TOKEN_GRID",
    "work_tokens",
    "CollectSink",
    "SummarySink",
    "ParquetSink",
    "trace_chunks",
    "Engine",
    "chunk_jobs",
    "occupancy",
    "time_average",
    "OCCUPANCY_QUANTITIES",
]


class SimJob(Job):
    """A :class:`Job` with the simulator's bookkeeping."""

    __slots__ = ("tokens", "enc_s", "admit", "first")

    def __init__(self, rid, arrival, est_service, duration, language, tokens, enc_s, priority=0):
        super().__init__(rid, arrival, est_service, duration, language, priority=priority)
        self.tokens = tokens
        self.enc_s = enc_s
        self.admit = math.nan
        self.first = math.nan


# ----------------------------------------------------------------------------- engine


class Engine:
    """One continuous-batching server: a policy-ordered waiting queue and up to ``max_num_seqs`` running.

    Drive it with :meth:`submit` (a job that has arrived) and :meth:`run_until` (process
    every decision point before a time). :func:`simulate` drives one engine from a
    trace (jobs built by :func:`chunk_jobs`); a multi-replica fleet
    (:mod:`asrsched.sim.fleet`) drives several, routing each arrival with the state the
    replicas show at that instant.

    Public API for a driver (everything else is internal state):

    * :meth:`submit`, :meth:`run_until`, :meth:`flush`; ``sink`` (finished records),
      ``events`` and ``completed`` (counters);
    * ``t`` (read only): the time of the engine's next decision point. ``run_until(h)``
      does nothing when ``t >= h``, so a driver may skip the call;
    * what a router sees at time ``at`` (after ``run_until(at)``): :meth:`n_waiting`,
      :meth:`n_in_system` and :meth:`outstanding_work` (estimated outstanding work,
      from the size estimates only; ``tests/sim_oracle.py`` has its reference loop);
    * :meth:`set_policy`: re-order the waiting queue under another policy (a
      switchback experiment switches every replica's policy at block boundaries);
    * ``on_finish(job, t)`` (optional): called as a job's last decode step ends at time ``t``, when
      the driver may :meth:`submit` a job that arrives then (:func:`simulate`'s ``follows``).

    A *decision point* is a step boundary at which the engine admits waiting jobs
    (each admission runs the job's encoder, stalling the batch) and then jumps over
    the decode steps until the next completion — or, while a slot is free, until the
    first step boundary at or after the caller's horizon (the next arrival), where a
    new job could be admitted.
    """

    def __init__(
        self,
        policy: str = "fcfs",
        service: ServiceModel | None = None,
        *,
        max_num_seqs: int = 32,
        policy_params: dict | None = None,
        sink: Any = None,
        flush_every: int = 100_000,
    ) -> None:
        service = service or default_service_model()
        if int(max_num_seqs) < 1:
            raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
        self.M = int(max_num_seqs)
        self.service = service
        self.q = make_queue(policy, **(policy_params or {}))
        self.sink = sink if sink is not None else CollectSink()
        self.flush_every = int(flush_every)
        self.steps = [0.0] + [float(service.step_s(b)) for b in range(1, self.M + 1)]
        self.overhead = float(service.overhead_s)
        self.t = 0.0  # time of the next decision point
        self.G = 0  # global decode-step index
        self.running: list[tuple[int, int, SimJob]] = []  # (finish step, rid, job)
        self.pending_first: list[SimJob] = []
        self.out: list[tuple] = []
        self.completed = 0
        self.events = 0
        self.queued_est = 0.0  # sum of est_service over waiting jobs
        self._just_finished = 0  # completions at self.t (still in system before that instant)
        self._work_cache: Any = None  # (running-set key, est_tokens, sorted estimate ends, suffix sums)
        self.on_decision: Any = None  # optional callback(engine) at each decision point, after admissions
        self.on_finish: Any = None  # optional callback(job, t) as a job's last decode step ends at engine time t

    # -- state seen by a router at time ``at`` (after run_until(at)) --
    def n_waiting(self) -> int:
        return len(self.q)

    def n_in_system(self, at: float) -> int:
        """Jobs waiting or running at time ``at`` (completions at a later decision point still count)."""
        extra = self._just_finished if self.t > at else 0
        return len(self.q) + len(self.running) + extra

    def outstanding_work(self, at: float, est_tokens: Sequence[float]) -> float:
        """Estimated outstanding work (s) at time ``at``, from the size estimates only.

        The waiting jobs' estimated service times plus, for each running job, its
        estimated remaining tokens ``max(est_tokens[rid] - generated so far, 0)`` times
        the current decode step time; ``est_tokens[rid]`` is job ``rid``'s size estimate
        (kappa x duration, in tokens; on the grid of :func:`work_tokens`, so that the sums
        here are exact and any order of adding gives the same value). Call after
        ``run_until(at)``: if the clock already jumped past ``at`` (to the next completion),
        the decode steps between ``at`` and that point count as not yet done.

        Equal (to rounding) to the reference loop of ``tests/sim_oracle.py``; this version
        keeps the running jobs' sorted estimate ends and their suffix sums, rebuilt only
        when the running set changes, so a query costs O(log b).
        """
        running = self.running
        if not running:
            return self.queued_est
        key = (self.completed + len(self.out), len(running))
        c = self._work_cache
        if c is None or c[0] != key or c[1] is not est_tokens:
            ex = sorted([f - job.tokens + est_tokens[rid] for f, rid, job in running])
            suffix = list(itertools.accumulate(reversed(ex)))[::-1] + [0.0]
            c = self._work_cache = (key, est_tokens, ex, suffix)
        _, _, ex, suffix = c
        st = self.steps[len(running)]
        G = self.G
        if self.t > at:
            G -= int((self.t - at) / st)
        k = bisect.bisect_right(ex, G)
        return self.queued_est + (suffix[k] - (len(ex) - k) * G) * st

    def set_policy(self, policy: str, policy_params: dict | None = None) -> None:
        """Order the waiting jobs under ``policy`` from the next decision point on.

        Running jobs continue. Nothing changes when the queue already runs ``policy``
        (same name); otherwise a fresh queue is built and every waiting job re-pushed.
        """
        if getattr(self.q, "name", None) == str(policy).lower():
            return
        q = make_queue(policy, **(policy_params or {}))
        for job in self.q:
            q.push(job)
        self.q = q

    def submit(self, job: SimJob) -> None:
        """A job that arrived at ``job.arrival`` (call :meth:`run_until` with that time first)."""
        self.q.push(job)
        self.queued_est += job.est_service
        if not self.running and self.t < job.arrival:
            self.t = job.arrival

    def run_until(self, horizon: float) -> None:
        """Process every decision point strictly before ``horizon`` (``inf`` drains the engine)."""
        q, running, steps, M = self.q, self.running, self.steps, self.M
        heappush, heappop = heapq.heappush, heapq.heappop
        while self.t < horizon:
            t = self.t
            while len(running) < M and q:
                if t >= horizon:  # jobs arriving during the encodes compete for the remaining slots
                    break
                job: SimJob = q.pop(t)  # type: ignore[assignment]  # the engine queues only SimJobs
                self.queued_est -= job.est_service
                job.admit = t
                t += job.enc_s
                heappush(running, (self.G + job.tokens, job.rid, job))
                self.pending_first.append(job)
            self.t = t
            if t >= horizon and len(running) < M:
                return  # jobs that arrived during the encodes may still take a free slot: resume after submit
            self.events += 1
            if self.on_decision is not None:  # state during the coming jump
                self.on_decision(self)
            if not running:  # idle: nothing happens before the next submit
                self._just_finished = 0
                if horizon < math.inf:
                    self.t = max(t, horizon)
                return
            b = len(running)
            st = steps[b]
            k = running[0][0] - self.G
            if b < M and horizon < math.inf:
                ka = max(1, math.ceil((horizon - t) / st - 1e-9))
                if ka < k:
                    k = ka
            if self.pending_first:
                ft = t + st
                for j in self.pending_first:
                    j.first = ft
                self.pending_first.clear()
            t += k * st
            self.G += k
            self.t = t
            fin = 0
            while running and running[0][0] == self.G:
                _, _, j = heappop(running)
                self.out.append(
                    (
                        j.rid,
                        j.arrival,
                        j.duration,
                        j.language,
                        j.est_service,
                        j.tokens,
                        j.admit,
                        j.first,
                        t + self.overhead,
                    )
                )
                fin += 1
                if self.on_finish is not None:  # a driver may submit a job that follows this one (at t)
                    self.on_finish(j, t)
            self._just_finished = fin
            if len(self.out) >= self.flush_every:
                self.flush()

    def flush(self) -> None:
        """Hand the finished records kept so far to the sink."""
        if self.out:
            self.sink.write(self.out)
            self.completed += len(self.out)
            self.out = []


# ----------------------------------------------------------------------------- simulate


def chunk_jobs(
    trace: Trace, service: ServiceModel, est_duration: np.ndarray | None = None, rid_base: int = 0
) -> Iterator[SimJob]:
    """The :class:`SimJob` of each request of ``trace``, in arrival order, for :meth:`Engine.submit`.

    ``rid`` is ``rid_base + i``; ``est_service`` comes from ``est_duration`` when given (e.g. a
    VAD's speech duration), else from the file duration; the encoder time from the file duration; the
    priority class from the trace's ``extra["priority"]`` column when it has one (else 0).
    """
    d_est = trace.duration if est_duration is None else np.asarray(est_duration, float)
    est = np.broadcast_to(service.est_service(d_est, trace.language), (len(trace),)).tolist()
    enc = np.broadcast_to(service.encoder_s(trace.duration), (len(trace),)).tolist()
    dur = trace.duration.tolist()
    lang = [str(x) for x in trace.language]
    tok = np.asarray(trace.tokens, np.int64).tolist()
    ex = trace.extra
    prio = ex["priority"].astype(np.int64).tolist() if "priority" in ex else [0] * len(trace)
    for i, a in enumerate(trace.arrival.tolist()):
        yield SimJob(rid_base + i, a, est[i], dur[i], lang[i], tok[i], enc[i], prio[i])


def simulate(
    trace: Trace | Iterable[Trace],
    policy: str = "fcfs",
    service: ServiceModel | None = None,
    *,
    max_num_seqs: int = 32,
    policy_params: dict | None = None,
    est_duration: np.ndarray | None = None,
    sink: Any = None,
    flush_every: int = 100_000,
    timeline_points: int = 4000,
    warn_overload: bool = True,
    engine: str = "auto",
    follows: np.ndarray | None = None,
) -> SimResult:
    """Simulate ``trace`` on a continuous-batching server under ``policy``.

    ``service`` defaults to :func:`~asrsched.core.service.default_service_model`.
    ``est_duration`` (optional, same length as the trace) replaces the file
    duration in the size estimate (e.g. speech duration measured by a VAD).
    ``sink`` receives finished records in batches (default: keep them all).
    Arrival rates above capacity are not an error: the run completes, warns
    with :class:`~asrsched.sim.overload.OverloadWarning` and reports ``queue_growth_per_s``.

    ``engine``: ``"auto"`` runs the compiled engine (:mod:`asrsched.sim.kernel`, a fleet of one
    replica: same decisions, identical records, timeline, event and mode counts) exactly when it
    implements the policy (:func:`asrsched.sim.inputs.compiled_support`: the built-in
    ``fcfs``, ``sjf``, ``ljf``, ``hrrn``, ``adaptive`` and static policies of
    :func:`asrsched.core.static_policies.register_static_policy`), on an in-memory trace or an iterator
    of chunks, with any sink; other policies take the Python :class:`Engine` (the readable
    reference). ``"python"`` forces the reference; ``"numba"`` the compiled engine, raising
    ``ValueError`` for a policy it does not implement.

    ``follows`` (optional, in-memory trace): row ``i`` is submitted when row ``follows[i]`` (an earlier row)
    finishes, at the engine's time of that last decode step, which becomes its ``arrival`` in the records;
    ``-1`` keeps the trace's arrival. A streamed upload's chunks run so in vLLM
    (:mod:`asrsched.sim.uploads`). Only the Python reference runs it (``engine="numba"`` raises).
    """
    from asrsched.sim.inputs import choose_engine

    service = service or default_service_model()
    M = int(max_num_seqs)
    if M < 1:
        raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
    in_memory = isinstance(trace, Trace)
    if est_duration is not None and not in_memory:
        raise ValueError("est_duration needs an in-memory Trace (not an iterator of chunks)")
    if isinstance(trace, Trace) and est_duration is not None and len(est_duration) != len(trace):
        raise ValueError(f"est_duration has {len(est_duration)} rows, the trace has {len(trace)}")
    if follows is not None:
        follows = _check_follows(follows, trace)
        if str(engine).lower() == "numba":
            raise ValueError("engine: the compiled engine does not run follows; use engine='python' or 'auto'")
        engine = "python"
    compiled = choose_engine(engine, [policy], policy_params=policy_params)
    chunks = [trace] if in_memory else trace
    run = _run_compiled if compiled else functools.partial(_run_python, follows=follows)
    records, (tt, tr_, tq), n_arrivals, n_completed, events, mode_counts, span = run(
        chunks,
        in_memory,
        policy,
        service,
        M,
        policy_params,
        est_duration,
        sink,
        flush_every,
        timeline_points,
        warn_overload,
    )
    growth, overloaded = queue_growth((tt, tq), M, span[0], span[1])
    if overloaded and warn_overload:
        warnings.warn(
            f"queue grew by {growth:.2f} requests/s over the second half of the run "
            f"(peak depth {int(tq.max()) if len(tq) else 0}): "
            "arrival rate above capacity",
            OverloadWarning,
            stacklevel=2,
        )
    timeline = pd.DataFrame({"time": tt, "running": tr_, "waiting": tq}, copy=False)
    params = dict(
        policy=str(policy).lower(),
        max_num_seqs=M,
        service=service.name,
        policy_params=policy_params or {},
        engine="numba" if compiled else "python",
        overhead_s=float(service.overhead_s),
    )
    if isinstance(trace, Trace):
        params.update({f"trace_{k}": v for k, v in trace.meta.items()})
    return SimResult(
        records=records,
        timeline=timeline,
        params=params,
        n_arrivals=n_arrivals,
        n_completed=n_completed,
        events=events,
        queue_growth_per_s=growth,
        overloaded=overloaded,
        mode_counts=mode_counts,
    )


def _check_follows(follows, trace) -> np.ndarray:
    """``follows`` as int64, or ``ValueError``: an in-memory trace, one entry per row, each ``-1`` or an earlier row."""
    if not isinstance(trace, Trace):
        raise ValueError("follows needs an in-memory Trace (not an iterator of chunks)")
    f = np.asarray(follows)
    if f.shape != (len(trace),) or not np.issubdtype(f.dtype, np.integer):
        raise ValueError(f"follows: need {len(trace)} integers (one per row), got shape {f.shape} of {f.dtype}")
    bad = np.flatnonzero((f < -1) | (f >= np.arange(len(f))))
    if len(bad):
        raise ValueError(f"follows: row {int(bad[0])} follows {int(f[bad[0]])}, which is not -1 or an earlier row")
    return f.astype(np.int64)


def _span(span: list, tr: Trace) -> None:
    if len(tr):
        span[0] = min(span[0], float(tr.arrival[0]))
        span[1] = max(span[1], float(tr.arrival[-1]))


def _run_python(
    chunks,
    in_memory,
    policy,
    service,
    M,
    policy_params,
    est_duration,
    sink,
    flush_every,
    timeline_points,
    warn_overload,
    follows=None,
):
    """:func:`simulate` on the Python :class:`Engine` (the reference)."""
    eng = Engine(policy, service, max_num_seqs=M, policy_params=policy_params, sink=sink, flush_every=flush_every)
    tl = ThinnedTimeline(timeline_points)
    # arrivals up to the decision time that the driver has not submitted yet are waiting too
    cur = {"arr": np.empty(0), "base": 0, "submitted": 0}
    held: dict[int, list[SimJob]] = {}  # rid -> the jobs submitted when it finishes (follows)
    if follows is not None:

        def release(job: SimJob, t: float) -> None:
            for nxt_job in held.pop(job.rid, ()):
                nxt_job.arrival = t
                eng.submit(nxt_job)

        eng.on_finish = release

    def sample(e: Engine) -> None:
        arrived = cur["base"] + int(np.searchsorted(cur["arr"], e.t, side="right"))
        tl.add(e.t, len(e.running), len(e.q) + max(arrived - cur["submitted"], 0))

    eng.on_decision = sample
    chunks = iter(chunks)
    n_arrivals = 0
    span = [math.inf, -math.inf]  # first and last arrival
    nxt = next(chunks, None)
    ci = -1
    while nxt is not None:
        tr, nxt, ci = nxt, next(chunks, None), ci + 1
        if warn_overload and ci == 0:
            check_offered_load(tr, service)
        # the next chunk's arrivals too: encodes at the end of this chunk can run past its first arrivals
        cur["arr"] = tr.arrival if nxt is None else np.concatenate([tr.arrival, nxt.arrival])
        if follows is not None:  # (in memory: one chunk) only the rows that arrive by the trace
            cur["arr"] = tr.arrival[follows < 0]
        cur["base"] = n_arrivals
        _span(span, tr)
        for job in chunk_jobs(tr, service, est_duration, n_arrivals):
            if follows is not None and follows[job.rid] >= 0:
                held.setdefault(int(follows[job.rid]), []).append(job)
                continue
            eng.run_until(job.arrival)
            eng.submit(job)
            cur["submitted"] += 1
        n_arrivals += len(tr)
    eng.run_until(math.inf)
    eng.flush()
    mode_counts = dict(getattr(eng.q, "mode_counts", {}) or {})
    return eng.sink.result(), tl.arrays(), n_arrivals, eng.completed, eng.events, mode_counts, span


def _run_compiled(
    chunks,
    in_memory,
    policy,
    service,
    M,
    policy_params,
    est_duration,
    sink,
    flush_every,
    timeline_points,
    warn_overload,
):
    """:func:`simulate` on the compiled engine (:mod:`asrsched.sim.kernel`), one replica."""
    from asrsched.sim.compiled import CompiledRun
    from asrsched.sim.inputs import policy_inputs, run_in_memory, static_policy_keys, trace_inputs
    from asrsched.sim.kernel import Requests

    stream = not in_memory or sink is not None
    if not stream:
        (tr,) = chunks
        if warn_overload:
            check_offered_load(tr, service)
        records, run = run_in_memory(
            tr,
            service,
            [policy],
            max_num_seqs=M,
            policy_params=policy_params,
            est_duration=est_duration,
            timeline_points=timeline_points,
        )
        span = [float(tr.arrival[0]), float(tr.arrival[-1])] if len(tr) else [math.inf, -math.inf]
        return (
            records,
            run.timeline(),
            len(tr),
            int(np.isfinite(records["finish"].to_numpy()).sum()),
            run.events,
            run.mode_counts(),
            span,
        )
    codes, params = policy_inputs([policy], policy_params)
    steps = np.concatenate([[0.0], np.asarray(service.step_s(np.arange(1, M + 1)), float)])
    sink = sink if sink is not None else CollectSink()
    run = CompiledRun(
        codes,
        max_num_seqs=M,
        steps=steps,
        overhead=float(service.overhead_s),
        params=params,
        timeline_points=timeline_points,
        write=column_writer(sink),
        flush_every=flush_every,
    )

    span = [math.inf, -math.inf]  # first and last arrival
    n_arrivals = 0
    for ci, tr in enumerate(chunks):
        if warn_overload and ci == 0:
            check_offered_load(tr, service)
        _span(span, tr)
        inp = trace_inputs(tr, service, cache=False)  # a chunk is seen once
        arrival = np.ascontiguousarray(tr.arrival, np.float64)
        key = static_policy_keys([policy], inp.est, arrival, tr.duration, *inp.codes)
        req = Requests(arrival, inp.est, inp.enc, np.ascontiguousarray(tr.tokens, np.int64), np.empty(0, np.int64), key)
        rows = {
            "rid": np.arange(n_arrivals, n_arrivals + len(tr)),
            "duration": np.ascontiguousarray(tr.duration, np.float64),
            "language": np.asarray(tr.language, dtype=object),
        }
        run.feed(req, rows)
        n_arrivals += len(tr)
    run.close()
    return sink.result(), run.timeline(), n_arrivals, run.n_written, run.events, run.mode_counts(), span
