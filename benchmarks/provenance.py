"""Provenance of a benchmark result: which code, which machine, how busy, which command.

Every results file in ``benchmarks/results/`` carries one of these, so a number can be
traced to the commit that produced it and read with the machine's load in mind::

    from provenance import provenance
    record = {"benchmark": "bench_x", "provenance": provenance(["asrsched/core"]), "rows": rows}

``clean`` is ``True`` only when the measured paths had no uncommitted change when the
run started: a result from a dirty tree is labelled as such, never passed off as the
commit's.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, strip: bool = True) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
        return out.strip() if strip else out
    except (OSError, subprocess.SubprocessError):  # pragma: no cover - no git
        return ""


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or "unknown"


def provenance(paths: Sequence[str] = ("asrsched", "benchmarks")) -> dict:
    """Commit, clean-tree flag for ``paths``, UTC date, CPU, cores, load average, Python, command.

    Results files (``benchmarks/results/``) are not code: one benchmark writing its results
    must not make the next one's tree look changed.
    """
    dirty = _git("status", "--porcelain", "--", *paths, ":(exclude)benchmarks/results",
                 strip=False).rstrip("\n")  # "XY path": keep column 0
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        load = []
    return {
        "commit": _git("rev-parse", "HEAD"),
        "clean": not dirty,
        "dirty_paths": sorted({ln[3:] for ln in dirty.splitlines()})[:20],
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "loadavg_1_5_15": load,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
    }


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
