"""Measure real Whisper, one row per request: WER scoring, the measurement table, :func:`measure`.

:func:`measure` runs a backend (:func:`make_backend`: faster-whisper or vLLM, by name) on every
clip of a manifest (:func:`asrsched.whisper.corpus.build_corpus`, or any table with
``path`` and ``language``) and appends one row per request to a CSV as it goes, so an
interrupted run resumes where it stopped. The fits of those rows are in
:mod:`asrsched.profiling.fit`; :mod:`asrsched.profiling.run` does the whole profile.

What is measured per request (columns of :data:`COLUMNS`): audio and speech
duration (true, header, silero VAD, energy VAD, each VAD's cost), language,
tokens kept / text tokens / generated (temperature fallbacks included) / decoder
steps, 30 s windows, encode and decode time, time to first token and first
segment, total time, real-time factor, WER (jiwer) against the reference text.
A file that cannot be read is a row with ``ok = False`` and ``error_reason``
(one of :data:`asrsched.whisper.audio.REASONS` or ``backend``); the run continues.
"""

from __future__ import annotations

import csv
import math
import os
import re
import unicodedata
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.whisper.audio import AudioError, audio_info, load_audio
from asrsched.whisper.backends import Backend, FasterWhisperBackend

__all__ = [
    "BACKENDS",
    "make_backend",
    "COLUMNS",
    "TOKEN_COLUMNS",
    "CLOCKS",
    "DURATION_COLUMNS",
    "normalize_text",
    "word_error_rate",
    "typed_measurements",
    "measure",
]

#: the Whisper backends a profile can measure
BACKENDS = ("faster-whisper", "vllm")


