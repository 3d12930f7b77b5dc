"""The ASR A/B study: null effects centred on zero, reproducibility, tables vs hand computation (notebook 06's
run: ``tests/notebook_checks.py``)."""

import math

import numpy as np
import pandas as pd
import pytest
from extras import need
from study_params import TINY_ASR_STUDY

from asrsched.abtest import asr_fleet as A
from asrsched.abtest import asr_fleet_report as R
from asrsched.abtest.asr_fleet import ASRStudyConfig, p90_cost_trajectory, quantile_estimate
from asrsched.abtest.asr_fleet_report import best_table, recommendation, summary_table
from asrsched.abtest.estimators import Trajectory, mixed_dq, qdq, wdq
from asrsched.sim import parallel
from asrsched.sim.parallel import run_study

TINY = TINY_ASR_STUDY


def _null_check(res, min_rows):
    """Every estimator's replications are centred on zero: |mean| <= 4 standard errors."""
    e = res.estimates[res.estimates.headline.astype(bool)]
    groups = list(e.groupby(["factor", "design", "estimator", "metric", "stat"]))
    assert len(groups) >= min_rows
    for key, g in groups:
        v = g.estimate.to_numpy(float)
        se = v.std(ddof=1) / math.sqrt(len(v))
        assert abs(v.mean()) <= 4 * se + 1e-12, (key, v)
    assert (res.truth.gte == 0).all()  # the same setting twice is one run: the truth is exactly zero


def test_identical_policies_centre_every_estimator_on_zero():
    cfg = ASRStudyConfig(
        **dict(TINY, reps=8, n_requests=2000),
        routing_control="pod2",
        routing_treatment="pod2",
        scheduling_control="hrrn",
        scheduling_treatment="hrrn",
        scheduling_router="pod2",
        routing_designs=("bernoulli", "group", "switchback", "replica_block"),
        scheduling_designs=("replica", "switchback", "replica_block"),
    )
    res = run_study(cfg, workers=1, progress=False)
    # routing: naive, qdq, wdq, mixed, group, switchback, replica_block/switchback; scheduling: replica,
    # switchback, replica_block/switchback; x 2 metrics x 2 stats
    _null_check(res, min_rows=10 * 4)
    assert set(res.estimates[res.estimates.design == "replica_block"].factor) == {"routing", "scheduling"}


def test_random_vs_random_router_shows_no_effect():
    cfg = ASRStudyConfig(
        **dict(TINY, reps=8, n_requests=2000),
        routing_control="random",
        routing_treatment="random",
        scheduling_designs=(),
    )
    res = run_study(cfg, workers=1, progress=False)
    _null_check(res, min_rows=6 * 4)
    # the arms also see the same fleet: treated share equals p and per-arm load is balanced
    assert abs(res.little[res.little.design == "bernoulli"].treated_share.mean() - 0.5) < 0.02


@pytest.fixture(scope="module")
def tiny():
    return run_study(ASRStudyConfig(**TINY), workers=1, progress=False)


def test_study_reproducible_from_seed_and_in_parallel(tiny):
    a = tiny
    sub = dict(TINY, scheduling_designs=("replica",), routing_designs=("bernoulli",))
    # every task's seed derives from (seed, workload, replication, design): a subset study, run on two
    # worker processes, reproduces the same rows
    b = run_study(ASRStudyConfig(**sub), workers=2, progress=False)
    c = run_study(ASRStudyConfig(**dict(sub, seed=1)), workers=1, progress=False)
    key = ["workload", "factor", "design", "rep", "metric", "stat", "estimator", "L", "burn_in"]
    sa = a.estimates[a.estimates.design.isin(["bernoulli", "replica"])].sort_values(key).reset_index(drop=True)
    sb = b.estimates.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(sa, sb)
    pd.testing.assert_frame_equal(a.truth, b.truth)
    kc = c.estimates.sort_values(key).reset_index(drop=True)
    assert len(kc) == len(sa) and not np.allclose(sa.estimate, kc.estimate)
    # the true effect of duration-aware routing is real and negative; Little's law holds in every run
    t = a.truth.set_index(["factor", "metric", "stat"])
    assert t.loc[("routing", "ttft", "mean"), "gte"] < -3 * t.loc[("routing", "ttft", "mean"), "gte_se"]
    assert a.little.rel_gap.abs().max() < 0.05


