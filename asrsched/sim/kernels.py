"""Compiled single-server engine: the simulator's decisions as one resumable numba kernel.

The same server model and the same decisions as :class:`asrsched.sim.engine.Engine`
(``tests/test_simfast.py`` compares per-request records, timelines, event and mode
counts decision by decision), written over plain arrays.
:func:`asrsched.sim.engine.simulate` uses it (``engine="auto"``) for

* the built-in policies ``fcfs``, ``sjf``, ``ljf``, ``hrrn`` and ``adaptive`` (with its
  ``low_depth`` and ``ratio_cap``);
* any *static* policy registered with :func:`register_static_policy`: a key function
  ``key(estimate, arrival, duration, language) -> float`` that numba compiles, so a
  custom policy runs as fast as a built-in;
* in-memory traces and chunked traces (:func:`asrsched.sim.engine.trace_chunks`), with
  any sink: finished records leave in the same batches as from the Python engine.

Other policies (``random``, user-defined queues) take the Python engine, the readable
reference.

Queues inside the kernel, equal to the Python ones decision for decision:

* FCFS: jobs leave in arrival order, so the queue is the index range ``[head, next_arrival)``;
* SJF / LJF / a compiled key: a binary heap over ``(k1, k2, index)`` with ``(k1, k2)``
  ``(est, arrival)``, ``(-est, arrival)`` or ``(key, 0)``: the key and tie-break order
  (push order, which is the trace index) of :class:`asrsched.core.policies.KeyQueue`;
* HRRN: waiting jobs in slots with swap-remove and one scan per decision for the
  largest ``(now - arrival) * (1 / max(S, min_service))``, ties to the earliest arrival,
  then to the earliest submission (trace index), as in :class:`asrsched.core.policies.HRRNQueue`;
* adaptive: the SJF heap (lazy deletion) and the HRRN slots at once, FCFS by a scan of
  the few waiting jobs below ``low_depth``, as :class:`asrsched.core.policies.AdaptiveQueue`.

Resumable: all state lives in arrays owned by :class:`CompiledServer`. The kernel returns
when it has used every arrival of the chunk it was given (the next chunk may hold an
arrival before its next decision), and when the finished records reach the sink's batch
size; it then resumes exactly where it stopped. Between chunks the jobs still in the
system (waiting or running) are carried into the next chunk's arrays, so memory is
bounded by the chunk size plus the number in system.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numba import njit
from numba.typed import List as NumbaList

from asrsched.core.policies import POLICIES, AdaptiveQueue, HRRNQueue, KeyQueue, make_queue, register_policy

__all__ = ["FAST_POLICIES", "CompiledPolicy", "CompiledServer", "compiled_policy", "constant_strings",
           "histogram_add", "language_codes", "register_static_policy", "run_trace"]

FCFS, SJF, LJF, HRRN, ADAPTIVE, KEY = 0, 1, 2, 3, 4, 5
FAST_POLICIES = {"fcfs": FCFS, "sjf": SJF, "ljf": LJF, "hrrn": HRRN, "adaptive": ADAPTIVE}
_BUILTIN_FACTORIES = {name: POLICIES[name] for name in FAST_POLICIES}
_STATIC_KEYS: dict[str, Any] = {}  # name -> (factory, numba key) of register_static_policy

# slots of the integer state vector
(_G, _CI, _HEAD, _NQ, _NW, _NH, _NR, _NPEND, _EVENTS, _STRIDE, _COUNT, _TLN, _NOUT, _MF, _MS, _MH) = range(16)
_NSTATE = 16


# ----------------------------------------------------------------------------- heaps

@njit(cache=True, inline="always")
def _less(a, b, k1, k2):
    if k1[a] != k1[b]:
        return k1[a] < k1[b]
    if k2[a] != k2[b]:
        return k2[a] < k2[b]
    return a < b


@njit(cache=True, inline="always")
def _kpush(hp, nh, j, k1, k2):
    i = nh
    while i > 0:
        p = (i - 1) >> 1
        q = hp[p]
        if _less(j, q, k1, k2):
            hp[i] = q
            i = p
        else:
            break
    hp[i] = j
    return nh + 1


@njit(cache=True, inline="always")
def _kpop(hp, nh, k1, k2):
    """Remove the top of a heap of ``nh`` entries; returns the new size."""
    nh -= 1
    if nh > 0:
        last = hp[nh]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= nh:
                break
            if c + 1 < nh and _less(hp[c + 1], hp[c], k1, k2):
                c += 1
            if _less(hp[c], last, k1, k2):
                hp[i] = hp[c]
                i = c
            else:
                break
        hp[i] = last
    return nh


@njit(cache=True, inline="always")
def _rpush(rf, rj, nr, f, j):
    i = nr
    while i > 0:
        p = (i - 1) >> 1
        if f < rf[p] or (f == rf[p] and j < rj[p]):
            rf[i] = rf[p]
            rj[i] = rj[p]
            i = p
        else:
            break
    rf[i] = f
    rj[i] = j
    return nr + 1


@njit(cache=True, inline="always")
def _rpop(rf, rj, nr):
    nr -= 1
    if nr > 0:
        lf = rf[nr]
        lj = rj[nr]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= nr:
                break
            if c + 1 < nr and (rf[c + 1] < rf[c] or (rf[c + 1] == rf[c] and rj[c + 1] < rj[c])):
                c += 1
            if rf[c] < lf or (rf[c] == lf and rj[c] < lj):
                rf[i] = rf[c]
                rj[i] = rj[c]
                i = c
            else:
                break
        rf[i] = lf
        rj[i] = lj
    return nr


@njit(cache=True, inline="always")
def _hrrn_best(slots, nw, arr, inv, t):
    """Slot of the highest response ratio; ties to the earliest arrival, then the smaller index."""
    best = 0
    bj = slots[0]
    br = (t - arr[bj]) * inv[bj]
    for i in range(1, nw):
        s = slots[i]
        r = (t - arr[s]) * inv[s]
        if r > br or (r == br and (arr[s] < arr[bj] or (arr[s] == arr[bj] and s < bj))):
            best = i
            bj = s
            br = r
    return best


# ----------------------------------------------------------------------------- the kernel

@njit(cache=True)
def _kernel(arr, est, enc, tok, k1, k2, inv, final, M, steps, overhead, code, low_depth, ratio_cap, min_service,
            admit, first, fin, hp, slots, pos, inq, rf, rj, pend, si, sf, tl_t, tl_r, tl_q, out_j,
            flush_at):  # noqa: C901 - one loop, kept flat for speed
    """Run until done (0), out of arrivals in a non-final chunk (1) or ``flush_at`` records finished (2)."""
    n = arr.shape[0]
    t = sf[0]
    G = si[_G]
    ci = si[_CI]
    head = si[_HEAD]
    nq = si[_NQ]
    nw = si[_NW]
    nh = si[_NH]
    nr = si[_NR]
    npend = si[_NPEND]
    events = si[_EVENTS]
    stride = si[_STRIDE]
    count = si[_COUNT]
    tl_n = si[_TLN]
    n_out = si[_NOUT]
    mf = si[_MF]
    ms = si[_MS]
    mh = si[_MH]
    tl_cap = tl_t.shape[0]
    keep_out = out_j.shape[0] > 0
    status = 0
    while True:
        # arrivals up to t (also those that came during an encode)
        while ci < n and arr[ci] <= t:
            if code == SJF or code == LJF or code == KEY:
                nh = _kpush(hp, nh, ci, k1, k2)
                inq[ci] = True
            elif code == HRRN:
                slots[nw] = ci
                pos[ci] = nw
                nw += 1
            elif code == ADAPTIVE:
                nh = _kpush(hp, nh, ci, k1, k2)
                inq[ci] = True
                slots[nw] = ci
                pos[ci] = nw
                nw += 1
            ci += 1
            nq += 1
        if ci == n and not final:  # the next arrival, in the next chunk, may come before any next decision
            status = 1
            break
        if nr < M and nq > 0:  # admit one job, then take the arrivals during its encode
            if code == FCFS:
                j = head
                head += 1
            elif code == HRRN:
                b = _hrrn_best(slots, nw, arr, inv, t)
                j = slots[b]
                nw -= 1
                if b != nw:
                    slots[b] = slots[nw]
                    pos[slots[b]] = b
            elif code == ADAPTIVE:
                if nq < low_depth:  # FCFS: the earliest (arrival, index) among the few waiting
                    b = 0
                    for i in range(1, nw):
                        s = slots[i]
                        c = slots[b]
                        if arr[s] < arr[c] or (arr[s] == arr[c] and s < c):
                            b = i
                    j = slots[b]
                    mf += 1
                else:
                    b = _hrrn_best(slots, nw, arr, inv, t)
                    j = slots[b]
                    if 1.0 + (t - arr[j]) / max(est[j], min_service) > ratio_cap:
                        mh += 1
                    else:
                        while not inq[hp[0]]:
                            nh = _kpop(hp, nh, k1, k2)
                        j = hp[0]
                        nh = _kpop(hp, nh, k1, k2)
                        b = pos[j]
                        ms += 1
                inq[j] = False
                nw -= 1
                if b != nw:
                    slots[b] = slots[nw]
                    pos[slots[b]] = b
            else:
                j = hp[0]
                nh = _kpop(hp, nh, k1, k2)
                inq[j] = False
            nq -= 1
            admit[j] = t
            t += enc[j]
            nr = _rpush(rf, rj, nr, G + tok[j], j)
            pend[npend] = j
            npend += 1
            continue
        events += 1
        count += 1
        if count % stride == 0:  # timeline with stride doubling (as asrsched.sim.engine._Timeline)
            tl_t[tl_n] = t
            tl_r[tl_n] = nr
            tl_q[tl_n] = nq
            tl_n += 1
            if tl_n >= tl_cap:
                half = 0
                for i in range(0, tl_n, 2):
                    tl_t[half] = tl_t[i]
                    tl_r[half] = tl_r[i]
                    tl_q[half] = tl_q[i]
                    half += 1
                tl_n = half
                stride *= 2
        if nr == 0:
            if ci >= n:
                break
            t = arr[ci]
            continue
        st = steps[nr]
        k = rf[0] - G
        if nr < M and ci < n:
            ka = max(1, math.ceil((arr[ci] - t) / st - 1e-9))
            if ka < k:
                k = ka
        if npend > 0:
            ft = t + st
            for i in range(npend):
                first[pend[i]] = ft
            npend = 0
        t += k * st
        G += k
        while nr > 0 and rf[0] == G:
            j = rj[0]
            nr = _rpop(rf, rj, nr)
            fin[j] = t + overhead
            if keep_out:
                out_j[n_out] = j
                n_out += 1
        if n_out >= flush_at:
            status = 2
            break
    sf[0] = t
    si[_G] = G
    si[_CI] = ci
    si[_HEAD] = head
    si[_NQ] = nq
    si[_NW] = nw
    si[_NH] = nh
    si[_NR] = nr
    si[_NPEND] = npend
    si[_EVENTS] = events
    si[_STRIDE] = stride
    si[_COUNT] = count
    si[_TLN] = tl_n
    si[_NOUT] = n_out
    si[_MF] = mf
    si[_MS] = ms
    si[_MH] = mh
    return status


# ----------------------------------------------------------------------------- streaming summaries

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


# ----------------------------------------------------------------------------- policies

@dataclass(frozen=True)
class CompiledPolicy:
    """A policy the kernel runs: its code and parameters (see :func:`compiled_policy`)."""

    name: str
    code: int
    min_service: float = 1e-6
    low_depth: int = 0
    ratio_cap: float = math.inf
    key: Any = None  # numba-compiled key(estimate, arrival, duration, language) -> float

    def keys(self, est: np.ndarray, arrival: np.ndarray, duration: np.ndarray, lang_codes: np.ndarray,
             lang_names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Heap keys ``(k1, k2)`` of a chunk of jobs (zeros for FCFS and HRRN, which use none)."""
        if self.code in (SJF, ADAPTIVE):
            return est, arrival
        if self.code == LJF:
            return -est, arrival
        if self.code == KEY:
            k = _apply_key(self.key, est, arrival, np.ascontiguousarray(duration, np.float64),
                           np.ascontiguousarray(lang_codes, np.int64), _typed_names(tuple(lang_names)))
            if np.isnan(k).any():
                raise ValueError(f"the key of static policy {self.name!r} returned NaN; it must return a number")
            return k, np.zeros(len(k))
        return np.zeros(len(est)), np.zeros(len(est))


