"""How the simulator tells an overloaded run: the offered load before it, the queue's growth after it, one warning.

An arrival rate above capacity is not an error (the run completes; its latencies are then a
finite-run transient): :func:`check_offered_load` warns before a run whose arrivals need more encoder
time than there is, :func:`queue_growth` measures after it how fast the waiting queue grew while
requests arrived and flags overload, and both warn with :class:`OverloadWarning`, which
:func:`one_overload_warning` collects into one line for a sweep.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.core.workloads import Trace

__all__ = [
    "OverloadWarning",
    "NoQueueWarning",
    "check_queue_can_form",
    "one_overload_warning",
    "check_offered_load",
    "queue_growth",
]


class OverloadWarning(UserWarning):
    """The arrival rate exceeds what the server can serve: the queue grows without bound."""


class NoQueueWarning(UserWarning):
    """The run is too short for a queue to form: every policy serves it alike."""


def check_queue_can_form(n_requests: int, max_num_seqs: int) -> None:
    """Warn (:class:`NoQueueWarning`) when ``n_requests <= max_num_seqs``: every request then starts at once,
    none waits, and every policy gives the same latencies, so each change vs FCFS is 0 % by construction,
    not a finding."""
    if int(n_requests) <= int(max_num_seqs):
        warnings.warn(
            NoQueueWarning(
                f"n_requests={int(n_requests)} is not more than max_num_seqs={int(max_num_seqs)}: every request "
                "starts at once and none waits, so every policy gives the same latencies (each change vs FCFS "
                "is 0 % by construction); use n_requests well above max_num_seqs"
            ),
            stacklevel=3,
        )


@contextlib.contextmanager
def one_overload_warning(what: str) -> Iterator[None]:
    """Collect the :class:`OverloadWarning` s raised inside and re-issue them as one, naming ``what``; others pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    over = [w for w in caught if issubclass(w.category, OverloadWarning)]
    for w in caught:
        if not issubclass(w.category, OverloadWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if over:
        warnings.warn(
            f"{what}: {len(over)} overload warning(s); the first: {over[0].message}", OverloadWarning, stacklevel=3
        )


def check_offered_load(trace: Trace, service: ServiceModel) -> None:
    """Warn (:class:`OverloadWarning`) before a run whose arrivals need more encoder time than there is."""
    if len(trace) <= 10:
        return
    span = float(trace.arrival[-1] - trace.arrival[0])
    rate = (len(trace) - 1) / span if span > 0 else math.inf
    enc_load = rate * float(np.mean(service.windows(trace.duration))) * service.encode_s_per_window
    if enc_load >= 1.0:
        warnings.warn(
            f"arrival rate {rate:.2f} req/s exceeds capacity: encoder work alone is "
            f"{enc_load:.2f} s per second; the queue will grow without bound",
            OverloadWarning,
            stacklevel=3,
        )


def queue_growth(
    timeline: pd.DataFrame | tuple[np.ndarray, np.ndarray],
    M: int,
    first_arrival: float = -math.inf,
    last_arrival: float = math.inf,
) -> tuple[float, bool]:
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
