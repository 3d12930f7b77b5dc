"""What the compiled engine is given: the engine-choice rule, policy and router inputs, per-trace inputs, a whole run.

Shared by :func:`asrsched.sim.engine.simulate` (one replica) and :func:`asrsched.sim.fleet.run_fleet`:

* :func:`compiled_support` -- **the** rule for ``engine="auto"``: the compiled engine runs a
  set of policies and routers exactly when it returns ``None``; otherwise its answer names
  what it cannot run (``engine="numba"`` raises it; :func:`choose_engine`);
* :func:`policy_inputs`, :func:`static_policy_keys` (and :func:`asrsched.sim.compiled.router_inputs`) -- the kernel's
  codes and parameters of the policies (a static policy's keys:
  :func:`asrsched.core.static_policies.register_static_policy`) and of the routers;
* :func:`trace_inputs` -- a trace's size estimates (:meth:`ServiceModel.est_service`), encoder
  times, size estimates in tokens and records language column, cached per trace (every policy
  of a sweep cell and every design of a replication replays one trace);
* :func:`run_in_memory` -- one whole in-memory run, its records frame built from blocks.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numba import njit
from numba.typed import List as NumbaList

from asrsched.core import rulebook as rb
from asrsched.core.policies import POLICIES, AdaptiveQueue, HRRNQueue, KeyQueue, make_queue, validate_policies
from asrsched.core.service import WORK_TOKEN_GRID, ServiceModel, language_codes, work_tokens
from asrsched.core.static_policies import static_clock, static_key
from asrsched.core.workloads import Trace
from asrsched.sim import kernel as K
from asrsched.sim.compiled import CompiledRun, router_inputs
from asrsched.sim.records import FLOAT_COLUMNS, blocks_frame, names_array

__all__ = [
    "compiled_support",
    "choose_engine",
    "policy_inputs",
    "static_policy_keys",
    "BUILTIN_ROUTERS",
    "TraceInputs",
    "trace_inputs",
    "clear_trace_cache",
    "run_in_memory",
    "set_router_lookup",
]

_BUILTIN_POLICY_FACTORIES = {name: POLICIES[name] for name in rb.POLICY_CODES}
#: the router registry keys the kernel implements, with their factories as registered at import (:mod:`asrsched.sim.fleet`)
BUILTIN_ROUTERS: dict[str, Any] = {}
_ROUTER_INFO: list = []  # the fleet's lookup: router name -> (registry key, factory registered now)


def set_router_lookup(info: Callable[[str], tuple[str, Any]]) -> None:
    """The router registry's lookup (:mod:`asrsched.sim.fleet` sets it at import; :func:`compiled_support` reads it)."""
    _ROUTER_INFO[:] = [info]


# ----------------------------------------------------------------------------- the engine-choice rule


def _policy_reason(name: Any, params: dict) -> str | None:
    if not isinstance(name, str):
        return f"policy {name!r} is a queue object, not a registered name"
    key = name.lower()
    if key not in POLICIES:
        validate_policies([key])  # a family's name registers itself here (or the unknown name is named)
    if static_key(key) is not None:
        if params:  # a bad input on either engine, not something the compiled engine lacks
            raise ValueError(f"static policy {key!r} takes no parameters, got {sorted(params)}")
        return None
    factory = POLICIES.get(key)
    if key not in rb.POLICY_CODES or factory is not _BUILTIN_POLICY_FACTORIES[key]:
        return f"policy {name!r} is not one the compiled engine implements"
    return None


def compiled_support(
    policies: Sequence[Any],
    routers: Sequence[str] = (),
    policy_params: dict | None = None,
    router_info: Callable[[str], tuple[str, Any]] | None = None,
) -> str | None:
    """``None`` when the compiled engine runs every policy and router given; otherwise why not.

    Compiled: the built-in policies ``fcfs``, ``sjf``, ``ljf``, ``hrrn``, ``adaptive`` and every
    static policy of :func:`~asrsched.core.static_policies.register_static_policy`; the built-in routers.
    Anything user-defined, ``random``, or a built-in name re-registered with another factory runs
    in the Python engines. ``policy_params`` must suit every policy (each Python queue is built
    with them, so a bad value raises the same error on either engine). ``router_info`` maps a
    router name to its registry key and the factory registered under it now (default: the lookup
    of :mod:`asrsched.sim.fleet`, whose built-in factories fill :data:`BUILTIN_ROUTERS`).
    """
    params = dict(policy_params or {})
    for name in dict.fromkeys(policies):
        why = _policy_reason(name, params)
        if why is not None:
            return why
        if static_key(name) is None:
            make_queue(name, **params)  # the Python queue's own check of the parameters
    info = router_info or (_ROUTER_INFO[0] if _ROUTER_INFO else None)
    for name in routers:
        key, factory = info(name) if info is not None else (str(name), None)
        if key not in BUILTIN_ROUTERS or BUILTIN_ROUTERS[key] is not factory:
            return f"router {name!r} is not one the compiled engine implements"
    return None


