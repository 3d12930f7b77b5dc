"""A request trace as a load generator's plan: a real speech clip for every request.

:func:`plan_requests` gives each request of a trace (:func:`asrsched.core.workloads.make_trace`:
arrival process x duration source) a clip from the synthesised corpus
(:func:`asrsched.whisper.corpus.build_corpus`, espeak-ng reading LibriSpeech/Common Voice texts at their
real durations) whose duration is nearest the trace's (``audio="pool"``), or the trace row's own
utterance synthesised at its duration (``audio="exact"``). :func:`asrsched.serving.loadgen.run_load`
sends the plan.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pandas as pd

from asrsched.core.workloads import Trace

__all__ = ["AUDIO_MODES", "plan_requests"]

#: how a request gets its clip: the pool clip nearest its duration, or its own utterance synthesised
AUDIO_MODES = ("pool", "exact")


def _exact_clips(trace: Trace, cache: str | os.PathLike | None, progress: bool) -> pd.DataFrame:
    """Synthesise each trace row's own text at its duration (cached by text, duration and language)."""
    import soundfile as sf
    from tqdm.auto import tqdm

    from asrsched.whisper.audio import TARGET_SR
    from asrsched.whisper.corpus import LANGUAGES, corpus_dir, load_texts, synthesize_to_duration

    ex = trace.extra.reset_index(drop=True) if len(trace.extra) else pd.DataFrame(index=range(len(trace)))
    root = corpus_dir(cache) / "loadgen"
    root.mkdir(parents=True, exist_ok=True)
    pools: dict[str, pd.DataFrame] = {}
    rows = []
    for i in tqdm(range(len(trace)), desc="synthesising trace audio", disable=not progress, leave=False):
        lang = str(trace.language[i])
        if lang not in LANGUAGES:
            raise ValueError(f"trace language {lang!r} has no packaged texts; allowed values: {', '.join(LANGUAGES)}")
        d = float(trace.duration[i])
        text = str(ex["text"].iloc[i]) if "text" in ex and isinstance(ex["text"].iloc[i], str) else None
        utt = str(ex["utt_id"].iloc[i]) if "utt_id" in ex else None
        if not text:  # a duration without a text (uniform, mixtures): borrow the text nearest in length
            if lang not in pools:
                pools[lang] = load_texts(lang)
            p = pools[lang]
            j = int(np.argmin(np.abs(np.log(p["target_s"].to_numpy(float) / d))))
            text, utt = str(p["text"].iloc[j]), str(p["utt_id"].iloc[j])
        key = hashlib.sha1(repr((lang, text, round(d, 3))).encode()).hexdigest()[:16]
        path = root / lang / f"{key}.wav"
        if not path.exists():
            y, _ = synthesize_to_duration(text, lang, d)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}.wav")
            sf.write(tmp, y, TARGET_SR, subtype="PCM_16")
            tmp.replace(path)
        info = sf.info(str(path))
        rows.append({"path": str(path), "audio_s": info.frames / info.samplerate, "utt_id": utt, "text": text})
    return pd.DataFrame(rows)


def plan_requests(
    trace: Trace,
    *,
    audio: str = "pool",
    pool_size: int = 40,
    min_s: float = 1.0,
    max_s: float = 35.0,
    seed: int = 0,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per trace request: ``rid, scheduled, duration`` (of the clip sent), ``trace_duration,
    language, path, utt_id, ref_text``.

    ``audio="pool"``: ``pool_size`` clips per language spread over ``[min_s, max_s]``
    (stratified by duration, cached) and each request gets the clip nearest its
    duration on a log scale. ``audio="exact"``: each row's own utterance (LibriSpeech /
    Common Voice rows carry their text) synthesised at its duration, cached.
    """
    if audio not in AUDIO_MODES:
        raise ValueError(f"audio must be one of {', '.join(AUDIO_MODES)}; got {audio!r}")
    if int(pool_size) != pool_size or pool_size < 2:
        raise ValueError(f"pool_size must be an integer >= 2, got {pool_size!r}")
    if not isinstance(trace, Trace) or len(trace) == 0:
        raise ValueError("trace must be a non-empty asrsched.core.workloads.Trace")
    lang = np.asarray([str(x) for x in trace.language], dtype=object)
    dur = np.asarray(trace.duration, float)
    if audio == "exact":
        clips = _exact_clips(trace, cache, progress)
    else:
        from asrsched.whisper.corpus import build_corpus

        parts = {}
        for lg in pd.unique(lang):
            m = build_corpus(
                [lg],
                int(pool_size),
                seed=seed,
                sample="stratified",
                min_s=min_s,
                max_s=max_s,
                cache=cache,
                progress=progress,
            )
            parts[lg] = m.sort_values("audio_s").reset_index(drop=True)
        rows = []
        for d, lg in zip(dur, lang):
            p = parts[lg]
            j = int(np.argmin(np.abs(np.log(p["audio_s"].to_numpy(float) / d))))
            rows.append(
                {
                    "path": p["path"].iloc[j],
                    "audio_s": float(p["audio_s"].iloc[j]),
                    "utt_id": p["utt_id"].iloc[j],
                    "text": p["text"].iloc[j],
                }
            )
        clips = pd.DataFrame(rows)
    return pd.DataFrame(
        {
            "rid": np.arange(len(trace)),
            "scheduled": np.asarray(trace.arrival, float) - float(trace.arrival[0]),
            "duration": clips["audio_s"].to_numpy(float),
            "trace_duration": dur,
            "language": lang,
            "path": clips["path"].to_numpy(object),
            "utt_id": clips["utt_id"].to_numpy(object),
            "ref_text": clips["text"].to_numpy(object),
        }
    )
