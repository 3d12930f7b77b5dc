"""Where mixed DQ pays: the Erlang and hyperexponential service laws, the DQ horizon counted in time, the
arm-centred per-job weight, the map's table and verdicts, and the claims' reading of the committed map.

Budget: ~20 s on 2 cores (numba cache warm).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from abtest_oracle import readable_arm_centred_alpha, readable_time_q

from asrsched.abtest import dq as D
from asrsched.abtest.estimators import arm_centred_alpha, dq_family, horizon_ends, q_values, qdq, wdq
from asrsched.abtest.mixed_map import LAWS, MixedMapConfig, map_table, write_map
from asrsched.abtest.model import SystemConfig, simulate_supermarket
from asrsched.abtest.service_laws import mg1_response, service_scv
from asrsched.abtest.study_report import (
    MIXED_MAP_DIR,
    load_mixed_map,
    mixed_map_cells,
    mixed_map_statement,
    verdict,
)
from asrsched.core.provenance import KEYS
from asrsched.sim.parallel import task_seed

# ----------------------------------------------------------------------------- service laws


def _services(cfg: SystemConfig, seed: int = 0) -> np.ndarray:
    """Service requirements of the jobs that found the one server empty (their response is their service; a
    job's service is drawn independently of the queue it joins, so these are i.i.d. draws of the law)."""
    tr = simulate_supermarket(cfg.replace(n_servers=1, lam=0.05, control=1, treatment=1, design="control"), seed)
    return tr.response[tr.q_seen == 0]


@pytest.mark.parametrize(
    "kw, scv, tol",
    [
        (dict(service="const"), 0.0, 1e-12),
        (dict(service="exp"), 1.0, 0.03),
        (dict(service="erlang", erlang_k=4), 0.25, 0.01),
        (dict(service="erlang", erlang_k=10), 0.1, 0.005),
        (dict(service="h2", h2_scv=4.0), 4.0, 0.3),
        (dict(service="h2", h2_scv=1.5), 1.5, 0.06),
    ],
)
def test_each_law_has_mean_one_and_its_squared_coefficient_of_variation(kw, scv, tol):
    x = _services(SystemConfig(n_requests=300_000, **kw))
    assert x.size > 250_000
    assert x.mean() == pytest.approx(1.0, abs=4 * np.sqrt(max(scv, 1e-9) / x.size) + 1e-12)
    assert x.var() / x.mean() ** 2 == pytest.approx(scv, abs=tol)
    assert service_scv(**kw) == scv


def test_pareto_keeps_its_scale_and_mean():
    x = _services(SystemConfig(service="pareto", pareto_shape=2.5, n_requests=300_000))
    assert x.min() == pytest.approx(0.6, rel=1e-3)  # scale (a - 1) / a
    assert x.mean() == pytest.approx(1.0, abs=0.02)
    assert np.mean(x > 3.0) == pytest.approx((0.6 / 3.0) ** 2.5, rel=0.1)  # the tail P(X > x) = (xm / x)^a


@pytest.mark.parametrize("kw", [dict(service="erlang", erlang_k=3), dict(service="h2", h2_scv=4.0)])
def test_pollaczek_khinchine_for_the_new_laws(kw):
    # random routing: N independent M/G/1 queues, W = 1 + lam (1 + SCV) / (2 (1 - lam))
    cfg = SystemConfig(n_servers=4, lam=0.5, control=1, design="control", n_requests=600_000, **kw)
    w = np.mean([simulate_supermarket(cfg, s).response.mean() for s in (0, 1)])
    assert w == pytest.approx(mg1_response(0.5, service_scv(**kw)), rel=0.03)


# ----------------------------------------------------------------------------- the horizon counted in time


@pytest.fixture(scope="module")
def small():
    cfg = SystemConfig(n_servers=5, lam=0.8, control="random", treatment="pod2", n_requests=3000, warmup_requests=500)
    return simulate_supermarket(cfg, 4, details=False, area_at=False)


@pytest.mark.parametrize("cost", ["w", "q"])
@pytest.mark.parametrize("tau", [0.7, 6.0, 25.0])
def test_time_horizon_q_values_match_a_window_by_window_sum(small, cost, tau):
    want = readable_time_q(small, tau, cost)
    got = q_values(small, cost=cost, tau=tau)
    assert got.size == want.size and small.arrival[got.size - 1] + tau <= small.arrival[-1]
    assert small.arrival[got.size] + tau > small.arrival[-1]  # the next decision has no full horizon
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9)


def test_time_horizon_dq_is_the_difference_of_arm_means_of_those_q_values(small):
    tau = 6.0
    z = small.z
    for est, cost in ((wdq, "w"), (qdq, "q")):
        Q = readable_time_q(small, tau, cost)
        zk = z[: Q.size] == 1
        assert est(small, tau=tau, n_batches=5).value == pytest.approx(Q[zk].mean() - Q[~zk].mean(), rel=1e-10)


