"""What a notebook's run must produce, per notebook: its tables, figures (HTML, PNG and SVG) and printed findings.

``tests/app/test_browser.py`` checks these on the run that ``asrsched dashboard NN --small`` makes in
Voila (the small set of ``notebooks/small_params.json``): Voila executes the notebook top to bottom in a fresh kernel with
nbclient, the parameters injected as papermill injects them (an ``injected-parameters`` cell), and the
exports go to ``--figures``; the check then reads the files and the text of the outputs on the page. Before,
each of these notebooks also ran once more under papermill only for these checks (01, 02, 04, 05 and 06: about
140 s of a worker's time); notebook 03 keeps its papermill and CLI runs (``tests/app/test_runner.py``,
``tests/project/test_install.py``), which check the runner itself.

A check takes ``fig`` (the notebook's figure folder), ``runs`` (the project's ``runs/``, where a relative
``OUT_DIR`` lands), ``tmp`` (a folder of the test's own, for ``EXTRA_PARAMS``) and ``outputs`` (the text of
every output on the page). Its parameters are the notebook's small set plus ``EXTRA_PARAMS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def check_01_profile_whisper(fig: Path, runs: Path, tmp: Path, outputs: str) -> None:
    """Real tiny.en over 5 English clips and a silent one: kappa with its CI, the service model and its hold-out."""
    from asrsched.core.service import ServiceModel

    kappa = pd.read_csv(fig / "kappa.csv")
    en = kappa[(kappa.language == "en") & (kappa.tokens == "decode_steps")].iloc[0]
    assert en.ci_low <= en.kappa <= en.ci_high and en.n == 4
    meas = pd.read_csv(fig / "measurements.csv")
    assert len(meas) == 6 and meas.ok.all() and meas.silence.sum() == 1
    coef = pd.read_csv(fig / "service_model.csv").iloc[0]
    assert coef.encode_s_per_window > 0 and coef.holdout_n == 1
    sm = ServiceModel.from_json(tmp / "profile.json")
    assert sm.fit["clock"] == "cpu"  # auto on a CPU engine
    # the held-back clip is the speech clip whose CPU time is the hold-out's measured mean; the rest trained
    held = meas[(meas.cpu_s - coef.holdout_measured_mean_s).abs() < 1e-9]
    assert len(held) == 1 and not held.silence.iloc[0]
    train = meas[~meas.silence & ~meas.index.isin(held.index)]
    # kappa recomputed (ratio of sums); per reference-text token the decoder takes 0.9-1.4 steps (transcript
    # up to WER, plus an end token): a count of characters, prompt tokens or samples would not fit
    assert en.kappa == pytest.approx(train.decode_steps.sum() / train.audio_s.sum(), rel=1e-9)
    assert 0.9 < train.decode_steps.sum() / train.tokens_text.sum() < 1.4
    # hold-out (one clip) = time model + token prediction, exactly, since the time is linear in tokens:
    d, steps, cpu = (float(held[c].iloc[0]) for c in ("audio_s", "decode_steps", "cpu_s"))
    kappa_tok = max(1.0, round(sm.kappa["en"] * d))
    assert coef.holdout_predicted_mean_s == pytest.approx(float(sm.service_time(d, "en", tokens=kappa_tok)), rel=1e-9)
    assert coef.holdout_rel_error == pytest.approx(coef.holdout_predicted_mean_s / cpu - 1, rel=1e-9)
    # and the time model alone (the clip's measured decoder steps) is within 30 % of its CPU time
    assert abs(float(sm.service_time(d, "en", tokens=steps)) / cpu - 1) < 0.3
    vad = pd.read_csv(fig / "vad_summary.csv")
    assert {"file duration", "silero VAD", "energy VAD"} <= set(vad.duration_source)
    for name in (
        "kappa_tokens_vs_duration",
        "service_time_model",
        "rtf_vs_duration",
        "vad_estimate_error",
        "batched_decode_step",
    ):
        assert (fig / f"{name}.png").stat().st_size > 10_000 and (fig / f"{name}.html").exists()
    assert sm.kappa["en"] == pytest.approx(en.kappa)
    # kappa from the real transcripts (tiny.en's tokenizer), and the gap to the profile walked on the clips
    kt = pd.read_csv(fig / "kappa_text.csv")
    assert list(kt.columns) == ["language", "kappa_text", "ci_low", "ci_high", "n"] and list(kt.language) == ["en"]
    assert kt.n.iloc[0] == 2620 and kt.ci_low.iloc[0] < kt.kappa_text.iloc[0] < kt.ci_high.iloc[0]
    gap = pd.read_csv(fig / "kappa_gap.csv")
    clean = meas[meas.ok & ~meas.silence]
    assert gap.kappa.iloc[0] == pytest.approx(kt.kappa_text.iloc[0])
    assert gap.kappa.iloc[-1] == pytest.approx(clean.decode_steps.sum() / clean.audio_s.sum())
    assert gap.kappa.iloc[3] == pytest.approx(clean.tokens_text.sum() / clean.audio_s.sum())
    assert len(list((runs / "profile-01").glob("tiny.en-faster-whisper-*/measurements.csv"))) == 1


def check_02_policy_sweep(fig: Path, runs: Path, tmp: Path, outputs: str) -> None:
    """Every policy below, at and above capacity; the papers' claims matched at the headline load (rho 0.95) with
    seeds added and a ratio interval, SJF's median cut in overload, the comparison with the papers printed."""
    rc = pd.read_csv(fig / "relative_change.csv")
    assert set(rc.policy) == {"fcfs", "sjf", "hrrn", "adaptive"} and sorted(set(rc.rho.round(2))) == [0.5, 0.95, 1.3]
    sjf = rc[(rc.policy == "sjf") & np.isclose(rc.rho, 1.3) & (rc.workload == "librispeech")]
    assert float(sjf.p50_e2el_ms_change_pct.iloc[0]) < -25
    hl = pd.read_csv(fig / "headline_vs_paper.csv")
    stable = hl[hl.regime == "stable"]
    assert len(stable) and np.allclose(stable.rho, 0.95) and (stable.n_seeds == 4).all()  # refined up to MAX_SEEDS
    assert ((-100 < stable.ours_ci_low) & (stable.ours_ci_low <= stable.ours_pct)).all()
    assert (stable.ours_pct <= stable.ours_ci_high).all()
    assert np.allclose(hl[hl.regime == "overload"].rho, 1.3)
    # the trade-off: SJF, HRRN and both adaptive caps per workload, over TRADEOFF_SEEDS with ratio CIs
    tr = pd.read_csv(fig / "adaptive_tradeoff.csv")
    assert sorted(set(tr.label)) == ["HRRN", "SJF", "adaptive cap=20", "adaptive cap=50"] and (tr.n_seeds == 3).all()
    assert (tr.p90_e2el_ms_change_ci_low <= tr.p90_e2el_ms_change_pct).all() and (
        tr.p50_e2el_ms_change_ci_low > -100
    ).all()
    for f in (
        "relative_change_librispeech",
        "cdf_e2el_uniform_rho0.95",
        "throughput",
        "run_length",
        "tradeoff_librispeech_rho0.95",
    ):
        for ext in ("html", "png", "svg"):
            assert (fig / f"{f}.{ext}").stat().st_size > 1000
    assert "paper" in outputs and "at rho 0.95" in outputs
    # every headline row beside the extreme over the swept grid, with its load
    assert hl.extreme_rho.isin([0.5, 0.95, 1.3]).all() and "over the swept grid" in outputs
    assert {"HRRN, LibriSpeech (abstract): P50 E2EL down by up to 28 %"} <= set(hl.claim)
    # the latency frontier: the committed study's table and recommendation per cell, its figures
    ft = pd.read_csv(fig / "frontier_table.csv")
    rec = pd.read_csv(fig / "frontier_recommendations.csv")
    assert {"gamma_boost", "nudge"} <= {p.split("_m")[0].rsplit("_", 1)[0] for p in ft.policy}
    assert len(rec) == 2 * ft.groupby(["service", "workload", "rho", "error"]).ngroups and (rec.n_qualified >= 1).all()
    assert (fig / "frontier_cpu_librispeech_rho0.9_real.png").stat().st_size > 1000
    # the headline under both GPU models: every claim under each, and the models compared to the published numbers
    hm = pd.read_csv(fig / "headline_by_gpu_model.csv")
    assert set(hm.gpu_model) == {"a100", "h200"} and hm.groupby("gpu_model").claim.nunique().nunique() == 1
    assert "fitted to published" in outputs and "published_h200_c32_ms" in outputs
    # the committed long-upload study and its figure
    assert (fig / "uploads.png").stat().st_size > 1000 and "sjf/chunks/upload" in outputs
    assert "measured short-request saturation" in outputs and "sjf/upload" in outputs  # the vLLM-CPU runs
    assert "non-streamed requests" in outputs and "sjf/streamed/upload" in outputs  # and the streamed mode
    assert "same-server changes (moving blocks of" in outputs and "between servers (A/A)" in outputs
    for name in ("uploads_real", "uploads_real_nonstream"):  # each run beside the simulator's predictions
        assert (fig / f"{name}.png").stat().st_size > 1000


