"""The warm-up compiles every compiled path once; a later process loads it from numba's cache.

Both processes run with an empty ``$NUMBA_CACHE_DIR`` of their own, so the check does not depend
on what this checkout's ``__pycache__`` holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# a process that runs the engine on an in-memory trace (read-only arrays) and chunk by chunk (carried-over,
# writable arrays), under every compiled policy and a fleet, then reports what numba compiled or loaded
LATER = """
import json
from asrsched.core.rulebook import POLICY_CODES
from asrsched.core.workloads import make_trace, trace_chunks
from asrsched.sim import kernel
from asrsched.sim.engine import simulate
from asrsched.sim.fleet import simulate_fleet

tr = make_trace("librispeech", rate=5.0, n=300, seed=3)
for p in POLICY_CODES:
    simulate(tr, p, max_num_seqs=3, engine="numba", warn_overload=False)
    simulate(trace_chunks("librispeech", rate=5.0, n=300, chunk=70, seed=4), p, max_num_seqs=3, flush_every=40,
             engine="numba", warn_overload=False)
simulate_fleet(tr, n_replicas=3, router="pod", policy="hrrn", max_num_seqs=2)
s = kernel.run.stats
print(json.dumps({"signatures": len(kernel.run.signatures), "hits": sum(s.cache_hits.values()),
                  "misses": sum(s.cache_misses.values())}))
"""


def _run(code: list[str], cache) -> subprocess.CompletedProcess:
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, *code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def test_after_the_warm_up_a_new_process_compiles_nothing_and_the_engine_once(tmp_path):
    """A process on an empty cache would compile every function it calls (numba's ``cache_misses``); after
    the warm-up the same calls load the engine's one machine code (read-only and writable inputs alike)."""
    cache = tmp_path / "numba-cache"
    r = _run(["-m", "asrsched.app.warmup"], cache)
    assert "[warm-up] numba code compiled or loaded from its cache in" in r.stderr
    assert len(list(cache.rglob("kernel.run-*.nbc"))) == 1
    later = json.loads(_run(["-c", LATER], cache).stdout.strip().splitlines()[-1])
    assert later == {"signatures": 1, "hits": 1, "misses": 0}
