"""The study runner, its tables, the explorer widget and notebook 05 under papermill.

Budget: ~10 s plus the notebook run (~40 s, marked slow).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from asrsched.abtest import study as S
from asrsched.abtest.model import SystemConfig

ROOT = Path(__file__).resolve().parents[1]


def _tiny(**kw):
    base = SystemConfig(n_servers=6, lam=0.8, control="random", treatment="pod2", n_jobs=50_000, warmup_jobs=5_000)
    d = dict(base=base, scenarios=("homogeneous", "switchback"), reps=3, L_factors=(0.5, 1.0, 2.0),
             alpha_batches=20, sb_blocks=(20.0, 80.0), block_len=40.0, burn_in=10.0, truth_jobs=100_000,
             truth_seeds=1, slope_h=0.1, seed=3)
    d.update(kw)
    return S.StudyConfig(**d)


@pytest.fixture(scope="module")
def tiny_result():
    return S.run_study(_tiny(), n_jobs=1, progress=False)


def test_study_tables(tiny_result):
    res = tiny_result
    summ = S.summarize(res)
    assert set(summ.scenario) == {"homogeneous", "switchback"}
    assert set(summ.estimator) == set(S.ESTIMATOR_ORDER)
    for _, g in summ.groupby("scenario", observed=True):
        g = g.set_index("estimator")
        assert g.loc["naive", "sd_vs_naive"] == pytest.approx(1.0)
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


def test_study_is_reproducible_and_resumes_from_cache(tmp_path, tiny_result):
    sc = _tiny(scenarios=("homogeneous",), reps=2)
    a = S.run_study(sc, n_jobs=1, progress=False, cache_dir=tmp_path)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 2 + 4  # 2 replications + 4 truth runs (control, treatment, p +- h)
    b = S.run_study(sc, n_jobs=1, progress=False, cache_dir=tmp_path)  # all from cache
    pd.testing.assert_frame_equal(a.estimates, b.estimates)
    c = S.run_study(sc, n_jobs=1, progress=False)  # recomputed: same numbers
    pd.testing.assert_frame_equal(a.estimates, c.estimates)
    # the homogeneous replications equal those of the bigger tiny study (same seeds per task)
    big = tiny_result.estimates
    big = big[(big.scenario == "homogeneous") & (big.rep < 2)].reset_index(drop=True)
    assert np.allclose(big.estimate.to_numpy(float), a.estimates.estimate.to_numpy(float))
    assert json.loads(files[0].read_text())


@pytest.mark.parametrize("kw, param", [
    (dict(reps=1), "reps"),
    (dict(burn_in=50.0), "burn_in"),
    (dict(L=0), "L"),
    (dict(L_factors=(0.0, 1.0)), "L_factors"),
    (dict(base=SystemConfig(n_servers=6, lam=0.8, n_jobs=5_000)), "n_jobs"),
    (dict(base=SystemConfig(n_servers=6, lam=0.8, treatment=7)), "treatment"),
    (dict(scenarios=("homogeneous", "rainy")), "scenario"),
    (dict(slope_h=0.6), "slope_h"),
])
def test_bad_study_config_is_refused_before_running(kw, param, monkeypatch):
    monkeypatch.setattr(S, "map_tasks", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    with pytest.raises(ValueError, match=param):
        S.run_study(_tiny(**kw), n_jobs=1, progress=False)


def test_explorer_reacts_to_sliders_and_reports_bad_input():
    from asrsched.figures.widgets import estimator_explorer

    box = estimator_explorer(lam=0.7, n_servers=6, reps=3, n_jobs=30_000)
    fig, table = box.children[1], box.children[2]
    sliders = {w.description: w for row in box.children[0].children for w in row.children}
    assert {"lam (per server)", "d1 (control)", "d2 (treatment)", "p (treated)", "L (0 = 30·N·lam)",
            "N (servers)"} <= set(sliders)
    before = fig.layout.title.text
    assert "Truth" in before and "<table" in table.value
    sliders["d2 (treatment)"].value = 3
    assert fig.layout.title.text != before and "d 1->3" in fig.layout.title.text
    sliders["d2 (treatment)"].value = 7  # d > N = 6
    assert "treatment" in table.value and "color:#b00" in table.value


@pytest.mark.slow
def test_notebook_05_runs_under_papermill(tmp_path):
    import papermill as pm

    os.environ["ASRSCHED_FIGURES"] = str(tmp_path / "figures")
    try:
        pm.execute_notebook(
            str(ROOT / "notebooks" / "05_ab_estimators.ipynb"), str(tmp_path / "out.ipynb"),
            parameters=dict(REPS=3, N_SERVERS=6, N_JOBS=50_000, TRUTH_JOBS_QUICK=60_000, WORKERS=1,
                            SCENARIOS=["homogeneous", "switchback"]),
            kernel_name="python3", execution_timeout=600, cwd=str(tmp_path), progress_bar=False)
    finally:
        os.environ.pop("ASRSCHED_FIGURES", None)
    out = tmp_path / "figures" / "05_ab_estimators"
    est = pd.read_csv(out / "estimators.csv")
    assert set(est.scenario) == {"homogeneous", "switchback"}
    assert {"naive", "group", "switchback", "qdq", "wdq", "mixed_dq"} <= set(est.estimator)
    assert est.rmse.gt(0).all() and est.reps.eq(3).all()
    claims = pd.read_csv(out / "claims.csv")
    assert claims.naive_biased_low.all()
    for name in ("overview", "errors_homogeneous", "ablation_homogeneous", "switchback_designs", "coverage"):
        assert (out / f"{name}.html").exists() and (out / f"{name}.png").stat().st_size > 10_000
    run = pd.read_csv(out / "run.csv")
    assert run.reps.iloc[0] == 3 and run.study_seconds.iloc[0] > 0
