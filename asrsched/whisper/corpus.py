"""A speech corpus without a dataset hub: espeak-ng reads real transcripts at real durations.

Texts (all real, see ``asrsched/data/PROVENANCE.md``):

* ``en``: LibriSpeech test-clean transcripts with their real durations (CC BY 4.0);
* ``id``: Common Voice Indonesian test sentences with their real clip durations (CC0);
* ``es``, ``de``: sentences from public-domain prose (Cervantes, *Lazarillo*, Kafka,
  Grimm) and the UN Universal Declaration of Human Rights; no recording exists, so
  the target duration is the word count at :data:`DEFAULT_WPM` words per minute
  (LibriSpeech reads at ~2.7 words/s = 162 wpm).

For each utterance the espeak-ng speaking rate (``-s``, words per minute) is
chosen so that the synthesised speech lasts as long as the target (a couple of
secant steps; espeak's rate is clamped to 80-450 wpm, so a few very slow Common
Voice clips come out shorter than their recording — ``audio_s`` vs ``target_s``
in the manifest says by how much). Output is 16 kHz mono 16-bit WAV, resampled
from espeak's 22.05 kHz with ``scipy.signal.resample_poly``.

Optional silence (:class:`SilenceSpec`): leading, trailing and inner pauses at
word boundaries; the manifest records the true ``speech_s`` beside ``audio_s``.

Clips are cached under ``<cache>/corpus/<lang>/`` (cache = ``$ASRSCHED_CACHE`` or
``~/.cache/asrsched``) with a manifest CSV ``<cache>/corpus/manifest.csv``; a
second call with the same parameters synthesises nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.whisper.audio import TARGET_SR

__all__ = [
    "LANGUAGES",
    "DEFAULT_WPM",
    "EspeakMissingError",
    "SilenceSpec",
    "espeak_path",
    "load_texts",
    "synthesize",
    "synthesize_to_duration",
    "build_corpus",
    "corpus_dir",
]

ESPEAK_SR = 22_050
DEFAULT_WPM = 160.0
RATE_MIN, RATE_MAX = 80.0, 450.0
#: language code -> (espeak-ng voice, packaged text file, where durations come from)
LANGUAGES = {
    "en": ("en-us", "librispeech_test_clean.csv", "LibriSpeech test-clean recording"),
    "id": ("id", "commonvoice_id_test.csv", "Common Voice id test clip"),
    "es": ("es", "texts_es.csv", f"{DEFAULT_WPM:.0f} wpm"),
    "de": ("de", "texts_de.csv", f"{DEFAULT_WPM:.0f} wpm"),
}
SAMPLE_MODES = ("stratified", "random", "first")
MANIFEST_COLUMNS = [
    "key",
    "utt_id",
    "language",
    "text",
    "n_words",
    "path",
    "audio_s",
    "speech_s",
    "target_s",
    "duration_source",
    "rate_wpm",
    "voice",
    "lead_s",
    "trail_s",
    "inner_s",
    "n_inner",
    "noise_dbfs",
]


class EspeakMissingError(RuntimeError):
    """espeak-ng is not installed (or not on ``PATH``)."""


def espeak_path() -> str:
    """Path of the ``espeak-ng`` binary; :class:`EspeakMissingError` saying what to install."""
    p = os.environ.get("ESPEAK_NG") or shutil.which("espeak-ng")
    if not p:
        raise EspeakMissingError(
            "espeak-ng was not found on PATH; the speech corpus is synthesised with it. "
            "Install it with: apt-get install espeak-ng  (conda: conda install -c conda-forge espeak-ng)"
        )
    return p


def corpus_dir(cache: str | os.PathLike | None = None) -> Path:
    """Folder of the cached corpus (``<cache>/corpus``)."""
    if cache is None:
        from asrsched.whisper.weights import cache_dir

        cache = cache_dir()
    d = Path(cache) / "corpus"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass(frozen=True)
class SilenceSpec:
    """Silence to insert: ``lead_s`` before, ``trail_s`` after, ``n_inner`` pauses of ``inner_s``
    at word boundaries (evenly spread by word count); ``noise_dbfs`` adds a seeded white-noise
    floor at that RMS level (dB re full scale) over the whole clip (``None``: digital silence)."""

    lead_s: float = 0.0
    trail_s: float = 0.0
    inner_s: float = 0.0
    n_inner: int = 0
    noise_dbfs: float | None = None

    def __post_init__(self):
        for f in ("lead_s", "trail_s", "inner_s"):
            v = getattr(self, f)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"SilenceSpec.{f} must be a finite number of seconds >= 0, got {v!r}")
        if int(self.n_inner) != self.n_inner or self.n_inner < 0:
            raise ValueError(f"SilenceSpec.n_inner must be an integer >= 0, got {self.n_inner!r}")
        if self.noise_dbfs is not None and not (-140 <= self.noise_dbfs <= 0):
            raise ValueError(f"SilenceSpec.noise_dbfs must be in [-140, 0] dBFS or None, got {self.noise_dbfs!r}")

    @property
    def total_s(self) -> float:
        return self.lead_s + self.trail_s + self.inner_s * self.n_inner

    @property
    def is_none(self) -> bool:
        return self.total_s == 0 and self.noise_dbfs is None


# --------------------------------------------------------------------------- texts
def _check_language(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"language {language!r} has no packaged texts; allowed values: {', '.join(LANGUAGES)}")
    return language


def load_texts(
    language: str,
    n: int | None = None,
    *,
    seed: int = 0,
    sample: str = "stratified",
    min_s: float = 0.0,
    max_s: float = float("inf"),
) -> pd.DataFrame:
    """Real texts of ``language`` with a target duration: ``utt_id, language, text, n_words, target_s,
    duration_source``.

    ``sample``: ``"stratified"`` takes one random row from each of ``n`` equal-width duration bins
    between the shortest and the longest text (even leverage for fitting a line), ``"random"`` draws ``n`` rows (the real duration distribution), ``"first"``
    takes the first ``n``. ``n=None`` returns every row in ``[min_s, max_s]``.
    """
    _check_language(language)
    if sample not in SAMPLE_MODES:
        raise ValueError(f"sample must be one of {', '.join(SAMPLE_MODES)}; got {sample!r}")
    if n is not None and (int(n) != n or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    voice, fname, dsrc = LANGUAGES[language]
    with resources.files("asrsched.data").joinpath(fname).open("r", encoding="utf-8") as f:
        df = pd.read_csv(f)
    df["text"] = df["text"].astype(str).str.strip()
    df["n_words"] = df["text"].str.split().str.len()
    if "duration_s" in df:
        df["target_s"] = df["duration_s"].astype(float)
    else:
        df["target_s"] = df["n_words"] * 60.0 / DEFAULT_WPM
    df["duration_source"] = dsrc
    df["language"] = language
    df = df[(df["target_s"] >= min_s) & (df["target_s"] <= max_s) & (df["n_words"] > 0)]
    df = df.sort_values(["target_s", "utt_id"], kind="mergesort").reset_index(drop=True)
    if n is not None and n < len(df):
        rng = np.random.default_rng(seed)
        if sample == "first":
            df = df.sort_values("utt_id").head(n)
        elif sample == "random":
            df = df.iloc[np.sort(rng.choice(len(df), n, replace=False))]
        else:  # one random row from each of n equal-width duration bins (nearest free row if a bin is empty)
            t = df["target_s"].to_numpy(float)
            edges = np.linspace(t.min(), t.max() + 1e-9, n + 1)
            chosen: list[int] = []
            for a, b in zip(edges[:-1], edges[1:]):
                cand = [i for i in np.flatnonzero((t >= a) & (t < b)) if i not in chosen]
                if not cand:
                    free = np.array([i for i in range(len(t)) if i not in chosen])
                    cand = [int(free[np.argmin(np.abs(t[free] - (a + b) / 2))])]
                chosen.append(int(rng.choice(cand)))
            df = df.iloc[sorted(chosen)]
    elif n is not None and n > len(df):
        raise ValueError(f"asked for n={n} {language!r} texts but only {len(df)} lie in [{min_s}, {max_s}] s")
    return df[["utt_id", "language", "text", "n_words", "target_s", "duration_source"]].reset_index(drop=True)


# --------------------------------------------------------------------------- synthesis
def _espeak_raw(text: str, voice: str, rate_wpm: float) -> np.ndarray:
    """espeak-ng's 22.05 kHz float32 output for ``text`` (text passed on stdin, UTF-8)."""
    exe = espeak_path()
    r = subprocess.run(
        [exe, "-v", voice, "-s", str(int(round(rate_wpm))), "-b", "1", "--stdout", "--stdin"],
        input=text.encode("utf-8"),
        capture_output=True,
        timeout=120,
    )
    if r.returncode != 0 or len(r.stdout) < 44:
        raise RuntimeError(f"espeak-ng failed (voice {voice!r}): {r.stderr.decode(errors='replace').strip()}")
    b = r.stdout
    # espeak writes a 44-byte canonical header with a placeholder size (it streams)
    if b[:4] != b"RIFF" or b[36:40] != b"data":
        raise RuntimeError("espeak-ng --stdout did not produce a canonical WAV header")
    pcm = np.frombuffer(b[44 : len(b) - (len(b) - 44) % 2], dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def _to16k(x: np.ndarray) -> np.ndarray:
    from scipy.signal import resample_poly

    # 22050 -> 16000 = 320 / 441
    return resample_poly(x, 320, 441).astype(np.float32)


def _trim(x: np.ndarray, thresh: float = 1e-3, pad: int = 160) -> np.ndarray:
    """Strip espeak's leading/trailing silence (keeps ``pad`` samples = 10 ms each side)."""
    nz = np.flatnonzero(np.abs(x) > thresh)
    if nz.size == 0:
        return x[:0]
    return x[max(nz[0] - pad, 0) : nz[-1] + pad + 1]


def synthesize(text: str, language: str, *, rate_wpm: float = DEFAULT_WPM, voice: str | None = None) -> np.ndarray:
    """16 kHz mono float32 speech of ``text`` read by espeak-ng at ``rate_wpm`` (edge silence trimmed)."""
    _check_language(language)
    if not (RATE_MIN <= rate_wpm <= RATE_MAX):
        raise ValueError(f"rate_wpm must be in [{RATE_MIN:.0f}, {RATE_MAX:.0f}] (espeak-ng's range), got {rate_wpm!r}")
    if not str(text).strip():
        raise ValueError("text must not be empty")
    return _trim(_to16k(_espeak_raw(str(text), voice or LANGUAGES[language][0], rate_wpm)))


def synthesize_to_duration(
    text: str, language: str, target_s: float, *, voice: str | None = None, rtol: float = 0.03, max_iter: int = 4
) -> tuple[np.ndarray, float]:
    """Speech of ``text`` lasting about ``target_s`` seconds; returns ``(audio, rate_wpm)``.

    Duration is close to inversely proportional to the rate, so the rate is
    updated as ``rate * duration / target`` until within ``rtol`` (or clamped at
    espeak's 80/450 wpm limits).
    """
    if not (np.isfinite(target_s) and target_s > 0):
        raise ValueError(f"target_s must be a positive number of seconds, got {target_s!r}")
    n_words = max(len(str(text).split()), 1)
    rate = float(np.clip(n_words * 60.0 / target_s, RATE_MIN, RATE_MAX))
    best = None
    for _ in range(max_iter):
        x = synthesize(text, language, rate_wpm=rate, voice=voice)
        d = len(x) / TARGET_SR
        err = abs(d - target_s) / target_s
        if best is None or err < best[0]:
            best = (err, x, rate)
        if err <= rtol or d == 0:
            break
        new = float(np.clip(rate * d / target_s, RATE_MIN, RATE_MAX))
        if abs(new - rate) < 0.5:  # clamped or converged to espeak's integer resolution
            break
        rate = new
    return best[1], round(best[2])


def _split_words(text: str, k: int) -> list[str]:
    words = text.split()
    k = min(k, len(words))
    edges = np.linspace(0, len(words), k + 1).round().astype(int)
    return [" ".join(words[a:b]) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _render(text: str, language: str, target_s: float, silence: SilenceSpec, seed: int, voice: str | None):
    """Audio with the requested silence; returns ``(audio, speech_s, rate_wpm)``."""
    x, rate = synthesize_to_duration(text, language, target_s, voice=voice)
    if silence.n_inner > 0 and silence.inner_s > 0:
        chunks = [synthesize(c, language, rate_wpm=rate, voice=voice) for c in _split_words(text, silence.n_inner + 1)]
    else:
        chunks = [x]
    speech_s = sum(len(c) for c in chunks) / TARGET_SR
    gap = np.zeros(int(round(silence.inner_s * TARGET_SR)), np.float32)
    parts = [np.zeros(int(round(silence.lead_s * TARGET_SR)), np.float32)]
    for i, c in enumerate(chunks):
        if i:
            parts.append(gap)
        parts.append(c)
    parts.append(np.zeros(int(round(silence.trail_s * TARGET_SR)), np.float32))
    y = np.concatenate(parts)
    if silence.noise_dbfs is not None:
        rng = np.random.default_rng(seed)
        y = y + rng.standard_normal(len(y)).astype(np.float32) * np.float32(10 ** (silence.noise_dbfs / 20))
    peak = float(np.max(np.abs(y))) if len(y) else 0.0
    if peak > 0.99:
        y = y * np.float32(0.99 / peak)
    return y.astype(np.float32), speech_s, rate


def _key(row, silence: SilenceSpec, voice: str | None) -> str:
    h = hashlib.sha1(
        repr((row["utt_id"], row["text"], round(float(row["target_s"]), 4), asdict(silence), voice, TARGET_SR)).encode()
    ).hexdigest()[:12]
    return f"{row['utt_id']}-{h}"


def _read_manifest(path: Path) -> pd.DataFrame:
    if path.exists():
        try:
            return pd.read_csv(path, keep_default_na=False, na_values={"noise_dbfs": [""]})
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            pass  # a corrupt cache index: rebuild it from what is requested
    return pd.DataFrame(columns=MANIFEST_COLUMNS)


def _write_manifest(path: Path, df: pd.DataFrame) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    df[MANIFEST_COLUMNS].to_csv(tmp, index=False)
    tmp.replace(path)


def build_corpus(
    languages: Sequence[str] | str = ("en",),
    n_per_language: int = 8,
    *,
    seed: int = 0,
    sample: str = "stratified",
    min_s: float = 1.0,
    max_s: float = 35.0,
    silence: SilenceSpec | None = None,
    cache: str | os.PathLike | None = None,
    voice: dict | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Synthesise (or reuse from the cache) ``n_per_language`` clips per language; returns the manifest.

    Columns: ``key, utt_id, language, text, n_words, path, audio_s, speech_s, target_s,
    duration_source, rate_wpm, voice, lead_s, trail_s, inner_s, n_inner, noise_dbfs``.
    ``audio_s`` is the WAV's length, ``speech_s`` the speech inside it (equal without
    ``silence``). Each clip's noise seed is derived from ``seed`` and its key.
    """
    if isinstance(languages, str):
        languages = [languages]
    languages = list(languages)
    if not languages:
        raise ValueError(f"languages must name at least one of {', '.join(LANGUAGES)}")
    for lang in languages:
        _check_language(lang)
    silence = silence or SilenceSpec()
    voice = dict(voice or {})
    texts = pd.concat(
        [load_texts(lang, n_per_language, seed=seed, sample=sample, min_s=min_s, max_s=max_s) for lang in languages],
        ignore_index=True,
    )
    espeak_path()  # fail before any work if espeak-ng is missing
    root = corpus_dir(cache)
    mpath = root / "manifest.csv"
    manifest = _read_manifest(mpath)
    have = {k: r for k, r in zip(manifest["key"], manifest.to_dict("records"))}
    from tqdm.auto import tqdm

    out, new = [], 0
    for row in tqdm(texts.to_dict("records"), desc="synthesising corpus", disable=not progress, leave=False):
        v = voice.get(row["language"])
        key = _key(row, silence, v)
        rec = have.get(key)
        if rec is not None and Path(root / rec["path"]).exists():
            out.append(rec)
            continue
        import soundfile as sf

        seed_i = int(hashlib.sha1(f"{seed}/{key}".encode()).hexdigest()[:8], 16)
        y, speech_s, rate = _render(row["text"], row["language"], row["target_s"], silence, seed_i, v)
        rel = Path(row["language"]) / f"{key}.wav"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        tmp = root / rel.with_suffix(".tmp.wav")
        sf.write(tmp, y, TARGET_SR, subtype="PCM_16")
        tmp.replace(root / rel)
        rec = {
            **row,
            "key": key,
            "path": str(rel),
            "audio_s": len(y) / TARGET_SR,
            "speech_s": speech_s,
            "rate_wpm": rate,
            "voice": v or LANGUAGES[row["language"]][0],
            **asdict(silence),
        }
        out.append(rec)
        have[key] = rec
        new += 1
        if new % 16 == 0:  # keep the cache index current on long builds
            _write_manifest(mpath, pd.DataFrame(list(have.values())))
    if new:
        _write_manifest(mpath, pd.DataFrame(list(have.values())))
    df = pd.DataFrame(out, columns=MANIFEST_COLUMNS)
    df["path"] = [str(root / p) for p in df["path"]]
    df.attrs["corpus_dir"] = str(root)
    df.attrs["synthesised"] = new
    return df


def iter_audio(manifest: pd.DataFrame) -> Iterable[tuple[dict, np.ndarray]]:
    """Yield ``(row, audio)`` for each manifest row (audio read with :func:`asrsched.whisper.audio.load_audio`)."""
    from asrsched.whisper.audio import load_audio

    for row in manifest.to_dict("records"):
        yield row, load_audio(row["path"])
