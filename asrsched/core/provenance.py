"""Provenance of a result: which code, which machine, how busy, which parameters and command.

**One record, one schema** (:data:`KEYS`) for every result the project writes with its
provenance: the A/B study's ``run.json``, the real-engine study's ``real_engine_run.json``, the
gallery's and the interactive runs' ``run.json``, and every benchmark result file
(``benchmarks/provenance.py`` calls this builder)::

    from asrsched.core.provenance import provenance
    run = provenance("python -m asrsched.abtest.full_run --full", params, load_start=[1.2, 1.1, 1.0])

``clean_tree`` is ``True`` only when the watched paths (by default the whole tree, less
``exclude``) had no uncommitted change to a tracked file; ``dirty_paths`` names up to 20 of
those that had. ``load_average_start_1_5_15`` is what the caller read when its work began (``None``
if it did not), ``load_average_end_1_5_15`` the load when the record is made.
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

__all__ = ["provenance", "describe", "cpu_model", "load_average", "KEYS"]

#: the keys of every provenance record, in order
KEYS = (
    "commit",
    "clean_tree",
    "dirty_paths",
    "date_utc",
    "cpu_model",
    "cpu_count",
    "load_average_start_1_5_15",
    "load_average_end_1_5_15",
    "python",
    "platform",
    "asrsched_version",
    "parameters",
    "command",
)

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        return r.stdout if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded to 0.01 (``None`` where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def provenance(
    command: str | None = None,
    params: dict | None = None,
    *,
    load_start=None,
    paths: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> dict:
    """The record of :data:`KEYS`: commit (and whether ``paths`` less ``exclude`` were clean: ``()``
    watches the whole tree), UTC date, CPU model and count, load average at the start (``load_start``,
    as the caller read it) and now, Python, platform, package version, the parameters and the exact
    command (default: this process's command line)."""
    from asrsched import __version__

    head = _git("rev-parse", "HEAD")
    spec = [*paths, *(f":(exclude){x}" for x in exclude)] if (paths or exclude) else []
    if exclude and not paths:
        spec.insert(0, ".")
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", *spec)
    lines = (dirty or "").rstrip("\n").splitlines()
    return {
        "commit": head.strip() if head else None,
        "clean_tree": dirty is not None and not lines,
        "dirty_paths": sorted({ln[3:] for ln in lines})[:20],
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_start_1_5_15": load_start,
        "load_average_end_1_5_15": load_average(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "asrsched_version": __version__,
        "parameters": params or {},
        "command": command or " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
    }


def describe(record: dict) -> str:
    """One sentence saying where a result came from: the commit (and whether the tree was clean), the date,
    the machine and its load when the work began, and the exact command (a record of :data:`KEYS`).

    >>> describe({"commit": "0123456789abcdef", "clean_tree": True, "date_utc": "2026-12-04T10:00:00+00:00",
    ...           "cpu_model": "Xeon", "cpu_count": 2, "load_average_start_1_5_15": [0.5, 0.4, 0.3],
    ...           "command": "python -m asrsched.abtest.full_run --full"})
    'commit 0123456789 (clean tree), 2026-12-04T10:00:00+00:00, Xeon (2 cores), load average at start [0.5, 0.4, 0.3]; command `python -m asrsched.abtest.full_run --full`'
    """
    commit = (record.get("commit") or "unknown")[:10]
    clean = "clean tree" if record.get("clean_tree") else "uncommitted changes"
    return (
        f"commit {commit} ({clean}), {record.get('date_utc')}, {record.get('cpu_model')} "
        f"({record.get('cpu_count')} cores), load average at start {record.get('load_average_start_1_5_15')}; "
        f"command `{record.get('command')}`"
    )
