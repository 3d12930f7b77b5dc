"""Per-request records of a simulation: their columns, the sinks that receive them, exact occupancy.

Records: one row per request, ``rid, arrival, duration, language, est_service, tokens, admit,
first_token, finish`` (:data:`RECORD_COLUMNS`) plus ``queue_delay = admit - arrival``,
``ttft = first_token - arrival``, ``e2el = finish - arrival`` (:func:`add_derived`).

Sinks receive finished records in batches: :class:`CollectSink` keeps them all (a
DataFrame), :class:`ParquetSink` streams them to files, :class:`SummarySink` keeps counts,
sums and log-binned histograms in bounded memory. A sink has ``write(rows)`` (tuples) and
may have ``write_columns(columns)`` (one array per column), which the compiled engine uses.

Time averages come exactly from the records (:func:`occupancy`, :func:`time_average`); the
result of a run is a :class:`SimResult`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numba import njit

from asrsched.core.service import language_codes
from asrsched.core.workloads import Trace

__all__ = ["RECORD_COLUMNS", "CollectSink", "ParquetSink", "SummarySink", "add_derived", "occupancy",
           "time_average", "OCCUPANCY_QUANTITIES", "SimResult", "records_frame", "string_column", "column_writer",
           "histogram_add"]

RECORD_COLUMNS = ["rid", "arrival", "duration", "language", "est_service", "tokens", "admit", "first_token",
                  "finish"]


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


@njit(cache=True)
def histogram_add(bins, log_lo, log_step, values, hist):
    """``hist += bincount(clip(searchsorted(bins, values, "right") - 1, 0, len(bins) - 1))``, in one pass.

    ``bins`` is ``[0, geomspace(lo, hi, m)]`` with ``log_lo = log(lo)`` and ``log_step`` the
    log spacing: a guess from the logarithm, then corrected against ``bins`` itself, so
    the counts are exactly those of the ``searchsorted`` expression (NaN to the last bin).
    """
    last = bins.shape[0] - 1
    for x in values:
        if x != x or x >= bins[last]:
            i = last
        elif x < bins[1]:
            i = 0
        else:
            i = int((math.log(x) - log_lo) / log_step) + 1
            if i < 1:
                i = 1
            elif i > last:
                i = last
            while i < last and bins[i + 1] <= x:
                i += 1
            while i > 0 and bins[i] > x:
                i -= 1
        hist[i] += 1


def records_frame(trace: Trace, est: np.ndarray, admit: np.ndarray, first: np.ndarray,
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
    :func:`~asrsched.core.service.language_codes`, if already known) and expanded by Arrow:
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


def column_writer(sink: Any):
    """``write(columns)`` for ``sink``: its ``write_columns`` if it has one, else ``write`` with row tuples."""
    if hasattr(sink, "write_columns"):
        return sink.write_columns

    def write(cols: dict) -> None:
        sink.write(list(zip(*(cols[c].tolist() for c in RECORD_COLUMNS), strict=True)))

    return write
