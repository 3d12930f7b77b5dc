"""A request log for the vLLM middleware: one JSON line per audio request, bounded, rotated, never in the way.

Opt-in (:class:`asrsched.vllm_plugin.middleware.DurationMiddleware` ``request_log=``, or the environment:
``ASRSCHED_REQUEST_LOG=/path/requests.jsonl``, ``ASRSCHED_REQUEST_LOG_MAX_MB`` (default 64) and
``ASRSCHED_REQUEST_LOG_KEEP`` (rotated files kept, default 3)). A line holds what a replay needs
(:mod:`asrsched.sim.replay`) and nothing of the audio or the text:

``arrival_unix_s`` (when the request's first byte arrived), ``audio_duration_s``, ``speech_duration_s`` (when a
VAD ran), ``language``, ``priority``, ``n_chunks`` (30 s windows of the audio), ``status`` (the HTTP status) and
``e2el_s`` (arrival to the last byte of the answer), ``path``.

The request path only appends to a bounded in-memory queue (:meth:`RequestLog.write`: never blocks, never
raises); a daemon thread writes the lines. A full queue, a file that cannot be opened or written, a full disk:
the line is dropped and counted (:attr:`RequestLog.dropped`, :attr:`RequestLog.errors`), the request goes on.
When the file would pass ``max_bytes`` it is rotated (``log.jsonl`` -> ``log.jsonl.1`` -> ... up to ``keep``).
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

__all__ = ["RequestLog", "LOG_ENV", "MAX_MB_ENV", "KEEP_ENV", "FIELDS", "from_env"]

LOG_ENV, MAX_MB_ENV, KEEP_ENV = "ASRSCHED_REQUEST_LOG", "ASRSCHED_REQUEST_LOG_MAX_MB", "ASRSCHED_REQUEST_LOG_KEEP"
#: the fields of a line, in order (absent values are null)
FIELDS = (
    "arrival_unix_s",
    "audio_duration_s",
    "speech_duration_s",
    "language",
    "priority",
    "n_chunks",
    "status",
    "e2el_s",
    "path",
)


class RequestLog:
    """A JSON-lines request log (see the module docstring)."""

    def __init__(self, path, *, max_bytes: int = 64 * 2**20, keep: int = 3, queue_size: int = 10_000):
        if int(max_bytes) < 1024:
            raise ValueError(f"max_bytes: a log file needs at least 1024 bytes, got {max_bytes!r}")
        if int(keep) < 0:
            raise ValueError(f"keep: the number of rotated files kept must be >= 0, got {keep!r}")
        self.path = Path(path)
        self.max_bytes, self.keep = int(max_bytes), int(keep)
        self._q: queue.Queue = queue.Queue(maxsize=int(queue_size))
        self.written = self.dropped = self.errors = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="asrsched-request-log", daemon=True)
        self._thread.start()

    def write(self, record: dict[str, Any]) -> None:
        """Queue one line (never blocks, never raises: a full queue drops it and counts it)."""
        try:
            self._q.put_nowait({k: record.get(k) for k in FIELDS})
        except Exception:
            with self._lock:
                self.dropped += 1

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued line is written or dropped (tests, shutdown); whether it finished in time."""
        done = threading.Event()
        try:
            self._q.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _rotate(self) -> None:
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def _append(self, line: bytes) -> None:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size and size + len(line) > self.max_bytes:
            self._rotate()
        with open(self.path, "ab") as f:
            f.write(line)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._append((json.dumps(item, separators=(",", ":")) + "\n").encode())
                with self._lock:
                    self.written += 1
            except Exception:  # a full disk, a missing folder, no permission: the line is lost, not the request
                with self._lock:
                    self.errors += 1

    def stats(self) -> dict[str, int]:
        """Lines ``written``, ``dropped`` (queue full) and lost to ``errors`` (file)."""
        with self._lock:
            return {"written": self.written, "dropped": self.dropped, "errors": self.errors}


def from_env(env=None) -> RequestLog | None:
    """The log the environment asks for (:data:`LOG_ENV` set), else ``None``; bad sizes name their variable."""
    env = os.environ if env is None else env
    path = env.get(LOG_ENV)
    if not path:
        return None
    try:
        max_mb = float(env.get(MAX_MB_ENV, 64))
        keep = int(env.get(KEEP_ENV, 3))
    except ValueError:
        raise ValueError(f"{MAX_MB_ENV} must be a number of MiB and {KEEP_ENV} an integer") from None
    return RequestLog(path, max_bytes=int(max_mb * 2**20), keep=keep)
