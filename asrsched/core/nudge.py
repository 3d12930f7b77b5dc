"""Nudge and Nudge-M: FCFS in which a short request may pass a long one that arrived just before it.

* **Nudge** (Grosof, Yang, Scully & Harchol-Balter, "Nudge: Stochastically Improving upon FCFS",
  SIGMETRICS 2021): FCFS, except that a *short* job that arrives to find a *long* job waiting at the
  back of the queue swaps with it, unless that long job was swapped before. For light-tailed sizes it
  improves on FCFS at every percentile of response time. The paper's proof uses four size bands (small,
  medium, large, huge); here the types are two, short (estimate at most a threshold) and long, the
  two-type setting in which Van Houdt (2022, "On the stochastic and asymptotic improvement of
  First-Come First-Served and Nudge scheduling") shows the improvement under weaker conditions.
* **Nudge-M** (Charlet & Van Houdt, "Tail optimality and performance analysis of the Nudge-M scheduling
  algorithm", Operations Research 2024): an arriving short job passes every long job still waiting that
  arrived as one of the last ``M`` jobs before it. With ``M = 1`` it is the two-type Nudge above (the long
  job it passes is the last arrival, so it is at the back and was never passed before).

Both are a static key on the push count (:func:`asrsched.core.static_policies.register_static_policy`
with ``clock="count"``): a job pushed ``p``-th ranks at ``p`` if short and at ``p + M + 1/2`` if long, so a
long job pushed ``i``-th is passed exactly by the short jobs pushed ``i + 1 ... i + M`` while it waits. The
order is fixed at arrival, so it runs in the Python engines, the compiled engine (decision for decision
the same), the HTTP server and the vLLM plug-in (an O(log n) heap). The "place" of a job is its push
into that queue: in a fleet, each replica counts its own arrivals.

Names: ``nudge_<threshold>`` (``M = 1``) and ``nudge_m<M>_<threshold>``, the threshold in seconds of
estimated service time (:func:`nudge_threshold` takes it from a quantile of a workload's estimates).
"""

from __future__ import annotations

import math
import re

import numpy as np
from numba import njit

from asrsched.core.policies import POLICIES
from asrsched.core.static_policies import register_static_policy, static_clock, static_key

__all__ = ["register_nudge", "nudge_name", "nudge_threshold", "nudge_from_name"]

_NAME = re.compile(r"^nudge_(?:m(?P<m>[^_]+)_)?(?P<thr>.+)$")


def _check(threshold, m) -> tuple[float, int]:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float, np.floating))
        or not (0 < threshold < math.inf)
    ):
        raise ValueError(f"threshold: the short/long threshold must be a finite estimate > 0 s, got {threshold!r}")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m: Nudge-M's M must be an integer >= 1 (places), got {m!r}")
    return float(threshold), int(m)


def nudge_name(threshold: float, m: int = 1) -> str:
    """The registry name: ``"nudge_<threshold>"`` for ``m = 1``, else ``"nudge_m<m>_<threshold>"`` (``%g``)."""
    thr, mm = _check(threshold, m)
    return f"nudge_{thr:g}" if mm == 1 else f"nudge_m{mm}_{thr:g}"


def register_nudge(threshold: float, m: int = 1, name: str | None = None) -> str:
    """Register Nudge-M with short = estimate <= ``threshold`` (s) and ``m`` places (idempotent); its name."""
    thr, mm = _check(threshold, m)
    lname = (name or nudge_name(thr, mm)).lower()
    jk = static_key(lname)
    if jk is not None and getattr(jk, "_nudge", None) == (thr, mm) and static_clock(lname) == "count":
        return lname
    if lname in POLICIES:
        raise ValueError(f"name: {lname!r} is already a policy in the registry")
    offset = mm + 0.5

    @njit
    def key(estimate, arrival, duration, language):
        return 0.0 if estimate <= thr else offset

    register_static_policy(lname, key, clock="count")
    key._nudge = (thr, mm)
    return lname


def nudge_threshold(estimates, quantile: float = 0.5) -> float:
    """The short/long threshold at ``quantile`` of a workload's estimated service times (s)."""
    e = np.asarray(estimates, float)
    if e.size < 1 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError("estimates: need at least one finite estimate > 0 s")
    if not (0 < quantile < 1):
        raise ValueError(f"quantile: must lie in (0, 1), got {quantile!r}")
    return float(np.quantile(e, quantile))


def nudge_from_name(name: str) -> str:
    """Register ``"nudge_<threshold>"`` or ``"nudge_m<M>_<threshold>"`` from its name (the registry does this
    on first use, so a server started with ``--policy nudge_m4_0.8`` finds it)."""
    lname = str(name).lower()
    mt = _NAME.match(lname)
    try:
        thr = float(mt["thr"]) if mt else math.nan
        m = int(mt["m"]) if mt and mt["m"] is not None else 1
    except ValueError:
        thr = math.nan
    if not (thr > 0 and math.isfinite(thr)):
        raise ValueError(
            f"policy {name!r}: write nudge_<threshold s> or nudge_m<M>_<threshold s>, e.g. nudge_0.8 or nudge_m4_0.8"
        )
    return register_nudge(thr, m, name=lname)
