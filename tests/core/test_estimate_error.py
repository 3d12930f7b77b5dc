"""The estimate-error model: presets, the two sides scaled apart, the loop tail, silence and VAD, the
first model's draws unchanged, bad input named; and the committed empirical body against a fresh fit
from the real transcripts (LibriSpeech test-clean, Common Voice) through the Whisper tokenizer."""

import json
import math

import numpy as np
import pytest
from extras import need

from asrsched.core.estimate_error import EstimateError, empirical_bodies, estimate_error
from asrsched.core.workloads import make_trace

RNG = np.random.default_rng


def test_presets_and_the_real_body():
    assert np.all(estimate_error("perfect").sample(RNG(0), 1000) == 1.0)
    m = estimate_error("real").sample(RNG(1), 200_000, "en")
    z = np.log(m)
    assert np.mean(m) == pytest.approx(1.0, abs=0.005)  # E[m] = 1: the mean work is kappa x duration
    body = empirical_bodies()["languages"]["en"]
    assert np.std(z) == pytest.approx(body["sd"], rel=0.03)
    assert np.mean(((z - z.mean()) / z.std()) ** 3) == pytest.approx(body["skewness"], abs=0.08)
    zi = np.log(estimate_error("real").sample(RNG(1), 200_000, "id"))
    assert np.std(zi) > np.std(z) + 0.05  # Common Voice Indonesian is noisier than read English
    assert np.log(estimate_error("real").sample(RNG(1), 50_000, "de")).std() == pytest.approx(np.std(z), rel=0.05)


def test_the_two_sides_scale_apart():
    base = estimate_error("real")
    z = np.log(base.sample(RNG(2), 100_000))
    zu = np.log(base.scaled(under=0.0).sample(RNG(2), 100_000))
    zo = np.log(base.scaled(over=0.0).sample(RNG(2), 100_000))
    # under = 0: no request needs more than its (re-centred) estimate; over = 0: none needs less
    assert np.isclose(zu, zu.max()).mean() > 0.49 and np.isclose(zo, zo.min()).mean() > 0.49
    assert np.std(zu) < np.std(z) and np.std(zo) < np.std(z)
    z2 = np.log(base.scaled(under=2.0).sample(RNG(2), 100_000))
    assert np.percentile(z2, 99) - np.median(z2) == pytest.approx(2 * (np.percentile(z, 99) - np.median(z)), rel=0.02)


def test_loop_tail_silence_and_vad():
    e = EstimateError(cv=0.0, loop_prob=0.05, loop_factor=(4.0, 8.0))
    m = e.sample(RNG(3), 100_000)
    hit = m > 1.5
    assert hit.mean() == pytest.approx(0.05, abs=0.004) and m[hit].min() >= 4.0 and m[hit].max() <= 8.0
    s = EstimateError(cv=0.0, silence_prob=0.3, silence_share=0.4)
    ms = s.sample(RNG(4), 100_000)
    assert set(np.round(np.unique(ms), 9)) == {0.6, 1.0} and (ms < 1).mean() == pytest.approx(0.3, abs=0.01)
    assert np.all(EstimateError(cv=0.0, silence_prob=0.3, silence_share=0.4, vad=True).sample(RNG(4), 1000) == 1.0)


def test_the_first_model_is_unchanged_and_specs_round_trip():
    a = make_trace("librispeech", rate=4.0, n=3000, seed=7, kappa=3.3)
    b = make_trace("librispeech", rate=4.0, n=3000, seed=7, kappa=3.3, estimate_error="lognormal")
    assert np.array_equal(a.tokens, b.tokens)
    c = make_trace("librispeech", rate=4.0, n=3000, seed=7, kappa=3.3, estimate_error="degraded")
    assert not np.array_equal(a.tokens, c.tokens) and c.meta["estimate_error"]["under"] == 2.0
    d = estimate_error("degraded")
    assert estimate_error(json.loads(json.dumps(d.spec()))) == d


@pytest.mark.parametrize(
    "spec, match",
    [
        ("optimistic", "estimate_error: unknown preset 'optimistic'"),
        ({"body": "empirical", "skew": 1}, r"estimate_error: unknown field\(s\) \['skew'\]"),
        ({"under": -1.0}, r"under: must lie in \[0, inf\)"),
        ({"loop_prob": 1.5}, r"loop_prob: must lie in \[0, 1\]"),
        ({"loop_factor": [5.0, 2.0]}, "loop_factor: need"),
        ({"silence_share": 1.0}, r"silence_share: must lie in \[0, 1\)"),
        ({"body": "gamma"}, "body: must be 'lognormal' or 'empirical'"),
    ],
)
def test_bad_input_is_named(spec, match):
    with pytest.raises(ValueError, match=match):
        estimate_error(spec)


def test_the_committed_body_is_the_fit_of_the_real_transcripts():
    need("tokenizers")
    from asrsched.profiling.error_fit import fit_bodies

    fresh = fit_bodies()
    stored = empirical_bodies()
    assert stored["probs"] == fresh["probs"]
    for lang in ("en", "id"):
        assert stored["languages"][lang]["n"] == fresh["languages"][lang]["n"]
        assert np.allclose(stored["languages"][lang]["quantiles"], fresh["languages"][lang]["quantiles"], atol=2e-6)
    en = stored["languages"]["en"]
    assert en["n"] == 2620 and 0.2 < en["sd"] < 0.26 and en["skewness"] < -0.4  # skewed: pauses over-state the size
    assert math.isfinite(stored["languages"]["id"]["sd"])
    from asrsched.profiling.error_fit import loop_tail_from_profiles

    tail = loop_tail_from_profiles()
    assert stored["loop_tail"] == tail and tail["clips"] >= 78
    lo, hi = tail["loop_prob_ci95"]
    assert lo <= tail["loops"] / tail["clips"] <= hi and lo <= estimate_error("degraded").loop_prob <= hi