def check_04_real_serving(fig: Path, runs: Path, tmp: Path, outputs: str) -> None:
    """Real tiny.en servers, FCFS and SJF at a stable and an overloaded load: the same trace per load, the
    simulator's errors recomputed from their two columns, the per-cell results without a verdict at n = 4, and
    the loads as fractions of the saturation throughput measured on the server (the checks of the engine
    study's quick CPU-server run, which ran the same pipeline once more, merged here)."""
    t = pd.read_csv(fig / "real_vs_sim.csv")
    assert len(t) == 4 and set(t.policy) == {"fcfs", "sjf"} and t["rho"].nunique() == 2
    assert (t.completed == 4).all() and (t.failed == 0).all()
    assert (t.p50_e2el_ms > 0).all() and (t.p90_e2el_ms >= t.p50_e2el_ms).all()
    for mode, m in (
        ("sim", "p50_e2el_ms"),
        ("replay", "p90_e2el_ms"),
        ("sim", "p50_ttft_ms"),
        ("profile", "p50_e2el_ms"),
    ):
        # each error is (predicted - measured) in % of measured, recomputed here from the two columns
        assert (t[f"{mode}_{m}"] > 0).all() and (t[m] > 0).all()
        np.testing.assert_allclose(
            t[f"{mode}_{m}_err_pct"], 100 * (t[f"{mode}_{m}"] / t[m] - 1), rtol=1e-9, err_msg=f"{mode}_{m}_err_pct"
        )
    # the same trace per load level for both policies
    rec = pd.read_csv(fig / "real_records.csv")
    assert len(rec) == 16 and rec["status"].eq(200).all()
    for _, g in rec.groupby("rho"):
        a, b = (x.sort_values("rid")["duration"].to_numpy() for _, x in g.groupby("policy"))
        assert np.array_equal(a, b)
    for f in ("cdf_e2el", "cdf_ttft", "latency_vs_load", "prediction", "calibration"):
        assert (fig / f"{f}.png").stat().st_size > 1000 and (fig / f"{f}.html").exists()
    assert (runs / "serving-04" / "calibrated_service_model.json").exists()
    # the per-cell results: the columns, rho from the measured saturation throughput, no verdict at n=4
    res = pd.read_csv(fig / "real_engine_results_this_run.csv")
    assert list(res.columns[:12]) == [
        "engine",
        "policy",
        "rho",
        "n_requests",
        "p50_e2el_s",
        "p50_ci_low",
        "p50_ci_high",
        "p90_e2el_s",
        "p50_ttft_s",
        "sim_p50_e2el_s",
        "sim_p90_e2el_s",
        "sim_p50_ttft_s",
    ]
    assert sorted(res.rho.unique()) == [0.8, 1.5] and list(res.regime.unique()) == ["stable", "overload"]
    assert res.loc[res.policy == "sjf", "verdict_p50_e2el"].str.startswith("not assessed").all()
    assert (res.n_requests == 4).all() and (res.failed == 0).all()
    assert ((res.p50_ci_low <= res.p50_e2el_s) & (res.p50_e2el_s <= res.p50_ci_high)).all()
    assert np.isfinite(res[["sim_p50_e2el_s", "sim_p90_e2el_s", "sim_p50_ttft_s"]]).all().all()
    # the saturation throughput measured on the server (a Capacity's fields), and rho = arrival rate / it
    sat = json.loads((runs / "serving-04" / "params.json").read_text())["saturation"]
    assert sat["completed"] == 4 and sat["n_requests"] == 4 and sat["rate"] > 0 and sat["per_seed"] == [sat["rate"]]
    assert sat["max_num_seqs"] == 1 and sat["workload"] == "librispeech" and "engine full" in sat["method"]
    assert np.allclose(res.rate_rps / sat["rate"], res.rho, rtol=0.01)
    assert (res.regime == np.where(res.rho < 1, "stable", "overload")).all()


