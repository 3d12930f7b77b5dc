"""kappa from real transcripts (asrsched.profiling.text_kappa): tokenizer, casing, statistics, the gap table."""

import numpy as np
import pandas as pd
import pytest
from extras import need

from asrsched.profiling.text_kappa import (
    GAP_STEPS,
    count_tokens,
    kappa_gap,
    load_transcripts,
    ols_fit,
    ratio_bootstrap,
    sentence_case,
    text_kappa,
    whisper_text,
)

need("tokenizers")


def test_known_sentences_tokenise_to_whisper_counts():
    # Whisper's multilingual (base) vocabulary; a leading space joins the first word's token
    assert count_tokens([" Hello world."]).tolist() == [3]
    # the same words upper case split into more pieces than sentence case
    up, sc = count_tokens(
        [
            whisper_text("HE BEGAN A CONFUSED COMPLAINT", "upper"),
            whisper_text("HE BEGAN A CONFUSED COMPLAINT", "sentence_case"),
        ]
    )
    assert sc == 6 and up > sc  # " He began a confused complaint." : five words and the period
    assert count_tokens([""]).tolist() == [0]


def test_sentence_case_and_pronoun_i():
    assert sentence_case("I THINK I'LL GO SAID IAN") == "I think I'll go said ian."
    assert sentence_case("WHAT IS IT") == "What is it."
    assert whisper_text("A  B", "sentence_case") == " A b."
    with pytest.raises(ValueError, match="style must be one of"):
        whisper_text("x", "title")


def test_ratio_of_sums_matches_independent_computation_and_ci_contains_it():
    rng = np.random.default_rng(3)
    sec = rng.uniform(1, 30, 400)
    tok = rng.poisson(3.4 * sec)
    spk = rng.integers(0, 20, 400)
    k, lo, hi = ratio_bootstrap(tok, sec, clusters=spk, n_boot=1000, seed=1)
    # independent: the weighted least-squares slope through the origin with weights 1/x is sum(y)/sum(x)
    w = 1 / sec
    assert k == pytest.approx(float((w * sec * tok).sum() / (w * sec * sec).sum()), rel=1e-12)
    assert lo < k < hi and hi - lo < 0.2
    assert lo < 3.4 < hi
    # a clustered bootstrap whose clusters differ in rate is wider than the row bootstrap
    tok2 = rng.poisson((2.5 + 0.1 * spk) * sec)
    _, l1, h1 = ratio_bootstrap(tok2, sec, n_boot=1000)
    _, l2, h2 = ratio_bootstrap(tok2, sec, clusters=spk, n_boot=1000)
    assert h2 - l2 > 1.5 * (h1 - l1)


def test_ratio_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="positive"):
        ratio_bootstrap([1, 2], [1, 0])
    with pytest.raises(ValueError, match="equal length"):
        ratio_bootstrap([1, 2, 3], [1, 2])


def test_ols_slope_and_intercept_against_polyfit():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 20, 200)
    y = 2.0 + 3.1 * x + rng.normal(0, 1, 200)
    f = ols_fit(x, y)
    b, a = np.polyfit(x, y, 1)
    assert f["slope"] == pytest.approx(b, rel=1e-9) and f["intercept"] == pytest.approx(a, rel=1e-9)
    assert abs(f["slope"] - 3.1) < 4 * f["slope_se"] and 0.0 < f["slope_se"] < 0.05


def test_text_kappa_on_the_real_corpora():
    tk = text_kappa(n_boot=300)
    t = tk.table.set_index("language")
    en = load_transcripts("en")
    assert int(t.loc["en", "n"]) == len(en) == 2620 and int(t.loc["en", "n_speakers"]) == 40
    assert int(t.loc["id", "n"]) == len(load_transcripts("id"))
    # ratio of sums, recomputed from the per-utterance counts
    r = tk.rows[tk.rows.language == "en"]
    assert t.loc["en", "kappa_text"] == pytest.approx(r.tokens.sum() / r.duration_s.sum(), rel=1e-12)
    for lang in ("en", "id"):
        assert t.loc[lang, "ci_low"] < t.loc[lang, "kappa_text"] < t.loc[lang, "ci_high"]
        assert t.loc[lang, "ci_low_utt"] < t.loc[lang, "kappa_text"] < t.loc[lang, "ci_high_utt"]
    # casing brackets: lower case has no more tokens than sentence case, upper case many more
    assert t.loc["en", "kappa_lower"] <= t.loc["en", "kappa_text"] < t.loc["en", "kappa_upper"]
    assert list(tk.csv_table().columns) == ["language", "kappa_text", "ci_low", "ci_high", "n"]


def test_kappa_gap_steps_telescope_to_the_profiled_kappa():
    tk = text_kappa(["en"], n_boot=100)
    ref = tk.rows.iloc[:6]
    meas = pd.DataFrame(
        {
            "utt_id": ref.utt_id,
            "language": "en",
            "ok": True,
            "silence": False,
            "audio_s": ref.duration_s * 0.9,
            "text": ref.text,
            "hypothesis": ref.whisper_text,
            "tokens_text": ref.tokens,
            "tokens_kept": ref.tokens + 4,
            "decode_steps": ref.tokens + 5,
        }
    )
    g = kappa_gap(meas, tk)
    assert list(g.step) == [s for s, _ in GAP_STEPS]
    k = g.set_index("step")["kappa"]
    a = meas.audio_s.sum()
    assert k["+ decoder steps"] == pytest.approx(meas.decode_steps.sum() / a)
    assert k["synthetic duration"] == pytest.approx(k["profiled clips, real duration"] / 0.9)
    assert g["change"].iloc[1:].sum() == pytest.approx(k.iloc[-1] - k.iloc[0])
    # the hypothesis (= the reference here) re-tokenises to the backend's text-token count
    assert g["retokenised_over_tokens_text"].iloc[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="missing column"):
        kappa_gap(meas.drop(columns=["hypothesis"]), tk)


def test_module_doctests_run():
    import doctest

    import asrsched.profiling.text_kappa as mod

    res = doctest.testmod(mod)
    assert res.failed == 0 and res.attempted >= 6
