"""How wrong a size estimate is: the multiplicative error of ``kappa x duration`` against the tokens decoded.

A request of ``d`` seconds is sized by ``kappa * d`` tokens (:class:`asrsched.core.service.ServiceModel`);
the engine then decodes ``kappa * d * m`` tokens. :class:`EstimateError` is the law of ``m``, the factor a
simulated trace draws per request (:func:`asrsched.core.workloads.make_trace`). Its parts:

* a **body**: either lognormal with a coefficient of variation ``cv`` (the package's first model, symmetric
  in log), or **empirical**: the quantiles of ``log(tokens / (kappa_text * d))`` over real utterances, per
  language: LibriSpeech test-clean (English) and Common Voice test (Indonesian) through the Whisper
  tokenizer against their real durations (``asrsched/data/estimate_error.json``, written by
  :mod:`asrsched.profiling.error_fit`, provenance inside). Real bodies are skewed to the left: a pause or a
  slow speaker makes the duration over-state the text;
* **separate scales** for the two sides of the body: ``under`` multiplies the log deviations above the
  median (the estimate *under*-states the work: the case that hurts size-based policies most, Dell'Amico
  et al.), ``over`` those below it; 1 and 1 is the body as measured, 0 and 0 a perfect estimate;
* a **loop tail**: with probability ``loop_prob`` the decoder runs into a repetition loop and emits a factor
  drawn log-uniformly from ``loop_factor`` (low, high) more tokens (hallucination loops: profiling's outlier
  rule, :mod:`asrsched.profiling.outliers`, flags such clips). The packaged profiling runs flagged none in
  their clips (``estimate_error.json``'s ``loop_tail``: the clips, the loops and the 95 % interval of the
  loop probability), so the probability is bounded by data but not measured, and the factor range is set,
  not fitted;
* **silence**: with probability ``silence_prob`` a request is padded with silence making up ``silence_share``
  of its audio; the duration then over-states the speech by ``1 / (1 - share)``. A VAD that sizes by speech
  duration removes this part (``vad=True``).

The body is re-centred so that ``E[m] = 1`` (kappa is a ratio of sums, so the mean work is unchanged and
a load stays the same fraction of capacity); the tails and silence then move the mean as they do in real
traffic. Presets (:func:`estimate_error`): ``"perfect"``, ``"lognormal"`` (cv 0.15, the default of every
trace), ``"real"`` and ``"degraded"`` (the real body with both sides doubled and 2 % loops of 3-10x, a
probability inside the profiling runs' interval).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field, replace
from importlib import resources

import numpy as np

__all__ = ["EstimateError", "estimate_error", "PRESETS", "empirical_bodies"]

#: the named error models (:func:`estimate_error`)
PRESETS = ("perfect", "lognormal", "real", "degraded")


@functools.lru_cache(maxsize=1)
def empirical_bodies() -> dict:
    """The committed empirical bodies: ``{"probs": [...], "languages": {lang: {"quantiles": [...], ...}}, ...}``."""
    with resources.files("asrsched.data").joinpath("estimate_error.json").open("r", encoding="utf-8") as f:
        return json.load(f)


def _num(x, name: str, lo: float = 0.0, hi: float = math.inf, closed_hi: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x):
        raise ValueError(f"{name}: need a finite number, got {x!r}")
    if x < lo or (x > hi if closed_hi else x >= hi):
        raise ValueError(f"{name}: must lie in [{lo:g}, {hi:g}{']' if closed_hi else ')'}, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class EstimateError:
    """The law of ``m = true tokens / (kappa x duration)``; see the module docstring."""

    body: str = "lognormal"  # "lognormal" or "empirical"
    cv: float = 0.15  # the lognormal body's coefficient of variation
    under: float = 1.0
    over: float = 1.0
    loop_prob: float = 0.0
    loop_factor: tuple[float, float] = (3.0, 10.0)
    silence_prob: float = 0.0
    silence_share: float = 0.0
    vad: bool = False
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.body not in ("lognormal", "empirical"):
            raise ValueError(f"body: must be 'lognormal' or 'empirical', got {self.body!r}")
        _num(self.cv, "cv")
        _num(self.under, "under")
        _num(self.over, "over")
        _num(self.loop_prob, "loop_prob", 0.0, 1.0, closed_hi=True)
        lf = tuple(self.loop_factor)
        if len(lf) != 2 or not (1.0 <= _num(lf[0], "loop_factor") <= _num(lf[1], "loop_factor")):
            raise ValueError(f"loop_factor: need (low, high) with 1 <= low <= high, got {self.loop_factor!r}")
        object.__setattr__(self, "loop_factor", (float(lf[0]), float(lf[1])))
        _num(self.silence_prob, "silence_prob", 0.0, 1.0, closed_hi=True)
        _num(self.silence_share, "silence_share", 0.0, 1.0)

    def spec(self) -> dict:
        """A JSON-able description (cache keys, results files); :meth:`from_spec` reads it back."""
        d = asdict(self)
        d["loop_factor"] = list(self.loop_factor)
        return d

    @classmethod
    def from_spec(cls, spec: dict) -> EstimateError:
        known = set(cls.__dataclass_fields__)
        bad = sorted(set(spec) - known)
        if bad:
            raise ValueError(f"estimate_error: unknown field(s) {bad}; known: {sorted(known)}")
        d = dict(spec)
        if "loop_factor" in d:
            d["loop_factor"] = tuple(d["loop_factor"])
        return cls(**d)

    def _log_body(self, rng: np.random.Generator, n: int, language) -> np.ndarray:
        """Centred log factors of the body (median 0 before scaling), then scaled side by side."""
        if self.body == "lognormal":
            if self.cv <= 0:
                return np.zeros(n)
            s = math.sqrt(math.log1p(self.cv**2))
            return np.log(rng.lognormal(-0.5 * s * s, s, size=n))  # the draws of the first model, unchanged
        data = empirical_bodies()
        probs = np.asarray(data["probs"], float)
        u = rng.random(n)
        out = np.empty(n)
        langs = np.broadcast_to(np.asarray(language, dtype=object), (n,))
        for lang in np.unique(langs.astype(str)):
            body = data["languages"].get(lang, data["languages"][data["fallback"]])
            q = np.asarray(body["quantiles"], float)
            sel = langs == lang
            out[sel] = np.interp(u[sel], probs, q) - float(np.interp(0.5, probs, q))
        return out

    def sample(self, rng: np.random.Generator, n: int, language="en") -> np.ndarray:
        """``n`` factors ``m`` (``language``: one per request or one for all; an unlisted language uses the
        fallback body)."""
        z = self._log_body(rng, n, language)
        if self.body == "empirical" or self.under != 1.0 or self.over != 1.0:
            z = np.where(z > 0, self.under * z, self.over * z)
            if self.body == "lognormal" and self.cv > 0:  # keep E[m] = 1 after the scales
                z = z - math.log(float(np.mean(np.exp(z))))
            elif self.body == "empirical":
                z = z - self._log_mean_shift(language)
        m = np.exp(z)
        if self.loop_prob > 0:
            hit = rng.random(n) < self.loop_prob
            lo, hi = self.loop_factor
            m = np.where(hit, m * np.exp(rng.uniform(math.log(lo), math.log(hi), n)), m)
        if self.silence_prob > 0 and self.silence_share > 0 and not self.vad:
            padded = rng.random(n) < self.silence_prob
            m = np.where(padded, m * (1.0 - self.silence_share), m)
        return m

    def _log_mean_shift(self, language) -> np.ndarray | float:
        """``log E[exp(z)]`` of the scaled empirical body per request's language (exact over the quantile grid)."""
        data = empirical_bodies()
        probs = np.asarray(data["probs"], float)
        mid = 0.5 * (probs[1:] + probs[:-1])
        w = np.diff(probs)
        shift = {}
        for lang, body in data["languages"].items():
            q = np.asarray(body["quantiles"], float)
            z = np.interp(mid, probs, q) - float(np.interp(0.5, probs, q))
            z = np.where(z > 0, self.under * z, self.over * z)
            shift[lang] = math.log(float(np.sum(w * np.exp(z))))
        langs = np.asarray(language, dtype=object).astype(str)
        fb = shift[data["fallback"]]
        if langs.ndim == 0:
            return shift.get(str(langs), fb)
        return np.array([shift.get(x, fb) for x in langs])

    def scaled(self, under: float | None = None, over: float | None = None) -> EstimateError:
        """The same model with the two sides scaled anew."""
        return replace(self, under=self.under if under is None else under, over=self.over if over is None else over)


def estimate_error(spec=None) -> EstimateError:
    """An :class:`EstimateError` from a preset name (:data:`PRESETS`), a spec dict, a number (a lognormal cv)
    or an :class:`EstimateError` (returned as is); ``None`` is the default lognormal (cv 0.15)."""
    if spec is None:
        return EstimateError(name="lognormal")
    if isinstance(spec, EstimateError):
        return spec
    if isinstance(spec, dict):
        return EstimateError.from_spec(spec)
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return EstimateError(cv=_num(spec, "estimate_error (a lognormal cv)"), name=f"lognormal_{spec:g}")
    name = str(spec).lower()
    if name == "perfect":
        return EstimateError(cv=0.0, name=name)
    if name == "lognormal":
        return EstimateError(name=name)
    if name == "real":
        return EstimateError(body="empirical", name=name)
    if name == "degraded":
        return EstimateError(body="empirical", under=2.0, over=2.0, loop_prob=0.02, name=name)
    raise ValueError(f"estimate_error: unknown preset {spec!r}; choose one of {', '.join(PRESETS)} or pass a spec dict")