def test_time_horizon_of_l_over_the_rate_counts_about_l_jobs(small):
    tau = 20.0 / small.total_rate
    e = horizon_ends(small, tau)
    # job k itself plus the Poisson arrivals in (t_k, t_k + tau): E L_k = 1 + rate * tau
    assert np.mean(e - np.arange(e.size)) == pytest.approx(21.0, rel=0.05)


def test_bad_horizons_are_refused_before_any_work(small):
    with pytest.raises(ValueError, match="tau"):
        q_values(small, tau=0.0)
    with pytest.raises(ValueError, match="tau"):
        q_values(small, tau=float("inf"))
    with pytest.raises(ValueError, match="tau"):
        q_values(small, tau=1e9)  # longer than the trajectory
    with pytest.raises(ValueError, match="L"):
        dq_family(small, 30, tau=5.0)  # both units
    with pytest.raises(ValueError, match="alpha"):
        dq_family(small, 30, alpha="pilot")


# ----------------------------------------------------------------------------- the arm-centred per-job weight


def test_job_alpha_matches_the_hand_computation(small):
    L = 40
    qw, qq = q_values(small, L, "w"), q_values(small, L, "q")
    z = small.z[: qw.size]
    want = readable_arm_centred_alpha(qw, qq, z)
    assert arm_centred_alpha(qw, qq, z) == pytest.approx(want, rel=1e-9)
    fam = dq_family(small, L, n_batches=5, alpha="job")
    m = fam["mixed_dq"]
    assert m.alpha == pytest.approx(want, rel=1e-9)
    assert m.value == pytest.approx(want * fam["wdq"].value + (1 - want) * fam["qdq"].value, rel=1e-9)
    # the same on the time horizon
    tw, tq = readable_time_q(small, 6.0, "w"), readable_time_q(small, 6.0, "q")
    a_t = dq_family(small, tau=6.0, n_batches=5, alpha="job")["mixed_dq"].alpha
    assert a_t == pytest.approx(readable_arm_centred_alpha(tw, tq, small.z[: tw.size]), rel=1e-9)


def test_job_alpha_ignores_the_effect_itself():
    # Q_q = Q_w + a treatment shift + independent noise: uncentred, the shift would look like shared variance
    rng = np.random.default_rng(1)
    z = (rng.random(20_000) < 0.5).astype(np.int8)
    qw = rng.normal(0, 1, z.size)
    qq = qw + 50.0 * z + rng.normal(0, 1, z.size)  # V_w = 1, V_q = 2, C = 1 -> alpha = (2 - 1) / (1 + 2 - 2) = 1
    assert arm_centred_alpha(qw, qq, z) == pytest.approx(1.0, abs=0.03)
    qq2 = rng.normal(0, 2, z.size)  # independent, V_q = 4: alpha = 4 / 5
    assert arm_centred_alpha(qw, qq2, z) == pytest.approx(0.8, abs=0.02)


def test_job_alpha_is_finite_in_the_degenerate_cases():
    z = np.array([0, 1] * 50, np.int8)
    q = np.arange(100.0)
    assert arm_centred_alpha(q, q, z) == 0.5  # identical: every weight gives the same mix
    assert arm_centred_alpha(q, 2 * q, np.zeros(100, np.int8)) == 0.5  # one arm only
    a = arm_centred_alpha(q, 2 * q, z)  # perfectly correlated: the weight that cancels the noise, finite
    assert np.isfinite(a) and a == pytest.approx(2.0)
    with pytest.raises(ValueError, match="z"):
        arm_centred_alpha(q, q[:50], z)


# ----------------------------------------------------------------------------- the map


def _synthetic_raw(R: int = 2000) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    w, q = rng.normal(0, 1, R), rng.normal(0, 2, R)
    return pd.DataFrame(
        dict(law="exp", rep=np.arange(R), unit="jobs", L_factor=1.0, L=480, tau=30.0, wdq=w, qdq=q)
        | dict(mixed_batch=w / 3, alpha_batch=0.5, mixed_job=w, alpha_job=1.0)
    )


def test_map_table_gains_cis_and_verdicts_on_known_spreads():
    t = map_table(_synthetic_raw(), n_boot=400).set_index("alpha")
    b, j, o = t.loc["batch"], t.loc["job"], t.loc["oracle"]
    assert b.gain_better == pytest.approx(3.0) and b.gain_better_ci_lo == pytest.approx(3.0)  # sd(w / 3) = sd(w) / 3
    assert b.verdict == "holds" and b.verdict_worse == "fails"  # over the worse (sd 2): 6x, beyond 5
    assert b.gain_worse == pytest.approx(3 * b.sd_qdq / b.sd_wdq)
    assert j.gain_better == pytest.approx(1.0) and j.verdict == "fails"
    assert j.vs_batch == pytest.approx(1 / 3) and j.vs_batch_ci_hi < 1  # the batch mix wins here
    # oracle for independent (1, 4): alpha 4/5, sd sqrt(0.8), gain over the better sqrt(5/4)
    assert o.alpha_oracle == pytest.approx(0.8, abs=0.03)
    assert o.gain_better == pytest.approx(np.sqrt(1.25), rel=0.03)
    assert verdict(o.gain_better_ci_lo, o.gain_better_ci_hi, 2, 5) == o.verdict == "fails"


