"""Read and validate request audio: clear per-file errors, and duration from the header alone.

The scheduler's size proxy is the audio duration, read *before* any decoding.
:func:`audio_duration_from_header` gives it from a path, ``bytes`` or a binary
file object by reading only the container header (for WAV, the RIFF chunks; for
FLAC/OGG/MP3 and the rest, libsndfile's header parse). :func:`load_audio` then
decodes to the float32 16 kHz mono array Whisper wants.

Every failure is an :class:`AudioError` (a ``ValueError``) whose ``reason`` is
one of :data:`REASONS` and whose message names the file::

    empty        the file has no bytes, or a header but no samples
    not_audio    no known audio container (text, HTML, random bytes, ...)
    corrupt      an audio header that cannot be parsed (bad chunk sizes, bad format block)
    truncated    the header promises more sample data than the file holds
    stereo       more than one channel while mono is required (``mono="error"``)
    sample_rate  a rate other than the required one (``resample=False``)
    unreadable   the path does not exist or cannot be opened

A WAV written to a pipe (``espeak-ng --stdout``, ``sox ... -t wav -``) carries a
placeholder data size (0x7FFFF000 or 0xFFFFFFFF); that is read as "until the end
of the file", not as truncation.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np

__all__ = [
    "AudioError",
    "AudioInfo",
    "REASONS",
    "audio_info",
    "audio_duration_from_header",
    "load_audio",
    "TARGET_SR",
    "frame_rms",
    "plan_windows",
    "WINDOW_MAX_S",
]

TARGET_SR = 16_000
#: why an upload is refused (:class:`AudioError`'s ``reason``)
REASONS = ("empty", "not_audio", "corrupt", "truncated", "stereo", "sample_rate", "unreadable")
AudioSource = Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO]  # noqa: UP007 (a runtime alias)

_STREAMING_SIZES = {0xFFFFFFFF, 0x7FFFF000, 0x7FFFFFFF, 0}
_WAV_FORMATS = {1: "PCM", 3: "FLOAT", 6: "ALAW", 7: "ULAW", 0xFFFE: "EXTENSIBLE"}


class AudioError(ValueError):
    """A per-file audio problem; ``reason`` is one of :data:`REASONS`, ``source`` names the file."""

    def __init__(self, source: str, reason: str, detail: str):
        assert reason in REASONS, reason
        self.source, self.reason, self.detail = source, reason, detail
        super().__init__(f"{source}: {reason}: {detail}")


@dataclass(frozen=True)
class AudioInfo:
    """What the header says: sample rate, channels, frames, duration (s), container and encoding."""

    sample_rate: int
    channels: int
    frames: int
    duration_s: float
    container: str
    subtype: str
    streamed: bool = False  # WAV with a placeholder data size (written to a pipe)


def _name(src: AudioSource) -> str:
    if isinstance(src, (str, os.PathLike)):
        return str(src)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return f"<{len(src)} bytes>"
    return getattr(src, "name", None) or "<file object>"


def _read_bytes(src: AudioSource, limit: int | None = None) -> tuple[bytes, int]:
    """Up to ``limit`` leading bytes of ``src`` and its total size in bytes."""
    name = _name(src)
    if isinstance(src, (bytes, bytearray, memoryview)):
        mv = memoryview(src)  # a header read copies the header only, not a 20 MB upload
        return bytes(mv if limit is None else mv[:limit]), mv.nbytes
    if isinstance(src, (str, os.PathLike)):
        p = Path(src)
        try:
            size = p.stat().st_size
            if p.is_dir():
                raise AudioError(name, "unreadable", "is a directory, not an audio file")
            with open(p, "rb") as f:
                return f.read() if limit is None else f.read(limit), size
        except AudioError:
            raise
        except OSError as e:
            raise AudioError(name, "unreadable", f"cannot open ({e.strerror or e})") from None
    # binary file object: the whole stream from its start, leaving the caller's position as it was
    pos = src.tell()
    try:
        src.seek(0, io.SEEK_END)
        size = src.tell()
        src.seek(0)
        data = src.read() if limit is None else src.read(limit)
    finally:
        src.seek(pos)
    return data, size


def _parse_wav(head: bytes, size: int, name: str) -> AudioInfo:
    """Walk the RIFF chunks of a WAV header (``head`` holds at least the chunk headers)."""
    big = head[:4] == b"RIFX"
    e = ">" if big else "<"
    if len(head) < 12 or head[8:12] != b"WAVE":
        raise AudioError(name, "corrupt", "RIFF file without a WAVE form type")
    pos, fmt, data_off, data_size = 12, None, None, None
    while pos + 8 <= len(head):
        cid = head[pos : pos + 4]
        (csize,) = struct.unpack(e + "I", head[pos + 4 : pos + 8])
        body = pos + 8
        if cid == b"fmt ":
            if csize < 16 or body + 16 > len(head):
                raise AudioError(name, "corrupt", f"WAV fmt chunk too short ({csize} bytes)")
            tag, ch, sr, _byte_rate, align, bits = struct.unpack(e + "HHIIHH", head[body : body + 16])
            fmt = (tag, ch, sr, align, bits)
        elif cid == b"data":
            data_off, data_size = body, csize
            break
        if csize > size:  # a chunk longer than the whole file: garbage header
            raise AudioError(name, "corrupt", f"WAV chunk {cid!r} claims {csize} bytes in a {size}-byte file")
        pos = body + csize + (csize & 1)
    if fmt is None:
        raise AudioError(name, "corrupt", "WAV file without a fmt chunk before its data")
    if data_off is None:
        if size <= pos:
            raise AudioError(name, "empty", "WAV header without a data chunk (no samples)")
        raise AudioError(name, "corrupt", "WAV file without a data chunk")
    tag, ch, sr, align, bits = fmt
    if ch < 1 or sr < 1 or align < 1:
        raise AudioError(name, "corrupt", f"WAV fmt chunk has channels={ch}, sample_rate={sr}, block_align={align}")
    if tag not in _WAV_FORMATS:
        raise AudioError(name, "corrupt", f"WAV format tag {tag:#x} is not PCM/float/a-law/mu-law")
    held = max(size - data_off, 0)
    streamed = data_size in _STREAMING_SIZES and held != data_size
    if streamed:
        data_size = held - held % align
    elif data_size > held:
        raise AudioError(
            name,
            "truncated",
            f"WAV header promises {data_size} bytes of samples but the file holds {held} "
            f"({held / max(data_size, 1):.0%}); the upload or copy was cut short",
        )
    frames = data_size // align
    if frames == 0:
        raise AudioError(name, "empty", "WAV file with a header but no samples")
    sub = f"{_WAV_FORMATS[tag]}_{bits}"
    return AudioInfo(sr, ch, frames, frames / sr, "WAV", sub, streamed)


def audio_info(src: AudioSource) -> AudioInfo:
    """Header-only description of ``src`` (path, bytes or binary file); :class:`AudioError` if bad.

    WAV headers are parsed directly (64 KiB read at most); other containers go
    through ``soundfile.info`` (libsndfile reads the header, not the samples).
    """
    name = _name(src)
    head, size = _read_bytes(src, 65536)
    if size == 0:
        raise AudioError(name, "empty", "file has 0 bytes")
    if head[:4] in (b"RIFF", b"RIFX"):
        return _parse_wav(head, size, name)
    import soundfile as sf

    obj = io.BytesIO(_read_bytes(src)[0]) if not isinstance(src, (str, os.PathLike)) else str(src)
    try:
        i = sf.info(obj)
    except Exception as e:  # libsndfile: "Format not recognised", "Error in WAV file", ...
        text = _clean_sf_error(str(e)) or type(e).__name__
        known = head[:4] in (b"fLaC", b"OggS", b"FORM", b"ID3\x03", b"ID3\x04") or head[:2] in (
            b"\xff\xfb",
            b"\xff\xf3",
        )
        reason = "corrupt" if known else "not_audio"
        what = "audio header cannot be parsed" if known else "not a recognised audio file"
        raise AudioError(name, reason, f"{what} ({text})") from None
    if i.frames <= 0:
        raise AudioError(name, "empty", f"{i.format} file with no samples")
    return AudioInfo(
        int(i.samplerate), int(i.channels), int(i.frames), i.frames / i.samplerate, str(i.format), str(i.subtype)
    )


def _clean_sf_error(msg: str) -> str:
    """libsndfile's message without the ``Error opening <_io.BytesIO object at 0x...>:`` prefix."""
    import re

    text = msg.split("\n")[-1].strip()
    text = re.sub(r"^Error opening <[^>]*>:\s*", "", text)
    text = re.sub(r"<_io\.\w+ object at 0x[0-9a-fA-F]+>", "the upload", text)
    return text.strip()


