"""The compiled engine (asrsched.sim.kernel) against the Python fleet: identical per-request records.

Every router of the registry x every compiled policy, every A/B design (routing and scheduling, switchback
and per-replica replica x block policy swaps included), odd and large fleets, and the dispatch rule
(compiled for built-ins, Python for anything user-registered).
"""

import numpy as np
import pandas as pd
import pytest

from asrsched.abtest.fleet_experiment import ABTest, run_experiment
from asrsched.core.policies import POLICIES, KeyQueue, register_policy
from asrsched.core.rulebook import POLICY_CODES as COMPILED_POLICIES
from asrsched.core.workloads import Trace, make_trace
from asrsched.sim import fleet as C
from asrsched.sim.fleet import Router, fleet_trace, register_router, run_fleet, simulate_fleet
from asrsched.sim.inputs import BUILTIN_ROUTERS, compiled_support

ROUTERS = ["random", "round_robin", "jsq", "least_work", "pod2", "pod2_work", "pod3", "pod4_work"]


@pytest.fixture(scope="module")
def busy():
    """LibriSpeech at 95 % of a 4-replica fleet's capacity: long queues, many routing ties and decisions."""
    return fleet_trace("librispeech", n_replicas=4, rho=0.95, n_requests=2500, seed=11)


def _same(a, b):
    pd.testing.assert_frame_equal(a.records, b.records, check_exact=True)
    assert a.events == b.events
    assert a.params["engine"] == "python" and b.params["engine"] == "numba"


@pytest.mark.parametrize("policy", sorted(COMPILED_POLICIES))
@pytest.mark.parametrize("router", ROUTERS)
def test_every_router_and_policy_gives_identical_records(busy, router, policy):
    tr, _ = busy
    a = simulate_fleet(tr, n_replicas=4, router=router, policy=policy, seed=3, warmup_s=10, engine="python")
    b = simulate_fleet(tr, n_replicas=4, router=router, policy=policy, seed=3, warmup_s=10, engine="numba")
    _same(a, b)
    assert a.records.replica.nunique() == 4  # every replica served requests: the router really chose


def _designs():
    out = []
    for d in ("bernoulli", "group", "switchback", "replica_block", "control", "treatment"):
        out.append(ABTest(factor="routing", control="random", treatment="least_work", design=d, block_s=15.0))
        out.append(
            ABTest(
                factor="routing",
                control="pod2",
                treatment="jsq",
                design=d,
                p=0.3,
                block_s=15.0,
                alternate=False,
                policy="hrrn",
            )
        )
    for d in ("replica", "switchback", "replica_block", "control", "treatment"):
        for c, t, r in (
            ("fcfs", "hrrn", "random"),
            ("sjf", "adaptive", "jsq"),
            ("hrrn", "ljf", "pod2_work"),
            ("adaptive", "fcfs", "least_work"),
        ):
            out.append(ABTest(factor="scheduling", control=c, treatment=t, design=d, router=r, block_s=15.0))
    return out


@pytest.mark.parametrize("test", _designs(), ids=lambda t: f"{t.factor}-{t.design}-{t.control}-{t.treatment}")
def test_every_design_gives_identical_records(busy, test):
    tr, lam = busy
    a = run_experiment(tr, test, n_replicas=4, seed=5, warmup_s=10, total_rate=lam, engine="python")
    b = run_experiment(tr, test, n_replicas=4, seed=5, warmup_s=10, total_rate=lam, engine="numba")
    _same(a, b)
    assert np.array_equal(a.replica_arm, b.replica_arm)
    if test.design == "switchback":
        assert np.array_equal(a.block_arms, b.block_arms)
        if test.factor == "scheduling":  # the swaps happened: both policies admitted requests
            assert set(a.records.z) == {0, 1}
    if test.design == "replica_block":  # per-replica swaps (scheduling) or per-block groups (routing)
        assert np.array_equal(a.block_replica_arms, b.block_replica_arms) and set(a.records.z) == {0, 1}


