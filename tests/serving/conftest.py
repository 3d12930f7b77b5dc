"""Fixtures the serving tests share: one real-Whisper server for the session.

``sjf_server`` is this package's HTTP server (uvicorn in a thread, faster-whisper ``tiny.en`` on CPU,
one slot, SJF), started once for every test that needs the default server; a test that needs another
configuration (policy, queue limit, timeout, upstream mode) starts its own. Tests that use it read
what they sent (their own request ids, counters that only grow), never the server's absolute totals.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def sjf_server():
    from asrsched.serving.app import run_in_thread
    from asrsched.serving.config import ServerConfig

    with run_in_thread(ServerConfig(policy="sjf", local_slots=1)) as h:
        yield h
