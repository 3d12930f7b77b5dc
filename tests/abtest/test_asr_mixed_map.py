"""The ASR fleet's mixed-DQ map: bad input refused before any simulation, one experiment's cells equal the DQ
estimators run by hand on its trajectory, and a tiny map's table and statement."""

import numpy as np
import pandas as pd
import pytest

from asrsched.abtest.asr_fleet import ASRStudyConfig
from asrsched.abtest.asr_mixed_map import ASRMixedMapConfig, asr_map_statement, run_asr_map_rep
from asrsched.abtest.dq import dq_family
from asrsched.abtest.fleet_experiment import fleet_trace, run_experiment
from asrsched.abtest.mixed_map import map_table
from asrsched.sim.parallel import run_study, task_seed

FLEET = ASRStudyConfig(workloads=("uniform",), n_replicas=2, rho=0.9, n_requests=6000, warmup_s=5.0, L=150)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(units=("hours",)), "units: need some of"),
        (dict(alphas=("best",)), "alphas: need some of"),
        (dict(reps=2), "reps: need an integer >= 3"),
        (dict(L_factors=(100.0,)), "n_requests"),  # a horizon longer than the experiment
    ],
)
def test_bad_map_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        ASRMixedMapConfig(fleet=FLEET, **kw).validate()


def test_one_experiment_cells_equal_the_estimators_by_hand():
    mm = ASRMixedMapConfig(fleet=FLEET, L_factors=(1.0,), reps=3)
    rows = run_asr_map_rep("uniform", 1, mm.to_dict())
    tr, rate = fleet_trace(
        "uniform", n_replicas=2, rho=0.9, n_requests=6000, seed=task_seed(0, "asr_mixed_map", "uniform", 1)
    )
    res = run_experiment(
        tr,
        FLEET.test("routing", "bernoulli"),
        n_replicas=2,
        seed=task_seed(0, "asr_mixed_map", "uniform", 1, "design"),
        warmup_s=5.0,
        total_rate=rate,
    )
    traj = res.trajectory("e2el")
    by_unit = {r["unit"]: r for r in rows}
    assert set(by_unit) == {"jobs", "time"} and by_unit["jobs"]["L"] == 150
    for unit, kw in (("jobs", dict(L=150)), ("time", dict(tau=150 / rate))):
        for a in ("batch", "job"):
            fam = dq_family(traj, n_batches=FLEET.n_batches, alpha_batches=FLEET.alpha_batches, alpha=a, **kw)
            assert by_unit[unit]["wdq"] == fam["wdq"].value and by_unit[unit]["qdq"] == fam["qdq"].value
            assert by_unit[unit][f"mixed_{a}"] == fam["mixed_dq"].value


def test_tiny_map_table_and_statement():
    mm = ASRMixedMapConfig(fleet=FLEET, L_factors=(0.5, 1.0), reps=6)
    res = run_study(mm, workers=1, progress=False)
    assert len(res.raw) == 6 * 2 * 2 and set(res.raw.law) == {"uniform"}
    t = map_table(res.raw, n_boot=200)
    assert len(t) == 2 * 2 * 3  # units x L factors x (batch, job, oracle)
    assert t.scv.isna().all() and (t.reps == 6).all()
    assert (t.gain_better_ci_lo <= t.gain_better).all() and (t.gain_better <= t.gain_better_ci_hi).all()
    text = asr_map_statement(t)
    at = t[(t.L_factor == 1.0) & (t.alpha != "oracle")]
    assert f"in {int((at.gain_better_ci_lo > 1).sum())} of {len(at)} cells" in text
    assert "uniform, horizon in requests" in text and "uniform, horizon in seconds" in text
    assert np.isfinite(pd.to_numeric(t.gain_worse)).all()
