"""Profile real Whisper: per-request measurements, kappa per language, the calibrated ServiceModel.

Pipeline (each step usable alone)::

    manifest (asrsched.whisper.corpus.build_corpus, or any table with path/language/text)
      -> measure(manifest, backend, out="run.csv")      one row per request, written as it goes
      -> fit_kappa(train)                              tokens = kappa x duration, bootstrap CI, R^2
      -> fit_service_model(train, kappa)               windows x enc + tokens x step + overhead
      -> validate_holdout(model, held)                 simulator vs measured mean service time
      -> silence_estimates(rows, model)                file duration vs VAD speech duration

:func:`run_profile` does all of it; ``python -m asrsched.profiling.run --help`` is the CLI.

What is measured per request (columns of :data:`COLUMNS`): audio and speech
duration (true, header, silero VAD, energy VAD, each VAD's cost), language,
tokens kept / text tokens / generated (temperature fallbacks included) / decoder
steps, 30 s windows, encode and decode time, time to first token and first
segment, total time, real-time factor, WER (jiwer) against the reference text.
A file that cannot be read is a row with ``ok = False`` and ``error_reason``
(one of :data:`asrsched.whisper.audio.REASONS` or ``backend``); the run continues.

Which token count is kappa? The paper's kappa is "tokens the decoder generates
per second of audio". The :class:`ServiceModel` written here uses
``decode_steps`` (decoder forward passes, fallbacks included), because that is
what the decode time follows; ``fit["kappa_tables"]`` also holds kappa for the
kept transcript tokens and for all generated tokens.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.whisper.audio import AudioError, audio_info, load_audio
from asrsched.core.service import ServiceModel

__all__ = [
    "COLUMNS",
    "TOKEN_COLUMNS",
    "KappaFit",
    "ProfileRun",
    "normalize_text",
    "word_error_rate",
    "measure",
    "fit_kappa",
    "fit_service_model",
    "split_holdout",
    "validate_holdout",
    "silence_estimates",
    "vad_summary",
    "run_profile",
    "fit_profile",
    "refit",
    "packaged_profile",
    "PACKAGED_PROFILES",
    "main",
]

TOKEN_COLUMNS = ("decode_steps", "tokens_generated", "tokens_kept", "tokens_text")
#: clock -> (total, encoder, decoder) columns
CLOCKS = {"wall": ("total_s", "encode_s", "decode_s"), "cpu": ("cpu_s", "encode_cpu_s", "decode_cpu_s")}
DURATION_COLUMNS = ("audio_s", "speech_s", "vad_silero_s", "vad_energy_s")
COLUMNS = [
    "utt_id", "key", "language", "silence", "path", "ok", "error_reason", "error",
    "audio_s", "header_s", "speech_s", "vad_silero_s", "vad_silero_cost_s", "vad_energy_s", "vad_energy_cost_s",
    "windows_nominal", "windows", "tokens_kept", "tokens_text", "tokens_generated", "decode_steps",
    "generate_calls", "fallbacks", "encode_s", "decode_s", "features_s", "first_token_s", "first_segment_s",
    "total_s", "cpu_s", "encode_cpu_s", "decode_cpu_s", "repeats", "rtf", "rtfx", "wer", "text", "hypothesis", "backend", "model",
]
_BOOL = {"True": True, "False": False, "true": True, "false": False, "1": True, "0": False}


#: the profiles measured here and shipped with the package (see each JSON's ``source`` and ``fit``)
PACKAGED_PROFILES = {"tiny.en": "profile_tiny_en_cpu.json", "base": "profile_base_cpu.json"}


def packaged_profile(model: str = "tiny.en") -> ServiceModel:
    """The :class:`ServiceModel` measured on this project's 2-core CPU machines for ``model``
    (faster-whisper, int8, greedy; CPU-time clock), shipped in ``asrsched/data``.

    >>> packaged_profile("tiny.en").kappa_for("en") > 2
    True
    """
    from importlib import resources

    if model not in PACKAGED_PROFILES:
        raise ValueError(f"no packaged profile for {model!r}; allowed values: {', '.join(PACKAGED_PROFILES)}")
    with resources.as_file(resources.files("asrsched.data") / PACKAGED_PROFILES[model]) as p:
        return ServiceModel.from_json(p)


# --------------------------------------------------------------------------- WER
def normalize_text(s: str) -> str:
    """Lower-case, drop punctuation (any script), collapse spaces: the form WER is scored on."""
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
                    raise ValueError(
                        f"{path} has columns {r.fieldnames}, not this profiler's; choose another out path"
                    )
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


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Column types of a measurement table read back from CSV."""
    df = df.reindex(columns=COLUMNS)
    for c in ("ok", "silence"):
        df[c] = df[c].map(lambda v: _BOOL.get(str(v), bool(v) if isinstance(v, (bool, np.bool_)) else False))
    for c in COLUMNS:
        if c not in ("utt_id", "key", "language", "path", "error_reason", "error", "text", "hypothesis",
                     "backend", "model", "ok", "silence"):
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
    df = _typed(pd.DataFrame(writer.rows, columns=COLUMNS))
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
        "utt_id": r["utt_id"], "key": r["key"], "language": str(r["language"]), "silence": silence,
        "path": str(r["path"]), "ok": False, "error_reason": "", "error": "", "text": str(r.get("text", "") or ""),
        "speech_s": num(r.get("speech_s")), "backend": getattr(backend, "name", type(backend).__name__),
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
    for k in ("tokens_kept", "tokens_text", "tokens_generated", "decode_steps", "generate_calls", "fallbacks",
              "windows", "encode_s", "decode_s", "features_s", "first_token_s", "first_segment_s", "total_s",
              "cpu_s", "encode_cpu_s", "decode_cpu_s"):
        rec[k] = res.get(k, math.nan)
    rec["repeats"] = repeats
    rec["hypothesis"] = res.get("text", "")
    rec["rtf"] = rec["total_s"] / rec["audio_s"] if rec["audio_s"] > 0 else math.nan
    rec["rtfx"] = 1.0 / rec["rtf"] if rec["rtf"] and rec["rtf"] > 0 else math.nan
    rec["wer"] = word_error_rate(rec["text"], rec["hypothesis"]) if rec["text"] else math.nan
    rec["ok"] = True
    return rec


