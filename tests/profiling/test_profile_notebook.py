"""Notebook 01 runs headlessly with tiny parameters (real tiny.en) and exports its figures and tables."""

from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_profile_notebook_headless(tmp_path, monkeypatch):
    import papermill as pm

    monkeypatch.setenv("ASRSCHED_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("ASRSCHED_CACHE", str(tmp_path / "cache"))
    params = dict(
        MODEL="tiny.en",
        LANGUAGES=["en"],
        N_PER_LANGUAGE=5,
        N_SILENCE_PER_LANGUAGE=1,
        BATCH_SIZES=[1, 2],
        N_BOOT=200,
        OUT_DIR=str(tmp_path / "run"),
        PROFILE_JSON=str(tmp_path / "profile.json"),
    )
    pm.execute_notebook(
        str(ROOT / "notebooks" / "01_profile_whisper.ipynb"),
        str(tmp_path / "out.ipynb"),
        parameters=params,
        kernel_name="python3",
        execution_timeout=600,
        cwd=str(tmp_path),
        progress_bar=False,
    )
    out = tmp_path / "figures" / "01_profile_whisper"
    kappa = pd.read_csv(out / "kappa.csv")
    en = kappa[(kappa.language == "en") & (kappa.tokens == "decode_steps")].iloc[0]
    assert en.ci_low <= en.kappa <= en.ci_high and en.n == 4
    meas = pd.read_csv(out / "measurements.csv")
    assert len(meas) == 6 and meas.ok.all() and meas.silence.sum() == 1
    coef = pd.read_csv(out / "service_model.csv").iloc[0]
    assert coef.encode_s_per_window > 0 and coef.holdout_n == 1
    from asrsched.core.service import ServiceModel

    sm = ServiceModel.from_json(tmp_path / "profile.json")
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
    vad = pd.read_csv(out / "vad_summary.csv")
    assert {"file duration", "silero VAD", "energy VAD"} <= set(vad.duration_source)
    for name in (
        "kappa_tokens_vs_duration",
        "service_time_model",
        "rtf_vs_duration",
        "vad_estimate_error",
        "batched_decode_step",
    ):
        assert (out / f"{name}.png").stat().st_size > 10_000 and (out / f"{name}.html").exists()
    assert sm.kappa["en"] == pytest.approx(en.kappa)
    # kappa from the real transcripts (tiny.en's tokenizer), and the gap to the profile walked on the clips
    kt = pd.read_csv(out / "kappa_text.csv")
    assert list(kt.columns) == ["language", "kappa_text", "ci_low", "ci_high", "n"] and list(kt.language) == ["en"]
    assert kt.n.iloc[0] == 2620 and kt.ci_low.iloc[0] < kt.kappa_text.iloc[0] < kt.ci_high.iloc[0]
    gap = pd.read_csv(out / "kappa_gap.csv")
    clean = meas[meas.ok & ~meas.silence]
    assert gap.kappa.iloc[0] == pytest.approx(kt.kappa_text.iloc[0])
    assert gap.kappa.iloc[-1] == pytest.approx(clean.decode_steps.sum() / clean.audio_s.sum())
    assert gap.kappa.iloc[3] == pytest.approx(clean.tokens_text.sum() / clean.audio_s.sum())
    assert len(list((tmp_path / "run").glob("tiny.en-faster-whisper-*/measurements.csv"))) == 1
