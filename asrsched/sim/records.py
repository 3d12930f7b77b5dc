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

__all__ = [
    "RECORD_COLUMNS",
    "CollectSink",
    "ParquetSink",
    "SummarySink",
    "add_derived",
    "occupancy",
    "time_average",
    "OCCUPANCY_QUANTITIES",
    "SimResult",
    "FLOAT_COLUMNS",
    "blocks_frame",
    "names_array",
    "column_writer",
    "histogram_add",
    "ThinnedTimeline",
]

#: the per-request columns of every simulator and load-generator record table, in order
RECORD_COLUMNS = ["rid", "arrival", "duration", "language", "est_service", "tokens", "admit", "first_token", "finish"]


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

    def _add(
        self, arrival: np.ndarray, dur: np.ndarray, admit: np.ndarray, first: np.ndarray, finish: np.ndarray
    ) -> None:
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
        out: dict[str, float] = {
            "completed": self.n,
            "request_throughput": self.n / span if span > 0 else math.nan,
            "rtfx": self.audio_s / span if span > 0 else math.nan,
            "max_queue_delay_ms": 1e3 * self.max_wait,
        }
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
        raise ValueError(
            "exact occupancy needs the per-request records as a DataFrame (the default CollectSink), "
            f"got {type(records).__name__}"
        )
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
        out[q] = (
            np.searchsorted(np.sort(start), t, side="right") - np.searchsorted(np.sort(end), t, side="right")
        ).astype(np.int64)
    return pd.DataFrame({"time": t, **out})


def time_average(
    records: pd.DataFrame,
    quantity: str = "in_system",
    t0: float | None = None,
    t1: float | None = None,
    overhead_s: float = 0.0,
) -> float:
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


FLOAT_COLUMNS = ("arrival", "duration", "est_service", "admit", "first_token", "finish", "queue_delay", "ttft", "e2el")


def blocks_frame(
    fl: np.ndarray, ints: np.ndarray, int_columns: tuple[str, ...], lang: Any, extra: dict | None = None
) -> pd.DataFrame:
    """A records frame from its blocks, without a copy (:func:`pandas.api.internals.create_dataframe_from_blocks`).

    ``fl``: the float columns :data:`FLOAT_COLUMNS` as rows; ``ints``: the integer columns
    ``int_columns`` (``rid``, ``tokens`` and possibly ``replica``) as rows; ``lang``: the
    language column (an extension array of this frame's own); ``extra``: more columns, each its
    own block. Columns in the order of :func:`add_derived` (:data:`RECORD_COLUMNS`,
    ``queue_delay``, ``ttft``, ``e2el``), then ``replica`` if given, then ``extra``. Built from
    fresh arrays only, so that no other frame shares them. The same frame as
    ``pd.DataFrame(dict)`` gives (the engine-parity tests compare them), at a fraction of the
    cost: the dict constructor copies every column into new blocks, which for a run of a few
    thousand requests costs as much as the simulation.
    """
    from pandas.api.internals import create_dataframe_from_blocks

    extra = extra or {}
    columns, (p_fl, p_int, p_lang, *p_extra) = _layout(tuple(int_columns), tuple(extra))
    n = fl.shape[1]
    blocks = [(fl, p_fl), (ints, p_int), (lang, p_lang)]
    for (k, v), p in zip(extra.items(), p_extra):
        v = np.array(v, copy=True)
        if v.shape != (n,):
            raise ValueError(f"extra[{k!r}]: need one value per request ({n}), got shape {v.shape}")
        blocks.append((v.reshape(1, n), p))
    return create_dataframe_from_blocks(blocks, index=pd.RangeIndex(n), columns=columns)


@functools.lru_cache(maxsize=16)
def _layout(int_columns: tuple[str, ...], extra: tuple[str, ...]) -> tuple[pd.Index, tuple[np.ndarray, ...]]:
    """The records' column index and each block's column positions (float, int, language, then ``extra``)."""
    cols = [
        *RECORD_COLUMNS,
        "queue_delay",
        "ttft",
        "e2el",
        *[c for c in int_columns if c not in RECORD_COLUMNS],
        *extra,
    ]
    if len(set(cols)) != len(cols):
        raise ValueError(f"extra: column names must be new, got {list(extra)}")
    at = {c: i for i, c in enumerate(cols)}
    pos = [[at[c] for c in FLOAT_COLUMNS], [at[c] for c in int_columns], [at["language"]], *[[at[k]] for k in extra]]
    out = []
    for p in pos:
        a = np.array(p, np.intp)
        a.flags.writeable = False
        out.append(a)
    return pd.Index(cols), tuple(out)


@functools.lru_cache(maxsize=64)
def names_array(names: tuple[str, ...]) -> Any:
    """The distinct language names as a pandas string array (taken by code for a records column)."""
    return pd.array(list(names), dtype="str")


def column_writer(sink: Any):
    """``write(columns)`` for ``sink``: its ``write_columns`` if it has one, else ``write`` with row tuples."""
    if hasattr(sink, "write_columns"):
        return sink.write_columns

    def write(cols: dict) -> None:
        sink.write(list(zip(*(cols[c].tolist() for c in RECORD_COLUMNS), strict=True)))

    return write


class ThinnedTimeline:
    """Thinned (t, running, waiting) samples: keeps at most ``cap`` points by stride doubling (the Python engine's
    ``SimResult.timeline``)."""

    def __init__(self, cap: int) -> None:
        self.cap = max(16, int(cap))
        self.t: list[float] = []
        self.r: list[int] = []
        self.q: list[int] = []
        self.stride = 1
        self.count = 0

    def add(self, t: float, running: int, waiting: int) -> None:
        """One sample (kept when it falls on the current stride)."""
        self.count += 1
        if self.count % self.stride:
            return
        self.t.append(t)
        self.r.append(running)
        self.q.append(waiting)
        if len(self.t) >= self.cap:
            self.t, self.r, self.q = self.t[::2], self.r[::2], self.q[::2]
            self.stride *= 2

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(time, running, waiting)`` arrays."""
        return np.asarray(self.t, float), np.asarray(self.r, np.int64), np.asarray(self.q, np.int64)