def check_05_ab_estimators(fig: Path, runs: Path, tmp: Path, outputs: str) -> None:
    """Every estimator in both scenarios; the naive estimate biased low; the figures and the run record."""
    est = pd.read_csv(fig / "estimators.csv")
    assert set(est.scenario) == {"homogeneous", "switchback"}
    assert {"naive", "group", "switchback", "qdq", "wdq", "mixed_dq"} <= set(est.estimator)
    assert est.rmse.gt(0).all() and est.reps.eq(3).all()
    claims = pd.read_csv(fig / "claims.csv")
    assert claims.naive_biased_low.all()
    for name in ("overview", "errors_homogeneous", "ablation_homogeneous", "switchback_designs", "coverage"):
        assert (fig / f"{name}.html").exists() and (fig / f"{name}.png").stat().st_size > 10_000
    run = pd.read_csv(fig / "run.csv")
    assert run.reps.iloc[0] == 3 and run.study_seconds.iloc[0] > 0


def check_06_ab_asr_policies(fig: Path, runs: Path, tmp: Path, outputs: str) -> None:
    """Bias, sd and MSE against the truth for both factors; the figures; the operator's recommendation printed."""
    s = pd.read_csv(fig / "estimator_summary.csv")
    assert {"bias", "sd", "mse", "truth"} <= set(s.columns) and len(s) >= 20
    t = pd.read_csv(fig / "ground_truth.csv")
    assert set(t.factor) == {"routing", "scheduling"}
    for f in ("ground_truth_e2el", "routing_mean_e2el", "rmse_routing", "tail_mixed_dq"):
        for ext in ("html", "png", "svg"):
            assert (fig / f"{f}.{ext}").stat().st_size > 1000
    assert "For an operator" in outputs
    # the plan section: the committed precision study re-planned, its figure and tables
    plan = pd.read_csv(fig / "ab_plan.csv")
    assert set(plan.factor) == {"routing", "scheduling"} and {"required_s", "mde_pct", "status"} <= set(plan.columns)
    assert plan.recommended.sum() <= 2 and (fig / "ab_plan_routing.png").stat().st_size > 10_000
    prec = pd.read_csv(fig / "ab_plan_precision.csv")
    assert prec.predicted.between(0, 1).all() and prec.detected.between(0, 1).all()
    assert "to detect a 10 % change in mean E2EL" in outputs


Check = Callable[[Path, Path, Path, str], None]
CHECKS: dict[str, Check] = {
    "01_profile_whisper": check_01_profile_whisper,
    "02_policy_sweep": check_02_policy_sweep,
    "04_real_serving": check_04_real_serving,
    "05_ab_estimators": check_05_ab_estimators,
    "06_ab_asr_policies": check_06_ab_asr_policies,
}
# parameters beside the small set's, given as -p on the dashboard's command line (paths under tmp)
EXTRA_PARAMS: dict[str, Callable[[Path], dict]] = {
    "01_profile_whisper": lambda tmp: {"PROFILE_JSON": str(tmp / "profile.json")},
}