def choose_engine(
    engine: str,
    policies: Sequence[Any],
    routers: Sequence[str] = (),
    policy_params: dict | None = None,
    router_info: Callable[[str], tuple[str, Any]] | None = None,
) -> bool:
    """Whether to run compiled: ``"auto"`` exactly when :func:`compiled_support`; ``"python"`` never;
    ``"numba"`` always, raising ``ValueError`` naming what it cannot run."""
    if engine not in ("auto", "python", "numba"):
        raise ValueError(f"engine: must be 'auto', 'python' or 'numba', got {engine!r}")
    if engine == "python":
        for name in dict.fromkeys(policies):  # the same parameter check on both engines
            if isinstance(name, str) and name.lower() in POLICIES and static_key(name) is None:
                make_queue(name, **dict(policy_params or {}))
        return False
    why = compiled_support(policies, routers, policy_params, router_info)
    if why is not None and engine == "numba":
        raise ValueError(f"engine='numba' cannot run this: {why}; use engine='auto' or 'python'")
    return why is None


# ----------------------------------------------------------------------------- the kernel's inputs


def policy_inputs(policies: Sequence[str], policy_params: dict | None = None) -> tuple[list[int], dict]:
    """Kernel codes of ``policies`` and the parameters ``low_depth``, ``ratio_cap``, ``min_service``."""
    params = dict(policy_params or {})
    codes = []
    kw = {"low_depth": 4, "ratio_cap": 50.0, "min_service": HRRNQueue().min_service}
    for name in policies:
        key = str(name).lower()
        if static_key(key) is not None:
            codes.append(rb.KEY_COUNT if static_clock(key) == "count" else rb.KEY)
            continue
        q = make_queue(key, **params)
        if isinstance(q, AdaptiveQueue):
            kw.update(low_depth=q.low_depth, ratio_cap=q.ratio_cap, min_service=q.min_service)
        elif isinstance(q, HRRNQueue):
            kw["min_service"] = q.min_service
        elif not (isinstance(q, KeyQueue) and not q.dynamic):  # pragma: no cover - a built-in returning another queue
            raise ValueError(f"policy {name!r}: not a compiled policy")
        codes.append(rb.POLICY_CODES[key])
    return codes, kw


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


def static_policy_keys(policies: Sequence[str], est, arrival, duration, codes, names) -> np.ndarray:
    """The key of every request under the (one) static policy among ``policies``; empty if there is none."""
    keys = {static_key(p) for p in policies} - {None}
    if not keys:
        return np.empty(0)
    if len(keys) > 1:
        raise ValueError("the compiled engine runs at most one static key policy per run")
    (key,) = keys
    k = _apply_key(
        key,
        np.ascontiguousarray(est, np.float64),
        np.ascontiguousarray(arrival, np.float64),
        np.ascontiguousarray(duration, np.float64),
        np.ascontiguousarray(codes, np.int64),
        _typed_names(tuple(names)),
    )
    if np.isnan(k).any():
        raise ValueError(f"the key of static policy {sorted(set(policies))} returned NaN; it must return a number")
    return k


# ----------------------------------------------------------------------------- per-trace inputs


class TraceInputs(NamedTuple):
    """A trace's inputs under a service model (:func:`trace_inputs`)."""

    est: np.ndarray  # size estimate S per request (s): ServiceModel.est_service
    enc: np.ndarray  # encoder time per request (s): ServiceModel.encoder_s
    est_tok: np.ndarray  # size estimate in tokens, on the grid of work_tokens (what work routers read)
    lang: Any  # the records' language column
    codes: Any  # the language column coded (asrsched.core.service.language_codes)


_CACHE: dict = {}


def clear_trace_cache() -> None:
    """Forget the cached per-trace inputs (the next run on any trace recomputes them; a cold benchmark clears first)."""
    _CACHE.clear()


def _service_key(service: ServiceModel) -> tuple:
    """What of ``service`` the per-trace inputs depend on: its class (a subclass may redefine the
    estimate) and every coefficient (its kappa table can change in place)."""
    return (
        type(service),
        service.encode_s_per_window,
        service.decode_s_per_token,
        service.decode_batch_slope,
        service.overhead_s,
        service.window_s,
        tuple(service.kappa.items()),
    )


def trace_inputs(trace: Trace, service: ServiceModel, *, cache: bool = True) -> TraceInputs:
    """:class:`TraceInputs` of ``trace`` under ``service``, cached.

    Keyed by the identity of the trace's duration and language arrays (held by weak
    reference, so a replaced array is a miss), its length and the service model
    (:func:`_service_key`). ``cache=False`` (a chunk of a long run, seen once): neither read nor kept.
    """
    key = (id(trace.duration), id(trace.language), len(trace), _service_key(service))
    hit = _CACHE.get(key) if cache else None
    if hit is not None and hit[0]() is trace.duration and hit[1]() is trace.language:
        return hit[2]
    codes = language_codes(trace.language)
    duration = np.asarray(trace.duration, float)
    est = np.ascontiguousarray(np.broadcast_to(service.est_service(duration, codes), duration.shape), np.float64)
    enc = np.ascontiguousarray(np.broadcast_to(service.encoder_s(duration), duration.shape), np.float64)
    est_tok = work_tokens(np.broadcast_to(service.est_tokens(duration, codes), duration.shape))
    # the records' language column: the distinct names, taken by code (one string per name, not per request)
    lang = (
        _constant_column(codes.names[0], len(duration))
        if len(codes.names) == 1
        else names_array(tuple(codes.names)).take(codes.codes)
    )
    val = TraceInputs(est, enc, est_tok, lang, codes)
    if not cache:
        return val
    if len(_CACHE) >= 8:
        _CACHE.clear()
    try:
        _CACHE[key] = (weakref.ref(trace.duration), weakref.ref(trace.language), val)
    except TypeError:  # not weak-referenceable (e.g. a list): no cache
        pass
    return val


