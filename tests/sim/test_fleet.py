"""The multi-replica cluster: equivalence with the single-server simulator, routers, designs, Little's law."""

import numpy as np
import pandas as pd
import pytest
from sim_oracle import estimated_work

from asrsched.abtest import fleet_experiment as X
from asrsched.abtest.estimators import littles_law
from asrsched.abtest.fleet_experiment import ABTest, run_experiment
from asrsched.core.service import default_service_model
from asrsched.core.workloads import Trace, make_trace
from asrsched.sim import fleet as C
from asrsched.sim.engine import Engine, SimJob, simulate
from asrsched.sim.fleet import (
    Router,
    fleet_trace,
    make_router,
    register_router,
    replica_capacity,
    router_names,
    simulate_fleet,
)

SVC = default_service_model()


@pytest.fixture(scope="module")
def busy():
    """A LibriSpeech trace at 95 % of a 4-replica fleet's capacity."""
    return fleet_trace("librispeech", n_replicas=4, rho=0.95, n_requests=4000, seed=11)


@pytest.mark.parametrize("policy", ["fcfs", "hrrn", "sjf"])
@pytest.mark.parametrize("router", ["random", "jsq", "least_work", "round_robin"])
def test_one_replica_is_simulate_exactly(policy, router):
    tr = make_trace("librispeech", rate=13.5, n=1500, seed=4)
    ref = simulate(tr, policy, SVC).records
    got = simulate_fleet(tr, n_replicas=1, router=router, policy=policy, service=SVC).records
    pd.testing.assert_frame_equal(ref, got[ref.columns])
    assert (got.replica == 0).all() and (got.z == 0).all()


@pytest.mark.parametrize("router,policy", [("least_work", "hrrn"), ("pod2", "fcfs")])
def test_plain_fleet_is_the_control_arm_of_an_experiment(busy, router, policy):
    """simulate_fleet (sim layer) and run_experiment's control design (A/B layer) are the same run."""
    tr, lam = busy
    a = simulate_fleet(tr, n_replicas=4, router=router, policy=policy, seed=9, warmup_s=10)
    b = run_experiment(
        tr,
        ABTest(control=router, treatment="random", design="control", policy=policy),
        n_replicas=4,
        seed=9,
        warmup_s=10,
    )
    pd.testing.assert_frame_equal(a.records, b.records)
    assert a.events == b.events and a.summary() == b.summary()
    assert a.by_replica().equals(b.by_replica().drop(columns="arm"))


def test_records_have_simulator_columns_and_summarize(busy):
    tr, lam = busy
    res = simulate_fleet(tr, n_replicas=4, router="pod2", warmup_s=10)
    from asrsched.sim.engine import RECORD_COLUMNS

    assert set(RECORD_COLUMNS + ["queue_delay", "ttft", "e2el", "replica", "z", "block"]) <= set(res.records)
    assert len(res.records) == len(tr) and res.records.rid.is_monotonic_increasing
    s = res.summary()
    assert s["completed"] == int((tr.arrival >= 10).sum())
    assert set(res.records.replica) == {0, 1, 2, 3}
    # every request is served exactly once, after it arrives
    r = res.records
    assert (r.admit >= r.arrival).all() and (r.first_token > r.admit).all() and (r.finish > r.first_token).all()


def test_router_registry_names_and_errors():
    names = router_names()
    for n in ("random", "round_robin", "jsq", "least_work", "pod<d>", "pod<d>_work"):
        assert n in names
    assert make_router("pod3").d == 3 and make_router("pod2_work").work
    with pytest.raises(ValueError, match="router: unknown router 'fastest'.*allowed values.*least_work"):
        make_router("fastest")
    with pytest.raises(ValueError, match="treatment: Power-of-d needs 1 <= d <= n_replicas"):
        ABTest(treatment="pod5").validate(4)

    @register_router("first_replica")
    def _first(rng=None):
        class First(Router):
            def route(self, view, cands):
                return cands[0]

        return First(rng)

    try:
        tr = make_trace("uniform", rate=8, n=300, seed=1)
        res = simulate_fleet(tr, n_replicas=3, router="first_replica")
        assert (res.records.replica == 0).all()
    finally:
        C.ROUTERS.pop("first_replica")


