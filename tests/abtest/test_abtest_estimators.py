"""Estimators on the plain Trajectory interface: formulas, CIs, A/A centring, the naive bias.

Budget: ~15 s on 2 cores (numba cache warm).
"""

from __future__ import annotations

import numpy as np
import pytest
from abtest_oracle import readable_dq, readable_mixed_dq

from asrsched.abtest import dq as D
from asrsched.abtest import estimators as E
from asrsched.abtest.estimators import Trajectory, default_L, estimate_all, q_values
from asrsched.abtest.model import SystemConfig, simulate_supermarket


def _toy(n=400, seed=0, total_rate_at=False):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(0.5, n))
    z = (rng.random(n) < 0.4).astype(np.int8)
    resp = rng.exponential(1.0, n) + 0.3 * z
    nb = rng.integers(0, 6, n)
    la = 2.0 + np.sin(arr) if total_rate_at else None
    return Trajectory(arrival=arr, z=z, response=resp, n_before=nb, total_rate=2.0, total_rate_at=la)


@pytest.mark.parametrize("total_rate_at", [False, True])
def test_q_values_match_brute_force_sums(total_rate_at):
    tr = _toy(total_rate_at=total_rate_at)
    L = 7
    qw, qq = q_values(tr, L, "w"), q_values(tr, L, "q")
    n = len(tr)
    assert qw.size == qq.size == n - L
    lam = tr.total_rate_at if total_rate_at else np.full(n, tr.total_rate)
    for k in (0, 1, 50, n - L - 1):
        assert qw[k] == pytest.approx(tr.response[k : k + L].sum())
        assert qq[k] == pytest.approx((tr.n_before[k + 1 : k + L + 1] / lam[k + 1 : k + L + 1]).sum())


def test_dq_is_difference_of_group_means_and_normalised_ipw():
    tr = _toy()
    L = 5
    Q = q_values(tr, L, "w")
    z = tr.z[: Q.size]
    est = E.wdq(tr, L, n_batches=4).value
    assert est == pytest.approx(Q[z == 1].mean() - Q[z == 0].mean())
    p = z.mean()
    w1, w0 = z / p, (1 - z) / (1 - p)
    assert est == pytest.approx((w1 * Q).sum() / w1.sum() - (w0 * Q).sum() / w0.sum())
    assert E.naive(tr, 4).value == pytest.approx(tr.response[tr.z == 1].mean() - tr.response[tr.z == 0].mean())


def test_mixed_dq_is_the_alpha_combination():
    tr = _toy()
    w, q = E.wdq(tr, 6, 5).value, E.qdq(tr, 6, 5).value
    m = E.mixed_dq(tr, 6, alpha=0.3, n_batches=5)
    assert m.value == pytest.approx(0.3 * w + 0.7 * q) and m.alpha == 0.3
    mb = E.mixed_dq(tr, 6, n_batches=10)
    assert mb.value == pytest.approx(mb.alpha * w + (1 - mb.alpha) * q)


def test_optimal_alpha_minimises_variance():
    rng = np.random.default_rng(1)
    common = rng.normal(size=5000)
    w = common + 0.3 * rng.normal(size=5000)
    q = 1.4 * common + 0.5 * rng.normal(size=5000)  # correlated, unequal variances
    a = E.optimal_alpha(w, q)
    grid = np.linspace(-3, 4, 701)
    var = [np.var(g * w + (1 - g) * q) for g in grid]
    assert a == pytest.approx(grid[int(np.argmin(var))], abs=0.02)
    assert a > 1  # a control variate: weight outside [0, 1]
    assert np.var(a * w + (1 - a) * q) < 0.95 * min(np.var(w), np.var(q))


def test_batch_means_ci_has_nominal_coverage_on_independent_data():
    rng = np.random.default_rng(2)
    hits = []
    for _ in range(400):
        n = 2000
        z = (rng.random(n) < 0.5).astype(np.int8)
        resp = rng.exponential(1.0, n) + 0.5 * z
        tr = Trajectory(arrival=np.arange(n, dtype=float), z=z, response=resp, n_before=np.zeros(n), total_rate=1.0)
        e = E.naive(tr, n_batches=20)
        hits.append(e.lo <= 0.5 <= e.hi)
    assert 0.91 <= np.mean(hits) <= 0.98


