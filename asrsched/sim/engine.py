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
they finish, so each event costs O(log b).

With ``max_num_seqs = 1`` and ``decode_batch_slope`` irrelevant the server is an
M/G/1 queue with service time ``enc x windows + tokens x decode_s_per_token``
(tests check Pollaczek-Khinchine and the M/G/1 SJF formula).

Records: one row per request, ``rid, arrival, duration, language, est_service,
tokens, admit, first_token, finish`` plus ``queue_delay = admit - arrival``,
``ttft = first_token - arrival``, ``e2el = finish - arrival``. ``SimResult.timeline``
holds batch occupancy and queue depth sampled at decision points (thinned to
``timeline_points``), for plotting; time averages come exactly from the records
(:func:`occupancy`, :func:`time_average`, :meth:`SimResult.time_average`).
For very long runs pass a trace *iterator* (:func:`trace_chunks`) and a bounded
``sink`` (:class:`SummarySink` or :class:`ParquetSink`): memory then stays flat.

:func:`simulate` runs the compiled engine (:mod:`asrsched.sim.kernels`) for the built-in
policies and for static policies registered with
:func:`asrsched.sim.kernels.register_static_policy`, on in-memory or chunked traces and with
any sink; :class:`Engine` here is the readable reference (``tests/test_simfast.py``
compares the two decision by decision) and the path for every other policy and for the fleet.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.policies import Job, make_queue
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import (
    Empirical,
    Trace,
    Uniform,
    check_rate,
    make_arrivals,
    make_source,
    make_trace,
    true_tokens,
)
from asrsched.sim.kernels import constant_strings, histogram_add, language_codes

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
    "estimate_services",
    "OverloadWarning",
    "Engine",
    "chunk_jobs",
    "estimated_work",
    "occupancy",
    "time_average",
    "OCCUPANCY_QUANTITIES",
]

RECORD_COLUMNS = ["rid", "arrival", "duration", "language", "est_service", "tokens", "admit", "first_token",
                  "finish"]


class OverloadWarning(UserWarning):
    """The arrival rate exceeds what the server can serve: the queue grows without bound."""


class SimJob(Job):
    """A :class:`Job` with the simulator's bookkeeping."""

    __slots__ = ("tokens", "enc_s", "admit", "first")

    def __init__(self, rid, arrival, est_service, duration, language, tokens, enc_s):
        super().__init__(rid, arrival, est_service, duration, language)
        self.tokens = tokens
        self.enc_s = enc_s
        self.admit = math.nan
        self.first = math.nan


# ----------------------------------------------------------------------------- sinks

class CollectSink:
    """Keeps every record; ``result()`` is the records DataFrame."""

    def __init__(self) -> None:
        self._parts: list[pd.DataFrame] = []

    def write(self, rows: list[tuple]) -> None:
        self._parts.append(pd.DataFrame.from_records(rows, columns=RECORD_COLUMNS))

    def write_columns(self, cols: dict[str, np.ndarray]) -> None:
        """The same records as :meth:`write`, given as one array per column of :data:`RECORD_COLUMNS`."""
        self._parts.append(pd.DataFrame({c: cols[c] for c in RECORD_COLUMNS}))

    def result(self) -> pd.DataFrame:
        if not self._parts:
            df = pd.DataFrame(columns=RECORD_COLUMNS)
        else:
            df = pd.concat(self._parts, ignore_index=True)
        df = df.sort_values("rid", kind="stable").reset_index(drop=True)
        return add_derived(df)


