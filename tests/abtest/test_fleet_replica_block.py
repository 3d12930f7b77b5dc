"""The replica x block design on the ASR fleet (asrsched.abtest.fleet_experiment): its definition, per-replica
policy switches on both engines, the switchback estimator on it, the study's tables, and bad input."""

import math

import numpy as np
import pandas as pd
import pytest

from asrsched.abtest import fleet_experiment as X
from asrsched.abtest.asr_fleet import ASRStudyConfig
from asrsched.abtest.asr_fleet_report import best_table, burn_in_table, recommendation, summary_table
from asrsched.abtest.estimators import estimate_all, switchback
from asrsched.abtest.fleet_experiment import ABTest, run_experiment
from asrsched.core.workloads import make_trace
from asrsched.sim import fleet as F
from asrsched.sim.fleet import fleet_trace, run_fleet
from asrsched.sim.parallel import run_study


@pytest.fixture(scope="module")
def busy():
    """LibriSpeech at 95 % of a 4-replica fleet's capacity (about 60 s of arrivals)."""
    return fleet_trace("librispeech", n_replicas=4, rho=0.95, n_requests=2500, seed=11)


def _sched(**kw):
    return ABTest(
        **dict(dict(factor="scheduling", control="fcfs", treatment="hrrn", design="replica_block", router="pod2"), **kw)
    )


def _route(**kw):
    return ABTest(**dict(dict(control="random", treatment="least_work", design="replica_block"), **kw))