def test_switchback_drops_burn_in_and_compares_blocks():
    arr = np.arange(0.5, 40.0, 1.0)  # 40 jobs, blocks of 10 time units
    block = (arr // 10).astype(int)
    z = (block % 2).astype(np.int8)
    t_in = arr - block * 10
    resp = np.where(t_in < 3, 100.0, 1.0 + z)  # the first 3 time units of each block are carry-over
    tr = Trajectory(
        arrival=arr,
        z=z,
        response=resp,
        n_before=np.zeros(40),
        total_rate=1.0,
        block=block,
        block_len=10.0,
        design="switchback",
    )
    assert E.switchback(tr, burn_in=3.0, n_batches=2).value == pytest.approx(1.0)
    assert E.switchback(tr, burn_in=0.0, n_batches=2).value == pytest.approx(0.7)  # diluted by the carry-over jobs
    resp2 = np.where((t_in < 3) & (z == 1), 100.0, 1.0 + z)  # carry-over only after switching to treatment
    tr2 = Trajectory(
        arrival=arr, z=z, response=resp2, n_before=np.zeros(40), total_rate=1.0, block=block, block_len=10.0
    )
    assert E.switchback(tr2, burn_in=3.0, n_batches=2).value == pytest.approx(1.0)
    assert E.switchback(tr2, burn_in=0.0, n_batches=2).value > 20


def test_from_records_counts_jobs_in_system_and_area():
    tr = Trajectory.from_records(arrival=[2.0, 0.0, 1.0], finish=[2.5, 3.0, 1.5], z=[1, 0, 1], t_end=3.0)
    assert np.array_equal(tr.arrival, [0.0, 1.0, 2.0])  # sorted by arrival
    assert np.array_equal(tr.n_before, [0, 1, 1])
    assert np.array_equal(tr.response, [3.0, 0.5, 0.5])
    assert tr.area == pytest.approx(4.0)
    assert tr.total_rate == pytest.approx(1.0)


def test_default_L_is_30_N_lam():
    assert default_L(20 * 0.8) == 480
    tr = _toy()
    assert default_L(tr) == 60


@pytest.mark.parametrize("L", [0, -5, 1.5, 10_000])
def test_bad_horizon_is_refused(L):
    with pytest.raises(ValueError, match="L"):
        E.wdq(_toy(), L)


def test_bad_estimator_inputs_are_refused():
    tr = _toy()
    with pytest.raises(ValueError, match="n_batches"):
        E.naive(tr, n_batches=1)
    with pytest.raises(ValueError, match="alpha"):
        E.mixed_dq(tr, 5, alpha="oracle")
    with pytest.raises(ValueError, match="traj"):
        E.switchback(tr)
    with pytest.raises(ValueError, match="z"):
        Trajectory(arrival=[0, 1], z=[0, 2], response=[1, 1], n_before=[0, 0], total_rate=1.0)
    with pytest.raises(ValueError, match="arrival"):
        Trajectory(arrival=[1, 0], z=[0, 1], response=[1, 1], n_before=[0, 0], total_rate=1.0)
    with pytest.raises(ValueError, match="total_rate"):
        Trajectory(arrival=[0, 1], z=[0, 1], response=[1, 1], n_before=[0, 0], total_rate=0.0)
    with pytest.raises(ValueError, match="finish"):
        Trajectory.from_records([0, 1], [2, 0.5], [0, 1])


def _reps(cfg, designs, R, L):
    out = {}
    for r in range(R):
        for design in designs:
            tr = simulate_supermarket(cfg.replace(design=design), 1000 * r + len(design))
            for k, e in estimate_all(tr, L=L, burn_in=10.0).items():
                out.setdefault(k, []).append(e.value)
    return {k: np.array(v) for k, v in out.items()}


def test_same_policy_in_both_arms_centres_every_estimator_on_zero():
    cfg = SystemConfig(n_servers=10, lam=0.8, control="pod2", treatment="pod2", n_requests=60_000, block_len=40.0)
    res = _reps(cfg, ("bernoulli", "group", "switchback"), R=12, L=None)
    assert set(res) == {"naive", "qdq", "wdq", "mixed_dq", "group", "switchback"}
    for k, v in res.items():
        se = v.std(ddof=1) / np.sqrt(v.size)
        assert abs(v.mean()) < 4 * se + 1e-9, (k, v.mean(), se)
        assert v.std() > 0


def test_naive_shrinks_the_effect_and_dq_removes_much_of_that_bias():
    cfg = SystemConfig(n_servers=10, lam=0.8, control="random", treatment="pod2", n_requests=150_000)
    truth = np.mean(
        [simulate_supermarket(cfg.replace(design="treatment", n_requests=1_000_000), s).response.mean() for s in (1, 2)]
    ) - np.mean(
        [simulate_supermarket(cfg.replace(design="control", n_requests=1_000_000), s).response.mean() for s in (1, 2)]
    )
    assert truth < -2  # Power-of-2 beats random by a lot
    res = _reps(cfg, ("bernoulli",), R=6, L=None)
    naive, wdq = res["naive"].mean(), res["wdq"].mean()
    assert np.sign(naive) == np.sign(truth) and 0.1 < naive / truth < 0.6  # biased toward zero ("low")
    assert abs(wdq - truth) < 0.7 * abs(naive - truth)
    # DQ pays with variance: far noisier than naive
    assert res["wdq"].std() > 10 * res["naive"].std()


def test_time_integral_cost_matches_the_integral_of_the_number_in_system():
    # three jobs: X(t) = 1 on [0,1), 2 on [1,1.5), 1 on [1.5,2), 2 on [2,2.5), 1 on [2.5,3)
    tr = Trajectory.from_records(arrival=[0.0, 1.0, 2.0], finish=[3.0, 1.5, 2.5], z=[0, 1, 0])
    assert np.allclose(tr.area_at, [0.0, 1.0, 1.0 + 1.0 + 0.5])
    assert np.allclose(q_values(tr, 1, "qt"), [1.0, 1.5])  # integral over [t_k, t_{k+1}]
    # on a simulated run: the kernel's area_at differences equal a recount from the records
    sim = simulate_supermarket(SystemConfig(n_servers=6, lam=0.8, n_requests=20_000, warmup_requests=0), 2)
    rec = Trajectory.from_records(sim.arrival, sim.arrival + sim.response, sim.z)
    assert np.allclose(np.diff(sim.area_at), np.diff(rec.area_at), rtol=0, atol=1e-6)
    assert sim.area_at[-1] - sim.area_at[0] == pytest.approx(sim.area, rel=1e-12)
    with pytest.raises(ValueError, match="area_at"):
        q_values(_toy(), 5, "qt")
    with pytest.raises(ValueError, match="cost"):
        q_values(_toy(), 5, "x")


@pytest.mark.parametrize("L", [3, 40, 400])
def test_compiled_dq_family_equals_the_numpy_reference(L):
    tr = simulate_supermarket(SystemConfig(n_servers=8, lam=0.8, n_requests=40_000, amp=0.3, period=80.0), 4)
    fam = E.dq_family(tr, L, n_batches=7, alpha_batches=30, costs=("w", "q", "qt"))
    ref = {
        "wdq": readable_dq(tr, L, "w", 7),
        "qdq": readable_dq(tr, L, "q", 7),
        "mixed_dq": readable_mixed_dq(tr, L, n_batches=7, alpha_batches=30),
    }
    members = {
        "wdq": E.wdq(tr, L, 7),
        "qdq": E.qdq(tr, L, 7),
        "mixed_dq": E.mixed_dq(tr, L, n_batches=7, alpha_batches=30),
    }
    fixed = E.mixed_dq(tr, L, alpha=0.3, n_batches=7)
    assert fixed.alpha == 0.3
    assert fixed.value == pytest.approx(readable_mixed_dq(tr, L, n_batches=7, alpha=0.3).value, rel=1e-9, abs=1e-12)
    for k, r in ref.items():
        assert members[k].value == pytest.approx(fam[k].value, rel=1e-12), k  # the public members are the family's
        f = fam[k]
        assert f.value == pytest.approx(r.value, rel=1e-9, abs=1e-12), k
        assert np.allclose(f.batches, r.batches, rtol=1e-9, atol=1e-12, equal_nan=True), k
        assert (f.lo, f.hi) == pytest.approx((r.lo, r.hi), rel=1e-9, abs=1e-12), k
    assert fam["mixed_dq"].alpha == pytest.approx(ref["mixed_dq"].alpha, rel=1e-9)
    qt = q_values(tr, L, "qt")
    z = tr.z[: qt.size]
    assert fam["qtdq"].value == pytest.approx(qt[z == 1].mean() - qt[z == 0].mean(), rel=1e-9)
    a = fam["mixed_dq_qt"].alpha
    assert fam["mixed_dq_qt"].value == pytest.approx(a * fam["wdq"].value + (1 - a) * fam["qtdq"].value)
    sweep = E.dq_sweep(tr, [L, 2 * L], n_batches=7, alpha_batches=30)
    assert sweep[L]["wdq"].value == fam["wdq"].value and set(sweep) == {L, 2 * L}
    with pytest.raises(ValueError, match="costs"):
        E.dq_family(tr, L, costs=("q",))


def test_compiled_sums_are_bit_identical_to_the_plain_numpy_ones():
    """The one-pass prefix sums, the two-cost segment pass and the branch-free masked sums add the same
    numbers in the same order as the numpy expressions and the one-cost pass they replace: equal bits."""
    rng = np.random.default_rng(7)
    n = 20_000
    w = rng.exponential(size=n)
    nb = rng.integers(0, 40, n).astype(np.int32)
    total_rate_at = rng.uniform(10.0, 20.0, n)
    z = (rng.random(n) < 0.5).astype(np.int8)
    assert np.array_equal(D._cumsum0(w, np.ones(1)), np.concatenate(([0.0], np.cumsum(w))))
    assert np.array_equal(D._cumsum0(nb, np.array([16.0])), np.concatenate(([0.0], np.cumsum(nb / 16.0))))
    assert np.array_equal(D._cumsum0(nb, total_rate_at), np.concatenate(([0.0], np.cumsum(nb / total_rate_at))))
    Cw, Cq = D._cumsum0(w, np.ones(1)), D._cumsum0(nb, total_rate_at)
    seg = np.array([0, 37, 5000, 12_345, n - 300], np.int64)
    s, s1, n1 = D._sweep_sums2(Cw, 0, Cq, 1, np.array([250]), z, seg, seg[None, :], np.array([seg.size - 1]))
    for row, (C, o) in enumerate(((Cw, 0), (Cq, 1))):
        a, a1, c1 = D._segment_sums(C, o, 250, z, seg)
        assert np.array_equal(s[0, row], a) and np.array_equal(s1[0, row], a1) and np.array_equal(n1[0], c1)
    ms, ms1, mn1 = E._masked_sums(w, z, seg)
    for i in range(seg.size - 1):
        part, zp = w[seg[i] : seg[i + 1]], z[seg[i] : seg[i + 1]]
        acc = acc1 = 0.0
        for x, t in zip(part.tolist(), zp.tolist()):  # the plain loop: add the treated ones only
            acc += x
            if t == 1:
                acc1 += x
        assert ms[i] == acc and ms1[i] == acc1 and mn1[i] == int(zp.sum())


def _arm_diff(w, z):
    return w[z == 1].mean() - w[z == 0].mean() if 0 < (z == 1).sum() < z.size else np.nan


def test_switchback_in_one_pass_equals_the_masked_copies_and_refuses_unordered_blocks():
    """The fused switchback estimator against the plain recipe (boolean mask, np.unique, searchsorted,
    masked sums per batch), bit for bit, with and without burn-in; blocks out of order are an error."""
    cfg = SystemConfig(
        n_servers=10, lam=0.8, n_requests=40_000, warmup_requests=2_000, design="switchback", block_len=40.0
    )
    tr = simulate_supermarket(cfg, 5)
    for burn in (0.0, 10.0):
        keep = (tr.arrival - tr.block * tr.block_len) >= burn
        w, z, blk = tr.response[keep], tr.z[keep], tr.block[keep]
        v = w[z == 1].mean() - w[z == 0].mean()
        ub = np.unique(blk)
        nb = min(20, ub.size // 2)
        gst = ub[np.linspace(0, ub.size, nb + 1).astype(np.int64)[:-1]]
        st = np.append(np.searchsorted(blk, gst, side="left"), blk.size)
        bats = np.array([_arm_diff(w[a:b], z[a:b]) for a, b in zip(st[:-1], st[1:])])
        est = E.switchback(tr, burn, 20)
        assert est.value == pytest.approx(v, rel=1e-12) and est.batches.size == nb >= 10
        np.testing.assert_allclose(est.batches, bats, rtol=1e-12)  # NaN where a group holds one arm only
    bad = Trajectory(**{**tr.__dict__, "block": tr.block[::-1].copy()})
    with pytest.raises(ValueError, match="blocks must not decrease"):
        E.switchback(bad, 0.0, 20)


@pytest.mark.parametrize("costs", [("w", "q"), ("w", "q", "qt"), ("w",)])
def test_dq_sweep_one_pass_gives_the_bits_of_dq_family_per_horizon(costs):
    """Every horizon in one pass (each horizon's segments end at their own points, the longest L drops out
    first): every estimate, CI, batch and alpha equal to dq_family's, bit for bit."""
    tr = simulate_supermarket(SystemConfig(n_servers=8, lam=0.8, n_requests=30_000), 5)
    Ls = [900, 3, 40, 40, 401, 1]
    sweep = E.dq_sweep(tr, Ls, n_batches=7, alpha_batches=30, costs=costs)
    assert list(sweep) == [900, 3, 40, 401, 1]
    for L in Ls:
        fam = E.dq_family(tr, L, n_batches=7, alpha_batches=30, costs=costs)
        assert set(sweep[L]) == set(fam)
        for k, f in fam.items():
            g = sweep[L][k]
            np.testing.assert_equal(g.as_dict(), f.as_dict())  # NaN equal to NaN, everything else exact
            assert np.array_equal(g.batches, f.batches, equal_nan=True), (L, k)
    assert E.dq_sweep(tr, []) == {}
    with pytest.raises(ValueError, match="L"):
        E.dq_sweep(tr, [40, 0])
    with pytest.raises(ValueError, match="costs"):
        E.dq_sweep(tr, [40], costs=("q",))
