"""Long uploads in the simulator, as each engine runs them, with per-upload records beside per-request ones.

Three engine behaviours (``mode``):

* ``chunks`` (vLLM, a non-streamed request): an upload of ``k`` windows becomes ``k`` engine requests submitted
  together at the upload's arrival, each one window of audio (its own encoder pass) and its share of the upload's
  tokens (in proportion to its audio, at least one). Each chunk's size estimate reads
  :func:`asrsched.core.uploads.sized_duration` under the ``sizing`` (``chunk``, ``upload`` or ``remaining``), the
  rule the vLLM plug-in applies;
* ``streamed`` (vLLM, a streamed request): the same chunks, but chunk ``i + 1`` is submitted when chunk ``i``
  finishes (vLLM 0.32's ``speech_to_text`` serving iterates a streamed request's chunk generators one after
  another), so the upload holds at most one slot and each chunk queues again under the policy. It runs on the
  Python reference engine only (:func:`asrsched.sim.engine.simulate`'s ``follows``);
* ``sequence`` (the package's CPU server): the upload is one job that holds one slot while its windows are
  decoded one after another, sized by the whole upload (``sizing`` must be ``upload``).

:func:`split_uploads` turns a trace of uploads into the trace of engine requests (:class:`ChunkedTrace`);
:func:`simulate_uploads` runs it (:func:`asrsched.sim.engine.simulate`: the compiled engine and the Python
reference make the same decisions, since a chunk is an ordinary request with a size estimate from
``est_duration``) and :func:`upload_records` folds the engine's records into one row per upload: its TTFT at
its first chunk's first token, its E2EL at its last chunk's finish.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.core.uploads import DEFAULT_SIZING, check_sizing, sized_duration
from asrsched.core.workloads import Trace
from asrsched.sim.engine import simulate
from asrsched.sim.records import SimResult

__all__ = ["UPLOAD_MODES", "ChunkedTrace", "split_uploads", "upload_records", "simulate_uploads", "chunk_capacity"]

#: ``chunks``: vLLM's non-streamed (chunks submitted together); ``streamed``: vLLM's streamed (each chunk submitted
#: when the one before finishes); ``sequence``: the CPU server's (one job, windows in sequence)
UPLOAD_MODES = ("chunks", "streamed", "sequence")


@dataclass(frozen=True)
class ChunkedTrace:
    """The engine requests of a trace of uploads.

    ``trace``: one row per engine request (arrival order); ``est_duration``: the duration each size estimate
    reads; ``upload``: the row of the original trace each engine request belongs to; ``chunk_index``: its
    place in its upload; ``uploads``: the original trace; ``follows`` (the ``streamed`` mode, else ``None``): the
    engine request each one is submitted after (``-1``: at the upload's arrival).
    """

    trace: Trace
    est_duration: np.ndarray
    upload: np.ndarray
    chunk_index: np.ndarray
    uploads: Trace
    mode: str
    sizing: str
    follows: np.ndarray | None = None


def _check_mode(mode: str) -> str:
    m = str(mode).strip().lower()
    if m not in UPLOAD_MODES:
        raise ValueError(f"mode: unknown {mode!r}; allowed values: {', '.join(UPLOAD_MODES)}")
    return m


def split_uploads(
    trace: Trace, *, mode: str = "chunks", sizing: str = DEFAULT_SIZING, window_s: float = 30.0
) -> ChunkedTrace:
    """The engine requests of ``trace`` under ``mode`` and ``sizing`` (module docstring).

    The chunks of an upload share its arrival, language and ``priority`` (when the trace has that column); the
    other extra columns are not carried.
    """
    m = _check_mode(mode)
    s = check_sizing(sizing)
    n = len(trace)
    if m == "sequence":
        if s != "upload":
            raise ValueError(f"sizing: the sequence mode runs an upload as one job sized by the upload, got {sizing!r}")
        idx = np.arange(n)
        return ChunkedTrace(trace, trace.duration.copy(), idx, np.zeros(n, np.int64), trace, m, s)
    d = np.asarray(trace.duration, float)
    k = np.maximum(1, np.ceil(d / window_s - 1e-9)).astype(np.int64)
    up = np.repeat(np.arange(n), k)
    first = np.concatenate([[0], np.cumsum(k)[:-1]])
    ci = np.arange(len(up)) - np.repeat(first, k)
    total = d[up]
    lo = np.minimum(ci * window_s, total)
    hi = np.minimum((ci + 1) * window_s, total)
    tok = np.asarray(trace.tokens, np.int64)[up].astype(float)
    share = np.where(total > 0, 1.0 / np.maximum(total, 1e-12), 0.0)
    t_hi = np.rint(tok * hi * share)
    t_lo = np.rint(tok * lo * share)
    chunk_tok = np.maximum(1, (t_hi - t_lo)).astype(np.int64)
    extra = pd.DataFrame({"priority": trace.extra["priority"].to_numpy()[up]}) if "priority" in trace.extra else None
    chunks = Trace(
        np.asarray(trace.arrival, float)[up],
        hi - lo,
        np.asarray(trace.language, dtype=object)[up],
        chunk_tok,
        extra=extra if extra is not None else pd.DataFrame(),
        meta={**trace.meta, "uploads_mode": m, "uploads_sizing": s},
    )
    est_d = np.asarray(sized_duration(total, ci, s, window_s), float)
    follows = np.where(ci > 0, np.arange(len(up)) - 1, -1) if m == "streamed" else None
    return ChunkedTrace(chunks, est_d, up, ci, trace, m, s, follows)


def upload_records(records: pd.DataFrame, chunked: ChunkedTrace) -> pd.DataFrame:
    """One row per upload from the engine's records (``rid`` = engine request): ``upload, arrival, duration,
    n_chunks, tokens, admit`` (its first chunk's), ``first_token`` (the earliest), ``finish`` (the last chunk's),
    and ``queue_delay``, ``ttft``, ``e2el`` from them."""
    r = records.sort_values("rid")
    if len(r) != len(chunked.upload) or not np.array_equal(r["rid"].to_numpy(), np.arange(len(r))):
        raise ValueError(f"records: need one row per engine request of the chunked trace ({len(chunked.upload)})")
    g = pd.DataFrame(
        {
            "upload": chunked.upload,
            "tokens": r["tokens"].to_numpy(),
            "admit": r["admit"].to_numpy(),
            "first_token": r["first_token"].to_numpy(),
            "finish": r["finish"].to_numpy(),
        }
    ).groupby("upload", sort=True)
    out = pd.DataFrame(
        {
            "upload": np.arange(len(chunked.uploads)),
            "arrival": np.asarray(chunked.uploads.arrival, float),
            "duration": np.asarray(chunked.uploads.duration, float),
            "n_chunks": g.size().to_numpy(),
            "tokens": g.tokens.sum().to_numpy(),
            "admit": g.admit.min().to_numpy(),
            "first_token": g.first_token.min().to_numpy(),
            "finish": g.finish.max().to_numpy(),
        }
    )
    out["queue_delay"] = out.admit - out.arrival
    out["ttft"] = out.first_token - out.arrival
    out["e2el"] = out.finish - out.arrival
    return out


def simulate_uploads(
    trace: Trace,
    policy: str,
    service: ServiceModel,
    *,
    mode: str = "chunks",
    sizing: str = DEFAULT_SIZING,
    **kw,
) -> tuple[SimResult, pd.DataFrame]:
    """Simulate a trace of uploads under ``policy``: the engine's result (per engine request) and
    :func:`upload_records`. Keywords go to :func:`~asrsched.sim.engine.simulate` (``engine``,
    ``max_num_seqs``, ...)."""
    ct = split_uploads(trace, mode=mode, sizing=sizing, window_s=service.window_s)
    res = simulate(ct.trace, policy, service, est_duration=ct.est_duration, follows=ct.follows, **kw)
    return res, upload_records(res.records, ct)


def chunk_capacity(trace: Trace, service: ServiceModel, *, mode: str = "chunks", max_num_seqs: int = 32) -> float:
    """Saturation throughput in *uploads* (original requests) per second of ``trace``'s requests under ``mode``:
    the engine's served rate on the chunked requests, all arriving at once (FCFS), times uploads per engine
    request. ``streamed`` counts as ``chunks``: with every request waiting, the same work keeps the same slots
    full."""
    from asrsched.sim.capacity import trace_capacity

    m = _check_mode(mode)
    mode = "chunks" if m == "streamed" else m
    sizing = "upload" if m == "sequence" else "chunk"
    ct = split_uploads(trace, mode=mode, sizing=sizing, window_s=service.window_s)
    rate = trace_capacity(ct.trace, service, max_num_seqs=max_num_seqs, burst=True)
    return rate * len(trace) / len(ct.trace)