def test_summary_matches_hand_computation_and_tables_are_consistent(tiny):
    res = tiny
    s = summary_table(res)
    row = s[(s.design == "bernoulli") & (s.estimator == "naive") & (s.metric == "e2el") & (s.stat == "mean")].iloc[0]
    v = res.estimates.query("design == 'bernoulli' and estimator == 'naive' and metric == 'e2el' and stat == 'mean'")
    runs = res.truth_runs[res.truth_runs.policy == "fcfs"]
    truth = runs.pivot_table(index="k", columns="router", values="mean_e2el")
    gte = float((truth["least_work"] - truth["random"]).mean())
    assert row.truth == pytest.approx(gte)
    assert row.bias == pytest.approx(v.estimate.mean() - gte)
    assert row.mse == pytest.approx(np.mean((v.estimate - gte) ** 2))
    assert row.sd == pytest.approx(v.estimate.std(ddof=1))
    assert set(s.estimator) == {"naive", "group", "switchback", "qdq", "wdq", "mixed_dq"}
    b = best_table(s)
    for r in b.itertuples():
        cell = s[(s.workload == r.workload) & (s.factor == r.factor) & (s.metric == r.metric) & (s.stat == r.stat)]
        assert r.best_rmse == pytest.approx(cell.rmse.min())
    text = recommendation(res, s)
    assert "For an operator" in text
    for r in b.itertuples():  # a winner is named exactly where its RMSE CI clears every other's
        cell = s[(s.workload == r.workload) & (s.factor == r.factor) & (s.metric == r.metric) & (s.stat == r.stat)]
        others = cell[cell.rmse > cell.rmse.min()]
        assert r.resolved == bool((others.rmse_ci_lo > r.best_rmse_ci_hi).all())
        assert r.winner == (r.best if r.resolved else "tie")
    if (~b.resolved).any():
        assert "Statistical tie (overlapping RMSE CIs)" in text
    # 95 % CIs: t interval for the bias (truth SE in quadrature), bootstrap for sd and RMSE
    from scipy import stats

    n = len(v)
    half = stats.t.ppf(0.975, n - 1) * math.sqrt(row.sd**2 / n + row.truth_se**2)
    assert row.bias_ci_hi - row.bias == pytest.approx(half) and row.bias - row.bias_ci_lo == pytest.approx(half)
    assert (s.sd_ci_lo <= s.sd_ci_hi).all() and (s.rmse_ci_lo < s.rmse_ci_hi).all()
    assert (s.rmse_ci_lo <= s.rmse * 1.0001).mean() > 0.9 and (s.rmse <= s.rmse_ci_hi).all()
    pd.testing.assert_frame_equal(s, summary_table(res))  # the bootstrap is seeded from the cell: reproducible
    ab = R.ablation_table(res)
    assert set(ab.L) == {75, 150} and set(ab.estimator) == {"qdq", "wdq", "mixed_dq"}
    bi = R.burn_in_table(res)
    assert set(bi.burn_in_s) == {0.0, 2.0}
    need("plotly")
    from asrsched.figures import ab_asr as F

    figs = [
        F.fig_truth(res),
        F.fig_estimates(res, summary=s),
        F.fig_rmse(s),
        F.fig_rmse(s, "scheduling"),
        F.fig_tail(s),
        F.fig_ablation(ab),
    ]
    for f in figs:
        assert f.layout.title.text and len(f.data) > 0
    # a bar beyond the tail figure's axis is cut there, and says its value on the bar, in its hover and the subtitle
    planted = s.copy()
    cell = (planted.stat == "p90") & (planted.estimator == "mixed_dq")
    planted.loc[cell, "mean"] = -15.0 * planted.loc[cell, "truth"]
    fig = F.fig_tail(planted)
    (bars,) = [t for t in fig.data if t.name == "mixed DQ" and t.xaxis == "x2"]
    assert min(bars.y) == -F.TAIL_CLIP and all(np.isclose(bars.customdata, -15.0))
    assert list(bars.text) == ["-15×"] * len(bars.y) and not any(bars.error_y.array)  # no whisker on a cut bar
    assert min(fig.layout.yaxis.range) < -F.TAIL_CLIP and "cut at the axis" in fig.layout.title.text
    for t in F.fig_tail(s).data:  # a label exactly where a bar is cut
        assert [bool(x) for x in t.text] == [abs(v) > F.TAIL_CLIP for v in t.customdata]
    # the figure check's data rules pass it: cut bars say their value, and no whisker of an uncut bar is cut
    from asrsched.figures.data_check import data_problems

    for f in (fig, F.fig_tail(s)):
        j = f.to_plotly_json()
        assert data_problems(j["data"], j["layout"]) == []
    wide = s.copy()  # a bar just inside the axis whose whisker reaches past it widens the axis
    wcell = (wide.stat == "mean") & (wide.estimator == "wdq")
    wide.loc[wcell, "mean"] = 2.9 * wide.loc[wcell, "truth"]
    wide.loc[wcell, "sd"] = 2.0 * wide.loc[wcell, "truth"].abs() * np.sqrt(wide.loc[wcell, "reps"])
    wf = F.fig_tail(wide)
    assert max(wf.layout.yaxis.range) >= 4.9 * 1.07 - 1e-9
    j = wf.to_plotly_json()
    assert data_problems(j["data"], j["layout"]) == []