def test_adaptive_policy_params_and_odd_and_large_fleets():
    tr, lam = fleet_trace("uniform", n_replicas=3, rho=0.97, n_requests=2000, seed=4)
    kw = dict(policy_params={"low_depth": 2, "ratio_cap": 5.0})
    for router in ("jsq", "pod2_work"):
        a = simulate_fleet(tr, n_replicas=3, router=router, policy="adaptive", seed=1, engine="python", **kw)
        b = simulate_fleet(tr, n_replicas=3, router=router, policy="adaptive", seed=1, engine="numba", **kw)
        _same(a, b)
    t = ABTest(factor="routing", control="round_robin", treatment="pod2_work", design="group", p=0.34)
    _same(
        run_experiment(tr, t, n_replicas=3, seed=2, engine="python"),
        run_experiment(tr, t, n_replicas=3, seed=2, engine="numba"),
    )
    big, _ = fleet_trace("librispeech", n_replicas=16, rho=0.95, n_requests=6000, seed=8)
    for router in ("pod3_work", "least_work"):
        a = simulate_fleet(big, n_replicas=16, router=router, policy="hrrn", seed=2, engine="python")
        b = simulate_fleet(big, n_replicas=16, router=router, policy="hrrn", seed=2, engine="numba")
        _same(a, b)
        assert b.records.replica.nunique() == 16


def test_small_batches_and_simultaneous_arrivals_tie_break_in_submission_order():
    """Equal sizes, arrivals at one instant, one slot: HRRN, SJF and FCFS all admit in submission order."""
    n = 6
    tr = Trace(
        arrival=np.zeros(n),
        duration=np.full(n, 8.0),
        language=np.array(["en"] * n, dtype=object),
        tokens=np.full(n, 40, np.int64),
    )
    for policy in ("fcfs", "sjf", "hrrn", "adaptive"):
        recs = [
            simulate_fleet(tr, n_replicas=1, policy=policy, max_num_seqs=1, engine=e).records
            for e in ("python", "numba")
        ]
        pd.testing.assert_frame_equal(*recs)
        assert list(recs[1].sort_values("admit").rid) == list(range(n)), policy


def test_work_routers_never_see_true_token_counts():
    """Until the first request finishes, least-work routing depends on the estimates only.

    Two traces differ only in the true token counts (all large: nothing finishes before the last arrival;
    more slots than requests, so no jump of the clock ends at a completion either); the compiled
    least-work router sends every request to the same replica in both. (Routing on true tokens would see
    different remaining work and route differently.)
    """
    tr = make_trace("uniform", rate=40.0, n=300, seed=6)
    tok_a = np.asarray(tr.tokens, np.int64) * 50 + 5000
    rng = np.random.default_rng(0)
    tok_b = tok_a + rng.integers(0, 4000, size=tok_a.size)
    a = simulate_fleet(
        Trace(tr.arrival, tr.duration, tr.language, tok_a),
        n_replicas=4,
        router="least_work",
        max_num_seqs=128,
        engine="numba",
    ).records
    b = simulate_fleet(
        Trace(tr.arrival, tr.duration, tr.language, tok_b),
        n_replicas=4,
        router="least_work",
        max_num_seqs=128,
        engine="numba",
    ).records
    assert a.finish.min() > tr.arrival[-1] and b.finish.min() > tr.arrival[-1]
    assert (a.replica.to_numpy() == b.replica.to_numpy()).all()
    assert not np.allclose(a.finish.to_numpy(), b.finish.to_numpy())  # the servers did see the true tokens
    assert a.replica.nunique() == 4


def test_dispatch_compiled_for_builtins_python_for_user_defined():
    assert compiled_support(["fcfs", "hrrn", "adaptive"], ["random", "pod3_work"]) is None
    assert "'random'" in compiled_support(["random"], ["jsq"])  # the seeded random queue stays on the Python path
    with pytest.raises(TypeError, match="low_depth"):  # params only for adaptive: an error on either engine
        compiled_support(["fcfs"], ["jsq"], {"low_depth": 2})
    tr = make_trace("uniform", rate=8, n=300, seed=1)
    assert simulate_fleet(tr, n_replicas=2, router="jsq").params["engine"] == "numba"

    @register_policy("lifo_test")
    def _lifo():
        return KeyQueue(lambda j: -j.arrival)

    @register_router("first_test")
    def _first(rng=None):
        class First(Router):
            def route(self, view, cands):
                return cands[0]

        return First(rng)

    try:
        assert simulate_fleet(tr, n_replicas=2, policy="lifo_test").params["engine"] == "python"
        res = simulate_fleet(tr, n_replicas=2, router="first_test")
        assert res.params["engine"] == "python" and (res.records.replica == 0).all()
        with pytest.raises(ValueError, match="engine='numba' cannot run this: policy 'lifo_test'"):
            simulate_fleet(tr, n_replicas=2, policy="lifo_test", engine="numba")
        with pytest.raises(ValueError, match="engine='numba' cannot run this: router 'first_test'"):
            simulate_fleet(tr, n_replicas=2, router="first_test", engine="numba")
        # a built-in name re-registered with other behaviour must not run the built-in kernel
        C.ROUTERS["jsq"] = _first
        assert simulate_fleet(tr, n_replicas=2, router="jsq").params["engine"] == "python"
    finally:
        POLICIES.pop("lifo_test")
        C.ROUTERS.pop("first_test")
        C.ROUTERS["jsq"] = BUILTIN_ROUTERS["jsq"]
    with pytest.raises(ValueError, match="engine: must be"):
        run_fleet(tr, ["fcfs"], [("random", 0)], engine="cuda")
    with pytest.raises(ValueError, match="route_arm"):
        run_fleet(tr, ["fcfs"], [("random", 0)], route_arm=np.ones(len(tr)))
    with pytest.raises(ValueError, match="cands"):
        run_fleet(tr, ["fcfs", "fcfs"], [("random", 0)], cands=[[2]])


