"""Compile the simulator's and the A/B model's numba code once, into numba's on-disk cache.

The compiled engine (:mod:`asrsched.sim.kernel`), the supermarket model
(:mod:`asrsched.abtest.model`) and the DQ estimators (:mod:`asrsched.abtest.estimators`) are
numba functions with ``cache=True``: the first process that calls one compiles it (about a
minute of CPU for all of them on a 2-core machine) and writes the machine code beside the
module (``__pycache__``) or under ``$NUMBA_CACHE_DIR``; every later process loads it in
milliseconds. Set-up (``scripts/bootstrap.sh``) runs :func:`warm_up` once, so that the first
notebook, the first test and every parallel worker start from compiled code instead of each
compiling the same functions at the same time.

:func:`warm_up` runs small instances of every compiled path: the single server under every
compiled policy, in memory and chunk by chunk; a fleet under every router; the supermarket
model under each design and service law, and the estimators on it. What it computes is thrown
away. It uses only the base install::

    python -m asrsched.app.warmup
"""

from __future__ import annotations

import sys
import time

__all__ = ["warm_up"]


def warm_up() -> float:
    """Run every compiled path once on a tiny input; returns the seconds it took."""
    from asrsched.abtest.estimators import dq, dq_sweep, estimate_all
    from asrsched.abtest.model import SystemConfig, simulate_supermarket
    from asrsched.core.rulebook import POLICY_CODES
    from asrsched.core.workloads import make_trace, trace_chunks
    from asrsched.sim.engine import simulate
    from asrsched.sim.fleet import simulate_fleet
    from asrsched.sim.kernel import ROUTER_CODES
    from asrsched.sim.records import SummarySink

    t0 = time.perf_counter()
    trace = make_trace("librispeech", rate=4.0, n=200, seed=0)
    for policy in POLICY_CODES:
        simulate(trace, policy, max_num_seqs=4, engine="numba", warn_overload=False)
    for policy in ("hrrn", "adaptive"):  # the Python reference's queues scan with the compiled rulebook
        simulate(trace, policy, max_num_seqs=4, engine="python", warn_overload=False)
    for policy, sink in (("sjf", SummarySink()), ("fcfs", None)):  # chunk by chunk, flushed in batches
        simulate(
            trace_chunks("librispeech", rate=4.0, n=400, chunk=100, seed=1),
            policy,
            max_num_seqs=4,
            sink=sink,
            flush_every=50,
            engine="numba",
            warn_overload=False,
        )
    for router in ROUTER_CODES:
        simulate_fleet(trace, n_replicas=2, router=router, policy="sjf", max_num_seqs=2)
    for design, service, amp in (
        ("bernoulli", "exp", 0.0),
        ("group", "const", 0.0),
        ("switchback", "pareto", 0.0),
        ("bernoulli", "exp", 0.5),
        ("control", "exp", 0.0),
    ):
        cfg = SystemConfig(
            n_servers=4, lam=0.7, service=service, amp=amp, design=design, n_requests=3000, warmup_requests=500
        )
        traj = simulate_supermarket(cfg, seed=0)
        if design != "control":
            estimate_all(traj)
            dq_sweep(traj, [10, 20])
            dq(traj, 10, cost="q")
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"[warm-up] numba code compiled or loaded from its cache in {warm_up():.0f} s", file=sys.stderr)