def test_p90_influence_cost_tracks_quantile_differences():
    rng = np.random.default_rng(0)
    n = 200_000
    z = (rng.random(n) < 0.5).astype(np.int8)
    w = rng.lognormal(0.0, 0.5, n) * np.where(z == 1, 0.9, 1.0)
    tr = Trajectory(arrival=np.arange(n, dtype=float), z=z, response=w, n_before=np.zeros(n), total_rate=1.0)
    c = p90_cost_trajectory(tr).response
    direct = np.quantile(w[z == 1], 0.9) - np.quantile(w[z == 0], 0.9)
    linear = c[z == 1].mean() - c[z == 0].mean()
    assert direct < -0.1 and linear == pytest.approx(direct, rel=0.1)
    assert abs(c.mean() - np.quantile(w, 0.9)) < 1e-9  # centred on the pooled P90
    assert quantile_estimate(tr, "naive").value == pytest.approx(direct)


def test_mixed_dq_for_p90_mixes_a_mean_estimate_in():
    """qDQ ignores the per-request cost: for P90, mixed DQ = alpha*wDQ(P90 cost) + (1-alpha)*qDQ(mean)."""
    from asrsched.abtest.fleet_experiment import ABTest, fleet_trace, run_experiment

    tr, lam = fleet_trace("librispeech", n_replicas=2, rho=0.9, n_requests=3000, seed=2)
    res = run_experiment(tr, ABTest(control="random", treatment="least_work"), n_replicas=2, seed=1, total_rate=lam)
    t = res.trajectory("e2el")
    tc = p90_cost_trajectory(t)
    assert qdq(tc, 100).value == qdq(t, 100).value
    m = mixed_dq(tc, 100, alpha=0.3)
    assert m.value == pytest.approx(0.3 * wdq(tc, 100).value + 0.7 * qdq(t, 100).value)


def test_bad_config_fails_before_any_run(monkeypatch):
    monkeypatch.setattr(parallel, "run_tasks", lambda *a, **k: pytest.fail("ran before validating"))
    bad = [
        (dict(rho=1.0), "rho"),
        (dict(p=0.0), "p: treatment probability"),
        (dict(L=0), "L: the DQ horizon"),
        (dict(L=5000), "n_requests: .* too few for a DQ horizon"),
        (dict(reps=1), "reps"),
        (dict(workloads=("podcasts",)), "workloads"),
        (dict(burn_in_s=20.0), "burn_in_s"),
        (dict(sb_burn_ins=(0.0, 12.0)), "sb_burn_ins"),
        (dict(routing_treatment="fastest"), "treatment: unknown router"),
        (dict(scheduling_designs=("bernoulli",)), "ill-defined"),
        (dict(n_replicas=1), "n_replicas"),
        (dict(block_s=200.0, burn_in_s=5.0), "block_s: a run of"),
    ]
    for kw, match in bad:
        with pytest.raises(ValueError, match=match):
            run_study(ASRStudyConfig(**dict(TINY, **kw)), workers=1, progress=False)


