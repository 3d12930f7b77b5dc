"""Faults during a load run leave a row for every request and never hang the run.

Against the package's real CPU server (faster-whisper tiny.en): the server process killed
with SIGKILL mid-run (as an engine crash takes a vLLM server down), a run stopped at its
deadline while requests wait and run (the client disconnects), and per-request timeouts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from extras import need

need("httpx")

import httpx
import pytest

from asrsched.core.metrics import summarize
from asrsched.core.workloads import Uniform, make_trace
from asrsched.serving.app import run_in_thread
from asrsched.serving.config import ServerConfig
from asrsched.serving.loadgen import run_coro, run_load
from asrsched.serving.request_plan import plan_requests

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plan():
    tr = make_trace(Uniform(lo=3.0, hi=9.0), rate=3.0, n=8, seed=5)
    return plan_requests(tr, pool_size=8, min_s=2.5, max_s=10.0, progress=False)


def _start_cli_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "asrsched.serving.cli", "--model", "tiny.en", "--port", "0", "--no-warmup"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    t_end = time.monotonic() + 180
    for line in proc.stdout:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining
            return proc, m.group(1)
        assert time.monotonic() < t_end, "server did not start"
    raise AssertionError(f"server exited with {proc.wait()}")


def test_a_server_killed_mid_run_leaves_a_row_per_request_and_the_run_ends(plan):
    proc, url = _start_cli_server()
    try:
        killed_at: list[float] = []

        def kill():
            killed_at.append(time.monotonic())
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(0.8, kill)
        t0 = time.monotonic()
        timer.start()
        rec = run_coro(run_load(url, plan, timeout_s=60, progress=False))
        wall = time.monotonic() - t0
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    print("\n" + rec[["rid", "scheduled", "status", "error"]].to_string())
    assert killed_at, "the server was not killed"
    assert len(rec) == len(plan) and sorted(rec["rid"]) == sorted(plan["rid"])  # no lost request
    assert rec["end"].notna().all()  # every request ended, answered or not
    assert wall < 30  # no hung run: connection errors end each request at once
    failed = rec[rec["finish"].isna()]
    assert len(failed) >= len(plan) // 2 and (failed["error"].str.len() > 0).all()
    # sent after the kill: refused connections; in flight at the kill: the connection dropped
    late = failed[failed["arrival"] > killed_at[0] - t0 + 0.05]
    assert len(late) >= 1 and late["error"].str.contains("ConnectError").all(), late["error"].tolist()
    assert failed["error"].str.contains("ConnectError|RemoteProtocolError|ReadError").all()
    assert summarize(rec)["failed"] == len(failed)


def test_a_run_stopped_at_its_deadline_records_what_was_cut_short_on_both_sides(plan):
    burst = plan.assign(scheduled=[0.0] * 4 + [5.0] * (len(plan) - 4))
    # the run's deadline: well under the fastest of the first four requests served alone (measured on a
    # server of its own; a fast machine serves such a clip in ~0.2 s), so at most one can finish before it
    with run_in_thread(ServerConfig(policy="fcfs", local_slots=1)) as h:
        alone = run_coro(run_load(h.url, plan.head(4).assign(scheduled=[0.0, 2.0, 4.0, 6.0]), progress=False))
    run_deadline = round(max(0.02, 0.6 * float(alone["e2el"].min())), 3)
    with run_in_thread(ServerConfig(policy="fcfs", local_slots=1)) as h:
        t0 = time.monotonic()
        rec = run_coro(run_load(h.url, burst, run_timeout_s=run_deadline, progress=False))
        wall = time.monotonic() - t0
        assert wall < 10 and len(rec) == len(burst)
        stopped = rec[rec["error"].str.contains("run was stopped")]
        assert rec.attrs["stopped"] == len(stopped) >= len(plan) - 1
        assert stopped["error"].str.contains("run deadline").all()
        never_sent = stopped[stopped["arrival"].isna()]
        assert len(never_sent) == len(plan) - 4  # due after the deadline: recorded, not sent
        assert never_sent["error"].str.contains("before it was sent").all()
        # the server saw the 4 sent requests leave: each is a "cancelled" record there, none is lost
        deadline = time.monotonic() + 30
        while True:
            srv = httpx.get(h.url + "/debug/requests").json()
            if len(srv) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        outcomes = sorted(r["outcome"] for r in srv)
        assert len(srv) == 4 and set(outcomes) <= {"ok", "cancelled"} and "cancelled" in outcomes, outcomes
        # the running one stops at its next decoder call and frees the worker
        while httpx.get(h.url + "/health").json()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(h.url + "/health").json()["in_flight"] == 0
