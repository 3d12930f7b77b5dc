"""A straightforward SimPy model of the fleet that :func:`asrsched.sim.fleet.simulate_fleet` models.

The baseline of ``benchmarks/bench_fleet.py`` and an independent check of the fleet
simulators (the compiled engine of :mod:`asrsched.sim.kernel` and the Python
:class:`asrsched.sim.fleet.Fleet`): per-request records must agree. Written the way a SimPy
user would write it, as ``benchmarks/simpy_reference.py`` does for one server:

* one engine process per replica that loops over decode steps *one at a time* (vLLM's engine
  loop): at a step boundary, while a slot is free and the policy's queue is not empty, pop the
  next request and run its encoder (the engine does nothing else); then one decode step of
  ``step_s(b)`` seconds; requests admitted at this boundary get their first token at its end;
  a request is done after its true token count; the client sees completion ``overhead_s`` later;
* one arrival process: at each arrival the router (the same router object as the fleet's,
  :func:`asrsched.sim.fleet.make_router`, with the same seed) reads what each replica shows at
  that instant and the request joins the chosen replica's queue (waking it if idle).

What a replica shows the router is the fleet's definition (:class:`asrsched.sim.fleet.FleetView`):

* ``n(i)``: requests waiting or in service. The fleet's engine jumps from decision point to
  decision point; when a request arrives during an encoder stall of a batch that still has a
  free slot, the engine sits at the end of that stall and still counts the requests that
  finished at the step boundary where the stall began (``Engine.n_in_system``). The model
  counts them the same way;
* ``work(i)``: the waiting requests' estimated service times plus, for each running request,
  ``max(kappa x duration - decode steps so far, 0)`` times the step time, exactly as
  ``Engine.outstanding_work`` computes it from where the engine's clock stands: at the end of
  the step in progress (a free slot) or at the next completion (a full batch), the requests
  completing there already left, the decode steps between now and then subtracted. The model
  reconstructs that point from its own state (it knows each request's remaining tokens, as the
  engine does). Only the size estimate enters the sum.

The waiting queues are the policy objects themselves (:func:`asrsched.core.policies.make_queue`),
so the comparison isolates the fleet mechanics. Times agree with the event-driven simulators
to rounding (a step-by-step clock accumulates ``t += step`` where they jump ``t += k x step``);
the replica of every request, the token counts and the order of events are identical.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd
import simpy

from asrsched.core.policies import Job, make_queue
from asrsched.core.service import ServiceModel, default_service_model, work_tokens
from asrsched.core.workloads import Trace
from asrsched.sim.fleet import make_router
from asrsched.sim.records import RECORD_COLUMNS, add_derived

__all__ = ["simulate_fleet_simpy"]


class _Req(Job):
    __slots__ = ("tokens", "left", "enc_s", "est_tok", "g_admit", "admit", "first", "finish", "replica")

    def __init__(self, rid, arrival, est_service, duration, language, tokens, enc_s, est_tok):
        super().__init__(rid, arrival, est_service, duration, language)
        self.tokens = tokens
        self.left = tokens
        self.enc_s = enc_s
        self.est_tok = est_tok
        self.g_admit = 0
        self.admit = self.first = self.finish = math.nan
        self.replica = -1


class _Replica:
    """One replica's state, as its engine process leaves it."""

    def __init__(self, env, policy, policy_params):
        self.env = env
        self.queue = make_queue(policy, **(policy_params or {}))
        self.running: list[_Req] = []
        self.encoding: _Req | None = None
        self.enc_end = 0.0
        self.G = 0  # decode steps completed
        self.in_step = False
        self.step_end = 0.0
        self.queued_est = 0.0
        self.fin_at_boundary = 0  # completions at the step boundary where the current stall began
        self.stall_after_step = False
        self.wake = None