class _FakeView:
    def __init__(self, n, w):
        self._n, self._w = n, w

    def n(self, i):
        return self._n[i]

    def work(self, i):
        return self._w[i]


def test_router_decisions_follow_their_definitions():
    rng = np.random.default_rng(0)
    v = _FakeView([5, 2, 7, 2], [1.0, 9.0, 0.5, 3.0])
    cands = [0, 1, 2, 3]
    jsq = make_router("jsq", rng)
    picks = [jsq.route(v, cands) for _ in range(400)]
    assert set(picks) == {1, 3} and 150 < picks.count(1) < 250  # ties broken at random
    assert make_router("least_work").route(v, cands) == 2
    assert all(make_router("pod4", np.random.default_rng(s)).route(v, cands) in (1, 3) for s in range(20))
    assert make_router("pod4_work").route(v, cands) == 2
    rr = make_router("round_robin")
    assert [rr.route(v, cands) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    assert [rr.route(v, [2, 3]) for _ in range(2)] == [2, 3]  # its own pointer, over the candidates given
    # Power-of-2 on queue length: the longest queue (2: seven requests) never wins; the shortest wins
    # whenever sampled (P = 1 - C(2,2)/C(4,2) ... = 5/6 for one of the two tied shortest)
    p2 = make_router("pod2", np.random.default_rng(1))
    picks = np.array([p2.route(v, cands) for _ in range(3000)])
    assert 2 not in picks and abs(np.isin(picks, [1, 3]).mean() - 5 / 6) < 0.03
    # random: uniform over the candidates
    r = make_router("random", np.random.default_rng(2))
    counts = np.bincount([r.route(v, cands) for _ in range(8000)], minlength=4)
    assert np.abs(counts / 8000 - 0.25).max() < 0.02


def test_work_estimate_uses_size_estimate_not_true_tokens():
    eng = Engine("fcfs", SVC, max_num_seqs=4)
    # true tokens 200, estimated 20 (kappa x duration): once it has run past its estimate it counts as zero
    j = SimJob(0, 0.0, 1.0, 6.0, "en", 200, 0.04)
    eng.run_until(0.0)
    eng.submit(j)
    est = [20.0]
    eng.run_until(0.5)  # admitted at 0, ~25 decode steps done by 0.5 s
    assert estimated_work(eng, 0.5, est) == 0.0
    eng2 = Engine("fcfs", SVC, max_num_seqs=4)
    eng2.submit(SimJob(0, 0.0, 1.0, 6.0, "en", 200, 0.04))
    eng2.run_until(0.1)
    w = estimated_work(eng2, 0.1, [150.0])
    gen = int((0.1 - 0.04) / SVC.step_s(1)) + 1
    assert abs(w - (150 - gen) * SVC.step_s(1)) <= 2 * SVC.step_s(1)


def test_cached_work_equals_reference_during_a_run(busy, monkeypatch):
    tr, lam = busy
    orig = C.FleetView.work
    seen = []

    def checked(self, i):
        v = orig(self, i)
        seen.append((v, estimated_work(self.engines[i], self.now, self.est_tok)))
        return v

    monkeypatch.setattr(C.FleetView, "work", checked)
    simulate_fleet(tr, n_replicas=4, router="least_work", engine="python")  # the Python fleet's view
    a = np.array(seen)
    assert len(a) > 10_000 and np.allclose(a[:, 0], a[:, 1], rtol=1e-9, atol=1e-9) and (a[:, 1] > 0).mean() > 0.9


@pytest.mark.parametrize(
    "factor,design",
    [
        ("routing", "bernoulli"),
        ("routing", "group"),
        ("routing", "switchback"),
        ("routing", "replica_block"),
        ("scheduling", "replica"),
        ("scheduling", "switchback"),
        ("scheduling", "replica_block"),
    ],
)
def test_littles_law_on_cluster_trajectories(busy, factor, design):
    tr, lam = busy
    t = ABTest(
        factor=factor,
        control="random" if factor == "routing" else "fcfs",
        treatment="least_work" if factor == "routing" else "hrrn",
        design=design,
        router="pod2",
        block_s=15.0,
    )
    res = run_experiment(tr, t, n_replicas=4, seed=3, warmup_s=10, total_rate=lam)
    for metric in ("e2el", "ttft"):
        ll = littles_law(res.trajectory(metric))
        assert abs(ll["rel_gap"]) < 0.03, (metric, ll)
        # time average vs arrival average (PASTA for Poisson arrivals)
        assert abs(ll["arrival_avg_n"] / ll["time_avg_n"] - 1) < 0.1


def test_designs_follow_their_definitions(busy):
    tr, lam = busy
    base = dict(control="random", treatment="jsq", p=0.3)
    b = run_experiment(tr, ABTest(design="bernoulli", **base), n_replicas=4, seed=1)
    assert abs(b.records.z.mean() - 0.3) < 0.03
    g = run_experiment(tr, ABTest(design="group", **base), n_replicas=4, seed=1)
    treated = np.flatnonzero(g.replica_arm)
    assert len(treated) == round(0.3 * 4)
    assert set(g.records[g.records.z == 1].replica) == set(treated)
    assert not set(g.records[g.records.z == 0].replica) & set(treated)
    s = run_experiment(tr, ABTest(design="switchback", block_s=10.0, **base), n_replicas=4, seed=1)
    blk = (s.records.arrival // 10.0).astype(int)
    assert (s.records.block == blk).all()
    assert (s.records.z.to_numpy() == s.block_arms[blk]).all()
    assert np.all(np.diff(s.block_arms) != 0)  # alternating
    r = run_experiment(
        tr, ABTest(factor="scheduling", control="fcfs", treatment="hrrn", design="replica", p=0.5), n_replicas=4, seed=2
    )
    assert r.replica_arm.sum() == 2
    assert (r.records.z.to_numpy() == r.replica_arm[r.records.replica.to_numpy()]).all()


def test_scheduling_switchback_changes_the_queue_order():
    """FCFS blocks admit waiting requests in arrival order; HRRN blocks do not."""
    tr, lam = fleet_trace("uniform", n_replicas=2, rho=0.97, n_requests=5000, seed=3, max_num_seqs=4)
    t = ABTest(
        factor="scheduling", control="fcfs", treatment="hrrn", design="switchback", block_s=40.0, router="random"
    )
    res = run_experiment(tr, t, n_replicas=2, seed=5, max_num_seqs=4)
    r = res.records
    viol = {0: 0, 1: 0}
    pairs = {0: 0, 1: 0}
    for _, g in r.groupby("replica"):
        g = g.sort_values("admit")
        adm, arr = g.admit.to_numpy(), g.arrival.to_numpy()
        arm = res.block_arms[np.minimum(adm // 40.0, len(res.block_arms) - 1).astype(int)]  # drain: last block
        for k in range(1, len(g)):
            # both waiting when the earlier one was admitted, admitted in the same block's policy
            if arr[k] < adm[k - 1] and arm[k] == arm[k - 1] and adm[k - 1] > arr[k - 1]:
                pairs[arm[k]] += 1
                viol[arm[k]] += arr[k] < arr[k - 1]
    assert pairs[0] > 100 and pairs[1] > 100
    assert viol[0] == 0 and viol[1] > 0.1 * pairs[1]


def test_reproducible_from_seed(busy):
    tr, lam = busy
    t = ABTest(control="pod2", treatment="least_work", design="bernoulli")
    a = run_experiment(tr, t, n_replicas=4, seed=7).records
    b = run_experiment(tr, t, n_replicas=4, seed=7).records
    c = run_experiment(tr, t, n_replicas=4, seed=8).records
    pd.testing.assert_frame_equal(a, b)
    assert not a.z.equals(c.z) and not a.replica.equals(c.replica)


def test_duration_aware_routing_beats_random_at_high_load(busy):
    tr, lam = busy
    e2el = {
        r: simulate_fleet(tr, n_replicas=4, router=r, warmup_s=10).summary()["mean_e2el_ms"]
        for r in ("random", "least_work", "pod2_work")
    }
    assert e2el["least_work"] < 0.93 * e2el["random"]
    assert e2el["pod2_work"] < 0.93 * e2el["random"]


def test_capacity_and_trace_load():
    cap = replica_capacity("librispeech")
    # fluid limit of a saturated replica: every admission stalls the batch for its encoder, and a full
    # batch of 32 decodes one token each per step_s(32): 1 / (E[enc] + E[tokens] step_s(32) / 32)
    sm = default_service_model()
    big = make_trace("librispeech", rate=1.0, n=100_000, seed=0)
    fluid = 1 / (np.mean(sm.windows(big.duration)) * sm.encode_s_per_window + big.tokens.mean() * sm.step_s(32) / 32)
    assert cap == pytest.approx(fluid, rel=0.03)
    assert replica_capacity("drift") == replica_capacity("uniform") < cap
    tr, lam = fleet_trace("drift", n_replicas=3, rho=0.8, n_requests=3000, seed=0)
    assert lam == pytest.approx(0.8 * 3 * replica_capacity("uniform"))
    third = len(tr) // 3
    assert tr.duration[:third].mean() < 10 < tr.duration[-third:].mean()  # LibriSpeech first, uniform 5-30 s last


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(factor="scheduling", control="fcfs", treatment="hrrn", design="bernoulli"), "ill-defined"),
        (dict(design="replica"), "design: 'replica' not allowed for a routing test"),
        (dict(p=1.0), "p: treatment probability"),
        (dict(block_s=0), "block_s"),
        (dict(control="nope"), "control: unknown router 'nope'"),
        (
            dict(factor="scheduling", control="fifo", treatment="hrrn", design="replica"),
            "control: unknown policy 'fifo'",
        ),
        (dict(factor="tuning"), "factor"),
    ],
)
def test_bad_design_fails_before_simulating(kw, match, monkeypatch):
    monkeypatch.setattr(X, "run_fleet", lambda *a, **k: pytest.fail("simulated before validating"))
    tr = make_trace("uniform", rate=5, n=50, seed=0)
    with pytest.raises(ValueError, match=match):
        run_experiment(tr, ABTest(**kw), n_replicas=4)


def test_group_designs_need_two_replicas():
    tr = make_trace("uniform", rate=5, n=50, seed=0)
    with pytest.raises(ValueError, match="n_replicas: the group design splits"):
        run_experiment(tr, ABTest(control="random", design="group"), n_replicas=1)
    with pytest.raises(ValueError, match="n_replicas"):
        simulate_fleet(tr, n_replicas=0)
    with pytest.raises(ValueError, match="rho"):
        fleet_trace("librispeech", n_replicas=2, rho=1.2, n_requests=100, seed=0)
    with pytest.raises(ValueError, match="warmup_s"):
        simulate_fleet(tr, n_replicas=2, warmup_s=-1)
    with pytest.raises(ValueError, match="router: unknown router 'fastest'"):
        simulate_fleet(tr, n_replicas=2, router="fastest")
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        simulate_fleet(tr, n_replicas=2, policy="fifo")
    with pytest.raises(ValueError, match="warmup_s"):
        run_experiment(tr, ABTest(), n_replicas=2, warmup_s=-1)
    with pytest.raises(ValueError, match="trace: need at least one request"):
        simulate_fleet(Trace.from_frame(tr.to_frame().iloc[:0]), n_replicas=2)