def make_backend(name: str = "faster-whisper", model: str = "tiny.en", **kw) -> Backend:
    """Build a backend by ``name`` (one of :data:`BACKENDS`) for ``model``.

    The backends live where their engines do: :class:`asrsched.whisper.backends.FasterWhisperBackend`
    (CTranslate2 on CPU) and :class:`asrsched.vllm_plugin.vllm_backend.VllmBackend`; the profiling layer sits
    above both, so the Whisper layer never imports vLLM code.

    ``"vllm"`` needs the vLLM extra (``pip install -e .[vllm]`` on CPU, ``vllm``
    on GPU) and :mod:`asrsched.vllm_plugin.vllm_backend`.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")
    if name == "faster-whisper":
        return FasterWhisperBackend(model, **kw)
    try:
        from asrsched.vllm_plugin import vllm_backend  # needs the vllm extra
    except ImportError as e:
        raise ImportError(
            f"the vLLM backend is not available ({e}); on CPU: pip install -e '.[vllm]', on GPU: pip install vllm"
        ) from None
    factory = getattr(vllm_backend, "make_profile_backend", None) or getattr(vllm_backend, "VllmBackend", None)
    if factory is None:
        raise ImportError("asrsched.vllm_plugin.vllm_backend provides neither make_profile_backend nor VllmBackend")
    return factory(model, **kw)


TOKEN_COLUMNS = ("decode_steps", "tokens_generated", "tokens_kept", "tokens_text")
#: clock -> (total, encoder, decoder) columns
CLOCKS = {"wall": ("total_s", "encode_s", "decode_s"), "cpu": ("cpu_s", "encode_cpu_s", "decode_cpu_s")}
DURATION_COLUMNS = ("audio_s", "speech_s", "vad_silero_s", "vad_energy_s")
#: the columns of a measurement table, one row per (clip, repeat)
COLUMNS = [
    "utt_id",
    "key",
    "language",
    "silence",
    "path",
    "ok",
    "error_reason",
    "error",
    "audio_s",
    "header_s",
    "speech_s",
    "vad_silero_s",
    "vad_silero_cost_s",
    "vad_energy_s",
    "vad_energy_cost_s",
    "windows_nominal",
    "windows",
    "tokens_kept",
    "tokens_text",
    "tokens_generated",
    "decode_steps",
    "generate_calls",
    "fallbacks",
    "encode_s",
    "decode_s",
    "features_s",
    "first_token_s",
    "first_segment_s",
    "total_s",
    "cpu_s",
    "encode_cpu_s",
    "decode_cpu_s",
    "repeats",
    "rtf",
    "rtfx",
    "wer",
    "text",
    "hypothesis",
    "backend",
    "model",
]
_BOOL = {"True": True, "False": False, "true": True, "false": False, "1": True, "0": False}


# --------------------------------------------------------------------------- WER
def normalize_text(s: str) -> str:
    """Lower-case, drop punctuation (any script), collapse spaces: the form WER is scored on.

    >>> normalize_text("Hello, World! It’s 'quoted'.")
    "hello world it's quoted"
    """
    s = unicodedata.normalize("NFKC", str(s)).lower().replace("’", "'")
    s = "".join(ch if (ch.isalnum() or ch in " '") else " " for ch in s)
    s = re.sub(r"(?<!\w)'|'(?!\w)", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """WER (jiwer) of ``hypothesis`` against ``reference`` after :func:`normalize_text`."""
    import jiwer

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp or ""))


# --------------------------------------------------------------------------- measurement
class _RowWriter:
    """Appends rows to a CSV, flushing each one, so an interrupted run keeps what it measured."""

    def __init__(self, path: Path | None, resume: bool):
        self.path = path
        self.done: set[str] = set()
        self.rows: list[dict] = []
        self._f = None
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > 0:
            if not resume:
                raise FileExistsError(
                    f"{path} already holds measurements; pass resume=True to continue it or choose another out path"
                )
            with open(path, newline="", encoding="utf-8") as f:
                r = csv.DictReader(f)
                if r.fieldnames != COLUMNS:
                    raise ValueError(f"{path} has columns {r.fieldnames}, not this profiler's; choose another out path")
                for row in r:
                    self.done.add(row["key"])
                    self.rows.append(row)
            self._f = open(path, "a", newline="", encoding="utf-8")
            self._w = csv.DictWriter(self._f, fieldnames=COLUMNS)
        else:
            self._f = open(path, "w", newline="", encoding="utf-8")
            self._w = csv.DictWriter(self._f, fieldnames=COLUMNS)
            self._w.writeheader()
            self._f.flush()

    def write(self, row: dict) -> None:
        self.rows.append(row)
        if self._f is not None:
            self._w.writerow({k: row.get(k) for k in COLUMNS})
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def typed_measurements(df: pd.DataFrame) -> pd.DataFrame:
    """The measurement table with :data:`COLUMNS` in order and their types (as when read back from CSV)."""
    df = df.reindex(columns=COLUMNS)
    for c in ("ok", "silence"):
        df[c] = df[c].map(lambda v: _BOOL.get(str(v), bool(v) if isinstance(v, (bool, np.bool_)) else False))
    for c in COLUMNS:
        if c not in (
            "utt_id",
            "key",
            "language",
            "path",
            "error_reason",
            "error",
            "text",
            "hypothesis",
            "backend",
            "model",
            "ok",
            "silence",
        ):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in ("error_reason", "error", "hypothesis", "text"):
        df[c] = df[c].astype(object).where(df[c].notna(), "").astype(str)
    return df


def measure(
    manifest: pd.DataFrame,
    backend,
    *,
    out: str | os.PathLike | None = None,
    resume: bool = True,
    vad_methods: Sequence[str] = ("silero", "energy"),
    warmup: int = 1,
    repeats: int = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """Run ``backend`` on every clip of ``manifest``; one row per request (:data:`COLUMNS`).

    ``manifest`` needs ``path`` and ``language``; ``utt_id``, ``key``, ``text``
    (reference for WER), ``speech_s`` (true speech duration) and ``n_inner``/``lead_s``
    (silence flags) are used when present. Rows are appended to ``out`` (CSV) as
    they are measured; with ``resume=True`` rows whose ``key`` is already in ``out``
    are skipped. A bad file becomes a row with ``ok=False`` and the reason; the
    run continues. ``warmup`` untimed transcriptions of the first good clip come first.
    ``repeats > 1`` transcribes each clip that many times and keeps the fastest run
    (the one least disturbed by other load on a shared machine; the tokens do not change).
    """
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    from asrsched.whisper.vad import VAD_METHODS, speech_duration

    missing = [c for c in ("path", "language") if c not in manifest]
    if missing:
        raise ValueError(f"manifest is missing column(s) {', '.join(missing)}; it needs path and language")
    bad = [m for m in vad_methods if m not in VAD_METHODS or m == "none"]
    if bad:
        raise ValueError(f"vad_methods must be drawn from silero, energy; got {bad}")
    if not hasattr(backend, "transcribe"):
        raise TypeError("backend must have a transcribe(audio, language) method (see asrsched.whisper.backends)")
    langs = set(manifest["language"].astype(str))
    supported = getattr(backend, "supported_languages", None)
    if supported is not None:
        unsupported = sorted(langs - set(supported()))
        if unsupported:
            raise ValueError(
                f"model {getattr(backend, 'model', '?')!r} does not read language(s) {', '.join(unsupported)}"
                + ("; it is English-only, use model='base'" if set(supported()) == {"en"} else "")
            )
    rows = manifest.to_dict("records")
    for i, r in enumerate(rows):
        r.setdefault("utt_id", Path(str(r["path"])).stem)
        r.setdefault("key", f"{r['utt_id']}")
        if not r.get("key") or (isinstance(r.get("key"), float) and math.isnan(r["key"])):
            r["key"] = f"{r['utt_id']}-{i}"
    writer = _RowWriter(Path(out) if out is not None else None, resume)
    todo = [r for r in rows if str(r["key"]) not in writer.done]
    from tqdm.auto import tqdm

    try:
        warmed = warmup <= 0
        for r in tqdm(todo, desc=f"profiling {getattr(backend, 'model', '')}", disable=not progress, leave=False):
            rec = _measure_one(r, backend, vad_methods, speech_duration, warmed, int(repeats))
            warmed = warmed or rec["ok"]
            writer.write(rec)
    finally:
        writer.close()
    df = typed_measurements(pd.DataFrame(writer.rows, columns=COLUMNS))
    keys = [str(r["key"]) for r in rows]
    df = df.set_index("key", drop=False).loc[[k for k in keys if k in set(df["key"])]].reset_index(drop=True)
    if out is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                df.to_parquet(Path(out).with_suffix(".parquet"), index=False)
            except Exception:  # pyarrow missing: the CSV is the record
                pass
    return df


def _measure_one(r: dict, backend, vad_methods, speech_duration, warmed: bool, repeats: int = 1) -> dict:
    def num(v):
        try:
            v = float(v)
            return v if math.isfinite(v) else math.nan
        except (TypeError, ValueError):
            return math.nan

    silence = bool(num(r.get("n_inner", 0)) > 0 or num(r.get("lead_s", 0)) > 0 or num(r.get("trail_s", 0)) > 0)
    rec: dict[str, Any] = {
        "utt_id": r["utt_id"],
        "key": r["key"],
        "language": str(r["language"]),
        "silence": silence,
        "path": str(r["path"]),
        "ok": False,
        "error_reason": "",
        "error": "",
        "text": str(r.get("text", "") or ""),
        "speech_s": num(r.get("speech_s")),
        "backend": getattr(backend, "name", type(backend).__name__),
        "model": getattr(backend, "model", ""),
    }
    try:
        info = audio_info(r["path"])
        rec["header_s"] = info.duration_s
        audio = load_audio(r["path"])
    except AudioError as e:
        rec.update(error_reason=e.reason, error=str(e))
        return rec
    rec["audio_s"] = len(audio) / 16_000
    if not math.isfinite(rec["speech_s"]) and not silence:
        rec["speech_s"] = math.nan
    for m in vad_methods:
        v = speech_duration(audio, 16_000, method=m)
        rec[f"vad_{m}_s"], rec[f"vad_{m}_cost_s"] = v.speech_s, v.cost_s
    rec["windows_nominal"] = max(1, math.ceil(rec["audio_s"] / 30.0 - 1e-9))
    try:
        if not warmed:
            backend.transcribe(audio, rec["language"])
        res = min((backend.transcribe(audio, rec["language"]) for _ in range(repeats)), key=lambda x: x["total_s"])
    except Exception as e:  # the engine failed on this request: record it, go on
        rec.update(error_reason="backend", error=f"{r['path']}: backend: {type(e).__name__}: {e}")
        return rec
    for k in (
        "tokens_kept",
        "tokens_text",
        "tokens_generated",
        "decode_steps",
        "generate_calls",
        "fallbacks",
        "windows",
        "encode_s",
        "decode_s",
        "features_s",
        "first_token_s",
        "first_segment_s",
        "total_s",
        "cpu_s",
        "encode_cpu_s",
        "decode_cpu_s",
    ):
        rec[k] = res.get(k, math.nan)
    rec["repeats"] = repeats
    rec["hypothesis"] = res.get("text", "")
    rec["rtf"] = rec["total_s"] / rec["audio_s"] if rec["audio_s"] > 0 else math.nan
    rec["rtfx"] = 1.0 / rec["rtf"] if rec["rtf"] and rec["rtf"] > 0 else math.nan
    rec["wer"] = word_error_rate(rec["text"], rec["hypothesis"]) if rec["text"] else math.nan
    rec["ok"] = True
    return rec
