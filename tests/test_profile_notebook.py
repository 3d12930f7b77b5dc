"""Notebook 01 runs headlessly with tiny parameters (real tiny.en) and exports its figures and tables."""

from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_profile_notebook_headless(tmp_path, monkeypatch):
    import papermill as pm

    monkeypatch.setenv("ASRSCHED_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("ASRSCHED_CACHE", str(tmp_path / "cache"))
    params = dict(MODEL="tiny.en", LANGUAGES=["en"], N_PER_LANGUAGE=5, N_SILENCE_PER_LANGUAGE=1,
                  BATCH_SIZES=[1, 2], N_BOOT=200, OUT_DIR=str(tmp_path / "run"),
                  PROFILE_JSON=str(tmp_path / "profile.json"))
    pm.execute_notebook(str(ROOT / "notebooks" / "01_profile_whisper.ipynb"), str(tmp_path / "out.ipynb"),
                        parameters=params, kernel_name="python3", execution_timeout=600, cwd=str(tmp_path),
                        progress_bar=False)
    out = tmp_path / "figures" / "01_profile_whisper"
    kappa = pd.read_csv(out / "kappa.csv")
    en = kappa[(kappa.language == "en") & (kappa.tokens == "decode_steps")].iloc[0]
    assert 1.5 < en.kappa < 10 and en.ci_low <= en.kappa <= en.ci_high and en.n == 4
    meas = pd.read_csv(out / "measurements.csv")
    assert len(meas) == 6 and meas.ok.all() and meas.silence.sum() == 1
    coef = pd.read_csv(out / "service_model.csv").iloc[0]
    assert coef.encode_s_per_window > 0 and coef.holdout_n == 1 and abs(coef.holdout_rel_error) < 5
    vad = pd.read_csv(out / "vad_summary.csv")
    assert {"file duration", "silero VAD", "energy VAD"} <= set(vad.estimator)
    for name in ("kappa_tokens_vs_duration", "service_time_model", "rtf_vs_duration", "vad_estimate_error",
                 "batched_decode_step"):
        assert (out / f"{name}.png").stat().st_size > 10_000 and (out / f"{name}.html").exists()
    from asrsched.core.service import ServiceModel

    assert ServiceModel.from_json(tmp_path / "profile.json").kappa["en"] == pytest.approx(en.kappa)
    assert len(list((tmp_path / "run").glob("tiny.en-faster-whisper-*/measurements.csv"))) == 1
