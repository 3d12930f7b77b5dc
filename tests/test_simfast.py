"""The compiled simulator path makes exactly the decisions of the Python Engine."""

import numpy as np
import pytest

from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate

COLS = ["admit", "first_token", "finish"]


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "ljf", "hrrn"])
@pytest.mark.parametrize("workload, rate, M", [("librispeech", 3.0, 32), ("librispeech", 18.0, 32),
                                                 ("uniform", 12.0, 4), ("uniform", 2.0, 1)])
def test_numba_and_python_engines_identical(policy, workload, rate, M):
    tr = make_trace(workload, rate=rate, n=1500, seed=int(rate) + M)
    a = simulate(tr, policy, default_service_model(), max_num_seqs=M, engine="python", warn_overload=False)
    b = simulate(tr, policy, default_service_model(), max_num_seqs=M, engine="numba", warn_overload=False)
    np.testing.assert_array_equal(a.records[COLS].to_numpy(), b.records[COLS].to_numpy())
    assert a.events == b.events
    assert a.timeline.equals(b.timeline)
    assert a.overloaded == b.overloaded


def test_batch_dependent_steps_and_overhead_identical():
    svc = ServiceModel(encode_s_per_window=0.03, decode_s_per_token=0.01, decode_batch_slope=0.2, overhead_s=0.5,
                       kappa={"en": 4.0})
    tr = make_trace("uniform", rate=20.0, n=800, seed=5, kappa=4.0)
    a = simulate(tr, "hrrn", svc, max_num_seqs=16, engine="python", warn_overload=False)
    b = simulate(tr, "hrrn", svc, max_num_seqs=16, engine="auto", warn_overload=False)
    assert b.params["engine"] == "numba"
    np.testing.assert_array_equal(a.records[COLS].to_numpy(), b.records[COLS].to_numpy())


def test_engine_choice_and_errors():
    tr = make_trace("librispeech", rate=5.0, n=200, seed=1)
    assert "engine" not in simulate(tr, "adaptive").params  # custom/parametrised policies: Python engine
    with pytest.raises(ValueError, match="engine='numba' needs"):
        simulate(tr, "adaptive", engine="numba")
    with pytest.raises(ValueError, match="engine must be"):
        simulate(tr, "fcfs", engine="gpu")