@pytest.mark.parametrize("p", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("make", [_sched, _route], ids=["scheduling", "routing"])
def test_each_block_draws_round_pN_treated_replicas_and_a_request_takes_its_replicas_arm(busy, make, p):
    tr, lam = busy
    B = 4.0
    res = run_experiment(tr, make(p=p, block_s=B), n_replicas=4, seed=2, warmup_s=5, total_rate=lam)
    bra, r = res.block_replica_arms, res.records
    nb = math.floor(tr.arrival[-1] / B) + 1
    assert bra.shape == (nb, 4) and nb >= 12
    assert (bra.sum(axis=1) == round(4 * p)).all()  # every block: round(pN) treated, so both arms
    assert len({tuple(row) for row in bra}) > 1  # re-drawn per block
    assert (r.block.to_numpy() == np.floor(r.arrival.to_numpy() / B)).all()
    assert np.array_equal(res.replica_arm, bra[0]) and res.block_arms is None
    # scheduling: the arm of (the replica that served it, its arrival block); routing: routed only among its
    # arm's group of its arrival block, so the same identity holds
    assert (r.z.to_numpy() == bra[r.block.to_numpy(), r.replica.to_numpy()]).all()
    share = r.z.mean()
    if make is _route:  # z ~ Bernoulli(p) per request
        assert abs(share - p) < 3 * math.sqrt(p * (1 - p) / len(r))
    tj = res.trajectory("e2el")
    assert tj.design == "switchback" and tj.block_len == B and tj.meta["design"] == "replica_block"
    keep = r.arrival.to_numpy() >= 5
    assert np.array_equal(tj.block, r.block.to_numpy()[keep]) and np.array_equal(tj.z, r.z.to_numpy()[keep])
    by = res.by_replica()
    assert "arm" not in by and np.allclose(by.treated_share, res.measured.groupby("replica").z.mean())


def test_a_replica_orders_its_queue_by_its_arm_of_the_current_block():
    """FCFS replica-blocks admit waiting requests in arrival order; HRRN replica-blocks do not."""
    tr, lam = fleet_trace("uniform", n_replicas=2, rho=0.97, n_requests=5000, seed=3, max_num_seqs=4)
    B = 40.0
    res = run_experiment(tr, _sched(block_s=B, router="random"), n_replicas=2, seed=5, max_num_seqs=4)
    bra, r = res.block_replica_arms, res.records
    assert (bra.sum(axis=1) == 1).all() and 0 < bra[:, 0].mean() < 1  # replica 0 is in both arms over time
    viol, pairs = {0: 0, 1: 0}, {0: 0, 1: 0}
    for rep, g in r.groupby("replica"):
        g = g.sort_values("admit")
        adm, arr = g.admit.to_numpy(), g.arrival.to_numpy()
        arm = bra[np.minimum(adm // B, len(bra) - 1).astype(int), rep]  # after the last arrival: the last block's
        for k in range(1, len(g)):
            if arr[k] < adm[k - 1] and arm[k] == arm[k - 1] and adm[k - 1] > arr[k - 1]:
                pairs[arm[k]] += 1
                viol[arm[k]] += arr[k] < arr[k - 1]
    assert pairs[0] > 100 and pairs[1] > 100
    assert viol[0] == 0 and viol[1] > 0.1 * pairs[1]


def _same(a, b):
    pd.testing.assert_frame_equal(a.records, b.records, check_exact=True)
    assert a.events == b.events and np.array_equal(a.block_replica_arms, b.block_replica_arms)
    assert a.params["engine"] == "python" and b.params["engine"] == "numba"


@pytest.mark.parametrize(
    "test",
    [
        _sched(block_s=3.0, router="least_work", p=0.25),
        _sched(control="ljf", treatment="adaptive", block_s=5.0, router="pod2_work", p=0.75),
        _sched(control="sjf", treatment="fcfs", block_s=2.0, router="round_robin"),
        _route(block_s=3.0, policy="hrrn"),
        _route(control="round_robin", treatment="pod2_work", block_s=5.0, p=0.25, policy="sjf"),
    ],
    ids=lambda t: f"{t.factor}-{t.control}-{t.treatment}-{t.router}",
)
def test_python_and_compiled_engines_give_identical_records(busy, test):
    tr, lam = busy
    a = run_experiment(tr, test, n_replicas=4, seed=5, warmup_s=5, total_rate=lam, engine="python")
    b = run_experiment(tr, test, n_replicas=4, seed=5, warmup_s=5, total_rate=lam, engine="numba")
    _same(a, b)
    assert set(a.records.z) == {0, 1}


def test_engines_agree_on_deep_queues_that_grow_at_a_switch():
    """An overloaded fleet: waiting queues pass the compiled engine's first room (256) and grow at a switch."""
    tr = make_trace("uniform", rate=6.0, n=3000, seed=4)
    t = _sched(control="fcfs", treatment="hrrn", block_s=20.0, router="random")
    a = run_experiment(tr, t, n_replicas=2, seed=1, max_num_seqs=2, engine="python")
    b = run_experiment(tr, t, n_replicas=2, seed=1, max_num_seqs=2, engine="numba")
    _same(a, b)
    assert (a.records.admit - a.records.arrival).max() > 300  # deep queues: hundreds of requests waited


@pytest.mark.parametrize("engine", ["python", "numba"])
def test_a_switch_for_every_replica_is_one_switch_per_replica(busy, engine):
    """``(j, t, policy)``, ``(j, t, policy, -1)`` and one ``(j, t, policy, r)`` per replica give the same run;
    a switch of one replica changes only what that replica does next."""
    tr, _ = busy
    n = len(tr)
    js = [n // 5, n // 2, 4 * n // 5]
    ts = [float(tr.arrival[j]) - 0.3 for j in js]
    pols = ["hrrn", "fcfs", "sjf"]
    kw = dict(engine=engine, extra=None)
    routers = [("pod2", 7)]

    def go(sw):
        return run_fleet(tr, ["fcfs"] * 4, routers, switches=sw, **kw)[0]

    three = go([(j, t, p) for j, t, p in zip(js, ts, pols)])
    four = go([(j, t, p, -1) for j, t, p in zip(js, ts, pols)])
    each = go([(j, t, p, r) for j, t, p in zip(js, ts, pols) for r in range(4)])
    pd.testing.assert_frame_equal(three, four, check_exact=True)
    pd.testing.assert_frame_equal(three, each, check_exact=True)
    same = go([(js[0], ts[0], "fcfs", 2)])  # a switch to the policy a replica runs changes nothing
    one = go([(js[0], ts[0], "hrrn", 2)])
    assert not one.equals(same) and (one.admit != same.admit).sum() > 10
    # before the switch nothing differs: the same routing and the same admissions
    before = (same.admit < ts[0]).to_numpy()
    assert before.sum() > n // 10
    pd.testing.assert_frame_equal(one[before][["replica", "admit"]], same[before][["replica", "admit"]])
    # replica 2 reorders first: the first admission that differs is its, at or after the switch
    diff = np.flatnonzero((one.admit != same.admit).to_numpy())
    k = diff[np.argmin(np.minimum(one.admit.to_numpy()[diff], same.admit.to_numpy()[diff]))]
    assert one.replica[k] == 2 and min(one.admit[k], same.admit[k]) >= ts[0]


def test_compiled_router_draws_are_sized_by_the_requests_each_router_routes(busy, monkeypatch):
    tr, lam = busy
    seen = {}
    real = F.run_in_memory

    def spy(*a, **k):
        seen["routers"], seen["arm"], seen["cands"] = k["routers"], k["route_arm"], k["cands"]
        return real(*a, **k)

    monkeypatch.setattr(F, "run_in_memory", spy)
    res = run_experiment(tr, _route(control="pod2", treatment="random", block_s=2.0), n_replicas=4, seed=3)
    specs, arm = seen["routers"], seen["arm"]
    nb = res.block_replica_arms.shape[0]
    assert len(specs) == 2 * nb and [s[3] for s in specs] == [0, 1] * nb  # one router per arm, every block
    z = res.records.z.to_numpy()
    assert np.array_equal(arm, 2 * res.records.block.to_numpy() + z)
    # pod2 over a group of 2 draws at most 2 uniforms per request it routes, random one; +1 spare each
    assert len(specs[0][2]) == 2 * int((z == 0).sum()) + 1 and len(specs[1][2]) == int((z == 1).sum()) + 1
    assert all(len(s[2]) == 0 for s in specs[2:])  # a router's draws go with its first arm only
    assert sum(len(s[2]) for s in specs) < 2 * len(tr) + 2  # not blocks x requests


def test_switchback_estimator_is_the_difference_of_arm_means_over_kept_requests(busy):
    """Control == treatment: the estimate is exactly the hand-computed difference of arm means past the burn-in,
    and its batch-means CI holds zero in most seeds."""
    tr, lam = busy
    B, burn = 4.0, 1.0
    covered = 0
    for seed in range(5):
        for test in (_sched(treatment="fcfs", block_s=B), _route(treatment="random", block_s=B)):
            res = run_experiment(tr, test, n_replicas=4, seed=seed, warmup_s=5, total_rate=lam)
            tj = res.trajectory("e2el")
            e = switchback(tj, burn, n_batches=5)
            m = res.measured
            kept = m[(m.arrival - m.block * B).to_numpy() >= burn]
            hand = kept[kept.z == 1].e2el.mean() - kept[kept.z == 0].e2el.mean()
            assert e.value == pytest.approx(hand, rel=1e-9, abs=1e-12)
            assert estimate_all(tj, burn_in=burn, n_batches=5)["switchback"].value == e.value
            covered += e.lo <= 0 <= e.hi
    assert covered >= 8  # of 10 (95 % intervals)


def test_the_study_runs_replica_block_and_its_tables_name_it():
    cfg = ASRStudyConfig(
        workloads=("librispeech",),
        n_replicas=2,
        rho=0.9,
        n_requests=2500,
        warmup_s=5.0,
        block_s=10.0,
        burn_in_s=2.0,
        sb_burn_ins=(0.0, 2.0),
        L=150,
        L_factors=(1.0,),
        n_batches=10,
        alpha_batches=20,
        reps=3,
        truth_seeds=2,
        routing_designs=("switchback", "replica_block"),
        scheduling_designs=("replica_block",),
    )
    res = run_study(cfg, workers=1, progress=False)
    e = res.estimates
    rb = e[e.design == "replica_block"]
    assert set(rb.factor) == {"routing", "scheduling"} and set(rb.estimator) == {"switchback"}
    assert set(rb.burn_in) == {0.0, 2.0} and len(rb) == 2 * 3 * 2 * 2 * 2  # factors x reps x metrics x stats x burn-ins
    s = summary_table(res)
    assert {("routing", "replica_block"), ("scheduling", "replica_block")} <= set(zip(s.factor, s.design))
    b = best_table(s)
    rt = b[b.factor == "routing"]
    assert rt.replica_block_rmse.notna().all() and rt.switchback_rmse.notna().all()
    cell = s[(s.factor == "routing") & (s.design == "replica_block") & (s.metric == "e2el") & (s.stat == "mean")]
    assert rt[(rt.metric == "e2el") & (rt.stat == "mean")].replica_block_rmse.iloc[0] == cell.rmse.iloc[0]
    bi = burn_in_table(res)
    assert set(zip(bi.factor, bi.design)) == {
        ("routing", "switchback"),
        ("routing", "replica_block"),
        ("scheduling", "replica_block"),
    }
    assert len(bi) == 3 * 2 * 2 * 2  # (factor, design) x metrics x stats x burn-ins
    assert "For an operator" in recommendation(res, s)


@pytest.mark.parametrize(
    "kw,n_replicas,match",
    [
        (dict(p=0.2), 2, "n_replicas: the replica_block design splits replicas round"),
        (dict(p=0.8), 2, "n_replicas: the replica_block design splits replicas round"),
        (dict(router="random"), 1, "n_replicas: the replica_block design splits"),
        (dict(block_s=0.0), 4, "block_s: the block length must be > 0"),
        (dict(block_s=float("nan")), 4, "block_s"),
        (dict(design="group"), 4, "design: 'group' not allowed for a scheduling test.*'replica_block'"),
        (dict(design="replica_blocks"), 4, "design: 'replica_blocks' not allowed"),
    ],
)
def test_bad_input_fails_before_simulating(kw, n_replicas, match, monkeypatch):
    monkeypatch.setattr(X, "run_fleet", lambda *a, **k: pytest.fail("simulated before validating"))
    tr = make_trace("uniform", rate=5, n=50, seed=0)
    with pytest.raises(ValueError, match=match):
        run_experiment(tr, _sched(**kw), n_replicas=n_replicas)
    if "design" not in kw:
        with pytest.raises(ValueError, match=match):
            run_experiment(tr, _route(**{k: v for k, v in kw.items() if k != "router"}), n_replicas=n_replicas)


def test_bad_fleet_inputs_and_study_configs_name_the_parameter():
    tr = make_trace("uniform", rate=5, n=50, seed=0)
    with pytest.raises(ValueError, match=r"switches: need \(request index, time, policy\[, replica in \[-1, 2\)\]\)"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], switches=[(3, 0.5, "hrrn", 2)])
    with pytest.raises(ValueError, match="switches"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], switches=[(3, 0.5)])
    with pytest.raises(ValueError, match=r"arm_router: need one entry in \[0, 1\)"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], arm_router=[0, 1])
    with pytest.raises(ValueError, match=r"cands: .* per routing arm"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], arm_router=[0, 0], cands=[[0]])
    with pytest.raises(ValueError, match=r"route_arm: need one entry in \[0, 2\)"):
        run_fleet(tr, ["fcfs"] * 2, [("random", 0)], arm_router=[0, 0], route_arm=np.full(50, 2))
    base = dict(workloads=("uniform",), n_replicas=2, reps=2, truth_seeds=2)
    with pytest.raises(ValueError, match="n_replicas: the replica_block design splits"):
        ASRStudyConfig(**dict(base, n_replicas=1), scheduling_designs=("replica_block",), routing_designs=()).validate()
    with pytest.raises(ValueError, match="block_s: a run of .* fewer than 4 blocks"):
        ASRStudyConfig(
            **base, n_requests=600, warmup_s=0.0, L=50, block_s=500.0, burn_in_s=1.0, sb_burn_ins=(0.0,)
        ).replace(routing_designs=("replica_block",), scheduling_designs=()).validate()
