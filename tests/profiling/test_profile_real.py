"""Real Whisper (tiny.en, faster-whisper on CPU) on synthesised speech, plus bad files in the same run.

One module-scoped model and corpus keep this file at ~30-40 s on 2 cores.
"""

import io
import struct

import numpy as np
import pandas as pd
import pytest
from extras import need

need("soundfile")

import soundfile as sf

from asrsched.core.service import ServiceModel
from asrsched.profiling.measure import COLUMNS, make_backend, measure, word_error_rate
from asrsched.profiling.run import run_profile
from asrsched.whisper.corpus import SilenceSpec, build_corpus
from asrsched.whisper.vad import speech_duration

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend():
    return make_backend("faster-whisper", "tiny.en", cpu_threads=2, temperature=0.0)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    clean = build_corpus(["en"], 4, seed=11, min_s=2.5, max_s=24.0, cache=cache, progress=False)
    sil = build_corpus(
        ["en"],
        1,
        seed=12,
        min_s=4.0,
        max_s=8.0,
        cache=cache,
        progress=False,
        silence=SilenceSpec(lead_s=4.0, trail_s=5.0, inner_s=3.0, n_inner=1),
    )
    return clean, sil


def bad_files(d):
    """One file per failure mode the profiler must record and survive."""
    d.mkdir(exist_ok=True)
    x = np.random.default_rng(0).uniform(-0.3, 0.3, 32000).astype("float32")
    b = io.BytesIO()
    sf.write(b, x, 16000, format="WAV", subtype="PCM_16")
    good = b.getvalue()
    files = {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "not_audio": b"<html>not found</html>\n" * 20,
        "corrupt": good[:20] + struct.pack("<H", 0) + good[22:],
    }
    paths = {}
    for k, v in files.items():
        (d / f"{k}.wav").write_bytes(v)
        paths[k] = d / f"{k}.wav"
    sf.write(d / "stereo.wav", np.c_[x, x], 16000)
    sf.write(d / "sample_rate.wav", x, 44100)
    paths["stereo"], paths["sample_rate"] = d / "stereo.wav", d / "sample_rate.wav"
    return paths


def test_real_inference_tokens_grow_with_duration_and_text_matches(backend, clips, tmp_path):
    clean, sil = clips
    bad = bad_files(tmp_path / "bad")
    extra = pd.DataFrame(
        {
            "path": [str(p) for p in bad.values()],
            "language": "en",
            "utt_id": list(bad),
            "key": [f"bad-{k}" for k in bad],
        }
    )
    man = pd.concat([clean, sil, extra], ignore_index=True)
    out = tmp_path / "m.csv"
    df = measure(man, backend, out=out, progress=False)
    # every request is a row, bad ones with their reason; the good ones were measured
    assert len(df) == len(man)
    failed = df[~df["ok"]].set_index("utt_id")["error_reason"].to_dict()
    assert failed == {k: k for k in bad}
    good = df[df["ok"] & ~df["silence"]].sort_values("audio_s")
    assert len(good) == 4
    assert good["audio_s"].is_monotonic_increasing and good["audio_s"].iloc[-1] > 3 * good["audio_s"].iloc[0]
    assert good["tokens_text"].is_monotonic_increasing
    assert good["tokens_text"].iloc[-1] > 2.5 * good["tokens_text"].iloc[0]
    assert (good["tokens_generated"] >= good["tokens_kept"]).all()
    assert (good["decode_steps"] >= good["generate_calls"]).all()
    # the transcript is close to the text espeak read (tiny.en on espeak voices: WER ~0.2-0.5),
    # and far closer to its own text than to any other clip's
    assert good["wer"].mean() < 0.5, good[["text", "hypothesis", "wer"]].to_string()
    for r in good.itertuples():
        others = [word_error_rate(t, r.hypothesis) for t in good["text"] if t != r.text]
        assert r.wer < min(others) - 0.3, (r.text, r.hypothesis)
    # timings are consistent: encode + decode inside the total, first token before the end
    assert (good["encode_s"] + good["decode_s"] <= good["total_s"] * 1.001).all()
    assert ((good["first_token_s"] > good["encode_s"] * 0.5) & (good["first_token_s"] < good["total_s"])).all()
    assert (good["windows"] == 1).all() and (good["rtf"] > 0).all()
    # the table on disk is the same table (written as it went)
    disk = pd.read_csv(out)
    assert list(disk.columns) == COLUMNS and len(disk) == len(man)
    assert out.with_suffix(".parquet").exists()
    # the silence clip: VAD finds the speech, file duration does not
    s = df[df["silence"]].iloc[0]
    assert s["audio_s"] > 2 * s["speech_s"]
    for m in ("silero", "energy"):
        assert s[f"vad_{m}_s"] == pytest.approx(s["speech_s"], rel=0.2)
        assert s[f"vad_{m}_cost_s"] < 0.25 * s["total_s"]


class StopAfter:
    """The real backend, interrupted (as by Ctrl-C) after ``n`` transcriptions."""

    def __init__(self, inner, n):
        self.inner, self.n, self.calls = inner, n, 0
        self.name, self.model = inner.name, inner.model

    def transcribe(self, audio, language):
        if self.calls >= self.n:
            raise KeyboardInterrupt
        self.calls += 1
        return self.inner.transcribe(audio, language)


