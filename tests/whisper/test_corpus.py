"""The espeak-ng corpus: real texts, durations matched to the real recordings, cache, silence, errors."""

import os

import numpy as np
import pandas as pd
import pytest
from extras import need

from asrsched.whisper import corpus
from asrsched.whisper.audio import audio_info, load_audio
from asrsched.whisper.corpus import EspeakMissingError, SilenceSpec, build_corpus, load_texts, synthesize_to_duration


@pytest.mark.parametrize("lang", ["en", "es", "de", "id"])
def test_load_texts_real_rows_seeded_and_spread(lang):
    a = load_texts(lang, 6, seed=3)
    b = load_texts(lang, 6, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 6 and (a["language"] == lang).all()
    assert a["text"].str.len().min() > 5 and (a["n_words"] > 0).all()
    full = load_texts(lang)
    # stratified: one pick per equal-width duration bin, so the picks span the whole range
    lo, hi = full["target_s"].min(), full["target_s"].max()
    w = (hi - lo) / 6
    assert a["target_s"].iloc[0] < lo + w and a["target_s"].iloc[-1] >= hi - w
    assert a["utt_id"].is_unique


def test_load_texts_en_uses_real_librispeech_durations():
    t = load_texts("en")
    row = t.set_index("utt_id").loc["1089-134686-0000"]
    assert row["target_s"] == pytest.approx(10.435)
    assert row["text"].startswith("HE HOPED THERE WOULD BE STEW")
    assert len(t) == 2620


def test_load_texts_bad_arguments():
    with pytest.raises(ValueError, match="allowed values: en, id, es, de"):
        load_texts("fr")
    with pytest.raises(ValueError, match="sample must be one of"):
        load_texts("en", 3, sample="best")
    with pytest.raises(ValueError, match="only .* lie in"):
        load_texts("es", 500)


@pytest.mark.parametrize("utt", ["1089-134686-0000", "1089-134686-0001", "121-121726-0000"])
def test_rate_is_chosen_to_match_the_real_duration(utt):
    row = load_texts("en").set_index("utt_id").loc[utt]
    x, rate = synthesize_to_duration(row["text"], "en", row["target_s"])
    assert x.dtype == np.float32
    assert len(x) / 16000 == pytest.approx(row["target_s"], rel=0.05)
    assert 80 <= rate <= 450


def test_build_corpus_writes_16k_mono_wavs_and_caches(tmp_path):
    need("soundfile")
    m = build_corpus(["en", "de"], 2, cache=tmp_path, progress=False)
    assert len(m) == 4 and m.attrs["synthesised"] == 4
    for r in m.itertuples():
        info = audio_info(r.path)
        assert (info.sample_rate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.duration_s == pytest.approx(r.audio_s)
        assert r.speech_s == pytest.approx(r.audio_s)
    mtime = {p: os.stat(p).st_mtime_ns for p in m["path"]}
    again = build_corpus(["en", "de"], 2, cache=tmp_path, progress=False)
    assert again.attrs["synthesised"] == 0
    assert {p: os.stat(p).st_mtime_ns for p in again["path"]} == mtime
    man = pd.read_csv(tmp_path / "corpus" / "manifest.csv")
    assert set(m["key"]) <= set(man["key"])


def test_silence_insertion_records_true_speech(tmp_path):
    need("soundfile")
    sil = SilenceSpec(lead_s=1.5, trail_s=2.0, inner_s=1.0, n_inner=2)
    clean = build_corpus(["en"], 2, seed=5, cache=tmp_path, progress=False)
    m = build_corpus(["en"], 2, seed=5, cache=tmp_path, silence=sil, progress=False)
    assert set(m["key"]).isdisjoint(clean["key"])  # different clips, both cached
    for r in m.itertuples():
        assert r.audio_s == pytest.approx(r.speech_s + sil.total_s, abs=1e-3)
        x = load_audio(r.path)
        lead = x[: int(1.5 * 16000)]
        assert np.abs(lead).max() == 0.0  # digital silence where it was inserted
        assert np.abs(x[int(1.5 * 16000) : int(1.5 * 16000) + 4000]).max() > 0.01  # speech right after
    noisy = build_corpus(
        ["en"], 1, seed=5, cache=tmp_path, progress=False, silence=SilenceSpec(lead_s=1.0, noise_dbfs=-50)
    )
    x = load_audio(noisy["path"].iloc[0])
    rms = float(np.sqrt(np.mean(x[:16000] ** 2)))
    assert 20 * np.log10(rms) == pytest.approx(-50, abs=1.5)


def test_silence_spec_validation():
    with pytest.raises(ValueError, match="lead_s"):
        SilenceSpec(lead_s=-1)
    with pytest.raises(ValueError, match="n_inner"):
        SilenceSpec(n_inner=1.5)
    with pytest.raises(ValueError, match="noise_dbfs"):
        SilenceSpec(noise_dbfs=3)


def test_missing_espeak_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.delenv("ESPEAK_NG", raising=False)
    with pytest.raises(EspeakMissingError, match="apt-get install espeak-ng"):
        corpus.espeak_path()
    with pytest.raises(EspeakMissingError, match="apt-get install espeak-ng"):
        build_corpus(["en"], 2, cache=tmp_path, progress=False)
    assert not list(tmp_path.rglob("*.wav"))  # failed before any work


def test_build_corpus_bad_language_before_work(tmp_path):
    with pytest.raises(ValueError, match="allowed values"):
        build_corpus(["en", "xx"], 2, cache=tmp_path, progress=False)
    assert not list(tmp_path.rglob("*.wav"))
