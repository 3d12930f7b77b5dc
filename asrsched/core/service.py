"""Size estimates: tokens = kappa(language) x duration, and the service-time model.

A :class:`ServiceModel` predicts how long a Whisper request occupies an engine:

    service(d, lang) = windows(d) * encode_s_per_window
                     + tokens(d, lang) * step_s(batch)
                     + overhead_s

with ``windows(d) = ceil(d / window_s)`` (Whisper pads each 30 s window),
``tokens(d, lang) = kappa[lang] * d`` and the decode step time growing with
the number of sequences decoded together:

    step_s(b) = decode_s_per_token * (1 + decode_batch_slope * (b - 1)).

JSON profile format (``schema: "asrsched.service_model/1"``), the hand-off
between the profiling notebook (real Whisper runs) and the simulator::

    {
      "schema": "asrsched.service_model/1",
      "name": "whisper-tiny.en/faster-whisper/cpu-2t",
      "encode_s_per_window": 0.5,
      "decode_s_per_token": 0.010,
      "decode_batch_slope": 0.0,
      "overhead_s": 0.05,
      "window_s": 30.0,
      "kappa": {"en": 4.1},                      # tokens per second of audio
      "kappa_ci": {"en": [4.0, 4.2]},            # optional, 95 % bootstrap CI
      "source": "...", "assumptions": "...", "fit": {...}   # optional, free-form
    }

Missing required fields raise ``ValueError`` naming them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

SCHEMA = "asrsched.service_model/1"
REQUIRED_FIELDS = ("encode_s_per_window", "decode_s_per_token", "overhead_s", "kappa")

__all__ = [
    "ServiceModel",
    "SCHEMA",
    "REQUIRED_FIELDS",
    "default_service_model",
    "as_service_model",
    "check_kappa",
    "language_codes",
    "LanguageCodes",
    "WORK_TOKEN_GRID",
    "work_tokens",
]


def check_kappa(kappa: float, name: str = "kappa") -> float:
    """``kappa`` as a float, or ``ValueError`` if it is not a finite positive number."""
    k = float(kappa)
    if not math.isfinite(k) or k <= 0:
        raise ValueError(f"{name} must be a positive number of tokens per second, got {kappa!r}")
    return k


class LanguageCodes(NamedTuple):
    """A language column coded once: ``names[codes[i]]`` is request ``i``'s language."""

    codes: np.ndarray
    names: list[str]


def _num(x: Any) -> np.ndarray | float:
    """A Python (or numpy) scalar as a float, anything else as a float array: the estimate's formulas then
    run on floats without numpy for one request, and vectorised for many."""
    if isinstance(x, (float, int, np.floating, np.integer)) and not isinstance(x, bool):
        return float(x)
    return np.asarray(x, dtype=float)


def _out(x: Any) -> np.ndarray | float:
    """A result as the caller gave it: a float for one request, an array for many."""
    return x if isinstance(x, float) else (float(x) if np.ndim(x) == 0 else x)


def language_codes(language: Any) -> LanguageCodes:
    """Integer codes and the table of distinct names of a language column (first-seen order).

    Already coded (a :class:`LanguageCodes`): returned as it is.
    """
    if isinstance(language, LanguageCodes):
        return language
    a = np.asarray(language, dtype=object)
    if len(a) and a[0] == a[-1] and (a == a[0]).all():  # one language (the common case): no hashing
        return LanguageCodes(np.zeros(len(a), np.int64), [str(a[0])])
    codes, names = pd.factorize(a)
    return LanguageCodes(codes.astype(np.int64), [str(x) for x in names])


# ----------------------------------------------------------------------------- size estimates a router reads (work view)

WORK_TOKEN_GRID = 65536  # the size estimates of the work view are whole multiples of 1/65536 token