def compiled_policy(policy: Any, policy_params: dict | None = None) -> CompiledPolicy | None:
    """The :class:`CompiledPolicy` for ``policy`` (a registered name) and its parameters, or ``None``.

    ``None`` means the compiled engine cannot run it (a user-defined queue, ``random``, or a
    built-in name re-registered with another factory): :func:`~asrsched.sim.engine.simulate`
    then takes the Python engine. Parameters are checked by building the Python queue, so a
    bad value raises the same ``ValueError``/``TypeError`` on both paths.
    """
    if not isinstance(policy, str):
        return None
    name = policy.lower()
    params = dict(policy_params or {})
    factory = POLICIES.get(name)
    if factory is None:
        return None
    if name in _STATIC_KEYS and _STATIC_KEYS[name][0] is factory:
        if params:
            raise ValueError(f"static policy {name!r} takes no parameters, got {sorted(params)}")
        return CompiledPolicy(name, KEY, key=_STATIC_KEYS[name][1])
    if name not in FAST_POLICIES or _BUILTIN_FACTORIES[name] is not factory:
        return None
    q = make_queue(name, **params)
    if isinstance(q, AdaptiveQueue):
        return CompiledPolicy(name, ADAPTIVE, min_service=HRRNQueue().min_service, low_depth=q.low_depth,
                              ratio_cap=q.ratio_cap)
    if isinstance(q, HRRNQueue):
        return CompiledPolicy(name, HRRN, min_service=q.min_service)
    if isinstance(q, KeyQueue) and not q.dynamic:
        return CompiledPolicy(name, FAST_POLICIES[name])
    return None  # pragma: no cover - a built-in factory returning something else


