"""The local inference engine: faster-whisper on CPU, decoding as vLLM's transcription endpoint does.

:class:`WhisperEngine` transcribes 16 kHz mono audio greedily (beam 1, no timestamps, no
temperature fallback), generating the first token on its own so that it streams as soon as
it exists; :class:`Cancelled` is what it raises when its request is cancelled between two
encoder/decoder calls, :class:`HallucinationLoop` when the decoder is caught repeating itself.
:func:`cpu_service_model` is the size-estimate model for the same engine on this CPU (a
measured profile when there is one, field-note figures otherwise); the server sizes a request
with its :meth:`~asrsched.core.service.ServiceModel.est_service`, from the engine's real number
of windows (:mod:`asrsched.serving.policy_server`).

Long audio (the long-form path)
-------------------------------
faster-whisper's own ``transcribe`` decodes 30 s windows *with* timestamp tokens, moves each
next window to the last complete segment, feeds the previous text back as a prompt
(``condition_on_previous_text=True`` by default) and re-decodes a window at higher
temperature when its output compresses too well (a loop). vLLM's endpoint cuts long audio
at the quietest point near each 30 s boundary and decodes every chunk on its own, without
timestamps and without the previous text. Decoding *without* timestamps, as vLLM does and as
this engine must to stream like it, a window holding 27-30 s of continuous speech can come
back as one or two words ("The"); feeding that back as the prompt of the next window seeds a
loop, which is how a 10-minute clip became 3,573 "The" tokens. So this engine:

* cuts the audio at its quietest points into windows of at most
  :data:`asrsched.whisper.audio.WINDOW_MAX_S` (25 s; :func:`asrsched.whisper.audio.plan_windows`),
  well short of the length where whole windows get lost;
* decodes each window independently: the prompt is the client's ``prompt`` (if any), never
  the model's own earlier output;
* checks every window: a decoder loop (one token, word or phrase of up to four words repeated
  more than :data:`asrsched.whisper.backends.MAX_REPEAT` times back to back) or a window with
  several seconds of speech that yields almost no words is split at its quietest point and
  each half decoded again (a loop at most twice, a near-empty window once); a loop that
  survives that (a piece still loops, or the halves joined still repeat one unit more than
  half of ``MAX_REPEAT`` times: the loop split in two) raises :class:`HallucinationLoop` —
  the server answers an error, never a transcript made of it.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from asrsched.core.service import ServiceModel
from asrsched.whisper.audio import TARGET_SR, WINDOW_MAX_S, frame_rms, plan_windows
from asrsched.whisper.backends import MAX_REPEAT, longest_repeat, text_repeat

__all__ = ["Cancelled", "HallucinationLoop", "WhisperEngine", "cpu_service_model"]


class Cancelled(Exception):
    """The request was cancelled (client gone or timed out) while it ran."""


class HallucinationLoop(RuntimeError):
    """The decoder repeated one unit back to back more than :data:`MAX_REPEAT` times, even after re-decoding."""

    def __init__(self, unit: str, repeats: int, start_s: float, end_s: float):
        self.unit, self.repeats, self.start_s, self.end_s = unit, int(repeats), float(start_s), float(end_s)
        super().__init__(
            f"hallucination loop: the model repeated {unit!r} {repeats} times in a row in the audio from "
            f"{start_s:.1f} s to {end_s:.1f} s (more than {MAX_REPEAT} is a decoder loop, not speech); "
            "no transcript is returned"
        )


def cpu_service_model(model: str = "tiny.en", profile: str | os.PathLike | None = None) -> ServiceModel:
    """The size-estimate model for ``model`` on this CPU.

    ``profile`` (a ``asrsched.service_model/1`` JSON) wins; otherwise the packaged
    measured profile (:func:`asrsched.profiling.run.packaged_profile`) if there is one; otherwise
    the field-note figures for faster-whisper on 2 cores (tiny.en: 0.5 s per 30 s
    window, 10 ms per token; base: 0.9 s, 18 ms; kappa 3.5 text tokens/s for English).
    Only the *order* of estimates matters to SJF; HRRN also uses their scale.
    """
    if profile:
        return ServiceModel.from_json(profile)
    with contextlib.suppress(ImportError, ValueError, FileNotFoundError):
        from asrsched.profiling.run import packaged_profile

        return packaged_profile(model)
    enc, tok = (0.9, 0.018) if model == "base" else (0.5, 0.010)
    return ServiceModel(
        encode_s_per_window=enc,
        decode_s_per_token=tok,
        overhead_s=0.05,
        kappa={"en": 3.5, "es": 4.8, "de": 4.5, "id": 4.0},
        name=f"whisper-{model}/faster-whisper/cpu (assumed)",
        source="an estimate for faster-whisper on a 2-core CPU, beam 1 (no measurement)",
        assumptions="assumed until a measured profile is given (--profile)",
    )


_MODEL_CACHE: dict[tuple, Any] = {}
_MODEL_LOCK = threading.Lock()


class WhisperEngine:
    """faster-whisper (CTranslate2) on CPU, decoding as vLLM's transcription endpoint does.

    Greedy (beam 1), no timestamp tokens, no temperature fallback; long audio is cut at its
    quietest points into windows of at most 25 s, each decoded on its own (see the module
    docstring: the long-form path, loop detection). In each request the first token is
    generated by its own ``generate`` call (``max_length`` = prompt + 1) and the rest by a
    second call with that token forced as prefix, so the first token streams as soon as it
    exists (TTFT = features + encoder + one decode step, as in vLLM); the extra cost is one
    prompt prefill. ``num_workers`` requests can run at once from as many threads
    (CTranslate2 ``inter_threads``); the weights are loaded once per configuration and shared.
    """

    #: a window with at least this much speech (s, by level) ...
    MIN_SPEECH_S = 6.0
    #: ... that yields fewer words per second of speech than this is decoded again in halves
    MIN_WORDS_PER_S = 0.4

    def __init__(
        self,
        model: str = "tiny.en",
        *,
        compute_type: str = "int8",
        cpu_threads: int = 2,
        num_workers: int = 1,
        max_window_s: float = WINDOW_MAX_S,
    ):
        from asrsched.whisper.weights import MODELS, load_whisper

        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {model!r}")
        if not (5.0 <= float(max_window_s) <= 29.0):  # the last window may run 1 s longer; Whisper sees 30 s
            raise ValueError(f"max_window_s must be in [5, 29] seconds, got {max_window_s!r}")
        key = (model, compute_type, int(cpu_threads), int(num_workers))
        with _MODEL_LOCK:
            wm = _MODEL_CACHE.get(key)
            if wm is None:
                wm = load_whisper(
                    model, compute_type=compute_type, cpu_threads=int(cpu_threads), num_workers=int(num_workers)
                )
                _MODEL_CACHE[key] = wm
        self.model = model
        self.wm = wm
        self.max_window_s = float(max_window_s)
        self.multilingual = bool(wm.model.is_multilingual)
        self.eot = wm.hf_tokenizer.token_to_id("<|endoftext|>")
        self.languages = set(wm.supported_languages) if self.multilingual else {"en"}

    def plan(self, audio: np.ndarray) -> list[tuple[int, int]]:
        """The windows this engine decodes ``audio`` in: ``[(start, end), ...]`` sample indices."""
        return plan_windows(audio, TARGET_SR, max_s=self.max_window_s)

    def transcribe(
        self,
        audio: np.ndarray,
        language: str | None = None,
        *,
        on_delta: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        prompt: str | None = None,
        task: str = "transcribe",
        windows: list[tuple[int, int]] | None = None,
    ) -> dict:
        """Transcribe 16 kHz mono float32 ``audio``; ``on_delta(text)`` gets the text as it comes.

        ``prompt``: text that conditions every window (Whisper's ``initial_prompt``: names,
        spelling, style); ``task``: ``"transcribe"`` or ``"translate"`` (into English, multilingual
        models only); ``windows``: a plan from :meth:`plan` (computed when ``None``).

        Returns ``text, language, tokens`` (text tokens kept), ``decode_steps`` (every
        decoder step run, re-decodes included: tokens + one end-of-text step per call),
        ``windows`` (encoder runs), ``planned_windows``, ``redecoded`` (windows split and
        decoded again), ``max_repeat`` (longest back-to-back repetition kept), ``segments``
        (one per decoded window: ``id, seek, start, end, text, tokens``), ``features_s,
        encode_s, decode_s, first_token_s, total_s``. ``cancelled()`` is checked before every
        encoder and decoder call (:class:`Cancelled`); a loop that survives re-decoding raises
        :class:`HallucinationLoop`.
        """
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer

        if task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {task!r}")
        if task == "translate" and not self.multilingual:
            raise ValueError(
                f"model {self.model!r} is English-only and cannot translate; use a multilingual model such as base"
            )
        wm = self.wm
        check = cancelled or (lambda: False)
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        t0 = time.perf_counter()
        feats = wm.feature_extractor(audio)
        plan = list(windows) if windows is not None else self.plan(audio)
        level = frame_rms(audio, TARGET_SR // 50)
        speech_thr = max(1e-3, 0.1 * float(np.percentile(level, 95))) if len(level) else 1.0
        t_feat = time.perf_counter() - t0
        hop = wm.feature_extractor.hop_length
        lang = language if self.multilingual else "en"
        st = {"enc": 0.0, "dec": 0.0, "windows": 0, "steps": 0, "redecoded": 0, "first_at": math.nan}
        ctx: dict[str, Any] = {"tok": None, "prompt": None, "head": None, "head_text": ""}

        def encode(a: int, b: int):
            if check():
                raise Cancelled()
            seg = pad_or_trim(feats[:, a // hop : max(a // hop + 1, b // hop)])
            t = time.perf_counter()
            enc = wm.encode(seg)
            st["enc"] += time.perf_counter() - t
            st["windows"] += 1
            return enc

        def setup(enc) -> None:
            nonlocal lang
            if self.multilingual and not lang:
                lang = wm.model.detect_language(enc)[0][0][0][2:-2]
            tok = Tokenizer(wm.hf_tokenizer, self.multilingual, task=task, language=lang or "en")
            ptoks = tok.encode(" " + prompt.strip())[-(wm.max_length // 2 - 1) :] if prompt and prompt.strip() else []
            ctx["tok"], ctx["prompt"] = tok, wm.get_prompt(tok, ptoks, without_timestamps=True)

        def generate(enc, prefix: list[int]) -> list[int]:
            if check():
                raise Cancelled()
            t = time.perf_counter()
            res = wm.model.generate(
                enc,
                [ctx["prompt"] + prefix],
                beam_size=1,
                suppress_blank=not prefix,
                suppress_tokens=[-1],
                max_length=wm.max_length,
            )[0]
            st["dec"] += time.perf_counter() - t
            toks = [x for x in res.sequences_ids[0] if x < self.eot]  # includes a forced prefix
            st["steps"] += len(toks) - len(prefix) + 1
            return toks

        def decode_span(a: int, b: int, depth: int, enc=None) -> list[dict]:
            """Accepted pieces of audio ``[a, b)``: one, or the pieces of its halves after a re-decode."""
            enc = encode(a, b) if enc is None else enc
            forced = ctx["head"] if (a == 0 and ctx["head"]) else []
            toks = generate(enc, forced)
            text = ctx["tok"].decode(toks)
            reps_t, at_t, per_t = longest_repeat(toks)
            reps_w, unit = text_repeat(text)
            loop = max(reps_t, reps_w) > MAX_REPEAT
            speech_s = float(np.sum(level[a // (TARGET_SR // 50) : -(-b // (TARGET_SR // 50))] > speech_thr)) / 50.0
            short = not loop and speech_s >= self.MIN_SPEECH_S and len(text.split()) < self.MIN_WORDS_PER_S * speech_s
            if ((loop and depth < 2) or (short and depth < 1)) and b - a >= 4 * TARGET_SR:
                mid = _quiet_cut(level, a, b)
                st["redecoded"] += 1
                parts = decode_span(a, mid, depth + 1) + decode_span(mid, b, depth + 1)
                if loop:  # cured only if the halves, joined, no longer carry the loop even at half strength
                    if text_repeat(" ".join(p["text"] for p in parts))[0] <= MAX_REPEAT // 2:
                        return parts
                elif sum(len(p["text"].split()) for p in parts) > len(text.split()):
                    return parts
            if loop:
                raise HallucinationLoop(
                    unit if reps_w >= reps_t else ctx["tok"].decode(toks[at_t : at_t + per_t]).strip(),
                    max(reps_t, reps_w),
                    a / TARGET_SR,
                    b / TARGET_SR,
                )
            return [{"start": a, "end": b, "tokens": toks, "text": text, "repeat": max(reps_t, reps_w)}]

        pieces: list[dict] = []
        sent = ""
        head_pending = False  # the streamed first token still has to be matched against its window's text
        for i, (a, b) in enumerate(plan):
            enc = encode(a, b)
            if ctx["tok"] is None:
                setup(enc)
            if i == 0:  # the first token on its own, streamed at once
                if check():
                    raise Cancelled()
                t = time.perf_counter()
                head = wm.model.generate(
                    enc,
                    [ctx["prompt"]],
                    max_length=len(ctx["prompt"]) + 1,
                    beam_size=1,
                    suppress_blank=True,
                    suppress_tokens=[-1],
                )[0].sequences_ids[0]
                st["dec"] += time.perf_counter() - t
                st["first_at"] = time.perf_counter() - t0
                head = [x for x in head if x < self.eot]
                st["steps"] += len(head)
                if not head:  # end of text first: nothing in this window
                    st["steps"] += 1
                    pieces.append({"start": a, "end": b, "tokens": [], "text": "", "repeat": 0})
                    continue
                ctx["head"] = head
                first = ctx["tok"].decode(head).lstrip()
                if first:
                    if on_delta:
                        on_delta(first)
                    sent, head_pending = first, True
            for p in decode_span(a, b, 0, enc):
                delta = p["text"]
                if head_pending:
                    delta = delta.lstrip()[len(sent) :]
                    head_pending = False
                elif not sent:
                    delta = delta.lstrip()
                if delta:
                    if on_delta:
                        on_delta(delta)
                    sent += delta
                pieces.append(p)
        text = sent
        segments = [
            {
                "id": k,
                "seek": p["start"] // hop,
                "start": round(p["start"] / TARGET_SR, 3),
                "end": round(p["end"] / TARGET_SR, 3),
                "text": p["text"].strip(),
                "tokens": p["tokens"],
            }
            for k, p in enumerate(pieces)
            if p["tokens"]
        ]
        return {
            "text": text,
            "language": lang or "en",
            "tokens": sum(len(p["tokens"]) for p in pieces),
            "decode_steps": st["steps"],
            "windows": st["windows"],
            "planned_windows": len(plan),
            "redecoded": st["redecoded"],
            "max_repeat": max([p["repeat"] for p in pieces] or [0]),
            "segments": segments,
            "features_s": t_feat,
            "encode_s": st["enc"],
            "decode_s": st["dec"],
            "first_token_s": st["first_at"],
            "total_s": time.perf_counter() - t0,
        }


def _quiet_cut(level: np.ndarray, a: int, b: int) -> int:
    """The quietest 100 ms in the middle half of samples ``[a, b)`` (``level``: 20 ms RMS frames)."""
    frame = TARGET_SR // 50
    lo, hi = (a + (b - a) // 4) // frame, (b - (b - a) // 4) // frame
    if hi <= lo + 1:
        return (a + b) // 2
    seg = np.convolve(level[lo:hi], np.ones(5) / 5, mode="same")
    return int(min(max((lo + int(np.argmin(seg))) * frame + frame // 2, a + frame), b - frame))