def work_tokens(est_tokens) -> np.ndarray:
    """Size estimates (tokens) rounded to the nearest multiple of ``1 / WORK_TOKEN_GRID`` token.

    What :meth:`Engine.outstanding_work` reads. On this grid every estimate end (decode step
    at admission plus the estimate) and every sum of them is exact in float64 while the sum
    stays below 2**37 tokens (a replica 2**32 decode steps into a run, with 32 running), so
    the sum does not depend on the order of adding: the Python engine adds sorted ends, the
    compiled fleet keeps integer multiples of the grid, and both give the same bits. The
    rounding moves an estimate by at most 2**-17 token.
    """
    x = np.asarray(est_tokens, dtype=float)
    return np.rint(x * WORK_TOKEN_GRID) / WORK_TOKEN_GRID


@dataclass(frozen=True)
class ServiceModel:
    """Service-time model of one Whisper deployment (see module docstring)."""

    encode_s_per_window: float
    decode_s_per_token: float
    overhead_s: float
    kappa: Mapping[str, float]
    decode_batch_slope: float = 0.0
    window_s: float = 30.0
    name: str = "custom"
    source: str = ""
    assumptions: str = ""
    kappa_ci: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("encode_s_per_window", "decode_s_per_token", "overhead_s", "decode_batch_slope"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"ServiceModel.{f} must be a finite number >= 0, got {v!r}")
        if self.window_s <= 0:
            raise ValueError(f"ServiceModel.window_s must be > 0, got {self.window_s!r}")
        if not self.kappa:
            raise ValueError("ServiceModel.kappa must give tokens/s for at least one language")
        for lang, k in self.kappa.items():
            check_kappa(k, f"kappa[{lang!r}]")

    # ------------------------------------------------------------------ estimates
    def kappa_for(self, language: str, *, fallback: str | None = None) -> float:
        """kappa for ``language``.

        A language without a kappa raises ``ValueError`` naming it and the known ones, unless
        the caller opts into ``fallback``: a language of this model whose kappa stands in for
        every unknown one (the vLLM plug-in passes its ``default_language``).
        """
        k = self.kappa.get(language)
        if k is not None:
            return float(k)
        if fallback is not None and fallback in self.kappa:
            return float(self.kappa[fallback])
        known = ", ".join(sorted(self.kappa))
        if fallback is not None:
            raise ValueError(f"fallback language {fallback!r} has no kappa either; known: {known}")
        raise ValueError(f"no kappa for language {language!r}; known: {known} (or pass fallback=<a known language>)")

    def kappas(self, language: Any, *, fallback: str | None = None) -> np.ndarray | float:
        """kappa per request: ``language`` a string (a float back), or one language per request (an array,
        or its :func:`language_codes`)."""
        k = self._kappa_column(language, fallback)
        if isinstance(language, str) or not isinstance(k, float):
            return k
        return np.full(len(language_codes(language).codes), k)  # one language: the column is constant

    def _kappa_column(self, language: Any, fallback: str | None) -> np.ndarray | float:
        """kappa for ``language``: one float when every request has the same language."""
        if isinstance(language, str):
            return self.kappa_for(language, fallback=fallback)
        codes, names = language_codes(language)
        if len(names) == 1:
            return self.kappa_for(names[0], fallback=fallback)
        return np.array([self.kappa_for(x, fallback=fallback) for x in names])[codes]

    def _windows(self, duration_s: Any) -> np.ndarray | float:
        """``max(1, ceil(duration / window_s))`` as floats (whole numbers); the one windows formula."""
        d = _num(duration_s)
        if isinstance(d, float) and math.isfinite(d):
            return float(max(1, math.ceil(d / self.window_s - 1e-9)))
        return np.maximum(1.0, np.ceil(d / self.window_s - 1e-9))

    def windows(self, duration_s: np.ndarray | float) -> np.ndarray | int:
        """Number of 30 s encoder windows (at least 1)."""
        w = self._windows(duration_s)
        return int(w) if np.ndim(w) == 0 else np.asarray(w).astype(np.int64)

    def encoder_s(self, duration_s: np.ndarray | float, *, windows: Any = None) -> np.ndarray | float:
        """Encoder time (s) of a request: ``windows x encode_s_per_window`` (``windows`` defaults to
        :meth:`windows` of the duration; an engine that plans its own windows passes their number)."""
        w = self._windows(duration_s) if windows is None else np.maximum(np.asarray(windows, np.int64), 1)
        out = w * self.encode_s_per_window
        return _out(out)

    def est_tokens(
        self, duration_s: np.ndarray | float, language: Any = "en", *, fallback: str | None = None
    ) -> np.ndarray | float:
        """Estimated generated tokens, ``kappa[language] * duration`` (``language``: see :meth:`kappas`)."""
        out = self._kappa_column(language, fallback) * _num(duration_s)
        return _out(out)

    def step_s(self, batch: np.ndarray | int) -> np.ndarray | float:
        """Decode step time with ``batch`` sequences decoding together."""
        b = _num(batch)
        b = max(b, 1.0) if isinstance(b, float) else np.maximum(b, 1.0)
        out = self.decode_s_per_token * (1.0 + self.decode_batch_slope * (b - 1.0))
        return _out(out)

    def service_time(
        self,
        duration_s: np.ndarray | float,
        language: Any = "en",
        *,
        tokens: Any = None,
        batch: int = 1,
        windows: Any = None,
    ) -> np.ndarray | float:
        """Predicted service time (s) of a request decoding ``tokens`` at decode batch size ``batch``.

        ``tokens`` defaults to the kappa estimate (:meth:`est_tokens`); pass measured tokens to
        model a known request. For the size estimate a scheduler reads, use :meth:`est_service`.
        """
        tok = self.est_tokens(duration_s, language) if tokens is None else _num(tokens)
        out = self.encoder_s(duration_s, windows=windows) + tok * self.step_s(batch) + self.overhead_s
        return _out(out)

    def est_service(
        self,
        duration_s: np.ndarray | float,
        language: Any = "en",
        *,
        windows: Any = None,
        max_tokens: Any = None,
        fallback: str | None = None,
    ) -> np.ndarray | float:
        """The size estimate ``S`` every policy reads: the batch-1 service time of kappa x duration tokens.

        ``windows x encode_s_per_window + min(kappa x duration, max_tokens) x step_s(1) + overhead_s``.
        The one place the estimate is formed: the simulator (both engines), the fleet and its
        routers, the HTTP server, the vLLM plug-in and the load generator all call it, so a subclass
        that overrides it changes every path alike. ``language``: one string or one per request;
        ``fallback``: see :meth:`kappa_for`; ``windows``: the engine's own window count, when it
        plans windows itself; ``max_tokens``: the request's decode limit. A Python number in gives a
        float out without numpy (the plug-in sizes one request at a time).
        """
        tok = self.est_tokens(duration_s, language, fallback=fallback)
        if max_tokens is not None:
            m = _num(max_tokens)
            tok = min(tok, m) if isinstance(tok, float) and isinstance(m, float) else np.minimum(tok, m)
        return self.service_time(duration_s, tokens=tok, windows=windows)

    def saturation_rate(
        self, duration_s: np.ndarray, language: np.ndarray | str = "en", *, max_num_seqs: int = 32, tokens: Any = None
    ) -> float:
        """Fluid approximation of the saturation throughput (req/s) on a workload's durations.

        With the batch always full (``max_num_seqs`` sequences decoding) each request costs its
        encoder windows, run serially (they stall the batch), plus its tokens at the full-batch
        step time shared by ``max_num_seqs`` sequences:

            capacity ~ 1 / (E[windows] * encode_s_per_window + E[tokens] * step_s(M) / M)

        It ignores the per-request ``overhead_s`` (client side, off the engine) and the
        granularity of decode steps. The simulator-measured value
        (:func:`asrsched.sim.capacity.measure_capacity`) is what sweeps use for the load
        ``rho``; this closed form is a cross-check.
        """
        M = int(max_num_seqs)
        if M < 1:
            raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
        d = np.asarray(duration_s, dtype=float)
        if not d.size:
            raise ValueError("saturation_rate needs at least one duration")
        tok = self.est_tokens(d, language) if tokens is None else np.asarray(tokens, dtype=float)
        per_req = (
            float(np.mean(self.windows(d))) * self.encode_s_per_window + float(np.mean(tok)) * float(self.step_s(M)) / M
        )
        return 1.0 / per_req if per_req > 0 else math.inf

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kappa"] = {k: float(v) for k, v in self.kappa.items()}
        d["kappa_ci"] = {k: [float(a), float(b)] for k, (a, b) in self.kappa_ci.items()}
        return {"schema": SCHEMA, **d}

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=float) + "\n")
        return path

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, origin: str = "profile") -> ServiceModel:
        missing = [f for f in REQUIRED_FIELDS if f not in d]
        if missing:
            raise ValueError(
                f"{origin} is missing required field(s) {', '.join(missing)}; "
                f"a service-model profile needs {', '.join(REQUIRED_FIELDS)}"
            )
        schema = d.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise ValueError(f"{origin} has schema {schema!r}; expected {SCHEMA!r}")
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if "kappa_ci" in kw:
            kw["kappa_ci"] = {k: tuple(v) for k, v in kw["kappa_ci"].items()}
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> ServiceModel:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"service-model profile not found: {path}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"service-model profile {path} is not valid JSON: {e}") from None
        return cls.from_dict(d, origin=f"profile {path}")

    def with_kappa(self, kappa: float | Mapping[str, float]) -> ServiceModel:
        """A copy with kappa replaced (a number applies to every known language); a subclass stays one."""
        if isinstance(kappa, Mapping):
            new = dict(kappa)
        else:
            k = check_kappa(kappa)
            new = {lang: k for lang in self.kappa}
        return replace(self, kappa=new)


