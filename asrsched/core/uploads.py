"""Long uploads: how an upload longer than one window is cut into chunks, and what size each chunk is given.

vLLM cuts audio longer than Whisper's 30 s window into chunks and submits each chunk as its own engine
request, all at once; the upload's answer is ready when its last chunk finishes. A policy ranks the chunks one
by one, so what size a chunk shows decides where it falls among short requests. The three *sizings* (one rule,
read by the simulator's :mod:`asrsched.sim.uploads` and by the vLLM plug-in's
:class:`~asrsched.vllm_plugin.size_estimate.SizeEstimator`):

* ``chunk``: a chunk is sized by its own audio (at most one window); vLLM's chunks look like 30 s clips;
* ``upload``: every chunk is sized by the whole upload (its total duration), so an upload's chunks rank
  together, behind the short requests under SJF;
* ``remaining``: chunk ``i`` is sized by the audio from its start to the upload's end (the upload's remaining
  work when the chunks are served in order).

:func:`sized_duration` is the duration the size estimate
(:meth:`~asrsched.core.service.ServiceModel.est_service`) reads; :func:`chunk_durations` the chunks' own
durations (full windows, then the remainder). :class:`UploadRegistry` remembers each upload's duration in a
server and names an upload id reused with another duration.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = [
    "SIZINGS",
    "DEFAULT_SIZING",
    "check_sizing",
    "n_chunks",
    "chunk_durations",
    "sized_duration",
    "check_chunk",
    "UploadRegistry",
]

SIZINGS = ("chunk", "upload", "remaining")
#: the plug-in's and the simulator's default sizing, chosen by the committed long-upload study
#: (``figures/02_policy_sweep/uploads``, ``asrsched uploads``): under SJF it leaves short requests' P50/P90 where
#: chunk sizing has them and cuts the uploads' median E2EL (their chunks run together instead of one by one among
#: the short requests); under HRRN it serves short requests sooner at some cost to uploads; FCFS ignores it
DEFAULT_SIZING = "upload"

_EPS = 1e-9  # a duration within a nanosecond of a window boundary fills whole windows


def check_sizing(sizing: Any, name: str = "sizing") -> str:
    """``sizing`` as one of :data:`SIZINGS`, or ``ValueError`` naming ``name`` and the allowed values."""
    s = str(sizing).strip().lower()
    if s not in SIZINGS:
        raise ValueError(f"{name}: unknown sizing {sizing!r}; allowed values: {', '.join(SIZINGS)}")
    return s


def _duration(total_s: Any, name: str) -> float:
    try:
        d = float(total_s)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {total_s!r}") from None
    if not (math.isfinite(d) and d >= 0):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {total_s!r}")
    return d


def n_chunks(total_s: Any, window_s: float = 30.0) -> int:
    """Chunks of an upload of ``total_s`` seconds: ``max(1, ceil(total_s / window_s))``."""
    d = _duration(total_s, "total_s")
    return max(1, math.ceil(d / window_s - _EPS))


def chunk_durations(total_s: Any, window_s: float = 30.0) -> np.ndarray:
    """The chunks' own durations: full windows, then the remainder (their sum is ``total_s``)."""
    d = _duration(total_s, "total_s")
    k = n_chunks(d, window_s)
    out = np.full(k, float(window_s))
    out[-1] = d - (k - 1) * window_s
    return out


def check_chunk(total_s: Any, chunk_index: Any, window_s: float = 30.0) -> tuple[float, int]:
    """``(total_s, chunk_index)`` checked: a duration >= 0 and a whole index in ``[0, n_chunks)``; else
    ``ValueError`` naming the parameter and the upload's chunk count."""
    d = _duration(total_s, "upload_duration_s")
    k = n_chunks(d, window_s)
    try:
        i = int(chunk_index)
        ok = float(chunk_index) == i
    except (TypeError, ValueError):
        ok = False
    if not ok or not 0 <= i < k:
        raise ValueError(
            f"chunk_index {chunk_index!r} is not a chunk of an upload of {d:g} s ({k} chunk(s) of {window_s:g} s: "
            f"allowed 0..{k - 1})"
        )
    return d, i


def sized_duration(total_s: Any, chunk_index: Any, sizing: str = DEFAULT_SIZING, window_s: float = 30.0) -> Any:
    """The audio duration the size estimate of chunk ``chunk_index`` of an upload of ``total_s`` s reads.

    ``chunk``: the chunk's own duration; ``upload``: ``total_s``; ``remaining``: ``total_s - chunk_index x
    window_s``. One chunk (numbers in, a float out): an index outside the upload is a ``ValueError``
    (:func:`check_chunk`). Many chunks (arrays of totals and indices, the simulator's): the same formula, per
    element, on indices the caller made.
    """
    s = check_sizing(sizing)
    d: Any
    i: Any
    if np.ndim(total_s) == 0 and np.ndim(chunk_index) == 0:
        d, i = check_chunk(total_s, chunk_index, window_s)
    else:
        d, i = np.asarray(total_s, float), np.asarray(chunk_index, float)
    if s == "upload":
        return d
    rest = d - i * window_s
    if s == "remaining":
        return rest
    out = np.minimum(rest, float(window_s))
    return float(out) if np.ndim(out) == 0 else out


class UploadRegistry:
    """The total duration of each upload id a server has seen (the most recent ``capacity`` ids).

    :meth:`check` returns the duration an id is known by, remembering a new one; an id seen before with another
    duration is a ``ValueError`` naming both (a server logs it and sizes the chunk by its own window)."""

    def __init__(self, capacity: int = 4096, *, tolerance_s: float = 1e-3):
        if int(capacity) < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.tolerance_s = float(tolerance_s)
        self._seen: OrderedDict[str, float] = OrderedDict()

    def check(self, upload_id: Any, total_s: Any) -> float:
        key = str(upload_id)
        d = _duration(total_s, "upload_duration_s")
        old = self._seen.get(key)
        if old is not None:
            if abs(old - d) > self.tolerance_s:
                raise ValueError(f"upload id {key!r} was seen with {old:g} s of audio, now with {d:g} s")
            self._seen.move_to_end(key)
            return old
        self._seen[key] = d
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return d

    def __len__(self) -> int:
        return len(self._seen)
