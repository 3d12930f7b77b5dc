"""Fit the empirical body of :class:`asrsched.core.estimate_error.EstimateError` from real transcripts.

For each packaged corpus (:data:`asrsched.profiling.text_kappa.CORPORA`: LibriSpeech test-clean for English,
Common Voice test for Indonesian) every utterance's Whisper text tokens (:func:`~asrsched.profiling.text_kappa.count_tokens`,
in the form Whisper emits, :func:`~asrsched.profiling.text_kappa.whisper_text`) are set against its real
duration: ``r = log(tokens / (kappa_text * seconds))`` with ``kappa_text`` the corpus' ratio of sums. The
quantiles of ``r`` on a fixed probability grid are the body; the summary (n, sd, skewness, share below
-0.3 and above +0.3) goes beside them. The loop tail: how many of the packaged profiles' clips the outlier rule
left out as loops, with the 95 % interval of the loop probability (:func:`loop_tail_from_profiles`).

    python -m asrsched.profiling.error_fit          # rewrites asrsched/data/estimate_error.json

The file records the command, the tokenizer and the package version (:mod:`asrsched.core.provenance`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from asrsched.profiling.text_kappa import CORPORA, count_tokens, load_transcripts, whisper_text

__all__ = ["PROBS", "log_ratios", "fit_bodies", "loop_tail_from_profiles", "main"]

#: the probability grid of the stored quantiles: 0, 0.0025, ..., 1 (401 points; min and max included)
PROBS = np.linspace(0.0, 1.0, 401)
#: the text form per language: LibriSpeech is upper case without punctuation, Common Voice is as Whisper writes
TEXT_STYLE = {"en": "sentence_case", "id": "as_is"}
OUT = Path(__file__).resolve().parents[1] / "data" / "estimate_error.json"


def log_ratios(language: str, model: str = "base") -> np.ndarray:
    """``log(tokens / (kappa_text * seconds))`` per utterance of the packaged corpus of ``language``."""
    df = load_transcripts(language)
    tok = count_tokens([whisper_text(t, TEXT_STYLE.get(language, "as_is")) for t in df["text"]], model)
    sec = df["duration_s"].to_numpy(float)
    keep = tok > 0
    kappa = tok[keep].sum() / sec[keep].sum()
    return np.log(tok[keep] / (kappa * sec[keep]))


def fit_bodies(model: str = "base") -> dict:
    """The bodies of every packaged corpus, as stored in ``estimate_error.json``."""
    from scipy.stats import skew

    out: dict = {"probs": [round(float(p), 6) for p in PROBS], "fallback": "en", "languages": {}}
    for lang in CORPORA:
        r = log_ratios(lang, model)
        out["languages"][lang] = {
            "corpus": CORPORA[lang][0],
            "style": TEXT_STYLE.get(lang, "as_is"),
            "n": int(r.size),
            "sd": float(r.std(ddof=1)),
            "skewness": float(skew(r)),
            "share_below_-0.3": float(np.mean(r < -0.3)),
            "share_above_+0.3": float(np.mean(r > 0.3)),
            "quantiles": [round(float(x), 6) for x in np.quantile(r, PROBS)],
        }
    return out


def loop_tail_from_profiles() -> dict:
    """What the packaged profiling runs say about decoder loops: clips profiled, clips the outlier rule left out
    of the fit (:mod:`asrsched.profiling.outliers`: more tokens than the duration explains), and the
    Clopper-Pearson 95 % interval of the loop probability."""
    from scipy.stats import beta

    from asrsched.profiling.run import PACKAGED_PROFILES, packaged_profile

    n = k = 0
    for model in PACKAGED_PROFILES:
        fit = dict(packaged_profile(model).fit or {})
        n += int(fit.get("n_rows", 0))
        k += int(fit.get("n_dropped", 0))
    lo = float(beta.ppf(0.025, k, n - k + 1)) if k > 0 else 0.0
    hi = float(beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
    return {"profiles": sorted(PACKAGED_PROFILES), "clips": n, "loops": k, "loop_prob_ci95": [lo, hi]}


def main(argv=None) -> int:
    """``python -m asrsched.profiling.error_fit [--model M] [--out FILE]``; the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="base", help="the Whisper tokenizer (the CT2 weights' tokenizer.json)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    from asrsched.core.provenance import provenance

    data = fit_bodies(a.model)
    data["loop_tail"] = loop_tail_from_profiles()
    data["provenance"] = {
        **provenance(
            "python -m asrsched.profiling.error_fit" + (f" --model {a.model}" if a.model != "base" else ""),
            params={"model": a.model},
            paths=("asrsched/profiling", "asrsched/data"),
            exclude=("asrsched/data/estimate_error.json",),
        ),
        "tokenizer": f"whisper-{a.model} (tokenizer.json of the CT2 weights)",
        "quantity": "log(tokens / (kappa_text * seconds)), kappa_text = sum(tokens) / sum(seconds) per corpus",
    }
    a.out.write_text(json.dumps(data, indent=1) + "\n")
    for lang, b in data["languages"].items():
        print(f"{lang}: n {b['n']}, sd {b['sd']:.3f}, skewness {b['skewness']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