class _View:
    """The router's view of the fleet at ``now`` (see module docstring)."""

    def __init__(self, reps, steps, M):
        self.reps, self.steps, self.M, self.now = reps, steps, M, 0.0

    def n(self, i):
        r = self.reps[i]
        n = len(r.queue) + len(r.running)
        if r.encoding is not None:
            n += 1
            if len(r.running) + 1 < self.M and r.stall_after_step:
                n += r.fin_at_boundary
        return n

    def work(self, i):
        r = self.reps[i]
        M, steps, now = self.M, self.steps, self.now
        jobs = r.running + ([r.encoding] if r.encoding is not None else [])
        if not jobs:
            return r.queued_est
        b = len(jobs)
        # where the engine's clock stands (T) and what it has popped: it jumps to the end of the step in
        # progress (a free slot), or, with a full batch, to the next completion; during an encoder stall with
        # a free slot it waits at the stall's end
        if r.encoding is not None and b < M:
            T, G_T, left = r.enc_end, r.G, jobs
        else:
            m = min(j.left for j in jobs)
            if r.encoding is not None:
                T, G_T = r.enc_end + m * steps[b], r.G + m
            elif b < M:
                m = 1
                T, G_T = r.step_end, r.G + 1
            else:
                T, G_T = r.step_end + (m - 1) * steps[b], r.G + m
            left = [j for j in jobs if j.left != m]
            if not left:
                return r.queued_est
        st = steps[len(left)]
        G = G_T - int((T - now) / st) if T > now else G_T
        ex = sorted(float(j.g_admit) + j.est_tok for j in left)
        k = bisect.bisect_right(ex, G)
        s = 0.0
        for x in reversed(ex[k:]):
            s += x
        return r.queued_est + (s - (len(ex) - k) * G) * st


def simulate_fleet_simpy(
    trace: Trace,
    *,
    n_replicas: int = 4,
    router: str = "random",
    policy: str = "fcfs",
    service: ServiceModel | None = None,
    max_num_seqs: int = 32,
    seed: int = 0,
    policy_params: dict | None = None,
) -> pd.DataFrame:
    """Per-request records (columns of :func:`asrsched.sim.fleet.simulate_fleet`'s, without ``z``/``block``)."""
    service = service or default_service_model()
    M, N = int(max_num_seqs), int(n_replicas)
    env = simpy.Environment()
    n = len(trace)
    est = np.broadcast_to(service.est_service(trace.duration, trace.language), (n,))
    enc = np.broadcast_to(service.encoder_s(trace.duration), (n,))
    # the grid the fleet's work view reads (exact sums)
    est_tok = work_tokens(np.broadcast_to(service.est_tokens(trace.duration, trace.language), (n,)))
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
            float(est_tok[i]),
        )
        for i in range(len(trace))
    ]
    steps = [0.0] + [float(service.step_s(b)) for b in range(1, M + 1)]
    reps = [_Replica(env, policy, policy_params) for _ in range(N)]
    view = _View(reps, steps, M)
    _, s_router, _ = np.random.SeedSequence(int(seed)).spawn(3)  # simulate_fleet's router stream
    rt = make_router(router, np.random.default_rng(s_router))
    cands = list(range(N))

    def arrivals():
        for q in reqs:
            if q.arrival > env.now:
                yield env.timeout(q.arrival - env.now)
            view.now = env.now
            i = rt.route(view, cands)
            r = reps[i]
            q.replica = i
            r.queue.push(q)
            r.queued_est += q.est_service
            if r.wake is not None and not r.wake.triggered:
                r.wake.succeed()

    def engine(r: _Replica):
        after_step = False
        while True:
            new = []
            r.stall_after_step = after_step
            while len(r.running) < M and r.queue:
                q = r.queue.pop(env.now)
                r.queued_est -= q.est_service
                q.admit = env.now
                q.g_admit = r.G
                r.encoding, r.enc_end = q, env.now + q.enc_s
                yield env.timeout(q.enc_s)
                r.encoding = None
                r.running.append(q)
                new.append(q)
            if not r.running:
                r.fin_at_boundary = 0
                r.wake = env.event()
                yield r.wake
                after_step = False
                continue
            r.in_step = True
            r.step_end = env.now + steps[len(r.running)]
            yield env.timeout(steps[len(r.running)])
            r.in_step = False
            r.G += 1
            for q in new:
                q.first = env.now
            still, fin = [], 0
            for q in r.running:
                q.left -= 1
                if q.left == 0:
                    q.finish = env.now + overhead
                    fin += 1
                else:
                    still.append(q)
            r.running = still
            r.fin_at_boundary = fin
            after_step = True

    env.process(arrivals())
    for r in reps:
        env.process(engine(r))
    env.run()
    df = pd.DataFrame.from_records(
        [(q.rid, q.arrival, q.duration, q.language, q.est_service, q.tokens, q.admit, q.first, q.finish) for q in reqs],
        columns=RECORD_COLUMNS,
    )
    df = add_derived(df)
    df["replica"] = np.array([q.replica for q in reqs], np.int64)
    return df