def default_service_model() -> ServiceModel:
    """Whisper-large-v3 served by vLLM on one A100-40GB: the study's setting.

    Not measured here (no GPU): the coefficients are engineering estimates,
    written down so they can be argued with and replaced by a measured profile.

    * encoder: one 30 s window (1500 frames, 32 layers, d=1280) ~ 1.9 TFLOP;
      at ~40 % of the A100's 312 TFLOP/s fp16 that is ~15 ms; with the mel
      front-end and scheduling around it we take 40 ms per window;
    * decode: 32-layer decoder, memory-bound; ~18 ms per step at batch 1,
      growing 4 % per extra sequence in the batch (cross-attention over 1500
      encoder states per sequence makes each extra sequence cost real bandwidth);
    * overhead: 30 ms of audio decode, resampling and detokenisation per request;
    * kappa (text tokens per second of speech, no timestamps): English 3.3
      (LibriSpeech reads at ~2.7 words/s, ~1.2 tokens/word); Spanish and German
      ~1.3x English (longer BPE splits; the ratio seen on espeak-ng speech,
      notebook 01); Indonesian 4.0.

    With ``max_num_seqs = 32`` these put the saturation point of a LibriSpeech
    stream at ~14 req/s and of the uniform 5-30 s split at ~9 req/s (measured with
    the simulator), inside the study's 1-25 req/s sweep, where it saw its high-load regime.
    """
    return ServiceModel(
        encode_s_per_window=0.040,
        decode_s_per_token=0.018,
        decode_batch_slope=0.04,
        overhead_s=0.030,
        kappa={"en": 3.3, "es": 4.4, "de": 4.1, "id": 4.0},
        name="whisper-large-v3/vllm/a100-40gb (assumed)",
        source="engineering estimate; see default_service_model() docstring",
        assumptions=(
            "A100-40GB fp16; encoder 40 ms per 30 s window; decode 18 ms/step at batch 1, "
            "+4 % per extra sequence; 30 ms overhead; kappa en 3.3 tokens/s"
        ),
    )


def as_service_model(
    service: ServiceModel | Mapping[str, Any] | str | Path | None = None,
    kappa: float | Mapping[str, float] | None = None,
) -> ServiceModel:
    """The :class:`ServiceModel` a caller means: ``None`` (:func:`default_service_model`), a model, its
    :meth:`~ServiceModel.to_dict` form or a JSON path; with ``kappa`` replaced when given (:meth:`~ServiceModel.with_kappa`)."""
    if service is None:
        sm = default_service_model()
    elif isinstance(service, ServiceModel):
        sm = service
    elif isinstance(service, Mapping):
        sm = ServiceModel.from_dict(service)
    else:
        sm = ServiceModel.from_json(service)
    return sm.with_kappa(kappa) if kappa is not None else sm