# --------------------------------------------------------------------------- kappa
@dataclass
class KappaFit:
    """kappa per language: ``table`` (one row per fitted language), ``skipped`` {language: why},
    ``n_dropped`` failed rows left out, and the columns used."""

    table: pd.DataFrame
    skipped: dict[str, str]
    n_dropped: int
    tokens: str
    duration: str

    @property
    def kappa(self) -> dict[str, float]:
        return {r.language: float(r.kappa) for r in self.table.itertuples()}

    @property
    def ci(self) -> dict[str, tuple[float, float]]:
        return {r.language: (float(r.ci_low), float(r.ci_high)) for r in self.table.itertuples()}

    def summary(self) -> str:
        """One line per language, plus the skipped ones and the dropped-row count."""
        lines = [f"kappa ({self.tokens} per s of {self.duration}):"]
        for r in self.table.itertuples():
            lines.append(f"  {r.language}: {r.kappa:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]  R2={r.r2:.3f}  n={r.n}")
        for lang, why in self.skipped.items():
            lines.append(f"  {lang}: not fitted: {why}")
        if self.n_dropped:
            lines.append(f"  ({self.n_dropped} failed row(s) dropped)")
        return "\n".join(lines)


def _kappa_ratio(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ratio estimator along the last axis: sum(tokens) / sum(seconds)."""
    return y.sum(-1) / x.sum(-1)


def fit_kappa(
    df: pd.DataFrame,
    *,
    tokens: str = "decode_steps",
    duration: str = "audio_s",
    n_boot: int = 2000,
    ci: float = 0.95,
    min_rows: int = 4,
    seed: int = 0,
) -> KappaFit:
    """Fit ``tokens = kappa x duration`` per language: ``kappa = sum(tokens) / sum(duration)``.

    This ratio estimator is the weighted least-squares fit through the origin for
    counts whose variance grows with duration (tokens behave like that), and it
    makes the predicted *total* work of the fitted rows exact — what a queue's
    mean service time depends on.

    Per language: ``kappa``, a percentile bootstrap CI (``n_boot`` resamples of the
    rows, level ``ci``), ``r2`` (``1 - SS_res / SS_tot`` with ``SS_tot`` about the
    mean, so it is comparable with an ordinary R^2), the affine fit
    ``tokens = a + b x duration`` for comparison, and the residual spread ``cv``
    (std of tokens / (kappa x duration)). Only ``ok`` rows with finite values are
    used; a language with fewer than ``min_rows`` of them is listed in
    ``skipped`` with the reason (and a warning), never given a NaN kappa. If no
    language can be fitted, ``ValueError``.
    """
    for c in (tokens, duration, "language"):
        if c not in df:
            raise ValueError(f"measurement table has no column {c!r}; tokens must be one of {', '.join(TOKEN_COLUMNS)}")
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if int(min_rows) < 2:
        raise ValueError(f"min_rows must be an integer >= 2, got {min_rows!r}")
    ok = df["ok"].astype(bool) if "ok" in df else pd.Series(True, index=df.index)
    x_all = pd.to_numeric(df[duration], errors="coerce")
    y_all = pd.to_numeric(df[tokens], errors="coerce")
    good = ok & np.isfinite(x_all) & np.isfinite(y_all) & (x_all > 0)
    n_dropped = int((~good).sum())
    rng = np.random.default_rng(seed)
    rows, skipped = [], {}
    for lang in sorted(df["language"].astype(str).unique()):
        m = good & (df["language"].astype(str) == lang)
        n = int(m.sum())
        if n < min_rows:
            n_lang = int((df["language"].astype(str) == lang).sum())
            skipped[lang] = (f"only {n} good row(s) of {n_lang} (at least {min_rows} needed); "
                             f"measure more {lang!r} clips")
            continue
        x, y = x_all[m].to_numpy(float), y_all[m].to_numpy(float)
        k = float(_kappa_ratio(x, y))
        idx = rng.integers(0, n, size=(int(n_boot), n))
        boots = _kappa_ratio(x[idx], y[idx])
        a = (1 - ci) / 2
        lo, hi = np.quantile(boots, [a, 1 - a])
        resid = y - k * x
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
        b, a0 = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (k, 0.0)
        rows.append(dict(language=lang, n=n, kappa=k, ci_low=float(lo), ci_high=float(hi), r2=r2,
                         affine_intercept=float(a0), affine_slope=float(b),
                         cv=float(np.std(y / (k * x), ddof=1)) if n > 1 else float("nan"),
                         mean_duration_s=float(x.mean()), tokens=tokens, duration=duration))
    for lang, why in skipped.items():
        warnings.warn(f"kappa for {lang!r} not fitted: {why}", stacklevel=2)
    if not rows:
        raise ValueError("no language has enough good rows to fit kappa: "
                         + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return KappaFit(pd.DataFrame(rows), skipped, n_dropped, tokens, duration)


# --------------------------------------------------------------------------- service model
def fit_service_model(
    df: pd.DataFrame,
    kappa: KappaFit,
    *,
    name: str = "profiled",
    batch: Sequence[dict] | pd.DataFrame | None = None,
    window_s: float | str = "fit",
    source: str = "",
    clock: str = "wall",
    extra_fit: dict | None = None,
) -> ServiceModel:
    """Fit the :class:`ServiceModel` from measured rows (``ok`` rows only).

    * ``encode_s_per_window`` = total encoder time / total encoder runs (measured directly);
    * ``decode_s_per_token`` and ``overhead_s``: non-negative least squares of
      ``total_s - windows(d) x encode_s_per_window`` on ``[kappa.tokens, 1]``
      (so the prediction ``windows x enc + tokens x step + overhead`` is unbiased on
      the training rows, whatever the backend does besides encode and decode);
    * ``decode_batch_slope`` from ``batch`` (rows ``batch, step_s`` as returned by
      ``FasterWhisperBackend.batch_step_times``; ``step_cpu_s`` on the cpu clock): least
      squares of ``step(b) / step(1) - 1 = slope x (b - 1)``; 0 when not measured;
    * ``kappa`` and ``kappa_ci`` from ``kappa``;
    * ``window_s``: a number, or ``"fit"`` (default): the effective audio advanced per
      encoder run, the largest ``w`` in 10-30 s for which ``ceil(d / w)`` best matches the
      measured encoder runs. faster-whisper seeks to the last complete segment, so a
      20-30 s clip often takes two runs (``w`` near 20 s); an engine that cuts fixed 30 s
      windows (vLLM) gives 30.

    ``clock="wall"`` (default) fits wall time (``total_s``, ``encode_s``, ``decode_s``);
    ``clock="cpu"`` fits process CPU time (``cpu_s``, ``encode_cpu_s``, ``decode_cpu_s``),
    which on a shared, loaded machine is the stable quantity: it approximates the wall
    time of the same engine on one dedicated core.
    """
    from scipy.optimize import nnls

    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    T, E, D = CLOCKS[clock]
    tok = kappa.tokens
    need = [T, E, "windows", "audio_s", tok]
    miss = [c for c in need if c not in df]
    if miss:
        raise ValueError(f"measurement table is missing column(s) {', '.join(miss)}")
    ok = df["ok"].astype(bool) if "ok" in df else pd.Series(True, index=df.index)
    d = df[ok & np.isfinite(df[need].astype(float)).all(axis=1)]
    n_dropped = int(len(df) - len(d))
    if len(d) < 3:
        raise ValueError(f"need at least 3 good rows to fit the service model, have {len(d)}")
    enc = float(d[E].sum() / max(d["windows"].sum(), 1))
    dur = d["audio_s"].to_numpy(float)
    runs = d["windows"].to_numpy(float)
    if window_s == "fit":
        grid = np.arange(30.0, 9.99, -0.5)  # largest first: ties keep the longer window
        sse = [float(((np.maximum(1, np.ceil(dur / w - 1e-9)) - runs) ** 2).sum()) for w in grid]
        window_s = float(grid[int(np.argmin(sse))])
    elif not (isinstance(window_s, (int, float)) and window_s > 0):
        raise ValueError(f"window_s must be a positive number of seconds or 'fit', got {window_s!r}")
    win = np.maximum(1, np.ceil(dur / float(window_s) - 1e-9))
    y = d[T].to_numpy(float) - enc * win
    A = np.c_[d[tok].to_numpy(float), np.ones(len(d))]
    (step, over), _ = nnls(A, y)
    pred = enc * win + A @ np.array([step, over])
    tot = d[T].to_numpy(float)
    ss_tot = float(((tot - tot.mean()) ** 2).sum())
    # decoder-only cross-check: decode_s = a + b x tokens
    dec_slope = (float(np.polyfit(d[tok].astype(float), d[D].astype(float), 1)[0])
                 if np.ptp(d[tok]) > 0 and D in d and d[D].notna().all() else float("nan"))
    slope, batch_rows = 0.0, []
    if batch is not None and len(batch):
        bt = pd.DataFrame(batch)
        col = "step_cpu_s" if clock == "cpu" and "step_cpu_s" in bt and bt["step_cpu_s"].notna().all() else "step_s"
        s1 = float(bt.loc[bt["batch"] == bt["batch"].min(), col].iloc[0])
        bt["ratio"] = bt[col] / s1
        xb = bt["batch"].to_numpy(float) - bt["batch"].min()
        if (xb > 0).any():
            slope = max(0.0, float((xb * (bt["ratio"] - 1)).sum() / (xb * xb).sum()))
        batch_rows = bt.to_dict("records")
    fit = {
        "clock": clock,
        "n_rows": int(len(d)),
        "window_s": float(window_s),
        "window_mismatches": int((win != runs).sum()),
        "n_dropped": n_dropped,
        "tokens_column": tok,
        "duration_column": kappa.duration,
        "r2_total_s_measured_tokens": 1 - float(((tot - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None,
        "mape_total_s_measured_tokens": float(np.mean(np.abs(pred - tot) / tot)),
        "mean_total_s": float(tot.mean()),
        "decode_s_per_token_decoder_only": dec_slope,
        "kappa_table": kappa.table.to_dict("records"),
        "kappa_skipped": dict(kappa.skipped),
        "batch_step": batch_rows,
        **(extra_fit or {}),
    }
    return ServiceModel(
        encode_s_per_window=enc,
        decode_s_per_token=float(step),
        decode_batch_slope=slope,
        overhead_s=float(over),
        window_s=float(window_s),
        kappa=kappa.kappa,
        kappa_ci=kappa.ci,
        name=name + ("/cpu-time" if clock == "cpu" else ""),
        source=source,
        assumptions=(
            ("times are process CPU seconds (~ wall time on one dedicated core); " if clock == "cpu" else "")
            + f"kappa = {tok} per second of {kappa.duration} (decoder passes, temperature fallbacks included); "
            "encode_s_per_window = measured encoder time per encoder run; decode_s_per_token and overhead_s "
            "from a non-negative least-squares fit of total time; decode_batch_slope from batched generate "
            "timings (0 if not measured)"
        ),
        fit=fit,
    )


def split_holdout(df: pd.DataFrame, frac: float = 0.25, *, seed: int = 0, min_train: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``ok`` rows into (train, held-back), per language, seeded; at least one held per language
    when it leaves ``min_train`` rows to fit. Failed rows go to train (fits drop them and count them)."""
    if not (0 <= frac < 1):
        raise ValueError(f"holdout frac must be in [0, 1), got {frac!r}")
    rng = np.random.default_rng(seed)
    held_idx = []
    ok = df["ok"].astype(bool)
    for lang in sorted(df["language"].astype(str).unique()):
        idx = df.index[ok & (df["language"].astype(str) == lang)].to_numpy()
        k = int(round(frac * len(idx)))
        if frac > 0 and k == 0 and len(idx) - 1 >= min_train:
            k = 1
        k = min(k, max(len(idx) - min_train, 0))
        held_idx.extend(rng.permutation(idx)[:k].tolist())
    held = df.loc[sorted(held_idx)]
    return df.drop(index=held.index), held


def validate_holdout(model: ServiceModel, held: pd.DataFrame, *, tokens: str = "kappa") -> dict:
    """Predict the held-back requests' mean service time and compare with the measured mean.

    ``tokens="kappa"`` (the real test): each request's tokens are what the profile
    predicts, ``round(kappa[lang] x audio_s)``; ``tokens=<column>`` uses the
    measured count (tests the time model alone). The requests run one at a time
    through :func:`asrsched.sim.engine.simulate` (``max_num_seqs=1``, arrivals far apart,
    so service time = finish - admit) when that module exists; otherwise through
    ``ServiceModel.service_time`` at batch 1, which is what the simulator reduces
    to for sequential requests. ``method`` says which.
    """
    h = held[held["ok"].astype(bool)] if "ok" in held else held
    if len(h) == 0:
        raise ValueError("no good held-back rows to validate on")
    dur = h["audio_s"].to_numpy(float)
    lang = h["language"].astype(str).to_numpy(object)
    if tokens == "kappa":
        tok = np.array([model.kappa_for(lg) * d for lg, d in zip(lang, dur)])
    else:
        if tokens not in h:
            raise ValueError(f"tokens must be 'kappa' or a column of the table, got {tokens!r}")
        tok = h[tokens].to_numpy(float)
    tok = np.maximum(1, np.rint(tok)).astype(np.int64)
    try:
        from asrsched.sim.engine import simulate
        from asrsched.core.workloads import Trace
    except ImportError:
        pred = np.array([model.service_time(d, lg, tokens=t) for d, lg, t in zip(dur, lang, tok)])
        method = "ServiceModel.service_time (batch 1)"
    else:
        gap = 10.0 * float(max(model.service_time(d, lg, tokens=t) for d, lg, t in zip(dur, lang, tok))) + 1.0
        tr = Trace(np.arange(len(h)) * gap, dur, lang, tok, meta=dict(workload="held-back profile rows"))
        rec = simulate(tr, "fcfs", model, max_num_seqs=1, warn_overload=False).records.sort_values("rid")
        pred = (rec["finish"] - rec["admit"]).to_numpy(float)
        method = "asrsched.sim.engine.simulate (fcfs, max_num_seqs=1, sequential arrivals)"
    clock = model.fit.get("clock", "wall") if model.fit else "wall"
    meas = h[CLOCKS[clock][0]].to_numpy(float)
    return {
        "clock": clock,
        "n": int(len(h)),
        "tokens": tokens,
        "method": method,
        "measured_mean_s": float(meas.mean()),
        "predicted_mean_s": float(pred.mean()),
        "rel_error": float(pred.mean() / meas.mean() - 1),
        "per_request_mape": float(np.mean(np.abs(pred - meas) / meas)),
        "per_language": {
            str(lg): {"n": int((lang == lg).sum()), "measured_mean_s": float(meas[lang == lg].mean()),
                      "predicted_mean_s": float(pred[lang == lg].mean())}
            for lg in pd.unique(lang)
        },
        "predicted": pred.tolist(),
    }


# --------------------------------------------------------------------------- silence / VAD
ESTIMATORS = {"file duration": "audio_s", "silero VAD": "vad_silero_s", "energy VAD": "vad_energy_s",
              "true speech": "speech_s"}


def silence_estimates(df: pd.DataFrame, model: ServiceModel, *, tokens: str | None = None) -> pd.DataFrame:
    """Per request and size estimator: estimated vs measured tokens and service time.

    Estimators (:data:`ESTIMATORS`): the file duration (the study's proxy), the
    silero and energy VAD speech durations, and the true speech duration (known
    for synthesised clips). Estimated tokens = ``kappa[lang] x d``; estimated
    time = ``model.service_time(audio_s, lang, tokens=...)`` (the encoder still
    sees the whole file), compared with the measured time on the model's clock
    (``measured_time_s``; ``total_s`` is the wall time the estimator's cost is set
    against). Errors are relative: estimate / measured - 1.
    """
    tok_col = tokens or model.fit.get("tokens_column", "decode_steps")
    d = df[df["ok"].astype(bool)].copy()
    out = []
    for est, col in ESTIMATORS.items():
        if col not in d:
            continue
        for r in d.itertuples():
            dur = getattr(r, col)
            if not (isinstance(dur, (int, float)) and math.isfinite(dur)) or r.language not in model.kappa:
                continue
            et = model.kappa_for(r.language) * dur
            st = model.service_time(r.audio_s, r.language, tokens=et)
            measured_t = getattr(r, CLOCKS[model.fit.get("clock", "wall")][0])
            meas_tok = getattr(r, tok_col)
            cost = getattr(r, f"{col[:-2]}_cost_s", 0.0) if col.startswith("vad_") else 0.0
            out.append(dict(utt_id=r.utt_id, key=r.key, language=r.language, silence=bool(r.silence),
                            estimator=est, duration_used_s=dur, audio_s=r.audio_s,
                            est_tokens=et, tokens=meas_tok, tokens_rel_error=et / meas_tok - 1 if meas_tok else math.nan,
                            est_time_s=st, measured_time_s=measured_t, total_s=r.total_s,
                            time_rel_error=st / measured_t - 1,
                            estimator_cost_s=cost))
    return pd.DataFrame(out)


def vad_summary(est: pd.DataFrame) -> pd.DataFrame:
    """Relative errors per (silence, estimator): mean signed (``*_bias``), mean absolute (``*_mae``)
    and median absolute (``*_median_ae``, robust to the odd temperature-fallback outlier), with each
    estimator's cost per request and that cost as a fraction of the inference time."""
    if est.empty:
        return pd.DataFrame()
    g = est.groupby(["silence", "estimator"], sort=False)
    s = g.agg(n=("key", "size"),
              tokens_bias=("tokens_rel_error", "mean"),
              tokens_mae=("tokens_rel_error", lambda v: float(np.mean(np.abs(v)))),
              tokens_median_ae=("tokens_rel_error", lambda v: float(np.median(np.abs(v)))),
              time_bias=("time_rel_error", "mean"),
              time_mae=("time_rel_error", lambda v: float(np.mean(np.abs(v)))),
              time_median_ae=("time_rel_error", lambda v: float(np.median(np.abs(v)))),
              cost_ms=("estimator_cost_s", lambda v: 1000 * float(np.mean(v))),
              inference_ms=("total_s", lambda v: 1000 * float(np.mean(v))))
    s["cost_fraction"] = s["cost_ms"] / s["inference_ms"]
    return s.reset_index()


# --------------------------------------------------------------------------- the whole run
@dataclass
class ProfileRun:
    """Everything one profiling run produced (see :func:`run_profile`)."""

    measurements: pd.DataFrame
    train: pd.DataFrame
    held: pd.DataFrame
    kappa: KappaFit
    kappa_tables: dict[str, KappaFit]
    service_model: ServiceModel
    holdout: dict
    holdout_measured_tokens: dict
    batch: pd.DataFrame
    estimates: pd.DataFrame
    vad: pd.DataFrame
    params: dict
    timings: dict = field(default_factory=dict)
    out_dir: Path | None = None

    def kappa_table(self) -> pd.DataFrame:
        """kappa per language for every token definition (one row per language x tokens)."""
        return pd.concat([k.table for k in self.kappa_tables.values()], ignore_index=True)

    def report(self) -> str:
        """The run's findings in a few lines: kappa, the time model, the held-back check, VAD, timings."""
        sm, out = self.service_model, []
        out.append(self.kappa.summary())
        kept = self.kappa_tables.get("tokens_kept")
        if kept is not None and kept is not self.kappa:
            out.append("  transcript tokens per s: " + ", ".join(
                f"{r.language} {r.kappa:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]" for r in kept.table.itertuples()))
        out.append(f"service model {sm.name}: encode {sm.encode_s_per_window:.3f} s/window, decode "
                   f"{1000 * sm.decode_s_per_token:.2f} ms/token, overhead {sm.overhead_s:.3f} s, batch slope "
                   f"{sm.decode_batch_slope:.3f}; R2 of total time {sm.fit.get('r2_total_s_measured_tokens', float('nan')):.3f}")
        if self.holdout:
            h, hm = self.holdout, self.holdout_measured_tokens
            out.append(f"held-back mean service time (n={h['n']}): measured {h['measured_mean_s']:.3f} s, "
                       f"predicted {h['predicted_mean_s']:.3f} s from kappa x duration ({100 * h['rel_error']:+.1f} %), "
                       f"{hm['predicted_mean_s']:.3f} s from measured tokens ({100 * hm['rel_error']:+.1f} %) "
                       f"[{h['method']}]")
        oc = sm.fit.get("other_clock") or {}
        if oc:
            out.append(f"  on the {oc['clock']} clock: encode {oc['encode_s_per_window']:.3f} s/window, decode "
                       f"{1000 * oc['decode_s_per_token']:.2f} ms/token, overhead {oc['overhead_s']:.3f} s, R2 "
                       f"{oc['r2_total_measured_tokens']:.3f}; held-back mean {oc['holdout']['measured_mean_s']:.3f} s "
                       f"measured vs {oc['holdout']['predicted_mean_s']:.3f} s predicted "
                       f"({100 * oc['holdout']['rel_error']:+.1f} %)")
        v = self.vad
        if len(v) and v["silence"].any():
            s = v[v["silence"]].set_index("estimator")
            parts = [f"{e}: tokens {100 * s.loc[e, 'tokens_median_ae']:.0f} %, time {100 * s.loc[e, 'time_median_ae']:.0f} %"
                     for e in s.index]
            out.append(f"silence clips (n={int(s['n'].iloc[0])}), median |error|: " + "; ".join(parts))
            for e in ("silero VAD", "energy VAD"):
                if e in s.index:
                    out.append(f"  {e} cost {s.loc[e, 'cost_ms']:.1f} ms/request = "
                               f"{100 * s.loc[e, 'cost_fraction']:.2f} % of inference ({s.loc[e, 'inference_ms']:.0f} ms)")
        m = self.measurements
        nf = int((~m["ok"]).sum())
        if nf:
            out.append(f"failed rows: {nf} ({', '.join(f'{k}: {v}' for k, v in m.loc[~m['ok'], 'error_reason'].value_counts().items())}); fits used the rest")
        if self.timings:
            out.append("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in self.timings.items()))
        return "\n".join(out)

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Write the service-model JSON, kappa table, VAD summary and run parameters into ``out_dir``."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = {
            "service_model": self.service_model.to_json(d / "service_model.json"),
            "kappa": d / "kappa.csv",
            "vad": d / "vad_summary.csv",
            "params": d / "params.json",
        }
        self.kappa_table().to_csv(paths["kappa"], index=False)
        if len(self.batch):
            paths["batch"] = d / "batch.csv"
            self.batch.to_csv(paths["batch"], index=False)
        self.vad.to_csv(paths["vad"], index=False)
        paths["params"].write_text(json.dumps({**self.params, "timings": self.timings, "holdout": {
            k: v for k, v in self.holdout.items() if k != "predicted"}}, indent=2, default=str) + "\n")
        return paths


def run_profile(
    *,
    model: str = "tiny.en",
    backend: str | Any = "faster-whisper",
    languages: Sequence[str] = ("en",),
    n_per_language: int = 16,
    n_silence_per_language: int = 3,
    silence: dict | None = None,
    beam_size: int = 1,
    temperature_fallback: bool = False,
    compute_type: str = "int8",
    cpu_threads: int = 2,
    batch_sizes: Sequence[int] = (1, 2, 4),
    holdout_frac: float = 0.25,
    kappa_tokens: str = "decode_steps",
    sample: str = "stratified",
    max_s: float = 35.0,
    seed: int = 0,
    n_boot: int = 2000,
    out_dir: str | os.PathLike | None = None,
    extra_files: Sequence[str | os.PathLike] = (),
    resume: bool = True,
    cache: str | os.PathLike | None = None,
    repeats: int = 1,
    clock: str = "auto",
    progress: bool = True,
) -> ProfileRun:
    """Synthesise a corpus, measure it on a real backend, fit kappa and the ServiceModel, validate.

    ``n_per_language`` clean clips per language feed the fits (``holdout_frac`` of
    them held back for validation); ``n_silence_per_language`` more clips with
    inserted silence (``silence``: :class:`~asrsched.whisper.corpus.SilenceSpec` fields,
    default 2 s lead, 3 s trail, two 2 s inner pauses) are measured for the VAD
    comparison only. ``extra_files`` (paths, language taken from ``languages[0]``)
    are measured too — corrupt ones become failed rows. ``batch_sizes`` () skips
    the batched-decode timing. ``temperature_fallback=False`` (default) decodes
    once at temperature 0, as vLLM's transcription endpoint (the study's engine)
    does; ``True`` keeps faster-whisper's fallback ladder 0.0-1.0, whose re-decodes
    (``fallbacks``, ``tokens_generated``) make a few clips many times dearer. ``backend`` is a name from
    :data:`asrsched.profiling.backends.BACKENDS` or a ready backend object. With ``out_dir``
    the measurements go to ``out_dir/<model>-<backend>-<set-up hash>/measurements.csv``
    as they are made (a rerun with the same set-up resumes; another set-up gets its own
    folder) and the fits beside them (``ProfileRun.out_dir``). ``cache``: corpus cache folder (default ``$ASRSCHED_CACHE``
    or ``~/.cache/asrsched``). ``repeats``: transcriptions per clip, the fastest kept
    (use 3 on a shared machine). ``clock``: ``"cpu"`` (process CPU seconds,
    which other load on a shared machine barely moves; ~ wall time on one dedicated
    core), ``"wall"``, or ``"auto"`` (default: ``cpu`` for an engine on the CPU,
    ``wall`` on a GPU; see :func:`fit_service_model`); the other clock's fit and hold-out check go into
    ``service_model.fit["other_clock"]`` when the backend reports both.
    """
    from asrsched.profiling.backends import BACKENDS, make_backend
    from asrsched.whisper.backends import ENGLISH_ONLY
    from asrsched.whisper.corpus import LANGUAGES, SilenceSpec, build_corpus

    # ---- validate everything before any work
    languages = [languages] if isinstance(languages, str) else list(languages)
    if not languages:
        raise ValueError(f"languages must name at least one of {', '.join(LANGUAGES)}")
    bad = [lg for lg in languages if lg not in LANGUAGES]
    if bad:
        raise ValueError(f"languages {bad} have no packaged texts; allowed values: {', '.join(LANGUAGES)}")
    if model in ENGLISH_ONLY and set(languages) - {"en"}:
        raise ValueError(f"model {model!r} is English-only; for languages {languages} use model='base'")
    if isinstance(backend, str) and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} (or a backend object); got {backend!r}")
    if clock not in (*CLOCKS, "auto"):
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, auto; got {clock!r}")
    if kappa_tokens not in TOKEN_COLUMNS:
        raise ValueError(f"kappa_tokens must be one of {', '.join(TOKEN_COLUMNS)}; got {kappa_tokens!r}")
    for nm, v, lo in (("n_per_language", n_per_language, 1), ("n_silence_per_language", n_silence_per_language, 0),
                      ("repeats", repeats, 1)):
        if int(v) != v or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")
    sil = SilenceSpec(**({"lead_s": 2.0, "trail_s": 3.0, "inner_s": 2.0, "n_inner": 2} | dict(silence or {})))
    for p in extra_files:
        if not isinstance(p, (str, os.PathLike)):
            raise ValueError(f"extra_files must be paths, got {p!r}")
    params = dict(model=model, backend=backend if isinstance(backend, str) else getattr(backend, "name", "?"),
                  languages=languages, n_per_language=n_per_language, n_silence_per_language=n_silence_per_language,
                  silence=sil.__dict__, beam_size=beam_size, temperature_fallback=bool(temperature_fallback), compute_type=compute_type, cpu_threads=cpu_threads,
                  batch_sizes=list(batch_sizes), holdout_frac=holdout_frac, kappa_tokens=kappa_tokens,
                  sample=sample, max_s=max_s, seed=seed, repeats=repeats, clock=clock)
    timings: dict[str, float] = {}
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    t0 = time.perf_counter()
    clean = build_corpus(languages, n_per_language, seed=seed, sample=sample, max_s=max_s, cache=cache,
                         progress=progress)
    parts = [clean]
    if n_silence_per_language:
        parts.append(build_corpus(languages, n_silence_per_language, seed=seed + 1, sample="random",
                                  max_s=min(max_s, 15.0), silence=sil, cache=cache, progress=progress))
    if extra_files:
        parts.append(pd.DataFrame({"path": [str(p) for p in extra_files], "language": languages[0],
                                   "utt_id": [Path(p).name for p in extra_files],
                                   "key": [f"extra-{Path(p).name}" for p in extra_files]}))
    manifest = pd.concat(parts, ignore_index=True)
    # measure in a seeded random order, so slow drifts of machine load do not line up with
    # language or duration
    manifest = manifest.iloc[np.random.default_rng(seed).permutation(len(manifest))].reset_index(drop=True)
    timings["corpus_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    if isinstance(backend, str):
        kw = dict(beam_size=beam_size, compute_type=compute_type, cpu_threads=cpu_threads)
        if backend == "faster-whisper":
            kw["temperature"] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature_fallback else 0.0
        be = make_backend(backend, model, **kw)
    else:
        be = backend
    timings["load_model_s"] = time.perf_counter() - t1
    if clock == "auto":  # GPU engines are timed on the wall clock, CPU engines on CPU time
        clock = "wall" if "/gpu" in str(getattr(be, "description", "")) else "cpu"
        params["clock"] = clock
    run_dir = None
    if out_dir is not None:  # one sub-folder per measurement set-up: resuming never mixes set-ups
        import hashlib

        setup = dict(backend=getattr(be, "description", params["backend"]), model=model, beam_size=beam_size,
                     temperature_fallback=bool(temperature_fallback), compute_type=compute_type,
                     cpu_threads=cpu_threads, repeats=repeats)
        h = hashlib.sha1(json.dumps(setup, sort_keys=True, default=str).encode()).hexdigest()[:8]
        run_dir = Path(out_dir) / f"{model}-{params['backend']}-{h}"
    out = run_dir / "measurements.csv" if run_dir is not None else None
    t2 = time.perf_counter()
    meas = measure(manifest, be, out=out, resume=resume, repeats=repeats, progress=progress)
    timings["measure_s"] = time.perf_counter() - t2
    batch = pd.DataFrame(columns=["batch", "step_s", "steps"])
    if batch_sizes and hasattr(be, "batch_step_times"):
        t3 = time.perf_counter()
        good = meas[meas["ok"] & ~meas["silence"]].sort_values("audio_s")
        clips = [load_audio(p) for p in good["path"].tail(4)]
        if clips:
            batch = pd.DataFrame(be.batch_step_times(clips, str(good["language"].iloc[-1]), tuple(batch_sizes)))
        timings["batch_s"] = time.perf_counter() - t3

    desc = getattr(be, "description", f"whisper-{model}/{params['backend']}")
    machine = {"cpus": os.cpu_count(), "load_avg_1min_start": load0,
               "load_avg_1min_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")}
    run = fit_profile(meas, batch=batch, name=desc, params=params, clock=clock, holdout_frac=holdout_frac,
                      kappa_tokens=kappa_tokens, n_boot=n_boot, seed=seed, extra_fit={"machine": machine})
    timings["total_s"] = time.perf_counter() - t0
    run.timings = timings
    run.out_dir = run_dir
    if run_dir is not None:
        run.save(run_dir)
    return run


