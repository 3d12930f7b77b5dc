"""Speech-duration detectors (asrsched.whisper.vad) on signals whose speech time is known."""

import numpy as np
import pytest
from extras import need

from asrsched.whisper.corpus import synthesize
from asrsched.whisper.vad import energy_segments, speech_duration

SR = 16000


def bursts(spans, total_s, noise_dbfs=None, seed=0):
    """A modulated tone in ``spans`` [(start_s, end_s)], silence (or a noise floor) elsewhere."""
    rng = np.random.default_rng(seed)
    x = np.zeros(int(total_s * SR), np.float32)
    for a, b in spans:
        t = np.arange(int((b - a) * SR)) / SR
        x[int(a * SR) : int(a * SR) + len(t)] = (
            0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
        )
    if noise_dbfs is not None:
        x += rng.standard_normal(len(x)).astype(np.float32) * np.float32(10 ** (noise_dbfs / 20))
    return x


@pytest.mark.parametrize("noise", [None, -55.0])
def test_energy_detector_recovers_known_speech_time(noise):
    spans = [(1.0, 3.0), (6.0, 6.8), (9.0, 12.5)]
    x = bursts(spans, 15.0, noise)
    r = speech_duration(x, method="energy", speech_pad_ms=0)
    assert r.speech_s == pytest.approx(2.0 + 0.8 + 3.5, abs=0.1)
    assert len(r.segments) == 3 and r.audio_s == 15.0
    assert r.speech_fraction == pytest.approx(6.3 / 15, abs=0.01)


def test_energy_detector_merges_short_gaps_and_drops_clicks():
    x = bursts([(1.0, 2.0), (2.2, 3.0), (5.0, 5.03)], 6.0)
    segs = energy_segments(x, min_silence_ms=500, min_speech_ms=100, speech_pad_ms=0)
    assert len(segs) == 1  # the 200 ms gap is closed, the 30 ms click dropped
    assert segs[0][0] / SR == pytest.approx(1.0, abs=0.04) and segs[0][1] / SR == pytest.approx(3.0, abs=0.04)


def test_silero_on_real_speech_with_silence_around_it():
    need("faster_whisper")
    sp = synthesize("the quick brown fox jumps over the lazy dog", "en", rate_wpm=160)
    x = np.concatenate([np.zeros(3 * SR, np.float32), sp, np.zeros(4 * SR, np.float32)])
    r = speech_duration(x, method="silero")
    assert r.speech_s == pytest.approx(len(sp) / SR, abs=0.35)
    assert r.segments[0][0] == pytest.approx(3.0, abs=0.3)
    assert speech_duration(np.zeros(5 * SR, np.float32), method="silero").speech_s == 0.0
    assert speech_duration(x, method="none").speech_s == pytest.approx(len(x) / SR)
    assert r.cost_s > 0


def test_bad_arguments():
    need("faster_whisper")
    x = np.zeros(SR, np.float32)
    with pytest.raises(ValueError, match="method must be one of silero, energy, none"):
        speech_duration(x, method="webrtc")
    with pytest.raises(ValueError, match="1-D mono"):
        speech_duration(np.zeros((2, SR), np.float32))
    with pytest.raises(ValueError, match="16000 Hz"):
        speech_duration(x, sr=8000, method="silero")