class ParquetSink:
    """Streams records to ``path/part-NNNNN.parquet`` (bounded memory)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.n = 0

    def write(self, rows: list[tuple]) -> None:
        self._write_frame(pd.DataFrame.from_records(rows, columns=RECORD_COLUMNS))

    def write_columns(self, cols: dict[str, np.ndarray]) -> None:
        """The same records as :meth:`write`, given as one array per column of :data:`RECORD_COLUMNS`."""
        self._write_frame(pd.DataFrame({c: cols[c] for c in RECORD_COLUMNS}))

    def _write_frame(self, df: pd.DataFrame) -> None:
        df.to_parquet(self.path / f"part-{self.n:05d}.parquet", index=False)
        self.n += 1

    def result(self) -> Path:
        return self.path


class SummarySink:
    """Streaming summary in bounded memory: counts, sums and log-binned histograms.

    Percentiles come from histograms with 0.5 % relative bin width (so P50/P90/P99
    are exact to about 0.5 %); ``result()`` returns a dict of metrics in the
    :func:`asrsched.core.metrics.summarize` naming.
    """

    BINS = np.concatenate([[0.0], np.geomspace(1e-4, 1e6, 4600)])
    _LOG_LO = math.log(1e-4)
    _LOG_STEP = (math.log(1e6) - math.log(1e-4)) / 4599

    def __init__(self) -> None:
        self.n = 0
        self.audio_s = 0.0
        self.first_arrival = math.inf
        self.last_finish = -math.inf
        self.max_wait = 0.0
        self.sums = {"ttft": 0.0, "e2el": 0.0, "queue_delay": 0.0}
        self.hist = {k: np.zeros(len(self.BINS), np.int64) for k in self.sums}

    def write(self, rows: list[tuple]) -> None:
        if not rows:
            return
        a = np.array([(r[1], r[2], r[6], r[7], r[8]) for r in rows], float)
        self._add(*a.T)

    def write_columns(self, cols: dict[str, np.ndarray]) -> None:
        """The same records as :meth:`write`, given as one array per column of :data:`RECORD_COLUMNS`."""
        self._add(*(np.asarray(cols[c], float) for c in ("arrival", "duration", "admit", "first_token", "finish")))

    def _add(self, arrival: np.ndarray, dur: np.ndarray, admit: np.ndarray, first: np.ndarray,
             finish: np.ndarray) -> None:
        if not len(arrival):
            return
        vals = {"ttft": first - arrival, "e2el": finish - arrival, "queue_delay": admit - arrival}
        self.n += len(arrival)
        self.audio_s += float(dur.sum())
        self.first_arrival = min(self.first_arrival, float(arrival.min()))
        self.last_finish = max(self.last_finish, float(finish.max()))
        self.max_wait = max(self.max_wait, float(vals["queue_delay"].max()))
        for k, v in vals.items():
            self.sums[k] += float(v.sum())
            # the bin counts of np.clip(np.searchsorted(BINS, v, "right") - 1, 0, len(BINS) - 1), in one pass
            histogram_add(self.BINS, self._LOG_LO, self._LOG_STEP, v, self.hist[k])

    def _pct(self, k: str, p: float) -> float:
        c = np.cumsum(self.hist[k])
        i = int(np.searchsorted(c, p / 100.0 * c[-1]))
        lo = self.BINS[i]
        hi = self.BINS[min(i + 1, len(self.BINS) - 1)]
        return 0.5 * (lo + hi)

    def result(self) -> dict[str, float]:
        span = self.last_finish - self.first_arrival
        out: dict[str, float] = {"completed": self.n, "request_throughput": self.n / span if span > 0 else math.nan,
                                 "rtfx": self.audio_s / span if span > 0 else math.nan,
                                 "max_queue_delay_ms": 1e3 * self.max_wait}
        for k in self.sums:
            out[f"mean_{k}_ms"] = 1e3 * self.sums[k] / max(self.n, 1)
            for p in (50, 90, 99):
                out[f"p{p}_{k}_ms"] = 1e3 * self._pct(k, p)
        return out


def add_derived(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``queue_delay``, ``ttft``, ``e2el`` (seconds) to a records table."""
    df = df.copy()
    df["queue_delay"] = df["admit"] - df["arrival"]
    df["ttft"] = df["first_token"] - df["arrival"]
    df["e2el"] = df["finish"] - df["arrival"]
    return df


# ----------------------------------------------------------------------------- exact occupancy

OCCUPANCY_QUANTITIES = ("in_system", "waiting", "running")


