"""The study runner, its tables and the explorer widget (notebook 05's run: ``tests/notebook_checks.py``).

Budget: ~10 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from abtest_oracle import reference_dq_sweep, reference_simulate
from extras import need

from asrsched.abtest import full_run as F
from asrsched.abtest import study as S
from asrsched.abtest.model import SystemConfig
from asrsched.sim import parallel
from asrsched.sim.parallel import run_study

ROOT = Path(__file__).resolve().parents[2]


def _tiny(**kw):
    base = SystemConfig(
        n_servers=6, lam=0.8, control="random", treatment="pod2", n_requests=50_000, warmup_requests=5_000
    )
    d = dict(
        base=base,
        scenarios=("homogeneous", "switchback"),
        reps=3,
        L_factors=(0.5, 1.0, 2.0),
        alpha_batches=20,
        sb_blocks=(20.0, 80.0),
        block_len=40.0,
        burn_in=10.0,
        truth_requests=100_000,
        truth_seeds=1,
        slope_h=0.1,
        seed=3,
    )
    d.update(kw)
    return S.StudyConfig(**d)


@pytest.fixture(scope="module")
def tiny_result():
    return run_study(_tiny(), workers=1, progress=False)


def test_study_tables(tiny_result):
    res = tiny_result
    summ = S.summary_table(res)
    assert set(summ.scenario) == {"homogeneous", "switchback"}
    assert set(summ.estimator) == set(S.ESTIMATOR_ORDER) - {"qtdq", "mixed_dq_qt"}  # "qt" cost not asked for
    head = res.estimates[res.estimates.headline.astype(bool)]
    for s, g in summ.groupby("scenario", observed=True):
        g = g.set_index("estimator")
        # sd and sd ratio recomputed from the raw replications (not the naive sd divided by itself)
        raw = head[head.scenario == s].groupby("estimator", observed=True)["estimate"].std(ddof=1)
        for name, sd in raw.items():
            assert g.loc[name, "sd"] == pytest.approx(sd, rel=1e-9)
            assert g.loc[name, "sd_vs_naive"] == pytest.approx(sd / raw["naive"], rel=1e-9)
        # the trade-off the study names: the DQ family is unbiased but far noisier than the naive estimate
        assert (g.loc[["wdq", "qdq", "mixed_dq"], "sd_vs_naive"] > 5).all()
        assert np.allclose(g.mse, g.bias**2 + g.sd**2 * (g.reps - 1) / g.reps)
        assert g.coverage.dropna().between(0, 1).all()
    truth = res.truth.set_index("scenario")
    assert np.allclose(truth.gte, truth.gte_q, rtol=0.02)  # Little: both forms of the GTE agree
    assert (truth.gte < 0).all() and (truth.slope < 0).all()
    assert res.little.rel_gap.abs().max() < 0.01
    abl = S.ablation_table(res)
    assert sorted(abl.L.unique()) == [72, 144, 288]  # 30 * 6 * 0.8 = 144
    sbt = S.switchback_table(res)
    sw = sbt[sbt.scenario == "switchback"]
    assert set(zip(sw.block_len, sw.burn_in)) == {(20.0, 0.0), (20.0, 5.0), (80.0, 0.0), (80.0, 20.0)}
    claims = S.claims_table(summ)
    assert claims.naive_biased_low.all()  # random vs Power-of-2: the naive estimate is shrunk toward zero
    text = S.claims_markdown(claims, summ, res.truth)
    assert "Naive biased low" in text and "2/2" in text
    # with the replications: CIs and verdicts; the point value lies inside its CI
    cl = S.claims_table(summ, res, n_boot=300)
    assert (cl.naive_share_ci_lo <= cl.naive_share).all() and (cl.naive_share <= cl.naive_share_ci_hi).all()
    assert (cl.mixed_sd_reduction_ci_lo <= cl.mixed_sd_reduction_ci_hi).all()
    assert cl.verdict_naive_low.eq("holds").all()
    assert set(cl.verdict_mixed_2_5x) <= {"holds", "fails", "inconclusive"}
    assert (cl.gain_bound >= cl.oracle_sd_reduction * 0.999).all()  # no fixed alpha beats the covariance bound
    text = S.claims_markdown(cl, summ, res.truth)
    assert "holds in: homogeneous, switchback" in text and "3 replications" in text
    # RMSE CIs bracket the RMSE; bias CIs bracket the bias
    assert (summ.rmse_ci_lo <= summ.rmse).all() and (summ.rmse <= summ.rmse_ci_hi).all()
    assert (summ.bias_ci_lo < summ.bias).all() and (summ.bias < summ.bias_ci_hi).all()


def test_study_is_reproducible_and_resumes_from_cache(tmp_path, tiny_result):
    sc = _tiny(scenarios=("homogeneous",), reps=2)
    a = run_study(sc, workers=1, progress=False, cache_dir=tmp_path)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 2 + 4  # 2 replications + 4 truth runs (control, treatment, p +- h)
    b = run_study(sc, workers=1, progress=False, cache_dir=tmp_path)  # all from cache
    pd.testing.assert_frame_equal(a.estimates, b.estimates)
    c = run_study(sc, workers=1, progress=False)  # recomputed: same numbers
    pd.testing.assert_frame_equal(a.estimates, c.estimates)
    # the homogeneous replications equal those of the bigger tiny study (same seeds per task)
    big = tiny_result.estimates
    big = big[(big.scenario == "homogeneous") & (big.rep < 2)].reset_index(drop=True)
    assert np.allclose(big.estimate.to_numpy(float), a.estimates.estimate.to_numpy(float))
    assert json.loads(files[0].read_text())


def test_study_results_do_not_depend_on_which_task_finished_first(tiny_result):
    # two worker processes finish tasks in a varying order; the tables come back in the tasks' order, bit for bit
    b = run_study(_tiny(), workers=2, progress=False)
    pd.testing.assert_frame_equal(tiny_result.estimates, b.estimates)
    pd.testing.assert_frame_equal(tiny_result.little, b.little)
    pd.testing.assert_frame_equal(tiny_result.truth, b.truth)
    cols = [c for c in b.truth_runs if c != "cpu_seconds"]
    pd.testing.assert_frame_equal(tiny_result.truth_runs[cols], b.truth_runs[cols])


def test_scenarios_of_one_system_share_experiments_and_truth(tiny_result):
    # "switchback" is the homogeneous system: one replication task and one set of truth runs serve both
    full = S.StudyConfig()
    assert S.shared_systems(full) == {
        "homogeneous": ("switchback",),
        "heterogeneous": (),
        "nonstationary": (),
        "delayed": (),
        "constant": (),
        "pareto": (),
        "small_effect": (),
    }
    e = tiny_result.estimates
    key = ["rep", "estimator", "L", "block_len", "burn_in"]

    def rows(s, sb):
        g = e[(e.scenario == s) & ((e.estimator == "switchback") == sb)]
        return g.sort_values(key, kind="stable").reset_index(drop=True)

    h, w = rows("homogeneous", False), rows("switchback", False)
    assert len(h) == len(w) > 0
    assert np.array_equal(h.estimate.to_numpy(float), w.estimate.to_numpy(float))  # the same experiments
    assert set(rows("switchback", True).block_len) == {20.0, 80.0} and set(rows("homogeneous", True).block_len) == {
        40.0
    }
    # a block length both ask for is simulated once: block 40 with burn-in 10 (= 25 %) is the same estimate
    sd = _tiny(sb_blocks=(40.0, 80.0)).to_dict()
    out = pd.DataFrame(S.run_replication("homogeneous", 0, sd, also=("switchback",))["rows"])
    sb = out[(out.estimator == "switchback") & (out.block_len == 40.0) & (out.burn_in == 10.0)]
    assert list(sb.scenario) == ["homogeneous", "switchback"] and sb.estimate.nunique() == 1
    assert sb.headline.astype(bool).all()
    t = tiny_result.truth.set_index("scenario")
    assert t.loc["homogeneous", "gte"] == t.loc["switchback", "gte"]
    tr = tiny_result.truth_runs
    assert set(tr.system) == {"homogeneous"} and (tr[tr.scenario == "switchback"].cpu_seconds == 0).all()
    # a replication refuses to share between different systems
    sd = _tiny(scenarios=("homogeneous", "heterogeneous")).to_dict()
    with pytest.raises(ValueError, match="another system"):
        S.run_replication("homogeneous", 0, sd, also=("heterogeneous",))


@pytest.mark.parametrize(
    "kw, param",
    [
        (dict(reps=1), "reps"),
        (dict(burn_in=50.0), "burn_in"),
        (dict(L=0), "L"),
        (dict(L_factors=(0.0, 1.0)), "L_factors"),
        (dict(base=SystemConfig(n_servers=6, lam=0.8, n_requests=5_000)), "n_requests"),
        (dict(base=SystemConfig(n_servers=6, lam=0.8, treatment=7)), "treatment"),
        (dict(scenarios=("homogeneous", "rainy")), "scenario"),
        (dict(slope_h=0.6), "slope_h"),
    ],
)
def test_bad_study_config_is_refused_before_running(kw, param, monkeypatch):
    monkeypatch.setattr(parallel, "run_tasks", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    with pytest.raises(ValueError, match=param):
        run_study(_tiny(**kw), workers=1, progress=False)


def test_explorer_reacts_to_sliders_and_reports_bad_input():
    need("plotly", "ipywidgets")
    from asrsched.figures.ab_widgets import estimator_explorer

    box = estimator_explorer(lam=0.7, n_servers=6, reps=3, n_requests=30_000)
    fig, table = box.children[1], box.children[2]
    sliders = {w.description: w for row in box.children[0].children for w in row.children}
    assert {
        "λ (per server)",
        "control: Power-of-d, d",
        "treatment: Power-of-d, d",
        "p (treated)",
        "L (0 = 30·N·λ)",
        "N (servers)",
    } <= set(sliders)
    before = fig.layout.title.text
    assert "Truth" in before and "<table" in table.value and "3 replications" in before
    assert "lam" not in before and "RMSE 95 % CI" in table.value and "qDQ" in table.value
    assert "qdq" not in table.value and "mixed_dq" not in table.value  # one spelling: the display names
    sliders["treatment: Power-of-d, d"].value = 3
    assert fig.layout.title.text != before and "random → Power-of-3" in fig.layout.title.text
    sliders["treatment: Power-of-d, d"].value = 7  # d > N = 6
    assert "treatment" in table.value and "color:#b00" in table.value


def test_lowest_mse_names_a_winner_only_outside_a_tie():
    rng = np.random.default_rng(0)
    clear = pd.DataFrame({"naive": 5 + rng.normal(0, 0.1, 50), "wdq": rng.normal(0, 0.1, 50)})
    win, share = S.lowest_mse(clear, 0.0, n_boot=400)
    assert win == ["wdq"] and share["wdq"] > 0.95
    tie = pd.DataFrame({"naive": rng.normal(0, 1.0, 20), "wdq": rng.normal(0, 1.0, 20)})
    win, share = S.lowest_mse(tie, 0.0, n_boot=400)
    assert sorted(win) == ["naive", "wdq"]  # neither wins in 95 % of resamples: both named


def test_search_table_gain_and_bound():
    rng = np.random.default_rng(1)
    rows = []
    for r in range(60):  # wDQ and qDQ with correlation ~0: a mix halves the variance (gain ~ sqrt 2)
        w, q = rng.normal(0, 1), rng.normal(0, 1)
        for name, v, a in (("wdq", w, None), ("qdq", q, None), ("mixed_dq", 0.5 * w + 0.5 * q, 0.5)):
            rows.append(
                dict(
                    lam=0.8,
                    control="random",
                    treatment="pod2",
                    rep=r,
                    L=100,
                    L_factor=1.0,
                    estimator=name,
                    estimate=v,
                    alpha=a,
                )
            )
    t = F.search_table(pd.DataFrame(rows), n_boot=500)
    assert len(t) == 1 and t.cost.iloc[0] == "q"
    g = t.iloc[0]
    assert 1.1 < g.gain < 1.8 and g.gain_ci_lo < g.gain < g.gain_ci_hi
    assert g.gain_bound == pytest.approx(g.gain, rel=0.1)  # alpha = 1/2 is the optimal weight here


def test_scenario_search_and_wp_curve_run_small(tmp_path):
    sc = _tiny(scenarios=("homogeneous",))
    raw = F.scenario_search(
        sc, lams=(0.7,), pairs=(("random", "pod2"),), L_factors=(1.0,), reps=4, workers=1, progress=False
    )
    assert set(raw.estimator) == {"wdq", "qdq", "qtdq", "mixed_dq", "mixed_dq_qt"} and raw.rep.nunique() == 4
    assert int(raw.L.iloc[0]) == round(30 * 6 * 0.7)
    with pytest.raises(ValueError, match="costs"):
        F.scenario_search(sc, costs=("w",), reps=4)
    curve = F.run_wp_curve(sc, ps=(0.0, 0.5, 1.0), requests_per_point=20_000, workers=1, progress=False)
    assert list(curve.p) == [0.0, 0.5, 1.0]
    truth = pd.DataFrame([{"scenario": "homogeneous", "gte": -1.0, "gte_se": 0.01, "slope": -0.7, "slope_se": 0.02}])
    wp = F.wp_table(curve, truth)
    c = curve.set_index("p").mean_w
    assert wp.chord.iloc[0] == pytest.approx(c[1.0] - c[0.0])
    assert wp.curvature_share.iloc[0] == pytest.approx(1 - (-0.7) / wp.chord.iloc[0])


def test_full_run_is_written_with_provenance_and_read_back(tmp_path):
    sc = _tiny(scenarios=("homogeneous",), reps=3, truth_requests=60_000, L_factors=(1.0,))
    out = F.write_full_run(
        tmp_path / "full",
        sc,
        wp_requests=20_000,
        wp_seeds=1,
        search_reps=3,
        search_requests=30_000,
        workers=1,
        progress=False,
        command="python -m asrsched.abtest.study --test",
    )
    run = json.loads((out / "run.json").read_text())
    for k in ("commit", "date_utc", "cpu_model", "load_average_start_1_5_15", "parameters", "command", "timings"):
        assert k in run, k
    assert run["command"].endswith("--test") and run["parameters"]["study"]["reps"] == 3
    fr = F.load_full_run(out)
    pd.testing.assert_frame_equal(
        S.summary_table(fr.res)[["estimator", "mean", "sd"]], fr.summary[["estimator", "mean", "sd"]], check_dtype=False
    )
    assert "Naive biased low" in (out / "claims.md").read_text()
    with pytest.raises(FileNotFoundError, match="missing"):
        F.load_full_run(tmp_path)


@pytest.mark.parametrize("scenario", ["homogeneous", "delayed"])
def test_fast_replication_equals_the_reference_path(scenario):
    # compiled kernel + O(n) DQ sweep vs the reference kernel + numpy DQ per L: same seeds, same estimates
    sd = _tiny(scenarios=(scenario,)).to_dict()
    a = pd.DataFrame(S.run_replication(scenario, 1, sd)["rows"])
    b = pd.DataFrame(S.run_replication(scenario, 1, sd, _paths=(reference_simulate, reference_dq_sweep))["rows"])
    assert list(a.estimator) == list(b.estimator) and np.array_equal(a.L.fillna(-1), b.L.fillna(-1))
    assert np.allclose(a.estimate, b.estimate, rtol=1e-9, atol=1e-12)
    assert np.allclose(a.ci_lo, b.ci_lo, rtol=1e-9, atol=1e-12, equal_nan=True)
    assert np.allclose(a.alpha.astype(float), b.alpha.astype(float), rtol=1e-9, equal_nan=True)


def test_the_mixed_dq_claim_reads_its_conditions_from_the_committed_map(tiny_result):
    from asrsched.abtest.study_report import MIXED_MAP_DIR, load_mixed_map, mixed_map_cells

    mm = load_mixed_map(ROOT / MIXED_MAP_DIR)
    summ = S.summary_table(tiny_result)
    claims = S.claims_table(summ, tiny_result, mixed_map=mm)
    holds = mixed_map_cells(mm, "holds")
    # the map's cells where "2-5x lower sd" holds at the default L, named on every scenario's row
    assert set(claims.mixed_2_5x_holds_under) == {", ".join(holds) or "none"}
    md = S.claims_markdown(claims, summ, mixed_map=mm)
    line = next(x for x in md.splitlines() if "Where the 2–5× claim holds" in x)
    for r in mm[(mm.L_factor == 1.0) & (mm.alpha != "oracle") & (mm.verdict == "holds")].itertuples():
        assert f"{r.law} (SCV {r.scv:g}) · {r.unit} · α {r.alpha} {r.gain_better:.2f}×" in line
    assert "Where the 2–5× claim holds" not in S.claims_markdown(claims, summ)  # only with the map