def audio_duration_from_header(src: AudioSource) -> float:
    """Audio duration in seconds from the container header, without decoding samples.

    ``src`` is a path, ``bytes`` or a seekable binary file object (read from its
    start; its position is kept). Raises :class:`AudioError` (reason ``empty``, ``not_audio``, ``corrupt``,
    ``truncated`` or ``unreadable``) for a file the server should reject at arrival.

    >>> import numpy as np, soundfile as sf, io
    >>> b = io.BytesIO(); sf.write(b, np.zeros(24000, "float32"), 16000, format="WAV"); _ = b.seek(0)
    >>> audio_duration_from_header(b.getvalue())
    1.5
    """
    return audio_info(src).duration_s


def load_audio(
    src: AudioSource,
    *,
    sample_rate: int = TARGET_SR,
    mono: str = "error",
    resample: bool = False,
) -> np.ndarray:
    """Decode ``src`` to a float32 array at ``sample_rate`` (mono), validating it first.

    Parameters
    ----------
    mono:
        ``"error"`` (default) rejects multi-channel audio with reason ``stereo``;
        ``"mix"`` averages the channels.
    resample:
        ``False`` (default) rejects a rate other than ``sample_rate`` with reason
        ``sample_rate``; ``True`` resamples with ``scipy.signal.resample_poly``.

    The profiler keeps the strict defaults so that every measured request is
    exactly what Whisper was given; a server can pass ``mono="mix", resample=True``.
    """
    if mono not in ("error", "mix"):
        raise ValueError(f"mono must be 'error' or 'mix', got {mono!r}")
    if int(sample_rate) <= 0:
        raise ValueError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
    name = _name(src)
    info = audio_info(src)
    if info.channels > 1 and mono == "error":
        raise AudioError(name, "stereo", f"{info.channels} channels; expected mono (or pass mono='mix')")
    if info.sample_rate != sample_rate and not resample:
        raise AudioError(
            name,
            "sample_rate",
            f"sampled at {info.sample_rate} Hz; expected {sample_rate} Hz (or pass resample=True)",
        )
    import soundfile as sf

    data, _ = _read_bytes(src)
    try:
        if info.streamed:  # libsndfile may refuse a placeholder size: hand it a fixed header
            data = _fix_streamed_wav(data)
        x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:
        raise AudioError(name, "corrupt", f"samples cannot be decoded ({str(e).strip() or type(e).__name__})") from None
    if x.shape[0] < info.frames * 0.99 - 1:
        raise AudioError(name, "truncated", f"decoded {x.shape[0]} of the {info.frames} frames the header promises")
    if x.shape[0] == 0:
        raise AudioError(name, "empty", "no samples decoded")
    y = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
    if not np.all(np.isfinite(y)):
        raise AudioError(name, "corrupt", "samples contain NaN or infinity")
    if sr != sample_rate:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(int(sr), int(sample_rate))
        y = resample_poly(y, sample_rate // g, sr // g).astype(np.float32)
    return np.ascontiguousarray(y, dtype=np.float32)


def _fix_streamed_wav(data: bytes) -> bytes:
    """Rewrite the RIFF and data sizes of a WAV written to a pipe so libsndfile reads it."""
    b = bytearray(data)
    e = ">" if b[:4] == b"RIFX" else "<"
    pos = 12
    while pos + 8 <= len(b):
        cid = bytes(b[pos : pos + 4])
        (csize,) = struct.unpack(e + "I", b[pos + 4 : pos + 8])
        if cid == b"data":
            b[pos + 4 : pos + 8] = struct.pack(e + "I", len(b) - pos - 8)
            break
        pos += 8 + csize + (csize & 1)
    b[4:8] = struct.pack(e + "I", len(b) - 8)
    return bytes(b)


# ----------------------------------------------------------------------------- long-form cut points

#: the longest window :func:`plan_windows` makes by default (s). Whisper decoding without timestamp
#: tokens loses whole windows of continuous speech near the full 30 s (a window of 27-30 s of espeak
#: speech can come back as "The" or two words), so windows stay well short of it.
WINDOW_MAX_S = 25.0


def frame_rms(audio: np.ndarray, frame: int = 320) -> np.ndarray:
    """Root-mean-square level of consecutive ``frame``-sample frames (20 ms at 16 kHz); the last partial frame counts."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"audio must be one-dimensional (mono), got shape {x.shape}")
    if int(frame) < 1:
        raise ValueError(f"frame must be a positive number of samples, got {frame!r}")
    n = -(-len(x) // frame)
    pad = np.zeros(n * frame, np.float32)
    pad[: len(x)] = x
    return np.sqrt(np.mean(pad.reshape(n, frame) ** 2, axis=1, dtype=np.float64))


def plan_windows(
    audio: np.ndarray,
    sample_rate: int = TARGET_SR,
    *,
    max_s: float = WINDOW_MAX_S,
    search_s: float = 5.0,
    rms: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """Cut long audio into windows of about ``max_s`` seconds at most, at its quietest points.

    Returns ``[(start, end), ...]`` sample indices covering the whole clip without gaps or
    overlap. Audio of at most ``max_s`` + 1 s is one window; every cut window is at most
    ``max_s`` long and the last at most ``max_s`` + 1 s (no sliver windows at the end). Longer audio: from each window's start,
    the ``k = ceil(remaining / max_s)`` windows still needed set a target length
    ``remaining / k`` (so windows come out near-equal, never a sliver at the end), and the cut
    goes to the quietest 100 ms (smoothed 20 ms RMS, as vLLM's long-audio split searches the
    lowest-energy point) within ``search_s`` before the target (or after it, up to ``max_s``).
    A pause between words or sentences is found when there is one; a cut never falls
    further than ``max_s`` from the window's start.

    >>> import numpy as np
    >>> x = np.ones(16000 * 60, np.float32); x[16000 * 20: 16000 * 20 + 1600] = 0  # a pause at 20 s
    >>> [(a / 16000, b / 16000) for a, b in plan_windows(x)]  # doctest: +NORMALIZE_WHITESPACE
    [(0.0, 20.05), (20.05, 40.03), (40.03, 60.0)]
    """
    sr = int(sample_rate)
    if sr <= 0:
        raise ValueError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
    if not (np.isfinite(max_s) and max_s >= 1.0):
        raise ValueError(f"max_s must be at least 1 second, got {max_s!r}")
    if not (np.isfinite(search_s) and 0 < search_s < max_s):
        raise ValueError(f"search_s must be in (0, max_s), got {search_s!r}")
    n = len(audio)
    if n == 0:
        return []
    frame = max(1, sr // 50)  # 20 ms
    slack = sr  # 1 s: a remainder this much over max_s stays in the last window (no sliver windows)
    if n <= max_s * sr + slack:
        return [(0, n)]
    level = frame_rms(audio, frame) if rms is None else np.asarray(rms, float)
    smooth = np.convolve(level, np.ones(5) / 5, mode="same")  # 100 ms
    out: list[tuple[int, int]] = []
    pos = 0
    lim = int(max_s * sr)
    while n - pos > lim + slack:  # the last window may run up to 1 s past max_s
        rem = n - pos
        k = -(-(rem - slack) // lim)  # windows still needed
        target = pos + rem // k
        lo = max(pos + sr, target - int(search_s * sr))
        hi = min(pos + lim, target + int(search_s * sr))
        f_lo, f_hi = -(-lo // frame), hi // frame
        if f_hi <= f_lo:
            cut = min(target, pos + lim)
        else:
            seg = smooth[f_lo:f_hi]
            quiet = f_lo + np.flatnonzero(seg <= seg.min() * (1 + 1e-6) + 1e-12)  # ties: nearest the target
            f = int(quiet[np.argmin(np.abs(quiet * frame + frame // 2 - target))])
            cut = min(f * frame + frame // 2, pos + lim)
        out.append((pos, cut))
        pos = cut
    out.append((pos, n))
    return out