def test_the_map_runs_end_to_end_and_its_statement_reads_the_table(tmp_path):
    mm = MixedMapConfig(
        laws=("const", "exp"),
        L_factors=(0.5, 1.0),
        reps=3,
        reps_by_law={"const": 4},
        n_batches=4,
        base=MixedMapConfig().base.replace(n_requests=20_000, warmup_requests=2000),
    )
    out = write_map(tmp_path / "map", mm, workers=1, progress=False, command="test")
    run = json.loads((out / "run.json").read_text())
    assert all(k in run for k in KEYS) and run["parameters"]["mixed_map"]["reps_by_law"] == {"const": 4}
    raw = pd.read_csv(out / "raw.csv.gz")
    assert len(raw) == (4 + 3) * 2 * 2  # (reps) x units x L factors
    # every cell of a law reads one trajectory, seeded by (seed, "mixed_map", law, rep)
    tr = simulate_supermarket(mm.system("const"), task_seed(0, "mixed_map", "const", 2), details=False, area_at=False)
    r = raw[(raw.law == "const") & (raw.rep == 2)].set_index(["unit", "L_factor"])
    assert r.loc[("jobs", 1.0), "wdq"] == pytest.approx(wdq(tr, 480, n_batches=4).value, rel=1e-12)
    assert r.loc[("time", 0.5), "qdq"] == pytest.approx(qdq(tr, tau=240 / 16, n_batches=4).value, rel=1e-12)
    t = load_mixed_map(out)
    assert set(t.alpha) == {"batch", "job", "oracle"} and set(t.reps) == {3, 4}
    assert set(t.law) == {"const", "exp"} and len(t) == 2 * 2 * 2 * 3
    s = mixed_map_statement(t)
    assert "mixed-DQ map, 3–4 replications" in s and "L = 0.5 × default" in s
    for cell in mixed_map_cells(t, "holds"):
        assert cell.split("·")[0] in s


def test_the_map_refuses_bad_parameters_before_simulating():
    for kw, name in [
        (dict(laws=("lognormal",)), "laws"),
        (dict(units=("blocks",)), "units"),
        (dict(alphas=("oracle",)), "alphas"),
        (dict(L_factors=(0.0,)), "L_factors"),
        (dict(reps=2), "reps"),
        (dict(reps_by_law={"h2": 1}), "reps_by_law"),
        (dict(reps_by_law={"weibull": 10}), "reps_by_law"),
        (dict(base=MixedMapConfig().base.replace(n_requests=10_000)), "n_requests"),
    ]:
        with pytest.raises(ValueError, match=name):
            MixedMapConfig(**kw).validate()
    with pytest.raises(FileNotFoundError, match="map.csv"):
        load_mixed_map("/nonexistent/folder")


def test_the_committed_map_covers_every_cell_with_decided_headline_verdicts():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    t = load_mixed_map(root / MIXED_MAP_DIR)
    mm = MixedMapConfig.from_dict(
        json.loads((root / MIXED_MAP_DIR / "run.json").read_text())["parameters"]["mixed_map"]
    )
    assert set(t.law) == set(LAWS) and set(t.unit) == {"jobs", "time"} and set(t.L_factor) == set(mm.L_factors)
    assert len(t) == len(LAWS) * 2 * len(mm.L_factors) * 3
    head = t[(t.L_factor == 1.0) & (t.alpha != "oracle")]
    assert (head.verdict != "inconclusive").mean() >= 0.75  # most verdicts at the default L are decided
    assert D.ALPHAS == ("batch", "job")


def test_the_map_figure_shows_every_cell_with_its_interval():
    from extras import need

    need("plotly")
    from asrsched.figures.mixed_map import fig_mixed_map

    raw = pd.concat([_synthetic_raw(300), _synthetic_raw(300).assign(unit="time")], ignore_index=True)
    t = map_table(raw, n_boot=200)
    fig = fig_mixed_map(t)
    assert len(fig.data) == 2 * 2 * 3  # rows (better, worse) x units x alphas
    b = t[(t.unit == "jobs") & (t.alpha == "batch")].iloc[0]
    tr = next(d for d in fig.data if d.name.startswith("α from batch") and d.xaxis == "x")
    assert tr.y[0] == pytest.approx(b.gain_better)
    assert tr.error_y.array[0] == pytest.approx(b.gain_better_ci_hi - b.gain_better)
    assert "holds in 2 of 4" in fig.layout.title.text  # batch (3x) holds in both units, the per-job mix (1x) fails
    with pytest.raises(ValueError, match="L_factor"):
        fig_mixed_map(t, L_factor=0.3)