@pytest.mark.parametrize(
    "n_replicas,router,policy",
    [(4, "least_work", "fcfs"), (4, "jsq", "sjf"), (16, "pod2_work", "hrrn"), (4, "pod3", "adaptive")],
)
def test_simpy_model_of_the_fleet_gives_the_same_records(n_replicas, router, policy):
    """The step-by-step SimPy fleet (benchmarks/, the speed baseline) agrees request by request."""
    from simpy_fleet_reference import simulate_fleet_simpy

    tr, _ = fleet_trace("librispeech", n_replicas=n_replicas, rho=0.95, n_requests=1200, seed=5)
    ref = simulate_fleet_simpy(tr, n_replicas=n_replicas, router=router, policy=policy, seed=4)
    got = simulate_fleet(tr, n_replicas=n_replicas, router=router, policy=policy, seed=4).records
    for k in ("rid", "replica", "tokens"):
        assert (ref[k].to_numpy() == got[k].to_numpy()).all(), k
    for k in ("admit", "first_token", "finish"):
        assert np.abs(ref[k].to_numpy() - got[k].to_numpy()).max() <= 1e-9, k
    assert got.replica.nunique() == n_replicas


def test_deep_queues_of_an_overloaded_fleet_stay_identical():
    """At 1.4x capacity the queues grow past a thousand (heap and slot stores grow in both engines)."""
    from asrsched.sim.fleet import replica_capacity

    tr = make_trace("librispeech", rate=1.4 * 2 * replica_capacity("librispeech"), n=3000, seed=3)
    # the compiled queues start with room for 256 and double when one is full, re-routing that request
    # (its router's draws rewound): every queue kind and every kind of router state crosses a doubling
    for policy, router in (
        ("hrrn", "jsq"),
        ("adaptive", "jsq"),
        ("sjf", "round_robin"),
        ("fcfs", "pod2_work"),
        ("ljf", "random"),
    ):
        a = simulate_fleet(tr, n_replicas=2, router=router, policy=policy, engine="python")
        b = simulate_fleet(tr, n_replicas=2, router=router, policy=policy, engine="numba")
        _same(a, b)
        if policy in ("hrrn", "adaptive"):
            assert b.records.queue_delay.max() > 60  # deep queues really formed
        waiting = np.searchsorted(np.sort(b.records.admit.to_numpy()), b.records.arrival.to_numpy(), side="right")
        assert (np.arange(len(tr)) + 1 - waiting).max() > 2 * 256  # more than 256 waiting on one of 2 replicas


# ----------------------------------------------------------------------------- the work view's exact sums


def test_work_tokens_lie_on_the_grid_and_move_an_estimate_by_at_most_half_a_step():
    from asrsched.sim.engine import WORK_TOKEN_GRID, work_tokens

    x = np.random.default_rng(0).uniform(0, 2000, 10_000)
    w = work_tokens(x)
    assert np.array_equal(w * WORK_TOKEN_GRID, np.rint(w * WORK_TOKEN_GRID))
    assert np.abs(w - x).max() <= 0.5 / WORK_TOKEN_GRID
    assert np.abs(w - x).max() > 0  # the estimates really were rounded (this would pass vacuously otherwise)


