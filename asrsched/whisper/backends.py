"""Transcription backends for the profiler: one small interface, real engines behind it.

A backend is any object with::

    backend.name: str                 # "faster-whisper", "vllm", ...
    backend.model: str                # "tiny.en", "base", ...
    backend.transcribe(audio_f32_16k: np.ndarray, language: str) -> dict
    backend.close() -> None           # optional

and ``transcribe`` returns a dict with (at least) the keys of :data:`RESULT_KEYS`:

=====================  ==========================================================
``text``               the transcript
``tokens_kept``        tokens of the final transcript (incl. timestamp tokens)
``tokens_text``        of those, text tokens (timestamps and specials removed)
``tokens_generated``   every token the decoder produced, temperature-fallback
                       re-decodes and sampled hypotheses included
``decode_steps``       decoder forward passes (max hypothesis length + 1 per call)
``generate_calls``     decoder runs (one per 30 s window, plus one per fallback)
``windows``            encoder runs (30 s windows actually encoded)
``encode_s``           wall time inside the encoder
``decode_s``           wall time inside the decoder
``first_token_s``      time from the call to the first generated token
``total_s``            wall time of the whole call
=====================  ==========================================================

Backends may add keys (``first_segment_s``, ``features_s``, ``fallbacks``, and
``cpu_s`` / ``encode_cpu_s`` / ``decode_cpu_s`` — process CPU time, which load from
other processes on a shared machine inflates far less than wall time).
:func:`asrsched.profiling.measure.make_backend` builds one by name: this module's
:class:`FasterWhisperBackend`, or :mod:`asrsched.vllm_plugin.vllm_backend`'s vLLM one.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Backend",
    "FasterWhisperBackend",
    "RESULT_KEYS",
    "ENGLISH_ONLY",
    "COMPUTE_TYPES",
    "MAX_REPEAT",
    "longest_repeat",
    "text_repeat",
]

#: the keys of every backend's ``transcribe`` result
RESULT_KEYS = (
    "text",
    "tokens_kept",
    "tokens_text",
    "tokens_generated",
    "decode_steps",
    "generate_calls",
    "windows",
    "encode_s",
    "decode_s",
    "first_token_s",
    "total_s",
)
ENGLISH_ONLY = {"tiny.en"}
COMPUTE_TYPES = ("int8", "int8_float32", "float32", "float16", "int16", "default")
#: more consecutive repeats of one token, word or short phrase than this is a hallucination loop
MAX_REPEAT = 20


def longest_repeat(seq, max_period: int = 4) -> tuple[int, int, int]:
    """The longest run of one unit of 1..``max_period`` items repeated back to back in ``seq``.

    Returns ``(repeats, start, period)``: ``seq[start:start + period]`` occurs ``repeats``
    times in a row from ``start`` (``(1, 0, 1)`` for a sequence without repetition,
    ``(0, 0, 1)`` for an empty one). A decoder caught in a loop emits exactly this
    ("The The The ...", "thank you. thank you. ...").

    >>> longest_repeat("a b the the the the c".split())
    (4, 2, 1)
    >>> longest_repeat([1, 2, 7, 8, 7, 8, 7, 8, 3])
    (3, 2, 2)
    """
    x = list(seq)
    if not x:
        return (0, 0, 1)
    best = (1, 0, 1)
    for p in range(1, max(1, int(max_period)) + 1):
        run = 0  # positions i with x[i] == x[i - p], consecutive
        for i in range(p, len(x)):
            if x[i] == x[i - p]:
                run += 1
                reps = run // p + 1
                if reps > best[0]:
                    best = (reps, i - run - p + 1, p)
            else:
                run = 0
    return best


def text_repeat(text: str, max_period: int = 4) -> tuple[int, str]:
    """Longest back-to-back repetition of a word or short phrase in ``text`` (case and punctuation ignored).

    Returns ``(repeats, unit)``, e.g. ``(57, "the")`` for "The The The ... The".
    """
    import re

    words = re.findall(r"[\w']+", text.lower())
    reps, start, period = longest_repeat(words, max_period)
    return reps, " ".join(words[start : start + period])


@runtime_checkable
class Backend(Protocol):
    """What the profiler needs from an engine (see the module docstring)."""

    name: str
    model: str

    def transcribe(self, audio: np.ndarray, language: str) -> dict: ...


class _TimedCT2:
    """Wraps a ``ctranslate2.models.Whisper`` to time ``encode`` / ``generate`` and count tokens.

    faster-whisper calls ``self.model.encode(...)`` and ``self.model.generate(...)``
    on the CT2 object; putting this proxy in its place measures exactly the
    encoder and the decoder inside the unmodified ``transcribe`` pipeline
    (temperature fallbacks included). Everything else is delegated.
    """

    def __init__(self, inner):
        self._inner = inner
        self.reset(time.perf_counter())

    def reset(self, t0: float) -> None:
        self.t0 = t0
        self.encode_s = 0.0
        self.decode_s = 0.0
        self.encode_cpu_s = 0.0
        self.decode_cpu_s = 0.0
        self.windows = 0
        self.calls: list[dict] = []
        self.first_encode_start: float | None = None
        self.first_token_at: float | None = None

    def encode(self, features, *args, **kw):
        t, c = time.perf_counter(), time.process_time()
        if self.first_encode_start is None:
            self.first_encode_start = t
        out = self._inner.encode(features, *args, **kw)
        self.encode_s += time.perf_counter() - t
        self.encode_cpu_s += time.process_time() - c
        self.windows += 1
        return out

    def generate(self, features, prompts, *args, **kw):
        t, c = time.perf_counter(), time.process_time()
        res = self._inner.generate(features, prompts, *args, **kw)
        dt = time.perf_counter() - t
        self.decode_s += dt
        self.decode_cpu_s += time.process_time() - c
        for r in res:
            lens = [len(s) for s in r.sequences_ids] or [0]
            steps = max(lens) + 1  # + the end-of-text step
            self.calls.append(
                {
                    "tokens": int(sum(lens)),
                    "steps": steps,
                    "decode_s": dt / len(res),
                    "temperature": kw.get("sampling_temperature", 0.0)
                    if kw.get("beam_size", 1) == 1 and "sampling_temperature" in kw
                    else 0.0,
                }
            )
            if self.first_token_at is None:
                # CT2 returns whole sequences; the first token comes after the prompt step,
                # estimated as one step's share of this call.
                self.first_token_at = t + dt / steps
        return res

    def detect_language(self, *args, **kw):
        t, c = time.perf_counter(), time.process_time()
        out = self._inner.detect_language(*args, **kw)
        self.decode_s += time.perf_counter() - t
        self.decode_cpu_s += time.process_time() - c
        return out

    def __getattr__(self, name):
        return getattr(self._inner, name)


class FasterWhisperBackend:
    """faster-whisper (CTranslate2) on CPU with the packaged weights; times encoder and decoder.

    Parameters mirror ``WhisperModel.transcribe``: ``beam_size`` (1 = greedy),
    ``temperature`` (the fallback ladder; a single number disables fallback),
    ``without_timestamps``; ``compute_type`` and ``cpu_threads`` go to the model.
    Other keyword arguments (``log_prob_threshold``, ``no_speech_threshold``, ...) go
    to every ``transcribe`` call unchanged.

    Long audio: faster-whisper's own long-form path (30 s windows with timestamp tokens, each
    next window starting at the last complete segment, temperature fallback when a window's
    text compresses too well). ``condition_on_previous_text`` defaults to ``False`` here (the
    previous window's text is not fed back as a prompt), so one bad window cannot seed a loop
    in the next; every result reports ``max_repeat``, the longest back-to-back repetition of a
    word or phrase in the transcript (:func:`text_repeat`; above :data:`MAX_REPEAT` it is a loop).
    """

    name = "faster-whisper"

    def __init__(
        self,
        model: str = "tiny.en",
        *,
        compute_type: str = "int8",
        cpu_threads: int = 2,
        beam_size: int = 1,
        temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        without_timestamps: bool = False,
        condition_on_previous_text: bool = False,
        **transcribe_options,
    ):
        from asrsched.whisper.weights import MODELS, load_whisper

        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {model!r}")
        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}; got {compute_type!r}")
        if int(beam_size) != beam_size or beam_size < 1:
            raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
        if int(cpu_threads) != cpu_threads or cpu_threads < 1:
            raise ValueError(f"cpu_threads must be an integer >= 1, got {cpu_threads!r}")
        temps = (temperature,) if isinstance(temperature, (int, float)) else tuple(temperature)
        if not temps or any(not (0 <= float(t) <= 2) for t in temps):
            raise ValueError(f"temperature must be a number or a sequence of numbers in [0, 2], got {temperature!r}")
        self.model = model
        self.compute_type = compute_type
        self.cpu_threads = int(cpu_threads)
        self.beam_size = int(beam_size)
        self.options = dict(
            beam_size=self.beam_size,
            temperature=temperature,
            without_timestamps=bool(without_timestamps),
            condition_on_previous_text=bool(condition_on_previous_text),
            vad_filter=False,
            **transcribe_options,
        )
        self._wm = load_whisper(model, compute_type=compute_type, cpu_threads=self.cpu_threads)
        self._timed = _TimedCT2(self._wm.model)
        self._wm.model = self._timed
        tok = self._wm.hf_tokenizer
        self.eot = tok.token_to_id("<|endoftext|>")
        self.multilingual = bool(self._timed.is_multilingual)

    @property
    def description(self) -> str:
        t = self.options["temperature"]
        fb = "fallback" if isinstance(t, (tuple, list)) and len(t) > 1 else "no-fallback"
        return (
            f"whisper-{self.model}/faster-whisper/cpu-{self.cpu_threads}t/{self.compute_type}/beam{self.beam_size}/{fb}"
        )

    def supported_languages(self) -> list[str]:
        return list(self._wm.supported_languages)

    def transcribe(self, audio: np.ndarray, language: str) -> dict[str, Any]:
        """Transcribe one 16 kHz mono float32 clip in ``language``; timings and token counts."""
        if not self.multilingual and language != "en":
            raise ValueError(f"model {self.model!r} is English-only; got language {language!r} (use model='base')")
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        tm = self._timed
        c0 = time.process_time()
        t0 = time.perf_counter()
        tm.reset(t0)
        segments, _info = self._wm.transcribe(audio, language=language, **self.options)
        kept: list[int] = []
        texts: list[str] = []
        first_seg = None
        for s in segments:
            if first_seg is None:
                first_seg = time.perf_counter() - t0
            kept.extend(s.tokens)
            texts.append(s.text)
        total = time.perf_counter() - t0
        cpu = time.process_time() - c0
        calls = tm.calls
        fallbacks = sum(1 for c in calls if c["temperature"] > 0)
        text = "".join(texts).strip()
        return {
            "text": text,
            "max_repeat": text_repeat(text)[0],
            "tokens_kept": len(kept),
            "tokens_text": sum(1 for t in kept if t < self.eot),
            "tokens_generated": int(sum(c["tokens"] for c in calls)),
            "decode_steps": int(sum(c["steps"] for c in calls)),
            "generate_calls": len(calls),
            "fallbacks": fallbacks,
            "windows": tm.windows,
            "encode_s": tm.encode_s,
            "decode_s": tm.decode_s,
            "features_s": (tm.first_encode_start - t0) if tm.first_encode_start else math.nan,
            "first_token_s": (tm.first_token_at - t0) if tm.first_token_at else math.nan,
            "first_segment_s": first_seg if first_seg is not None else math.nan,
            "total_s": total,
            "cpu_s": cpu,
            "encode_cpu_s": tm.encode_cpu_s,
            "decode_cpu_s": tm.decode_cpu_s,
        }

    def batch_step_times(
        self, audios: list[np.ndarray], language: str, batch_sizes=(1, 2, 4), repeats: int = 3, max_new_tokens: int = 48
    ) -> list[dict]:
        """Decoder step time at each batch size: ``generate`` on ``b`` encoded windows at once.

        Greedy, no timestamps, the clips' first 30 s; per batch size the
        minimum over ``repeats`` (interleaved across batch sizes; the minimum is the
        least disturbed by other load on a shared machine) of
        ``decode_s / decode_steps`` (the prompt step and the cross-attention
        set-up are amortised over the steps); ``step_cpu_s`` likewise in process CPU time. This is how the
        decode step grows when an engine batches sequences (continuous batching).
        """
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer

        if not audios:
            raise ValueError("batch_step_times needs at least one clip")
        wm = self._wm
        tok = Tokenizer(
            wm.hf_tokenizer, self.multilingual, task="transcribe", language=language if self.multilingual else "en"
        )
        prompt = wm.get_prompt(tok, [], without_timestamps=True)
        feats = [pad_or_trim(wm.feature_extractor(np.asarray(a, np.float32))[..., :-1]) for a in audios]
        sizes = [int(b) for b in batch_sizes]
        if any(b < 1 for b in sizes):
            raise ValueError(f"batch sizes must be integers >= 1, got {list(batch_sizes)}")
        encoded = {b: wm.encode(np.stack([feats[i % len(feats)] for i in range(b)]).astype(np.float32)) for b in sizes}
        per_step: dict[int, list[float]] = {b: [] for b in sizes}
        per_step_cpu: dict[int, list[float]] = {b: [] for b in sizes}
        steps_of: dict[int, int] = {}
        for _ in range(max(1, int(repeats))):  # interleaved, so load changes hit every batch size alike
            for b in sizes:
                t, c = time.perf_counter(), time.process_time()
                res = self._timed._inner.generate(
                    encoded[b], [prompt] * b, beam_size=1, max_length=len(prompt) + max_new_tokens
                )
                dt, dc = time.perf_counter() - t, time.process_time() - c
                steps_of[b] = max(len(r.sequences_ids[0]) for r in res) + 1
                per_step[b].append(dt / steps_of[b])
                per_step_cpu[b].append(dc / steps_of[b])
        return [
            {
                "batch": b,
                "step_s": float(np.min(per_step[b])),
                "step_cpu_s": float(np.min(per_step_cpu[b])),
                "steps": steps_of[b],
            }
            for b in sizes
        ]

    def close(self) -> None:
        self._wm = None