@functools.lru_cache(maxsize=16)
def _constant_column(name: str, n: int) -> Any:
    """A records language column of ``n`` times ``name`` (shared: each records frame takes a copy)."""
    return names_array((name,)).take(np.zeros(n, np.int64))


# ----------------------------------------------------------------------------- a whole run


def run_in_memory(
    trace: Trace,
    service: ServiceModel,
    policies: Sequence[str],
    *,
    max_num_seqs: int,
    policy_params: dict | None = None,
    routers: Sequence[tuple] | None = None,
    route_arm=None,
    cands: Sequence[Sequence[int]] | None = None,
    switches: Sequence[tuple] = (),
    est_duration: np.ndarray | None = None,
    timeline_points: int = 0,
    extra: dict | None = None,
) -> tuple[Any, CompiledRun]:
    """One in-memory run of ``trace`` on ``len(policies)`` replicas; ``(records frame, the run)``.

    ``routers``: the kernel's router specs (:func:`router_inputs`; ``None`` for one replica),
    ``route_arm`` and ``cands`` as there; ``switches``: ``(request index, time, policy name[, replica])``
    (replica ``-1`` or left out: every replica); ``est_duration``: a duration to size requests by
    instead of the file duration (a VAD's speech duration); ``timeline_points``: keep a thinned
    timeline (one replica); ``extra``: more record columns. The records carry ``replica`` when there is more than one replica or a router.
    """
    M = int(max_num_seqs)
    if M < 1:
        raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
    n, N = len(trace), len(policies)
    inp = trace_inputs(trace, service)
    est = inp.est
    if est_duration is not None:
        est = np.ascontiguousarray(
            np.broadcast_to(service.est_service(np.asarray(est_duration, float), inp.codes), (n,)), np.float64
        )
    steps = np.concatenate(([0.0], service.step_s(np.arange(1, M + 1))))  # elementwise: the scalar values
    names = [str(p).lower() for p in policies] + [str(s[2]).lower() for s in switches]
    codes, params = policy_inputs(names, policy_params)
    work = routers is not None and any(r[0] in ("least_work", "pod_work") for r in routers)
    # the estimates in whole grid units (exact: they lie on the grid and the grid is a power of two)
    est_q = (inp.est_tok * WORK_TOKEN_GRID).astype(np.int64) if work else np.empty(0, np.int64)
    arrival = np.ascontiguousarray(trace.arrival, np.float64)
    has_key = rb.KEY in codes or rb.KEY_COUNT in codes
    key = static_policy_keys(names, est, arrival, trace.duration, *inp.codes) if has_key else np.empty(0)
    req = K.Requests(arrival, est, inp.enc, np.ascontiguousarray(trace.tokens, np.int64), est_q, key)
    run = CompiledRun(
        codes[:N],
        max_num_seqs=M,
        steps=steps,
        overhead=float(service.overhead_s),
        params=params,
        routing=None if routers is None else router_inputs(routers, route_arm, cands, n, N),
        switches=[(int(s[0]), float(s[1]), c, int(s[3]) if len(s) > 3 else -1) for s, c in zip(switches, codes[N:])],
        work=work,
        timeline_points=timeline_points,
    )
    # the records' blocks, filled in place: the kernel writes admit / first token / finish (and the replica)
    fl = np.empty((len(FLOAT_COLUMNS), n))
    arrival_c, duration, est_c, admit, first, fin, qd, ttft, e2el = fl
    np.copyto(arrival_c, arrival)
    np.copyto(duration, trace.duration)
    np.copyto(est_c, est)
    with_replica = routers is not None
    ints = np.empty((3 if with_replica else 2, n), np.int64)
    ints[0] = np.arange(n)
    np.copyto(ints[1], trace.tokens)
    run.run(req, out=(admit, first, fin, ints[2] if with_replica else np.empty(n, np.int64)))
    np.subtract(admit, arrival_c, out=qd)  # the derived columns of asrsched.sim.records.add_derived
    np.subtract(first, arrival_c, out=ttft)
    np.subtract(fin, arrival_c, out=e2el)
    cols = ("rid", "tokens", "replica") if with_replica else ("rid", "tokens")
    return blocks_frame(fl, ints, cols, inp.lang.copy(), extra), run