def test_sums_of_estimate_ends_on_the_grid_do_not_depend_on_the_order_of_adding():
    """What lets the kernel keep integer sums where the Python engine adds sorted floats."""
    from asrsched.sim.engine import WORK_TOKEN_GRID, work_tokens

    rng = np.random.default_rng(1)
    for _ in range(200):
        b = int(rng.integers(1, 33))
        g0 = rng.integers(0, 10**7, b).astype(float)  # decode step at admission
        ends = g0 + work_tokens(rng.uniform(0, 500, b) * rng.choice([1.0, 3.7, 4.1], b))
        s = sorted(ends)
        fwd = 0.0
        for v in s:
            fwd += v
        rev = 0.0
        for v in reversed(s):
            rev += v
        shuffled = 0.0
        for v in rng.permutation(ends):
            shuffled += v
        ints = int(np.rint(np.asarray(ends) * WORK_TOKEN_GRID).astype(np.int64).sum())
        assert fwd == rev == shuffled == ints / WORK_TOKEN_GRID
    # off the grid, the order matters (the reason for the grid)
    x = [0.1, 0.2, 0.3]
    assert (x[0] + x[1]) + x[2] != x[0] + (x[1] + x[2])


def test_the_engine_reads_size_estimates_on_the_grid(busy):
    """The work view's estimates reach the kernel as whole multiples of the grid (exact integer sums)."""
    from asrsched.core.service import WORK_TOKEN_GRID, default_service_model
    from asrsched.sim.inputs import trace_inputs

    tr, _ = busy
    x = trace_inputs(tr, default_service_model()).est_tok * WORK_TOKEN_GRID
    assert np.array_equal(x, np.rint(x)) and (x > 0).all()


# ----------------------------------------------------------------------------- the records frame


def test_records_are_each_runs_own_even_where_their_inputs_are_cached(busy):
    """The compiled fleet builds its records from blocks without a copy; no two frames share one."""
    tr, _ = busy
    a = simulate_fleet(tr, n_replicas=4, router="least_work", seed=2).records
    ref = simulate_fleet(tr, n_replicas=4, router="least_work", seed=2, engine="python").records
    a.loc[0, "language"] = "xx"
    a.loc[0, "est_service"] = -1.0
    a.loc[0, "replica"] = 99
    b = simulate_fleet(tr, n_replicas=4, router="least_work", seed=2).records  # the same cached per-trace inputs
    pd.testing.assert_frame_equal(b, ref, check_exact=True)
    assert a.loc[0, "language"] == "xx" and b.loc[0, "language"] == ref.loc[0, "language"]
    # a frame like any other: it filters, groups and grows
    assert len(b[b.arrival >= 10.0]) == int((ref.arrival >= 10.0).sum())
    b["x"] = 1.0
    assert b.groupby("replica").size().sum() == len(tr)


def test_extra_columns_must_be_new_names_and_one_value_per_request(busy):
    tr, _ = busy
    n = len(tr)
    with pytest.raises(ValueError, match="column names must be new"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], extra={"ttft": np.zeros(n)})
    with pytest.raises(ValueError, match="one value per request"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], extra={"z2": np.zeros(n - 1)})


def test_per_request_inputs_are_the_service_models_estimates_language_by_language():
    """trace_inputs forms every estimate through the ServiceModel; per-language masks give the same bits."""
    from asrsched.core.service import default_service_model, work_tokens
    from asrsched.sim.inputs import clear_trace_cache, trace_inputs

    rng = np.random.default_rng(4)
    d = np.concatenate([rng.uniform(0, 95, 5000), [0.0, 1e-12, 30.0, 60.0, 30.0 + 1e-10, 29.999999999, 1e4]])
    lang = rng.choice(np.array(["en", "id", "de"], dtype=object), len(d))
    base = default_service_model()
    for svc, lg in (
        (base, np.full(len(d), next(iter(base.kappa)), dtype=object)),
        (base.with_kappa({"en": 3.3, "id": 5.1, "de": 4.4}), lang),
    ):
        tr = Trace(arrival=np.arange(len(d), dtype=float), duration=d, language=lg, tokens=np.ones(len(d), np.int64))
        clear_trace_cache()
        inp = trace_inputs(tr, svc)
        est, enc, tok = (np.empty(len(d)) for _ in range(3))
        for x in pd.unique(lg):
            m = lg == x
            est[m] = svc.est_service(d[m], str(x))
            enc[m] = svc.windows(d[m]) * float(svc.encode_s_per_window)
            tok[m] = work_tokens(svc.kappa_for(str(x)) * d[m])
        assert np.array_equal(inp.est, est) and np.array_equal(inp.enc, enc) and np.array_equal(inp.est_tok, tok)
        assert list(inp.lang) == list(lg)