def _intervals(records: pd.DataFrame, quantity: str, overhead_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each request's stay in ``quantity``, from the records."""
    if quantity not in OCCUPANCY_QUANTITIES:
        raise ValueError(f"quantity must be one of {', '.join(OCCUPANCY_QUANTITIES)}, got {quantity!r}")
    if not isinstance(records, pd.DataFrame):
        raise ValueError("exact occupancy needs the per-request records as a DataFrame (the default CollectSink), "
                         f"got {type(records).__name__}")
    cols = {"in_system": ("arrival", "finish"), "waiting": ("arrival", "admit"), "running": ("admit", "finish")}
    start, end = (records[c].to_numpy(float) for c in cols[quantity])
    if quantity == "running":
        end = end - float(overhead_s)  # the engine frees the slot overhead_s before the client sees the result
    if len(start) and not (np.isfinite(start).all() and np.isfinite(end).all()):
        raise ValueError(f"records have unfinished requests (NaN times): {quantity!r} needs every interval closed")
    return start, end


def occupancy(records: pd.DataFrame, overhead_s: float = 0.0) -> pd.DataFrame:
    """The exact step functions of the number of requests in system, waiting and running.

    One row per instant at which any of them changes (every arrival, admission and
    finish), holding the values from that instant until the next row: ``time,
    in_system, waiting, running``. ``in_system`` counts requests between arrival and
    ``finish`` (as the client sees it, so E2EL and Little's law ``L = lambda W`` agree),
    ``waiting`` between arrival and admission, ``running`` between admission and the
    engine's finish (``finish - overhead_s``: the batch occupancy of ``SimResult.timeline``,
    encode included). Unlike the sampled ``SimResult.timeline``, integrating these steps
    gives exact time averages.
    """
    out = {}
    ts = []
    spans = {q: _intervals(records, q, overhead_s) for q in OCCUPANCY_QUANTITIES}
    for start, end in spans.values():
        ts.extend([start, end])
    t = np.unique(np.concatenate(ts)) if ts else np.empty(0)
    for q, (start, end) in spans.items():
        out[q] = (np.searchsorted(np.sort(start), t, side="right")
                  - np.searchsorted(np.sort(end), t, side="right")).astype(np.int64)
    return pd.DataFrame({"time": t, **out})


def time_average(records: pd.DataFrame, quantity: str = "in_system", t0: float | None = None,
                 t1: float | None = None, overhead_s: float = 0.0) -> float:
    """Exact time average of ``quantity`` (see :func:`occupancy`) over ``[t0, t1]``.

    Defaults: from the first arrival to the last finish, where it equals
    ``lambda W`` exactly (Little's law with ``lambda = n / (t1 - t0)`` and ``W`` the
    mean time in ``quantity``). Computed as the summed overlap of each request's
    interval with the window, divided by its length.
    """
    start, end = _intervals(records, quantity, overhead_s)
    if not len(start):
        raise ValueError("time_average needs at least one request")
    arr = records["arrival"].to_numpy(float)
    t0 = float(arr.min()) if t0 is None else float(t0)
    t1 = float(records["finish"].to_numpy(float).max()) if t1 is None else float(t1)
    if not t1 > t0:
        raise ValueError(f"time_average needs t1 > t0, got t0={t0!r}, t1={t1!r}")
    overlap = np.clip(np.minimum(end, t1) - np.maximum(start, t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0))


# ----------------------------------------------------------------------------- result

@dataclass
class SimResult:
    """Output of :func:`simulate`: per-request records, timeline, parameters, overload report.

    ``timeline`` (columns ``time, running, waiting``) is the engine's state sampled at
    its decision points and thinned by stride doubling to at most ``timeline_points``
    rows: **for plotting**. It is not a time-weighted record: a request that arrives
    while the batch is full appears only at the next decision point, so a step-function
    average of ``running + waiting`` comes out below Little's ``lambda W`` (by a few
    per cent on a loaded server). For time averages use :meth:`time_average` (exact,
    from the records) or :meth:`occupancy` (the exact step functions).
    """

    records: Any  # DataFrame (CollectSink), dict (SummarySink) or Path (ParquetSink)
    timeline: pd.DataFrame
    params: dict
    n_arrivals: int
    n_completed: int
    events: int
    queue_growth_per_s: float = 0.0
    overloaded: bool = False
    mode_counts: dict = field(default_factory=dict)

    def summary(self, **kw) -> dict:
        """Metrics of this run (see :func:`asrsched.core.metrics.summarize`)."""
        from asrsched.core.metrics import summarize

        if isinstance(self.records, dict):
            return dict(self.records)
        return summarize(self.records, **kw)

    def occupancy(self) -> pd.DataFrame:
        """Exact step functions ``time, in_system, waiting, running`` of this run (:func:`occupancy`)."""
        return occupancy(self.records, self.params.get("overhead_s", 0.0))

    def time_average(self, quantity: str = "in_system", t0: float | None = None, t1: float | None = None) -> float:
        """Exact time average of ``in_system``, ``waiting`` or ``running`` over ``[t0, t1]`` (:func:`time_average`).

        Needs the records in memory (the default sink); ``ValueError`` otherwise.
        """
        return time_average(self.records, quantity, t0, t1, self.params.get("overhead_s", 0.0))


# ----------------------------------------------------------------------------- helpers

def estimate_services(service: ServiceModel, duration: np.ndarray, language: np.ndarray,
                      codes: tuple[np.ndarray, list[str]] | None = None) -> np.ndarray:
    """Estimated service time per request (batch-1 time from kappa x duration).

    ``codes``: the language column as ``(codes, names)`` (:func:`asrsched.sim.kernels.language_codes`)
    when the caller has it already; the values are the same either way.
    """
    duration = np.asarray(duration, float)
    if codes is not None:
        return _estimates_coded(service, duration, codes[0], codes[1])
    language = np.asarray(language, dtype=object)
    single = len(language) and language[0] == language[-1] and (language == language[0]).all()
    langs = language[:1] if single else pd.unique(language)
    if len(langs) == 1:  # one language: no masks
        return np.asarray(service.service_time(duration, str(langs[0])), float).reshape(len(duration))
    est = np.empty(len(duration))
    for lang in langs:
        m = language == lang
        est[m] = service.service_time(duration[m], str(lang))
    return est


def trace_chunks(workload="librispeech", *, rate: float, n: int, chunk: int = 200_000, seed: int = 0,
                 **kw) -> Iterator[Trace]:
    """A long trace as consecutive chunks (for bounded-memory runs); chunk ``i`` uses seed ``(seed, i)``.

    Chunk ``i`` is ``make_trace(workload, rate=rate, n=..., seed=<from (seed, i)>, **kw)`` with its
    arrivals shifted to follow chunk ``i - 1``. For a single-language duration source
    (LibriSpeech, Common Voice, uniform) the chunk is drawn without the transcripts
    (``Trace.extra``), which a simulation does not read: same random draws, same arrivals,
    durations and token counts as :func:`make_trace` (``tests/test_simfast.py`` checks it),
    several times faster.
    """
    t0, done, i = 0.0, 0, 0
    while done < n:
        m = min(chunk, n - done)
        cseed = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
        tr = _bare_trace(workload, rate, m, cseed, **kw)
        if tr is None:
            tr = make_trace(workload, rate=rate, n=m, seed=cseed, **kw)
        tr.arrival = tr.arrival + t0
        t0 = float(tr.arrival[-1])
        done += m
        i += 1
        yield tr


def _bare_trace(workload: Any, rate: float, n: int, seed: int, *, arrival: str = "poisson",
                arrival_kw: dict | None = None, kappa: float | dict = 3.3, noise_cv: float = 0.15) -> Trace | None:
    """:func:`make_trace` without transcripts for a single-language source (``None`` for any other)."""
    src = make_source(workload)
    if type(src) not in (Empirical, Uniform):
        return None
    rate = check_rate(rate)
    rng = np.random.default_rng(seed)
    times = make_arrivals(arrival, rng, rate, int(n), **(arrival_kw or {}))
    dur = np.asarray(src.sample(rng, len(times)), float)  # the draws of src.sample_rows
    if isinstance(kappa, dict):
        if src.language not in kappa:
            return None  # make_trace raises its own error
        k = float(kappa[src.language])
    else:
        k = float(kappa)
    if not k > 0:
        return None
    tok = true_tokens(rng, dur, k, noise_cv)
    meta = dict(workload=getattr(src, "name", str(workload)), rate=rate, seed=seed, arrival=arrival, kappa=kappa,
                noise_cv=noise_cv)
    return Trace(times, dur, constant_strings(src.language, len(times)), tok, meta=meta)


class _Timeline:
    """Thinned (t, running, waiting) samples: keeps at most ``cap`` points by stride doubling."""

    def __init__(self, cap: int) -> None:
        self.cap = max(16, int(cap))
        self.t: list[float] = []
        self.r: list[int] = []
        self.q: list[int] = []
        self.stride = 1
        self.count = 0

    def add(self, t: float, running: int, waiting: int) -> None:
        self.count += 1
        if self.count % self.stride:
            return
        self.t.append(t)
        self.r.append(running)
        self.q.append(waiting)
        if len(self.t) >= self.cap:
            self.t, self.r, self.q = self.t[::2], self.r[::2], self.q[::2]
            self.stride *= 2

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"time": self.t, "running": self.r, "waiting": self.q})