@functools.lru_cache(maxsize=64)
def _typed_names(names: tuple[str, ...]) -> NumbaList:
    """The language names as a numba typed list (built once per distinct tuple: building one is slow)."""
    out = NumbaList()
    for s in names or ("",):
        out.append(str(s))
    return out


@njit
def _apply_key(key, est, arrival, duration, codes, names):
    out = np.empty(est.shape[0])
    for i in range(est.shape[0]):
        out[i] = key(est[i], arrival[i], duration[i], names[codes[i]])
    return out


def register_static_policy(name: str, key: Callable | None = None):
    """Register a static policy given by ``key(estimate, arrival, duration, language) -> float``.

    The job with the smallest key is served first; ties go to the earlier submission
    (as :class:`~asrsched.core.policies.KeyQueue`). ``estimate`` is the estimated service
    time (s), ``arrival`` the arrival time (s), ``duration`` the audio duration (s) and
    ``language`` a string. The key is compiled with numba (``numba.njit``; pass an
    already-jitted function to choose options), so it must be numba-compatible code.

    The policy joins the registry of :mod:`asrsched.core.policies` under ``name``: the
    Python engine, the fleet, the HTTP server and the vLLM plug-in use it as a
    :class:`~asrsched.core.policies.KeyQueue`, and :func:`~asrsched.sim.engine.simulate`
    runs it in the compiled kernel (same decisions). Usable as a decorator::

        @register_static_policy("longest_wait_first_en")
        def key(estimate, arrival, duration, language):
            return arrival if language == "en" else arrival + 60.0

    Returns the compiled key.
    """
    if key is None:
        return lambda f: register_static_policy(name, f)
    if not callable(key):
        raise TypeError(f"key must be a function (estimate, arrival, duration, language) -> float, got {key!r}")
    lname = str(name).lower()
    if lname in FAST_POLICIES or lname == "random":
        raise ValueError(f"{name!r} is a built-in policy name; choose another name")
    jkey = key if hasattr(key, "py_func") else njit(key)

    def factory() -> KeyQueue:
        q = KeyQueue(lambda j: float(jkey(float(j.est_service), float(j.arrival), float(j.duration),
                                          str(j.language))), name=lname)
        q.compiled_key = jkey
        return q

    register_policy(lname)(factory)
    _STATIC_KEYS[lname] = (factory, jkey)
    return jkey


