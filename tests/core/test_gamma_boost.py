"""γ-Boost (Yu & Scully 2024): its boost function, the decay rate γ* it is tuned to, its two limits (FCFS and SJF)
on one slot decision for decision, and the same records in the Python reference and the compiled engine."""

import math

import numpy as np
import pytest

from asrsched.core.gamma_boost import boost, decay_rate, gamma_boost_name, register_gamma_boost
from asrsched.core.policies import POLICIES, make_queue
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate

SVC = ServiceModel(encode_s_per_window=0.05, decode_s_per_token=0.02, overhead_s=0.1, kappa={"en": 3.3})


@pytest.fixture
def policies():
    added = []

    def add(gamma):
        name = register_gamma_boost(gamma)
        added.append(name)
        return name

    yield add
    for name in added:
        POLICIES.pop(name, None)


def test_boost_limits_and_shape():
    s = np.array([0.1, 0.5, 1.0, 5.0])
    b = boost(s, 1.0)
    assert np.all(np.diff(b) < 0) and np.all(b > 0)  # shorter requests get a larger boost
    assert np.all(boost(s, 1e3) < 1e-6)  # gamma -> inf: no boost (FCFS)
    g = 1e-6  # gamma -> 0: boosts differ by log(s'/s) / gamma
    assert boost(0.1, g) - boost(1.0, g) == pytest.approx(math.log(10) / g, rel=1e-4)
    with pytest.raises(ValueError, match="gamma: .* must be a finite number > 0"):
        boost(s, 0.0)
    with pytest.raises(ValueError, match="s: sizes must be > 0"):
        boost([0.0], 1.0)


def test_decay_rate_solves_cramer_lundberg():
    rng = np.random.default_rng(0)
    # M/M/1, mu = 1: gamma* = mu - lambda
    assert decay_rate(0.5, rng.exponential(1.0, 400_000)) == pytest.approx(0.5, rel=0.03)
    # M/D/1, S = 1, lambda = 0.5: 0.5 (e^g - 1) = g, i.e. e^g = 1 + 2g
    g = decay_rate(0.5, np.ones(10))
    assert math.exp(g) == pytest.approx(1 + 2 * g, rel=1e-10) and g == pytest.approx(1.2564312086, rel=1e-8)
    with pytest.raises(ValueError, match=r"total_rate: load .* >= 1"):
        decay_rate(1.0, np.ones(10))
    with pytest.raises(ValueError, match="sizes: need"):
        decay_rate(0.5, [])


def test_the_two_limits_are_fcfs_and_sjf_on_one_slot(policies):
    """One slot (max_num_seqs = 1, an M/G/1 with estimated sizes): gamma = 1e4 admits exactly as FCFS,
    gamma = 1e-8 exactly as SJF; a gamma in between (the workload's gamma*) is neither."""
    tr = make_trace("librispeech", rate=1.4, n=1500, seed=4)
    runs = {p: simulate(tr, p, SVC, max_num_seqs=1, warn_overload=False).records for p in ("fcfs", "sjf")}
    big, small = policies(1e4), policies(1e-8)
    sizes = SVC.est_service(tr.duration, tr.language)
    rate = len(tr) / float(tr.arrival[-1] - tr.arrival[0])
    assert 0.7 < rate * sizes.mean() < 0.95  # a queue forms, so the order matters
    star = policies(decay_rate(rate, sizes))
    for name, ref in ((big, "fcfs"), (small, "sjf")):
        rec = simulate(tr, name, SVC, max_num_seqs=1, warn_overload=False).records
        assert rec[["rid", "admit", "finish"]].equals(runs[ref][["rid", "admit", "finish"]]), (name, ref)
    mid = simulate(tr, star, SVC, max_num_seqs=1, warn_overload=False).records
    for ref in ("fcfs", "sjf"):
        assert not mid["admit"].equals(runs[ref]["admit"])


def test_compiled_equals_python_and_the_queue_is_a_registry_policy(policies):
    name = policies(0.7)
    assert name == gamma_boost_name(0.7) == "gamma_boost_0.7" and register_gamma_boost(0.7) == name
    tr = make_trace("uniform", rate=9.0, n=1200, seed=2)
    a = simulate(tr, name, SVC, max_num_seqs=8, engine="python", warn_overload=False)
    b = simulate(tr, name, SVC, max_num_seqs=8, warn_overload=False)
    assert b.params["engine"] == "numba" and a.records.equals(b.records)
    assert make_queue(name).name == name  # the server and the vLLM plug-in take it from the registry
    with pytest.raises(ValueError, match="name: 'sjf' is already a policy"):
        register_gamma_boost(0.7, name="sjf")


def test_a_name_registers_the_policy_on_first_use():
    """A fresh process (a server started with --policy gamma_boost_0.25) finds γ-Boost by name alone."""
    import subprocess
    import sys

    code = (
        "from asrsched.core.policies import make_queue, validate_policies\n"
        "from asrsched.core.workloads import make_trace\n"
        "from asrsched.sim.engine import simulate\n"
        "assert validate_policies(['GAMMA_BOOST_0.25']) == ['gamma_boost_0.25']\n"
        "assert make_queue('gamma_boost_0.25').name == 'gamma_boost_0.25'\n"
        "tr = make_trace('uniform', rate=4.0, n=300, seed=1)\n"
        "a = simulate(tr, 'gamma_boost_0.25', max_num_seqs=4, engine='python', warn_overload=False)\n"
        "b = simulate(tr, 'gamma_boost_0.25', max_num_seqs=4, warn_overload=False)\n"
        "assert b.params['engine'] == 'numba' and a.records.equals(b.records)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    with pytest.raises(ValueError, match=r"gamma: 'gamma_boost_fast' does not end in a number"):
        make_queue("gamma_boost_fast")
    with pytest.raises(ValueError, match="gamma: .* must be a finite number > 0"):
        make_queue("gamma_boost_-1")


def test_partial_information_boost():
    """Yu & Scully's boost for a label: b(l) = (1/γ) log(M / (M - 1)), M = E[exp(γ S) | l]. With no error it is
    the full-information boost; a loop tail (rare, many times the tokens) takes the boost of long estimates
    towards 0; the named policy runs identically in both engines."""
    from asrsched.core.estimate_error import EstimateError
    from asrsched.core.gamma_boost import partial_boost

    s = np.array([0.2, 1.0, 3.0, 10.0])
    assert np.allclose(partial_boost(s, 0.3, EstimateError(cv=0.0)), boost(s, 0.3))
    real, degraded = partial_boost(s, 0.3, "real"), partial_boost(s, 0.3, "degraded")
    assert np.all(np.diff(real) < 0) and np.all(degraded < real) and degraded[-1] < 0.01 * real[-1]
    name = register_gamma_boost(0.3, error="real")
    assert name == gamma_boost_name(0.3, "real") == "gamma_boost_0.3_real"
    tr = make_trace("uniform", rate=9.0, n=1200, seed=2, estimate_error="real")
    a = simulate(tr, name, SVC, max_num_seqs=8, engine="python", warn_overload=False)
    b = simulate(tr, name, SVC, max_num_seqs=8, warn_overload=False)
    assert b.params["engine"] == "numba" and a.records.equals(b.records)
    POLICIES.pop(name, None)
    with pytest.raises(ValueError, match="error: a partial-information boost needs a named error"):
        gamma_boost_name(0.3, "perfect")
    with pytest.raises(ValueError, match="estimate_error: unknown preset 'wild'"):
        make_queue("gamma_boost_0.3_wild")