def fit_profile(
    meas: pd.DataFrame,
    *,
    batch: pd.DataFrame | Sequence[dict] | None = None,
    name: str = "profiled",
    params: dict | None = None,
    clock: str = "cpu",
    holdout_frac: float = 0.25,
    kappa_tokens: str = "decode_steps",
    n_boot: int = 2000,
    seed: int = 0,
    extra_fit: dict | None = None,
) -> ProfileRun:
    """The fitting half of :func:`run_profile`, on a measurement table already made.

    Clean (no inserted silence) rows are split into train / held-back per language;
    kappa is fitted for every token definition, the :class:`ServiceModel` on ``clock``
    (the other clock's fit and hold-out check go into ``fit["other_clock"]``), the
    hold-out is predicted through the simulator, and the silence clips are sized
    with and without VAD. Use it to re-fit a saved run (:func:`refit`).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    if kappa_tokens not in TOKEN_COLUMNS:
        raise ValueError(f"kappa_tokens must be one of {', '.join(TOKEN_COLUMNS)}; got {kappa_tokens!r}")
    params = dict(params or {})
    meas = _typed(meas)
    batch = pd.DataFrame(batch if batch is not None else [], columns=None)
    # failed rows stay in, so the fits count them as dropped
    fit_rows = meas[~meas["silence"] | ~meas["ok"]]
    train, held = split_holdout(fit_rows, holdout_frac, seed=seed)
    kappas = {t: fit_kappa(train, tokens=t, n_boot=n_boot, seed=seed) for t in TOKEN_COLUMNS}
    kfit = kappas[kappa_tokens]
    extra = {"kappa_tables": {t: k.table.to_dict("records") for t, k in kappas.items()},
             "n_failed_rows": int((~meas["ok"]).sum()),
             "failed_reasons": meas.loc[~meas["ok"], "error_reason"].value_counts().to_dict(),
             **(extra_fit or {})}
    src = f"asrsched.profiling.run.run_profile({json.dumps(params, default=str)})" if params else "asrsched.profiling.run.fit_profile"
    sm = fit_service_model(train, kfit, name=name, batch=batch, source=src, clock=clock, extra_fit=extra)
    hold = validate_holdout(sm, held) if len(held) else {}
    hold_m = validate_holdout(sm, held, tokens=kappa_tokens) if len(held) else {}
    other = {}
    oc = "cpu" if clock == "wall" else "wall"
    ok_rows = train[train["ok"].astype(bool)]
    if len(held) and len(ok_rows) and ok_rows[list(CLOCKS[oc][:2])].notna().all().all():
        so = fit_service_model(train, kfit, name=name, batch=batch, clock=oc)
        ho = validate_holdout(so, held)
        other = {"clock": oc, "encode_s_per_window": so.encode_s_per_window,
                 "decode_s_per_token": so.decode_s_per_token, "overhead_s": so.overhead_s,
                 "window_s": so.window_s, "r2_total_measured_tokens": so.fit["r2_total_s_measured_tokens"],
                 "holdout": {k: v for k, v in ho.items() if k not in ("predicted", "per_language")}}
    sm = ServiceModel.from_dict({**sm.to_dict(), "fit": {**sm.fit, "holdout": {
        k: v for k, v in hold.items() if k != "predicted"}, "holdout_measured_tokens": {
        k: v for k, v in hold_m.items() if k != "predicted"}, "other_clock": other}})
    est = silence_estimates(meas, sm)
    vad = vad_summary(est)
    return ProfileRun(meas, train, held, kfit, kappas, sm, hold, hold_m, batch, est, vad, params, {}, None)


def refit(run_dir: str | os.PathLike, **kw) -> ProfileRun:
    """Re-fit a saved run folder (``measurements.csv`` + ``service_model.json`` or ``batch.csv``)
    without measuring again; keyword arguments go to :func:`fit_profile` (defaults: the saved
    run's name, parameters and clock)."""
    d = Path(run_dir)
    if not (d / "measurements.csv").exists():
        raise FileNotFoundError(f"{d} holds no measurements.csv (a run_profile output folder is needed)")
    meas = pd.read_csv(d / "measurements.csv")
    old = ServiceModel.from_json(d / "service_model.json") if (d / "service_model.json").exists() else None
    params = json.loads((d / "params.json").read_text()) if (d / "params.json").exists() else {}
    params.pop("timings", None)
    params.pop("holdout", None)
    batch = (pd.read_csv(d / "batch.csv") if (d / "batch.csv").exists()
             else pd.DataFrame(old.fit.get("batch_step", [])) if old else None)
    kw.setdefault("batch", batch)
    kw.setdefault("params", params)
    kw.setdefault("name", old.name.removesuffix("/cpu-time") if old else "profiled")
    kw.setdefault("clock", (old.fit.get("clock") if old else None) or params.get("clock", "cpu"))
    for k in ("holdout_frac", "kappa_tokens", "seed"):
        if k in params:
            kw.setdefault(k, params[k])
    if old and "machine" in old.fit:
        kw.setdefault("extra_fit", {"machine": old.fit["machine"]})
    run = fit_profile(meas, **kw)
    run.out_dir = d
    return run


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.profiling.run``: profile a model and write its ServiceModel JSON."""
    p = argparse.ArgumentParser(prog="python -m asrsched.profiling.run", description=main.__doc__)
    p.add_argument("--model", default="tiny.en", help="tiny.en or base")
    p.add_argument("--backend", default="faster-whisper", help="faster-whisper or vllm")
    p.add_argument("--languages", default="en", help="comma-separated: en,es,de,id")
    p.add_argument("--n", type=int, default=16, help="clean clips per language")
    p.add_argument("--n-silence", type=int, default=3, help="clips with inserted silence per language")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--fallback", action="store_true", help="keep faster-whisper's temperature-fallback ladder")
    p.add_argument("--compute-type", default="int8")
    p.add_argument("--cpu-threads", type=int, default=2)
    p.add_argument("--batch-sizes", default="1,2,4", help="batched-decode timing ('' to skip)")
    p.add_argument("--holdout", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="transcriptions per clip; the fastest is kept")
    p.add_argument("--clock", default="auto", help="cpu, wall or auto (cpu on a CPU engine, wall on a GPU)")
    p.add_argument("--out-dir", default="runs/profile", help="a sub-folder per set-up with measurements and fits")
    p.add_argument("--out", default=None, help="also write the ServiceModel JSON here")
    p.add_argument("--refit", default=None, metavar="RUN_DIR",
                   help="re-fit a saved run folder instead of measuring (writes its fits back there)")
    a = p.parse_args(argv)
    if a.refit:
        run = refit(a.refit, **({} if a.clock == "auto" else {"clock": a.clock}))
        run.save(a.refit)
        if a.out:
            run.service_model.to_json(a.out)
        print(run.report())
        return 0
    run = run_profile(model=a.model, backend=a.backend, languages=[s for s in a.languages.split(",") if s],
                      n_per_language=a.n, n_silence_per_language=a.n_silence, beam_size=a.beam_size,
                      temperature_fallback=a.fallback,
                      compute_type=a.compute_type, cpu_threads=a.cpu_threads,
                      batch_sizes=[int(b) for b in a.batch_sizes.split(",") if b], holdout_frac=a.holdout,
                      seed=a.seed, repeats=a.repeats, clock=a.clock, out_dir=a.out_dir)
    if a.out:
        run.service_model.to_json(a.out)
    print(run.report())
    print(f"measurements and fits: {run.out_dir}")
    if len(run.vad):
        print(run.vad.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
