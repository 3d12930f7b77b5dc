"""Queueing A/B-test estimator study (paper 2): supermarket model, designs, estimators.

* :mod:`.model` -- the numba supermarket model (Power-of-d routing, heterogeneous rates,
  exp/const/Pareto service, cyclic arrivals, stale dispatcher) and the three designs.
* :mod:`.estimators` -- naive, group, switchback, qDQ, wDQ, mixed DQ with batch-means
  CIs, on a simulator-independent :class:`Trajectory` (documented there).
* :mod:`.study` -- scenarios, ground truth, replications fanned out with
  :func:`asrsched.sim.parallel.map_tasks`, bias/std/MSE tables and figures.
* :mod:`.widgets` -- interactive panel (sliders for lam, d1, d2, p, L, N).
"""

from asrsched.abtest.estimators import (  # noqa: F401
    ESTIMATORS,
    Estimate,
    Trajectory,
    default_L,
    estimate_all,
    littles_law,
    mixed_dq,
    naive,
    qdq,
    switchback,
    wdq,
)
from asrsched.abtest.model import SystemConfig, mean_field_response, mm1_response, parse_policy, simulate  # noqa: F401
