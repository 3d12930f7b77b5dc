"""The profile run's parameters checked before any work (:func:`check_profile`), so that a notebook or
``asrsched run`` rejects a bad value before a Whisper model is loaded or a clip synthesised."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from asrsched.profiling.measure import CLOCKS, TOKEN_COLUMNS
from asrsched.profiling.outliers import MIN_SPREAD, OUTLIER_Z, check_rule

__all__ = ["check_profile"]


def check_profile(
    *,
    model: str = "tiny.en",
    backend: str | Any = "faster-whisper",
    languages: Sequence[str] | str = ("en",),
    n_per_language: int = 16,
    n_silence_per_language: int = 3,
    silence: dict | None = None,
    clock: str = "auto",
    kappa_tokens: str = "decode_steps",
    repeats: int = 1,
    outlier_z: float | None = OUTLIER_Z,
    extra_files: Sequence[str | os.PathLike] = (),
) -> tuple[list[str], Any]:
    """Every check of :func:`run_profile` (same arguments), before any work: ``ValueError`` naming the argument.
    Returns the languages as a list and the :class:`~asrsched.whisper.corpus.SilenceSpec`."""
    from asrsched.profiling.measure import BACKENDS
    from asrsched.whisper.backends import ENGLISH_ONLY
    from asrsched.whisper.corpus import LANGUAGES, SilenceSpec

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
    for nm, v, lo in (
        ("n_per_language", n_per_language, 1),
        ("n_silence_per_language", n_silence_per_language, 0),
        ("repeats", repeats, 1),
    ):
        if int(v) != v or v < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {v!r}")
    check_rule(outlier_z, MIN_SPREAD)
    sil = SilenceSpec(**({"lead_s": 2.0, "trail_s": 3.0, "inner_s": 2.0, "n_inner": 2} | dict(silence or {})))
    for p in extra_files:
        if not isinstance(p, (str, os.PathLike)):
            raise ValueError(f"extra_files must be paths, got {p!r}")
    return languages, sil
