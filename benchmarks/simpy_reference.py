"""A straightforward SimPy model of the server that :func:`asrsched.sim.engine.simulate` models.

This is the *baseline* of ``benchmarks/bench_sim.py`` and an independent check of
the event-driven simulator (``tests/sim/test_sim.py`` compares per-request results on
a small trace). It is written the way a SimPy user would write it: one process
per request (arrive, enqueue, wait for completion) and one engine process that
loops over decode steps one at a time, exactly like vLLM's engine loop:

* at a step boundary, while fewer than ``max_num_seqs`` requests run and the
  policy's queue is not empty, pop the policy's next request and run its encoder
  (``windows x encode_s_per_window`` seconds, the engine does nothing else);
* then one decode step of ``step_s(b)`` seconds for the ``b`` running requests;
  each gets one token; requests admitted at this boundary get their first token
  at the end of this step; a request is done after its true token count;
* the client sees completion ``overhead_s`` after the engine is done.

The waiting queue is the same policy object (:func:`asrsched.core.policies.make_queue`),
so the comparison isolates the server mechanics. Nothing here jumps over steps:
one SimPy event per decode step (step times are precomputed per batch size, so
the baseline is not slowed down by numpy scalar calls).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import simpy

from asrsched.core.policies import Job, make_queue
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import Trace
from asrsched.sim.records import RECORD_COLUMNS, add_derived

__all__ = ["simulate_simpy"]


class _Req(Job):
    __slots__ = ("tokens", "left", "enc_s", "admit", "first", "finish", "done")

    def __init__(self, rid, arrival, est_service, duration, language, tokens, enc_s):
        super().__init__(rid, arrival, est_service, duration, language)
        self.tokens = tokens
        self.left = tokens
        self.enc_s = enc_s
        self.admit = self.first = self.finish = math.nan
        self.done = None


def simulate_simpy(
    trace: Trace,
    policy: str = "fcfs",
    service: ServiceModel | None = None,
    *,
    max_num_seqs: int = 32,
    policy_params: dict | None = None,
) -> pd.DataFrame:
    """Per-request records (same columns as :func:`asrsched.sim.engine.simulate`) from a step-by-step SimPy model."""
    service = service or default_service_model()
    M = int(max_num_seqs)
    env = simpy.Environment()
    queue = make_queue(policy, **(policy_params or {}))
    est = np.broadcast_to(service.est_service(trace.duration, trace.language), (len(trace),))
    enc = np.asarray(service.windows(trace.duration)) * float(service.encode_s_per_window)
    overhead = float(service.overhead_s)
    reqs = [
        _Req(
            i,
            float(trace.arrival[i]),
            float(est[i]),
            float(trace.duration[i]),
            str(trace.language[i]),
            int(trace.tokens[i]),
            float(enc[i]),
        )
        for i in range(len(trace))
    ]
    steps = [0.0] + [float(service.step_s(b)) for b in range(1, M + 1)]
    state = {"wake": None, "arrived": 0}

    def request(r: _Req):
        yield env.timeout(max(0.0, r.arrival - env.now))
        r.done = env.event()
        queue.push(r)
        state["arrived"] += 1
        if state["wake"] is not None and not state["wake"].triggered:
            state["wake"].succeed()
        yield r.done

    def engine():
        running: list[_Req] = []
        while True:
            new = []
            while len(running) < M and queue:
                r = queue.pop(env.now)
                r.admit = env.now
                yield env.timeout(r.enc_s)
                running.append(r)
                new.append(r)
            if not running:
                if state["arrived"] == len(reqs):
                    return
                state["wake"] = env.event()
                yield state["wake"]
                continue
            yield env.timeout(steps[len(running)])
            for r in new:
                r.first = env.now
            still = []
            for r in running:
                r.left -= 1
                if r.left == 0:
                    r.finish = env.now + overhead
                    r.done.succeed()
                else:
                    still.append(r)
            running = still

    # requests are started in arrival order, so SimPy wakes same-time arrivals in that order
    for r in reqs:
        env.process(request(r))
    env.process(engine())
    env.run()
    df = pd.DataFrame.from_records(
        [(r.rid, r.arrival, r.duration, r.language, r.est_service, r.tokens, r.admit, r.first, r.finish) for r in reqs],
        columns=RECORD_COLUMNS,
    )
    return add_derived(df)
