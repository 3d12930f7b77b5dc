"""Provenance of a benchmark result, and the machine probe that reads a wall time against the machine's state.

Every results file in ``benchmarks/results/`` carries a provenance record, so a number can be
traced to the commit that produced it and read with the machine's load in mind. The record is
the package's one schema (:func:`asrsched.core.provenance.provenance`), watching the measured
paths::

    from provenance import provenance
    record = {"benchmark": "bench_x", "provenance": provenance(["asrsched/core"]), "rows": rows}

``clean_tree`` is ``True`` only when the measured paths had no uncommitted change when the
record was made: a result from a dirty tree is labelled as such, never passed off as the
commit's. Results files are not code: one benchmark writing its results must not make the
next one's tree look changed, so ``benchmarks/results`` is never watched.
"""

from __future__ import annotations

from collections.abc import Sequence

from asrsched.core.provenance import load_average
from asrsched.core.provenance import provenance as _record


def provenance(paths: Sequence[str] = ("asrsched", "benchmarks"), load_start=None) -> dict:
    """The package's provenance record, watching ``paths`` (less ``benchmarks/results``)."""
    return _record(paths=paths, exclude=("benchmarks/results",), load_start=load_start)


__all__ = ["provenance", "load_average", "lindley_kernel", "machine_probe"]


def lindley_kernel():
    """A bare numba Lindley recursion (random routing to FCFS M/M/1 servers), compiled once and cached.

    ``lindley(n, n_servers, lam_total, seed)`` returns the mean response time of ``n`` jobs:
    per server, ``start = max(arrival, free)`` and ``free = start + S``. It is the machine's
    practical ceiling for a supermarket model (``bench_sim.py``) and, because this code does
    not change, the reference workload of :func:`machine_probe`.
    """
    import numpy as np
    from numba import njit

    @njit(cache=True)
    def lindley(n, n_servers, lam_total, seed):
        np.random.seed(seed)
        free = np.zeros(n_servers)
        t = 0.0
        total = 0.0
        for _ in range(n):
            t += np.random.exponential(1.0 / lam_total)
            s = np.random.randint(0, n_servers)
            start = t if t > free[s] else free[s]
            free[s] = start + np.random.exponential(1.0)
            total += free[s] - t
        return total / n

    return lindley


def machine_probe(n: int = 1_000_000, repeats: int = 5) -> float:
    """Nanoseconds per job of a fixed workload (:func:`lindley_kernel`, 20 servers, best of ``repeats``).

    This machine's speed drifts by tens of percent within hours (other tenants); a wall time
    measured with this probe beside it can be read against the machine's state at the time,
    and the probe re-measured now says whether the machine is faster or slower than then.
    """
    import time

    lindley = lindley_kernel()
    lindley(1000, 20, 16.0, 0)
    best = float("inf")
    for i in range(int(repeats)):
        c = time.perf_counter()
        lindley(int(n), 20, 16.0, i)
        best = min(best, time.perf_counter() - c)
    return best / int(n) * 1e9