# ----------------------------------------------------------------------------- drivers

def _tl_cap(timeline_points: int) -> int:
    return max(16, int(timeline_points))


def _state() -> tuple[np.ndarray, np.ndarray]:
    si = np.zeros(_NSTATE, np.int64)
    si[_STRIDE] = 1
    return si, np.zeros(1)


def language_codes(language) -> tuple[np.ndarray, list[str]]:
    """Integer codes and the table of distinct names of a language column."""
    a = np.asarray(language, dtype=object)
    if len(a) and a[0] == a[-1] and (a == a[0]).all():  # one language (the common case): no hashing
        return np.zeros(len(a), np.int64), [str(a[0])]
    codes, names = pd.factorize(a)
    return codes.astype(np.int64), [str(x) for x in names]


def constant_strings(value: str, n: int) -> np.ndarray:
    """An object array of ``n`` references to ``value`` (``np.full`` with ``dtype=object`` is ~100x slower)."""
    a = np.empty(n, dtype=object)
    a[:] = value
    return a


def run_trace(arrival, est, enc, tokens, policy: CompiledPolicy, max_num_seqs: int, steps, overhead: float,
              timeline_points: int = 4000, duration=None, language=None) -> dict:
    """One in-memory trace through the kernel; returns the per-request times and the run's counters.

    Keys: ``admit``, ``first_token``, ``finish`` (per request, in trace order), ``events``,
    ``timeline`` (``(t, running, waiting)`` arrays) and ``mode_counts`` (adaptive only).
    ``duration`` and ``language`` (or its ``language_codes``) are needed only by a static key policy.
    """
    arr = np.ascontiguousarray(arrival, np.float64)
    n = arr.shape[0]
    est = np.ascontiguousarray(est, np.float64)
    M = int(max_num_seqs)
    if policy.code == KEY:
        codes, names = language if isinstance(language, tuple) else language_codes(language)
        k1, k2 = policy.keys(est, arr, duration, codes, names)
    elif policy.code in (FCFS, HRRN):
        k1 = k2 = np.empty(0)
    else:
        k1, k2 = policy.keys(est, arr, duration, np.empty(0, np.int64), [])
    inv = 1.0 / np.maximum(est, policy.min_service) if policy.code in (HRRN, ADAPTIVE) else est
    admit = np.full(n, np.nan)
    first = np.full(n, np.nan)
    fin = np.full(n, np.nan)
    heap_n = n if policy.code in (SJF, LJF, KEY, ADAPTIVE) else 0
    slot_n = n if policy.code in (HRRN, ADAPTIVE) else 0
    si, sf = _state()
    cap = _tl_cap(timeline_points)
    tl_t, tl_r, tl_q = np.empty(cap), np.empty(cap, np.int64), np.empty(cap, np.int64)
    _kernel(arr, est, np.ascontiguousarray(enc, np.float64), np.ascontiguousarray(tokens, np.int64),
            np.ascontiguousarray(k1, np.float64), np.ascontiguousarray(k2, np.float64), inv, True, M,
            np.asarray(steps, np.float64), float(overhead), policy.code, policy.low_depth, policy.ratio_cap,
            policy.min_service, admit, first, fin, np.empty(heap_n, np.int64), np.empty(slot_n, np.int64),
            np.empty(slot_n, np.int64), np.zeros(heap_n, np.bool_), np.empty(M + 1, np.int64),
            np.empty(M + 1, np.int64), np.empty(M + 1, np.int64), si, sf, tl_t, tl_r, tl_q, np.empty(0, np.int64),
            np.iinfo(np.int64).max)
    tn = si[_TLN]
    return dict(admit=admit, first_token=first, finish=fin, events=int(si[_EVENTS]),
                timeline=(tl_t[:tn], tl_r[:tn], tl_q[:tn]), mode_counts=_mode_counts(policy, si))


