"""Measured capacity (saturation throughput) and the load rho it defines."""

import json

import numpy as np
import pytest

import asrsched.sim.capacity as capmod
from asrsched.core.service import default_service_model
from asrsched.core.workloads import make_trace
from asrsched.sim.capacity import measure_capacity, regime
from asrsched.sim.engine import simulate

SM = default_service_model()


@pytest.mark.parametrize("workload, M", [("librispeech", 32), ("uniform", 32), ("librispeech", 8)])
def test_measured_capacity_matches_the_full_batch_fluid_formula(workload, M):
    cap = measure_capacity(workload, SM, max_num_seqs=M, n_requests=6000, seeds=(0, 1, 2), cache_dir=None)
    # the closed form ignores only the granularity of decode steps at the ends of requests
    assert cap.rate == pytest.approx(cap.analytic, rel=0.02)
    assert cap.ci_low <= cap.rate <= cap.ci_high and cap.ci_high - cap.ci_low < 0.05 * cap.rate


def test_one_slot_capacity_is_one_over_mean_service_time():
    """max_num_seqs=1: an M/G/1 server, capacity = 1 / E[encoder + tokens x decode step]."""
    cap = measure_capacity("uniform", SM, max_num_seqs=1, n_requests=4000, seeds=(3,), cache_dir=None)
    tr = make_trace("uniform", rate=1e6, n=4000, seed=3, kappa=dict(SM.kappa))
    svc = np.asarray(SM.windows(tr.duration)) * SM.encode_s_per_window + tr.tokens * SM.decode_s_per_token
    # the served rate is counted between the 1st and the (n-1)-th completion: the middle requests
    assert cap.rate == pytest.approx(1 / svc[1:-1].mean(), rel=0.01)


def test_capacity_separates_stable_from_overloaded_runs():
    cap = measure_capacity("librispeech", SM, n_requests=6000, seeds=(0, 1), cache_dir=None)
    below = simulate(make_trace("librispeech", rate=cap.rate_at(0.8), n=6000, seed=5), "fcfs", SM, warn_overload=False)
    above = simulate(make_trace("librispeech", rate=cap.rate_at(1.3), n=6000, seed=5), "fcfs", SM, warn_overload=False)
    fin = above.records.finish.sort_values().to_numpy()
    served_above = (len(fin) - 200) / (fin[-100] - fin[100])
    assert not below.overloaded and below.timeline.waiting.max() < 200
    assert above.overloaded
    assert served_above == pytest.approx(cap.rate, rel=0.03)  # above capacity the engine serves its capacity
    assert cap.rho(cap.rate_at(0.8)) == pytest.approx(0.8)
    assert list(regime([0.5, 0.999, 1.0, 1.4])) == ["stable", "stable", "overload", "overload"]


def test_capacity_cache_is_keyed_by_parameters_and_code(tmp_path, monkeypatch):
    capmod._MEMO.clear()
    a = measure_capacity("uniform", SM, n_requests=1500, seeds=(0,), cache_dir=tmp_path)
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["rate"] == pytest.approx(a.rate)
    # a second call (fresh memory) reads the file: make any simulation impossible
    capmod._MEMO.clear()

    def boom(*a, **k):
        raise AssertionError("recomputed a cached capacity")

    monkeypatch.setattr("asrsched.sim.engine.simulate", boom)
    assert measure_capacity("uniform", SM, n_requests=1500, seeds=(0,), cache_dir=tmp_path).rate == a.rate
    # another service model, kappa or code version misses the cache
    for kw in (dict(kappa=4.0), dict(max_num_seqs=16)):
        with pytest.raises(AssertionError, match="recomputed"):
            measure_capacity("uniform", SM, n_requests=1500, seeds=(0,), cache_dir=tmp_path, **kw)
    capmod._MEMO.clear()
    monkeypatch.setattr(capmod, "capacity_code_hash", lambda: "changed-code")
    with pytest.raises(AssertionError, match="recomputed"):
        measure_capacity("uniform", SM, n_requests=1500, seeds=(0,), cache_dir=tmp_path)


def test_code_hash_covers_the_engine_and_the_policies():
    from asrsched.sim.cache import module_closure

    mods = module_closure("asrsched.sim.capacity")
    assert {
        "asrsched.sim.engine",
        "asrsched.sim.kernel",
        "asrsched.sim.inputs",
        "asrsched.core.rulebook",
        "asrsched.core.policies",
        "asrsched.core.workloads",
        "asrsched.core.service",
    } <= set(mods)


def test_the_fleet_loads_are_fractions_of_this_capacity():
    """One capacity definition: the fleet's per-replica capacity is this measurement, and its traces
    arrive at ``load x replicas x capacity`` (the heavier phase's for a drift)."""
    from asrsched.sim.capacity import fleet_trace, replica_capacity

    cap = measure_capacity("uniform", SM, cache_dir=None)
    assert replica_capacity("uniform", service=SM) == cap.rate == replica_capacity("drift", service=SM)
    tr, lam = fleet_trace("uniform", n_replicas=3, rho=0.6, n_requests=4000, seed=2, service=SM)
    assert lam == 0.6 * 3 * cap.rate
    assert (len(tr) - 1) / (tr.arrival[-1] - tr.arrival[0]) == pytest.approx(lam, rel=0.05)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_requests=50), "too small to measure capacity"),
        (dict(max_num_seqs=0), "max_num_seqs"),
        (dict(seeds=()), "seeds"),
    ],
)
def test_bad_input_is_named(kw, match):
    with pytest.raises(ValueError, match=match):
        measure_capacity("librispeech", SM, cache_dir=None, **kw)


def test_saturation_rate_rejects_bad_input():
    with pytest.raises(ValueError, match="max_num_seqs"):
        SM.saturation_rate([5.0], max_num_seqs=0)
    with pytest.raises(ValueError, match="at least one duration"):
        SM.saturation_rate([])
    with pytest.raises(ValueError, match="no kappa for language 'xx'"):
        SM.saturation_rate([5.0], "xx")