def test_cache_resumes_without_rerunning(tmp_path, monkeypatch):
    cfg = ASRStudyConfig(**dict(TINY, scheduling_designs=("replica",), routing_designs=("bernoulli",)))
    a = run_study(cfg, workers=1, progress=False, cache_dir=tmp_path)
    n_files = len(list(tmp_path.glob("*.json")))
    assert n_files == 3 + 2  # one task per trace: 3 replications (both designs) + 2 truth traces (3 settings)
    monkeypatch.setattr(A, "_dispatch", lambda **k: pytest.fail("recomputed a cached task"))
    b = run_study(cfg, workers=1, progress=False, cache_dir=tmp_path)
    pd.testing.assert_frame_equal(a.estimates, b.estimates)
    pd.testing.assert_frame_equal(a.truth, b.truth)


def test_explorer_shows_the_study_and_redraws_on_input():
    need("plotly", "ipywidgets")
    from asrsched.figures.ab_widgets import ab_explorer

    box = ab_explorer(ASRStudyConfig(**TINY), reps=2, n_requests=2500)
    f_w, m_w = box.children[1].children[1:]  # (L, test, metric)
    msg, fig, table = box.children[2:5]
    assert msg.value == "" and len(fig.data) > 0 and "<table" in table.value
    # two rows of panels (design-based estimators, DQ family) keep the height they need for their axis titles
    assert fig.layout.yaxis2 is not None and fig.layout.height >= 700
    assert fig.layout.title.text.startswith("Routing A/B, mean E2EL")
    f_w.value = "scheduling"
    m_w.value = ("ttft", "p90")
    assert fig.layout.title.text.startswith("Scheduling A/B, P90 TTFT") and "replica" in table.value


def test_fast_quantile_is_numpys():
    rng = np.random.default_rng(3)
    for _ in range(3000):
        x = rng.lognormal(0, 1, int(rng.integers(1, 500)))
        for q in (0.1, 0.5, 0.9, 0.99):
            assert A._quantile(x, q) == float(np.quantile(x, q))


def test_no_winner_in_a_tie_and_the_naive_sign_is_worded(tiny):
    """Overlapping RMSE CIs name no winner; a naive estimate whose CI is on the other side is 'the wrong sign'."""
    res = tiny
    s = summary_table(res).copy()
    s["rmse_ci_lo"], s["rmse_ci_hi"] = 0.0, 1e9  # every estimator's RMSE CI overlaps every other's
    b = best_table(s)
    assert (b.winner == "tie").all() and not b.resolved.any()
    text = recommendation(res, s)
    assert "Lowest MSE, clear of the others" not in text and "Statistical tie" in text
    assert "no design/estimator is clearly best" in text
    need("plotly")
    from asrsched.figures import ab_asr as F

    title = F.fig_estimates(res, summary=s).layout.title.text.replace("<br>", " ")  # titles wrap at spaces
    assert "no estimator clearly best" in title and "lowest MSE" not in title
    # the naive row with its whole CI on the other side of zero from a resolved truth
    nv = (s.estimator == "naive") & (s.factor == "routing") & (s.metric == "e2el") & (s.stat == "mean")
    t = float(s.loc[nv, "truth"].iloc[0])
    s.loc[nv, ["truth_se", "mean", "mean_ci_lo", "mean_ci_hi"]] = [abs(t) / 100, -t, -1.1 * t, -0.9 * t]
    s.loc[nv, "recovered_pct"] = -100.0
    if t > 0:
        s.loc[nv, ["mean_ci_lo", "mean_ci_hi"]] = [-1.1 * t, -0.9 * t]
    else:
        s.loc[nv, ["mean_ci_lo", "mean_ci_hi"]] = [-0.9 * t, -1.1 * t]
    assert R.sign_verdict(s[nv].iloc[0]) == "wrong sign"
    assert "the wrong sign (-100 %" in recommendation(res, s)
    s.loc[nv, "recovered_pct"] = -0.4  # a small share is printed with its digits, never as "-0 %"
    assert "the wrong sign (-0.4 %" in recommendation(res, s)
    title = F.fig_estimates(res, summary=s).layout.title.text.replace("<br>", " ")
    assert "naive has the wrong sign on 1 of 1 workloads" in title
    s.loc[nv, ["mean_ci_lo", "mean_ci_hi"]] = [-abs(t), abs(t)]
    assert R.sign_verdict(s[nv].iloc[0]) == "sign not resolved"