# ----------------------------------------------------------------------------- size estimates a router reads

WORK_TOKEN_GRID = 65536  # the size estimates of the work view are whole multiples of 1/65536 token


def work_tokens(est_tokens) -> np.ndarray:
    """Size estimates (tokens) rounded to the nearest multiple of ``1 / WORK_TOKEN_GRID`` token.

    What :meth:`Engine.outstanding_work` reads. On this grid every estimate end (decode step
    at admission plus the estimate) and every sum of them is exact in float64 while the sum
    stays below 2**37 tokens (a replica 2**32 decode steps into a run, with 32 running), so
    the sum does not depend on the order of adding: the Python engine adds sorted ends, the
    compiled fleet keeps integer multiples of the grid, and both give the same bits. The
    rounding moves an estimate by at most 2**-17 token.
    """
    x = np.asarray(est_tokens, dtype=float)
    return np.rint(x * WORK_TOKEN_GRID) / WORK_TOKEN_GRID


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
      from the size estimates only; :func:`estimated_work` is its reference loop);
    * :meth:`set_policy`: re-order the waiting queue under another policy (a
      switchback experiment switches every replica's policy at block boundaries).

    A *decision point* is a step boundary at which the engine admits waiting jobs
    (each admission runs the job's encoder, stalling the batch) and then jumps over
    the decode steps until the next completion — or, while a slot is free, until the
    first step boundary at or after the caller's horizon (the next arrival), where a
    new job could be admitted.
    """

    def __init__(self, policy: str = "fcfs", service: ServiceModel | None = None, *, max_num_seqs: int = 32,
                 policy_params: dict | None = None, sink: Any = None, flush_every: int = 100_000) -> None:
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

    # -- state seen by a router at time ``at`` (after run_until(at)) --
    def n_waiting(self) -> int:
        return len(self.q)

    def n_in_system(self, at: float) -> int:
        """Jobs waiting or running at time ``at`` (completions at a later decision point still count)."""
        extra = self._just_finished if self.t > at else 0
        return len(self.q) + len(self.running) + extra

    def queued_work(self) -> float:
        """Estimated work (s) of the waiting jobs plus the running jobs' remaining decode time.

        The running part uses the *true* token counts (an oracle view, for diagnostics); what a
        router may see is :meth:`outstanding_work`.
        """
        st = self.steps[max(len(self.running), 1)]
        return self.queued_est + sum((f - self.G) * st for f, _, _ in self.running)

    def outstanding_work(self, at: float, est_tokens: Sequence[float]) -> float:
        """Estimated outstanding work (s) at time ``at``, from the size estimates only.

        The waiting jobs' estimated service times plus, for each running job, its
        estimated remaining tokens ``max(est_tokens[rid] - generated so far, 0)`` times
        the current decode step time; ``est_tokens[rid]`` is job ``rid``'s size estimate
        (kappa x duration, in tokens; on the grid of :func:`work_tokens`, so that the sums
        here are exact and any order of adding gives the same value). Call after
        ``run_until(at)``: if the clock already jumped past ``at`` (to the next completion),
        the decode steps between ``at`` and that point count as not yet done.

        Equal (to rounding) to :func:`estimated_work` (the reference loop); this version
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
                job = q.pop(t)
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
                self.out.append((j.rid, j.arrival, j.duration, j.language, j.est_service, j.tokens, j.admit, j.first,
                                 t + self.overhead))
                fin += 1
            self._just_finished = fin
            if len(self.out) >= self.flush_every:
                self.flush()

    def flush(self) -> None:
        """Hand the finished records kept so far to the sink."""
        if self.out:
            self.sink.write(self.out)
            self.completed += len(self.out)
            self.out = []


def estimated_work(engine: Engine, at: float, est_tokens: Sequence[float]) -> float:
    """Estimated outstanding work (s) of ``engine`` at time ``at``: the reference loop.

    Same definition as :meth:`Engine.outstanding_work` (which routers use), written as a
    plain loop over the running jobs: a job that ran past its estimate counts as zero.
    """
    running = engine.running
    work = engine.queued_est
    if running:
        st = engine.steps[len(running)]
        G = engine.G
        if engine.t > at:
            G -= int((engine.t - at) / st)
        for f, rid, job in running:
            left = est_tokens[rid] - (job.tokens - (f - G))
            if left > 0:
                work += left * st
    return work


# ----------------------------------------------------------------------------- simulate

def chunk_jobs(trace: Trace, service: ServiceModel, est_duration: np.ndarray | None = None,
               rid_base: int = 0) -> Iterator[SimJob]:
    """The :class:`SimJob` of each request of ``trace``, in arrival order, for :meth:`Engine.submit`.

    ``rid`` is ``rid_base + i``; ``est_service`` comes from ``est_duration`` when given (e.g. a
    VAD's speech duration), else from the file duration; the encoder time from the file duration.
    """
    d_est = trace.duration if est_duration is None else np.asarray(est_duration, float)
    est = estimate_services(service, d_est, trace.language).tolist()
    enc = (np.asarray(service.windows(trace.duration)) * float(service.encode_s_per_window)).tolist()
    dur = trace.duration.tolist()
    lang = [str(x) for x in trace.language]
    tok = np.asarray(trace.tokens, np.int64).tolist()
    for i, a in enumerate(trace.arrival.tolist()):
        yield SimJob(rid_base + i, a, est[i], dur[i], lang[i], tok[i], enc[i])


def _check_offered_load(trace: Trace, service: ServiceModel) -> None:
    if len(trace) <= 10:
        return
    span = float(trace.arrival[-1] - trace.arrival[0])
    rate = (len(trace) - 1) / span if span > 0 else math.inf
    enc_load = rate * float(np.mean(service.windows(trace.duration))) * service.encode_s_per_window
    if enc_load >= 1.0:
        warnings.warn(f"arrival rate {rate:.2f} req/s exceeds capacity: encoder work alone is "
                      f"{enc_load:.2f} s per second; the queue will grow without bound", OverloadWarning, stacklevel=3)


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
) -> SimResult:
    """Simulate ``trace`` on a continuous-batching server under ``policy``.

    ``service`` defaults to :func:`~asrsched.core.service.default_service_model`.
    ``est_duration`` (optional, same length as the trace) replaces the file
    duration in the size estimate (e.g. speech duration measured by a VAD).
    ``sink`` receives finished records in batches (default: keep them all).
    Arrival rates above capacity are not an error: the run completes, warns
    with :class:`OverloadWarning` and reports ``queue_growth_per_s``.

    ``engine``: ``"auto"`` runs the compiled engine (:mod:`asrsched.sim.kernels`: same
    decisions, identical records, timeline, event and mode counts) for the built-in
    policies ``fcfs``, ``sjf``, ``ljf``, ``hrrn`` and ``adaptive`` (with their
    ``policy_params``) and for static policies registered with
    :func:`asrsched.sim.kernels.register_static_policy`, on an in-memory trace or an
    iterator of chunks, with any sink; other policies take the Python :class:`Engine`
    (the readable reference). ``"python"`` or ``"numba"`` force one.
    """
    service = service or default_service_model()
    if engine not in ("auto", "python", "numba"):
        raise ValueError(f"engine must be 'auto', 'python' or 'numba', got {engine!r}")
    from asrsched.sim.kernels import FAST_POLICIES, compiled_policy

    spec = compiled_policy(policy, policy_params) if engine != "python" else None
    if engine == "numba" and spec is None:
        raise ValueError(f"engine='numba' needs one of the policies {', '.join(FAST_POLICIES)} or a policy "
                         f"registered with asrsched.sim.kernels.register_static_policy; got {policy!r} "
                         "(use engine='python' or 'auto')")
    if spec is not None:
        return _simulate_compiled(trace, spec, service, max_num_seqs, policy_params, est_duration, sink,
                                  flush_every, timeline_points, warn_overload)
    eng = Engine(policy, service, max_num_seqs=max_num_seqs, policy_params=policy_params, sink=sink,
                 flush_every=flush_every)
    if est_duration is not None and not isinstance(trace, Trace):
        raise ValueError("est_duration needs an in-memory Trace (not an iterator of chunks)")
    if isinstance(trace, Trace) and est_duration is not None and len(est_duration) != len(trace):
        raise ValueError(f"est_duration has {len(est_duration)} rows, the trace has {len(trace)}")
    tl = _Timeline(timeline_points)
    # arrivals up to the decision time that the driver has not submitted yet are waiting too
    cur = {"arr": np.empty(0), "base": 0, "submitted": 0}

    def sample(e: Engine) -> None:
        arrived = cur["base"] + int(np.searchsorted(cur["arr"], e.t, side="right"))
        tl.add(e.t, len(e.running), len(e.q) + max(arrived - cur["submitted"], 0))

    eng.on_decision = sample
    chunks = iter([trace] if isinstance(trace, Trace) else trace)
    n_arrivals = 0
    span = [math.inf, -math.inf]  # first and last arrival
    nxt = next(chunks, None)
    ci = -1
    while nxt is not None:
        tr, nxt, ci = nxt, next(chunks, None), ci + 1
        if warn_overload and ci == 0:
            _check_offered_load(tr, service)
        # the next chunk's arrivals too: encodes at the end of this chunk can run past its first arrivals
        cur["arr"] = tr.arrival if nxt is None else np.concatenate([tr.arrival, nxt.arrival])
        cur["base"] = n_arrivals
        if len(tr):
            span[0] = min(span[0], float(tr.arrival[0]))
            span[1] = max(span[1], float(tr.arrival[-1]))
        for job in chunk_jobs(tr, service, est_duration, n_arrivals):
            eng.run_until(job.arrival)
            eng.submit(job)
            cur["submitted"] += 1
        n_arrivals += len(tr)
    eng.run_until(math.inf)
    eng.flush()

    timeline = tl.frame()
    growth, overloaded = _queue_growth(timeline, eng.M, span[0], span[1])
    if overloaded and warn_overload:
        warnings.warn(f"queue grew by {growth:.2f} requests/s over the second half of the run "
                      f"(peak depth {int(timeline['waiting'].max()) if len(timeline) else 0}): "
                      "arrival rate above capacity", OverloadWarning, stacklevel=2)
    params = dict(policy=str(policy), max_num_seqs=eng.M, service=service.name, policy_params=policy_params or {},
                  overhead_s=float(service.overhead_s))
    if isinstance(trace, Trace):
        params.update({f"trace_{k}": v for k, v in trace.meta.items()})
    return SimResult(
        records=eng.sink.result(), timeline=timeline, params=params, n_arrivals=n_arrivals,
        n_completed=eng.completed, events=eng.events, queue_growth_per_s=growth, overloaded=overloaded,
        mode_counts=dict(getattr(eng.q, "mode_counts", {}) or {}),
    )


def _simulate_compiled(trace: Trace | Iterable[Trace], spec: Any, service: ServiceModel, max_num_seqs: int,
                       policy_params: dict | None, est_duration: np.ndarray | None, sink: Any, flush_every: int,
                       timeline_points: int, warn_overload: bool) -> SimResult:
    """:func:`simulate` through the compiled engine (see :mod:`asrsched.sim.kernels`)."""
    from asrsched.sim.kernels import CompiledServer, run_trace

    if int(max_num_seqs) < 1:
        raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
    in_memory = isinstance(trace, Trace)
    if est_duration is not None and not in_memory:
        raise ValueError("est_duration needs an in-memory Trace (not an iterator of chunks)")
    if in_memory and est_duration is not None and len(est_duration) != len(trace):
        raise ValueError(f"est_duration has {len(est_duration)} rows, the trace has {len(trace)}")
    M = int(max_num_seqs)
    steps = np.concatenate([[0.0], np.asarray(service.step_s(np.arange(1, M + 1)), float)])
    overhead = float(service.overhead_s)
    enc_s = float(service.encode_s_per_window)
    span = [math.inf, -math.inf]  # first and last arrival
    if in_memory and sink is None:  # one call, records straight into a DataFrame
        if warn_overload:
            _check_offered_load(trace, service)
        d_est = trace.duration if est_duration is None else np.asarray(est_duration, float)
        coded = language_codes(trace.language)  # once: the estimates, a key policy and the records use it
        est = _estimates_coded(service, np.asarray(d_est, float), *coded)
        out = run_trace(trace.arrival, est, np.asarray(service.windows(trace.duration)) * enc_s, trace.tokens, spec,
                        M, steps, overhead, timeline_points, trace.duration, coded)
        records = _records_frame(trace, est, out["admit"], out["first_token"], out["finish"], coded)
        n_arrivals = len(trace)
        n_completed = int(np.isfinite(out["finish"]).sum())
        events, (tt, tr_, tq), mode_counts = out["events"], out["timeline"], out["mode_counts"]
        if n_arrivals:
            span = [float(trace.arrival[0]), float(trace.arrival[-1])]
    else:
        sink = sink if sink is not None else CollectSink()
        server = CompiledServer(spec, M, steps, overhead, write=_column_writer(sink), flush_every=flush_every,
                                timeline_points=timeline_points)
        n_arrivals = 0
        for ci, tr in enumerate([trace] if in_memory else trace):
            if warn_overload and ci == 0:
                _check_offered_load(tr, service)
            if len(tr):
                span[0] = min(span[0], float(tr.arrival[0]))
                span[1] = max(span[1], float(tr.arrival[-1]))
            d_est = tr.duration if est_duration is None else np.asarray(est_duration, float)
            coded = language_codes(tr.language)
            server.feed(tr.arrival, _estimates_coded(service, np.asarray(d_est, float), *coded),
                        np.asarray(service.windows(tr.duration)) * enc_s, tr.tokens, tr.duration, tr.language, coded)
            n_arrivals += len(tr)
        server.close()
        records = sink.result()
        n_completed, events, mode_counts = server.n_written, server.events, server.mode_counts()
        tt, tr_, tq = server.timeline()
    growth, overloaded = _queue_growth((tt, tq), M, span[0], span[1])
    if overloaded and warn_overload:
        warnings.warn(f"queue grew by {growth:.2f} requests/s over the second half of the run "
                      f"(peak depth {int(tq.max()) if len(tq) else 0}): "
                      "arrival rate above capacity", OverloadWarning, stacklevel=3)
    timeline = pd.DataFrame({"time": tt, "running": tr_, "waiting": tq}, copy=False)
    params = dict(policy=spec.name, max_num_seqs=M, service=service.name, policy_params=policy_params or {},
                  engine="numba", overhead_s=overhead)
    if in_memory:
        params.update({f"trace_{k}": v for k, v in trace.meta.items()})
    return SimResult(records=records, timeline=timeline, params=params, n_arrivals=n_arrivals,
                     n_completed=n_completed, events=events, queue_growth_per_s=growth, overloaded=overloaded,
                     mode_counts=mode_counts)


def _estimates_coded(service: ServiceModel, duration: np.ndarray, codes: np.ndarray, names: list[str]) -> np.ndarray:
    """:func:`estimate_services` from language codes (:func:`asrsched.sim.kernels.language_codes`)."""
    if len(names) == 1:
        return np.asarray(service.service_time(duration, names[0]), float).reshape(len(duration))
    est = np.empty(len(duration))
    for i, lang in enumerate(names):
        m = codes == i
        est[m] = service.service_time(duration[m], lang)
    return est


def _records_frame(trace: Trace, est: np.ndarray, admit: np.ndarray, first: np.ndarray,
                   finish: np.ndarray, coded: tuple | None = None) -> pd.DataFrame:
    """The records table (with the derived columns) of an in-memory run, in one DataFrame construction."""
    arrival = np.array(trace.arrival, float)  # copies: the frame must not share memory with the trace
    cols = {"rid": np.arange(len(arrival)), "arrival": arrival, "duration": np.array(trace.duration, float),
            "language": string_column(trace.language, coded), "est_service": est,
            "tokens": np.array(trace.tokens, np.int64), "admit": admit, "first_token": first, "finish": finish,
            "queue_delay": admit - arrival, "ttft": first - arrival, "e2el": finish - arrival}
    return pd.DataFrame(cols, copy=False)  # every array is fresh: no second copy into 2-D blocks


@functools.cache
def _str_dtype() -> Any:
    """The dtype pandas gives a column of Python strings (``object`` before pandas 3, ``str`` from 3 on)."""
    return pd.Series(["x"]).dtype


def string_column(values: Any, coded: tuple | None = None) -> Any:
    """``values`` (strings) as the column pandas would build from them, without a per-element conversion.

    Under pandas 3 a column of Python strings becomes an Arrow string array, element by
    element; a few distinct values (languages) are coded once (``coded``: their
    :func:`~asrsched.sim.kernels.language_codes`, if already known) and expanded by Arrow:
    the same column, ~20x faster.
    """
    dtype = _str_dtype()
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        if isinstance(values, np.ndarray) and values.dtype.kind == "O":
            return values
        return np.asarray([str(x) for x in values], dtype=object)
    import pyarrow as pa

    codes, names = coded if coded is not None else language_codes(values)
    if len(names) == 1:
        arr = pa.repeat(pa.scalar(names[0], type=pa.large_string()), len(codes))
    else:
        arr = pa.array(names, type=pa.large_string()).take(pa.array(codes))
    return pd.array(arr, dtype=dtype)


def _column_writer(sink: Any):
    """``write(columns)`` for ``sink``: its ``write_columns`` if it has one, else ``write`` with row tuples."""
    if hasattr(sink, "write_columns"):
        return sink.write_columns

    def write(cols: dict) -> None:
        sink.write(list(zip(*(cols[c].tolist() for c in RECORD_COLUMNS), strict=True)))

    return write


def _queue_growth(timeline: pd.DataFrame | tuple[np.ndarray, np.ndarray], M: int, first_arrival: float = -math.inf,
                  last_arrival: float = math.inf) -> tuple[float, bool]:
    """Slope of queue depth (req/s) over the second half of the arrivals, and an overload flag.

    ``timeline``: the timeline DataFrame, or its ``(time, waiting)`` arrays.
    """
    if isinstance(timeline, pd.DataFrame):
        t, w = timeline["time"].to_numpy(float), timeline["waiting"].to_numpy(float)
    else:
        t, w = (np.asarray(x, float) for x in timeline)
    if len(t) < 20:
        return 0.0, False
    # only while requests still arrive: after the last arrival the queue drains. Select by time,
    # not by sample index: a long drain can hold most of the samples.
    if math.isfinite(first_arrival) and math.isfinite(last_arrival) and last_arrival > first_arrival:
        m = (t >= 0.5 * (first_arrival + last_arrival)) & (t <= last_arrival)
        tt, ww = t[m], w[m]
    else:
        peak = int(np.argmax(w))
        seg = slice(len(t) // 4, max(peak + 1, len(t) // 4 + 10))
        tt, ww = t[seg], w[seg]
    if len(tt) < 5 or tt[-1] <= tt[0]:
        return 0.0, False
    dt = tt - tt.mean()
    slope = float(np.dot(dt, ww - ww.mean()) / np.dot(dt, dt))  # least-squares line, closed form
    overloaded = slope > 0 and w.max() > 4 * M and ww[-1] > 2 * max(ww[0], 1) and w.max() > 50
    return slope, bool(overloaded)
