"""Test oracles of the simulator: plain loops for quantities the package computes faster."""

from collections.abc import Sequence


def estimated_work(engine, at: float, est_tokens: Sequence[float]) -> float:
    """Estimated outstanding work (s) of ``engine`` at time ``at``: the reference loop.

    Same definition as :meth:`Engine.outstanding_work` (which routers use), written as a
    plain loop over the running jobs: a job that ran past its estimate counts as zero.
    """
    running = engine.running
    work = engine.queued_est
    if running:
        st = engine.steps[len(running)]
        G = engine.G
        if engine.t > at:
            G -= int((engine.t - at) / st)
        for f, rid, job in running:
            left = est_tokens[rid] - (job.tokens - (f - G))
            if left > 0:
                work += left * st
    return work
