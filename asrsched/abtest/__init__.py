"""The A/B-test study: designs, estimators, the supermarket study and the ASR-fleet study.

* :mod:`.model` -- the numba supermarket model (Power-of-d routing, heterogeneous rates,
  cyclic arrivals, stale dispatcher) and the three designs; its service laws
  (exp/const/Pareto/Erlang-k/hyperexponential) and closed forms are :mod:`.service_laws`.
* :mod:`.estimators` -- naive, group, switchback, qDQ, wDQ, mixed DQ with batch-means
  CIs, on a simulator-independent :class:`Trajectory` (documented there); the DQ family
  (horizon in jobs or in time, batch or per-job alpha) is :mod:`.dq`.
* :mod:`.mixed_map` -- where mixed DQ pays: its sd gain by service law, horizon unit, L and alpha.
* :mod:`.study` -- scenarios, ground truth, replications fanned out with
  :func:`asrsched.sim.parallel.run_tasks`, bias/std/MSE tables (the study of Jia et al. 2026).
* :mod:`.fleet_experiment` -- A/B experiments (routing or scheduling; Bernoulli, group,
  replica, switchback designs) on the multi-replica fleet of :mod:`asrsched.sim.fleet`.
* :mod:`.asr_fleet` -- the ASR-fleet study: configuration, the estimators on one run,
  tasks (run by :func:`~asrsched.sim.parallel.run_study`); :mod:`.asr_fleet_report` -- its
  tables and the operator's recommendation.

Figures and interactive panels live in the figures layer (:mod:`asrsched.figures.abtest`,
:mod:`asrsched.figures.ab_asr`, :mod:`asrsched.figures.widgets`): this package needs
numpy, pandas, scipy and numba only.
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
from asrsched.abtest.model import SystemConfig, mean_field_response, mm1_response, power_of_d, simulate_supermarket  # noqa: F401