def test_interrupted_run_keeps_rows_and_resumes(backend, clips, tmp_path):
    clean, _ = clips
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        measure(clean, StopAfter(backend, 3), out=out, warmup=0, progress=False)
    kept = pd.read_csv(out)
    assert len(kept) == 3 and kept["ok"].all()
    again = StopAfter(backend, 99)
    df = measure(clean, again, out=out, warmup=0, progress=False)
    assert again.calls == 1 and len(df) == 4  # only the missing clip was transcribed
    assert list(df["key"]) == list(clean["key"])
    with pytest.raises(FileExistsError, match="resume=True"):
        measure(clean, again, out=out, resume=False, progress=False)


def test_temperature_fallbacks_are_counted_in_generated_tokens(clips):
    """log_prob_threshold=0 fails every decode's check, so every temperature of the ladder runs."""
    from asrsched.whisper.audio import load_audio

    be = make_backend(
        "faster-whisper",
        "tiny.en",
        temperature=(0.0, 0.5, 1.0),
        log_prob_threshold=0.0,
        compression_ratio_threshold=None,
        no_speech_threshold=None,
    )
    x = load_audio(clips[0].sort_values("audio_s")["path"].iloc[0])
    r = be.transcribe(x, "en")
    assert r["generate_calls"] == 3 and r["fallbacks"] == 2 and r["windows"] == 1
    assert r["tokens_generated"] > r["tokens_kept"]
    assert r["decode_steps"] > r["tokens_kept"]


def test_silence_vad_cost_is_small_against_inference(backend, clips):
    _, sil = clips
    from asrsched.whisper.audio import load_audio

    x = load_audio(sil["path"].iloc[0])
    v = speech_duration(x, method="silero")
    r = backend.transcribe(x, "en")
    assert v.speech_s == pytest.approx(sil["speech_s"].iloc[0], rel=0.2)
    assert v.cost_s < 0.2 * r["total_s"]


def test_run_profile_end_to_end_writes_a_loadable_profile(backend, tmp_path):
    run = run_profile(
        model="tiny.en",
        backend=backend,
        languages=["en"],
        n_per_language=6,
        n_silence_per_language=1,
        batch_sizes=(1, 2),
        holdout_frac=0.25,
        n_boot=200,
        out_dir=tmp_path / "run",
        cache=tmp_path / "cache",
        progress=False,
    )
    sm = ServiceModel.from_json(run.out_dir / "service_model.json")
    assert sm.kappa["en"] == pytest.approx(run.kappa.kappa["en"])
    lo, hi = sm.kappa_ci["en"]
    train = run.train[run.train.ok.astype(bool) & ~run.train.silence.astype(bool)]
    # kappa: decoder steps per second of audio over the training clips (ratio of sums), recomputed here; the
    # decoder emits the transcript (reference-text tokens, up to WER) plus an end token, so per reference
    # token it takes 0.9-1.4 steps (a count of characters, prompt tokens or samples would not)
    assert lo <= sm.kappa["en"] <= hi
    assert sm.kappa["en"] == pytest.approx(train.decode_steps.sum() / train.audio_s.sum(), rel=1e-9)
    assert 0.9 < train.decode_steps.sum() / train.tokens_text.sum() < 1.4
    # the encoder pads every window to 30 s, so each encoder run costs the same: the fitted cost per run is the
    # pooled mean, and no clip's own cost per run is off it by more than a third
    per_run = train.encode_cpu_s / train.windows
    assert sm.encode_s_per_window == pytest.approx(train.encode_cpu_s.sum() / train.windows.sum(), rel=1e-9)
    assert (per_run / sm.encode_s_per_window).between(2 / 3, 1.5).all(), per_run.tolist()
    # the per-token step from the total-time fit agrees with the decoder-only regression (an independent fit)
    assert 0.5 < sm.decode_s_per_token / sm.fit["decode_s_per_token_decoder_only"] < 2
    h = sm.fit["holdout"]
    assert h["n"] >= 1 and "asrsched.sim.engine" in h["method"]
    # hold-out = time model + token prediction; with each clip's measured decoder steps the time model alone
    # predicts the held-back clips' mean CPU time within 30 % (wrong clock, windows or units would not)
    held = run.held[run.held.ok.astype(bool)]
    assert h["measured_mean_s"] == pytest.approx(held.cpu_s.mean(), rel=1e-9)
    by_time_model = sm.service_time(held.audio_s.to_numpy(), "en", tokens=held.decode_steps.to_numpy())
    assert abs(by_time_model.mean() / held.cpu_s.mean() - 1) < 0.3
    kappa_tok = np.maximum(1, np.rint(sm.kappa["en"] * held.audio_s.to_numpy()))
    assert h["predicted_mean_s"] == pytest.approx(
        sm.service_time(held.audio_s.to_numpy(), "en", tokens=kappa_tok).mean(), rel=1e-9
    )
    assert sm.fit["clock"] == "cpu" and sm.fit["other_clock"]["clock"] == "wall"  # auto: CPU engine
    assert len(run.batch) == 2 and sm.decode_batch_slope >= 0
    assert {"file duration", "silero VAD"} <= set(run.vad["duration_source"])
    assert (run.out_dir / "measurements.csv").exists() and (run.out_dir / "kappa.csv").exists()
    assert run.out_dir.parent == tmp_path / "run" and run.out_dir.name.startswith("tiny.en-faster-whisper-")
