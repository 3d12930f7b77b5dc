"""Audio validation and header-only duration (asrsched.whisper.audio): every bad-file case has its reason."""

import io
import struct

import numpy as np
import pytest
from extras import need

need("soundfile")

import soundfile as sf

from asrsched.whisper.audio import AudioError, audio_duration_from_header, audio_info, load_audio


def wav_bytes(n=16000, sr=16000, channels=1, subtype="PCM_16", seed=0):
    x = np.random.default_rng(seed).uniform(-0.5, 0.5, size=(n, channels)).astype("float32")
    b = io.BytesIO()
    sf.write(b, x, sr, format="WAV", subtype=subtype)
    return b.getvalue(), x


def reason(src, fn=load_audio, **kw):
    with pytest.raises(AudioError) as e:
        fn(src, **kw)
    return e.value


@pytest.mark.parametrize("n,sr", [(24000, 16000), (44100 * 3 + 7, 44100), (1, 8000)])
def test_header_duration_exact_for_path_bytes_and_fileobj(tmp_path, n, sr):
    b, _ = wav_bytes(n, sr)
    p = tmp_path / "a.wav"
    p.write_bytes(b)
    f = io.BytesIO(b)
    f.seek(10)
    assert audio_duration_from_header(p) == pytest.approx(n / sr, abs=1e-12)
    assert audio_duration_from_header(b) == pytest.approx(n / sr, abs=1e-12)
    assert audio_duration_from_header(f) == pytest.approx(n / sr, abs=1e-12)
    assert f.tell() == 10  # the caller's position is kept


def test_header_duration_reads_only_the_header(tmp_path):
    """A 10-minute WAV: the header parse must not depend on the sample data."""
    sr, n = 16000, 16000 * 600
    hdr = bytearray(wav_bytes(1, sr)[0][:44])
    struct.pack_into("<I", hdr, 40, n * 2)
    struct.pack_into("<I", hdr, 4, 36 + n * 2)
    p = tmp_path / "long.wav"
    with open(p, "wb") as f:
        f.write(hdr)
        f.truncate(44 + n * 2)  # sparse file of zeros
    assert audio_duration_from_header(p) == 600.0


def test_flac_header_duration(tmp_path):
    x = np.zeros(12345, "float32")
    p = tmp_path / "a.flac"
    sf.write(p, x, 16000, format="FLAC")
    assert audio_duration_from_header(p) == pytest.approx(12345 / 16000)
    assert audio_info(p).container == "FLAC"


def test_load_roundtrip_float32_mono(tmp_path):
    b, x = wav_bytes(8000, subtype="FLOAT")
    y = load_audio(b)
    assert y.dtype == np.float32 and y.shape == (8000,)
    np.testing.assert_allclose(y, x[:, 0], atol=1e-7)


def test_streamed_wav_with_placeholder_size_is_not_truncation():
    b, x = wav_bytes(4000)
    s = bytearray(b)
    struct.pack_into("<I", s, 4, 0x7FFFF024)
    struct.pack_into("<I", s, 40, 0x7FFFF000)  # what espeak-ng --stdout writes
    info = audio_info(bytes(s))
    assert info.streamed and info.frames == 4000
    assert load_audio(bytes(s)).shape == (4000,)


def test_truncated_wav(tmp_path):
    b, _ = wav_bytes(16000)
    p = tmp_path / "cut.wav"
    p.write_bytes(b[: len(b) // 3])
    e = reason(p, audio_duration_from_header)
    assert e.reason == "truncated" and "cut.wav" in str(e) and "promises" in str(e)
    assert reason(p).reason == "truncated"


def test_empty_file_and_header_without_samples(tmp_path):
    p = tmp_path / "empty.wav"
    p.write_bytes(b"")
    assert reason(p, audio_duration_from_header).reason == "empty"
    b, _ = wav_bytes(16000)
    h = bytearray(b[:44])
    struct.pack_into("<I", h, 40, 0)
    assert reason(bytes(h), audio_duration_from_header).reason == "empty"


@pytest.mark.parametrize(
    "payload",
    [
        b"hello, this is not audio\n" * 40,
        b"<html><body>404</body></html>",
        bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)),
    ],
)
def test_non_audio(tmp_path, payload):
    p = tmp_path / "x.wav"
    p.write_bytes(payload)
    e = reason(p)
    assert e.reason == "not_audio" and "x.wav" in str(e)


def test_corrupt_headers(tmp_path):
    b, _ = wav_bytes(16000)
    bad_fmt = bytearray(b)
    struct.pack_into("<H", bad_fmt, 22, 0)  # zero channels
    assert reason(bytes(bad_fmt)).reason == "corrupt"
    garbage_chunk = b[:12] + b"JUNK" + struct.pack("<I", 10**9) + b[12:]
    assert reason(garbage_chunk).reason == "corrupt"
    assert reason(b"RIFF\x10\x00\x00\x00AVI LIST").reason == "corrupt"
    flac_garbage = b"fLaC" + bytes(range(256)) * 4
    assert reason(flac_garbage).reason == "corrupt"


def test_stereo_rejected_or_mixed():
    b, x = wav_bytes(1600, channels=2, subtype="FLOAT")
    e = reason(b)
    assert e.reason == "stereo" and "mono='mix'" in str(e)
    y = load_audio(b, mono="mix")
    np.testing.assert_allclose(y, x.mean(axis=1), atol=1e-6)


def test_odd_sample_rate_rejected_or_resampled():
    b, _ = wav_bytes(44100, sr=44100)
    e = reason(b)
    assert e.reason == "sample_rate" and "44100" in str(e)
    y = load_audio(b, resample=True)
    assert abs(len(y) - 16000) <= 1


def test_missing_path_and_directory(tmp_path):
    assert reason(tmp_path / "nope.wav").reason == "unreadable"
    assert reason(tmp_path).reason == "unreadable"


def test_bad_parameters_name_themselves():
    b, _ = wav_bytes(100)
    with pytest.raises(ValueError, match="mono must be 'error' or 'mix'"):
        load_audio(b, mono="left")
    with pytest.raises(ValueError, match="sample_rate must be a positive"):
        load_audio(b, sample_rate=0)