def _mode_counts(policy: CompiledPolicy, si: np.ndarray) -> dict:
    if policy.code != ADAPTIVE:
        return {}
    return {"fcfs": int(si[_MF]), "sjf": int(si[_MS]), "hrrn": int(si[_MH])}


class CompiledServer:
    """The compiled engine fed chunk by chunk, handing finished records over in batches.

    ``feed(chunk)`` runs every decision that the arrivals so far determine and calls
    ``write(columns)`` with each batch of ``flush_every`` finished records (a dict of
    arrays named as :data:`asrsched.sim.engine.RECORD_COLUMNS`, in completion order),
    exactly where the Python :class:`~asrsched.sim.engine.Engine` would flush;
    ``close()`` drains the server and writes the last batch. Jobs still in the system at
    the end of a chunk are carried into the next chunk's arrays.
    """

    _JOB_FIELDS = ("arr", "est", "enc", "tok", "k1", "k2", "inv", "dur", "lang", "rid", "admit", "first")

    def __init__(self, policy: CompiledPolicy, max_num_seqs: int, steps, overhead: float, *,
                 write: Callable[[dict], None], flush_every: int = 100_000, timeline_points: int = 4000) -> None:
        self.policy = policy
        self.M = int(max_num_seqs)
        self.steps = np.asarray(steps, np.float64)
        self.overhead = float(overhead)
        self.write = write
        self.flush_every = max(1, int(flush_every))
        self.si, self.sf = _state()
        cap = _tl_cap(timeline_points)
        self.tl = (np.empty(cap), np.empty(cap, np.int64), np.empty(cap, np.int64))
        self.rf = np.empty(self.M + 1, np.int64)
        self.rj = np.empty(self.M + 1, np.int64)
        self.pend = np.empty(self.M + 1, np.int64)
        self.out_j = np.empty(self.flush_every + self.M + 1, np.int64)
        self.languages: list[str] = []  # language code -> name
        self._lang_code: dict[str, int] = {}
        self.pending: list[dict] = []  # finished records carried over a chunk boundary, not yet written
        self.n_pending = 0
        self.n_written = 0
        self.job: dict[str, np.ndarray] | None = None
        self.n_jobs = 0

    # -- chunks --
    def _codes(self, language, coded: tuple | None = None) -> np.ndarray:
        codes, names = coded if coded is not None else language_codes(language)
        table = np.array([self._lang_code.setdefault(x, len(self._lang_code)) for x in names], np.int64)
        self.languages = list(self._lang_code)
        return table[codes] if len(names) else np.empty(0, np.int64)

    def _chunk_fields(self, arrival, est, enc, tokens, duration, language, rid_base: int,
                      coded: tuple | None = None) -> dict:
        arr = np.ascontiguousarray(arrival, np.float64)
        est = np.ascontiguousarray(est, np.float64)
        dur = np.ascontiguousarray(duration, np.float64)
        n = arr.shape[0]
        lang = self._codes(language, coded)
        k1, k2 = self.policy.keys(est, arr, dur, lang, self.languages)
        inv = 1.0 / np.maximum(est, self.policy.min_service) if self.policy.code in (HRRN, ADAPTIVE) else est
        return dict(arr=arr, est=est, enc=np.ascontiguousarray(enc, np.float64),
                    tok=np.ascontiguousarray(tokens, np.int64), k1=np.ascontiguousarray(k1, np.float64),
                    k2=np.ascontiguousarray(k2, np.float64), inv=np.ascontiguousarray(inv, np.float64),
                    dur=dur, lang=lang, rid=np.arange(rid_base, rid_base + n, dtype=np.int64),
                    admit=np.full(n, np.nan), first=np.full(n, np.nan))

    def feed(self, arrival, est, enc, tokens, duration, language, coded: tuple | None = None) -> None:
        """Add the next chunk of arrivals (non-decreasing, after the previous chunk's) and run.

        ``coded``: the chunk's :func:`language_codes`, if the caller has them already.
        """
        new = self._chunk_fields(arrival, est, enc, tokens, duration, language, self.n_jobs, coded)
        self.n_jobs += len(new["arr"])
        self._carry(new)
        self._run(final=False)

    def close(self) -> None:
        """No more arrivals: drain the server and write the last batch."""
        if self.job is None:
            self._carry(self._chunk_fields(np.empty(0), np.empty(0), np.empty(0), np.empty(0, np.int64),
                                           np.empty(0), np.empty(0, dtype=object), 0))
        self._run(final=True)
        self._take_out()
        self._flush()

    # -- internals --
    def _carry(self, new: dict) -> None:
        """Build the next chunk's arrays: jobs still in the system, then the new arrivals; remap the queues."""
        old = self.job
        si = self.si
        if old is None:
            job = new
            c = 0
            alive = None
        else:
            self._take_out()
            ci = int(si[_CI])
            alive = np.flatnonzero(np.isnan(old["fin"][:ci]))
            c = len(alive)
            job = {f: np.concatenate([old[f][alive], new[f]]) for f in self._JOB_FIELDS}
        n = len(job["arr"])
        code = self.policy.code
        job["fin"] = np.full(n, np.nan)
        heap_n = n if code in (SJF, LJF, KEY, ADAPTIVE) else 0
        slot_n = n if code in (HRRN, ADAPTIVE) else 0
        hp, slots, pos = np.empty(heap_n, np.int64), np.empty(slot_n, np.int64), np.empty(slot_n, np.int64)
        inq = np.zeros(heap_n, np.bool_)
        if old is not None:
            remap = np.full(len(old["arr"]), -1, np.int64)
            remap[alive] = np.arange(c)
            nr, npend = int(si[_NR]), int(si[_NPEND])
            self.rj[:nr] = remap[self.rj[:nr]]  # (finish step, index) order is kept by a monotone remap
            self.pend[:npend] = remap[self.pend[:npend]]
            si[_HEAD] = int(np.searchsorted(alive, si[_HEAD]))
            if heap_n:
                in_heap = old["hp"][:int(si[_NH])]
                waiting = np.sort(remap[in_heap[old["inq"][in_heap]]])  # drop lazily deleted entries
                order = np.lexsort((waiting, job["k2"][waiting], job["k1"][waiting]))
                hp[:len(order)] = waiting[order]  # a sorted array is a heap
                inq[waiting] = True
                si[_NH] = len(order)
            if slot_n:
                nw = int(si[_NW])
                slots[:nw] = remap[old["slots"][:nw]]
                pos[slots[:nw]] = np.arange(nw)
            si[_CI] = c
        job.update(hp=hp, slots=slots, pos=pos, inq=inq)
        self.job = job

    def _run(self, final: bool) -> None:
        j, p = self.job, self.policy
        while True:
            status = _kernel(j["arr"], j["est"], j["enc"], j["tok"], j["k1"], j["k2"], j["inv"], final, self.M,
                             self.steps, self.overhead, p.code, p.low_depth, p.ratio_cap, p.min_service, j["admit"],
                             j["first"], j["fin"], j["hp"], j["slots"], j["pos"], j["inq"], self.rf, self.rj,
                             self.pend, self.si, self.sf, *self.tl, self.out_j,
                             max(1, self.flush_every - self.n_pending))
            if status != 2:
                return
            self._take_out()
            self._flush()

    def _take_out(self) -> None:
        """Move the finished records out of the kernel's buffer (kept until the batch is full)."""
        n_out = int(self.si[_NOUT])
        if not n_out:
            return
        j = self.job
        idx = self.out_j[:n_out]
        if len(self.languages) == 1:
            lang = constant_strings(self.languages[0], n_out)
        else:
            lang = np.array(self.languages, dtype=object)[j["lang"][idx]]
        self.pending.append({"rid": j["rid"][idx], "arrival": j["arr"][idx], "duration": j["dur"][idx],
                             "language": lang, "est_service": j["est"][idx],
                             "tokens": j["tok"][idx], "admit": j["admit"][idx], "first_token": j["first"][idx],
                             "finish": j["fin"][idx]})
        self.n_pending += n_out
        self.si[_NOUT] = 0

    def _flush(self) -> None:
        if not self.pending:
            return
        parts = self.pending
        cols = parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self.pending, self.n_pending = [], 0
        self.n_written += len(cols["rid"])
        self.write(cols)

    # -- results --
    @property
    def events(self) -> int:
        return int(self.si[_EVENTS])

    def timeline(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tn = int(self.si[_TLN])
        return self.tl[0][:tn].copy(), self.tl[1][:tn].copy(), self.tl[2][:tn].copy()

    def mode_counts(self) -> dict:
        return _mode_counts(self.policy, self.si)
