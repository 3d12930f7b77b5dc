"""Workloads: the real LibriSpeech distribution, the uniform split, mixtures, drift, arrivals, traces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from asrsched.core.workloads import (
    Drift,
    Mixture,
    Trace,
    Uniform,
    bursty,
    commonvoice_id_table,
    cyclic,
    librispeech_table,
    make_arrivals,
    make_source,
    make_trace,
    poisson,
    true_tokens,
    workload_names,
)
from asrsched.sim.engine import trace_chunks

# ----------------------------------------------------------------------------- duration sources


def test_packaged_librispeech_table_is_test_clean():
    t = librispeech_table()
    assert len(t) == 2620 and t["utt_id"].is_unique
    d = t["duration_s"]
    assert round(d.mean(), 3) == 7.425
    assert round(d.median(), 2) == 5.79
    assert 1.2 < d.min() < 1.4 and 34.9 < d.max() < 35.0
    assert round(d.sum() / 3600, 2) == 5.40  # 5.4 h of audio, as published
    assert t["text"].str.len().gt(0).all()


def test_librispeech_source_reproduces_the_distribution():
    rows = make_source("librispeech").sample_rows(np.random.default_rng(0), 200_000)
    d = rows["duration"].to_numpy()
    table = librispeech_table()
    assert set(np.unique(d)) <= set(table["duration_s"])
    se = table["duration_s"].std() / math.sqrt(len(d))
    assert abs(d.mean() - 7.425) < 4 * se
    assert abs(np.median(d) - 5.79) < 0.05
    # the transcripts travel with their durations
    joined = rows.merge(table, on="utt_id")
    np.testing.assert_array_equal(joined["duration"], joined["duration_s"])
    assert (rows["language"] == "en").all()
    # chi-square over deciles of the table
    edges = np.quantile(table["duration_s"], np.linspace(0, 1, 11))
    expect = np.histogram(table["duration_s"], edges)[0] / len(table) * len(d)
    got = np.histogram(d, edges)[0]
    assert stats.chisquare(got, expect).pvalue > 1e-3


def test_uniform_split_is_uniform_on_5_30():
    d = make_source("uniform").sample(np.random.default_rng(1), 100_000)
    assert d.min() >= 5.0 and d.max() <= 30.0
    assert stats.kstest(d, stats.uniform(loc=5, scale=25).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match="lo"):
        Uniform(10, 5)


def test_commonvoice_indonesian_source():
    t = commonvoice_id_table()
    rows = make_source("commonvoice_id").sample_rows(np.random.default_rng(2), 1000)
    assert (rows["language"] == "id").all()
    assert rows["duration"].between(t["duration_s"].min(), t["duration_s"].max()).all()


def test_mixture_weights_and_mean():
    mix = make_source("mix")
    d = mix.sample(np.random.default_rng(3), 200_000)
    assert mix.mean() == pytest.approx((7.4246 + 17.5) / 2, abs=1e-3)
    assert d.mean() == pytest.approx(mix.mean(), rel=0.01)
    # share above 5 s: LibriSpeech share / 2 + 1/2
    ls_above = (librispeech_table()["duration_s"] > 5).mean()
    assert (d > 5).mean() == pytest.approx(0.5 * ls_above + 0.5, abs=0.01)
    m = Mixture([Uniform(1, 2), Uniform(10, 11)], [3, 1])
    d = m.sample(np.random.default_rng(4), 40_000)
    assert (d < 5).mean() == pytest.approx(0.75, abs=0.01)
    with pytest.raises(ValueError, match="weights"):
        Mixture([Uniform(1, 2)], [0])
    with pytest.raises(ValueError, match="weights"):
        Mixture([Uniform(1, 2), Uniform(2, 3)], [1.0])


# ----------------------------------------------------------------------------- drift


def _two_phase(ramp_s: float, end_s=None) -> Drift:
    return Drift(
        [(0.0, Uniform(1, 2, name="short")), (100.0, Uniform(20, 21, name="long"))], ramp_s=ramp_s, end_s=end_s
    )


def test_drift_abrupt_switch():
    d = _two_phase(0.0)
    assert d.weights_at(0.0) == (1.0, 0.0)
    assert d.weights_at(99.999) == (1.0, 0.0)
    assert d.weights_at(100.0) == (0.0, 1.0)
    assert d.weights_at(1e6) == (0.0, 1.0)


def test_drift_gradual_ramp():
    d = _two_phase(40.0)
    for t, w_long in [(50, 0.0), (100, 0.0), (110, 0.25), (120, 0.5), (130, 0.75), (140, 1.0), (500, 1.0)]:
        assert d.weights_at(t) == pytest.approx((1 - w_long, w_long), abs=1e-12)


def test_drift_trace_follows_the_schedule():
    d = _two_phase(40.0)
    tr = make_trace(d, rate=50.0, horizon_s=200.0, seed=5)
    df = tr.to_frame()
    assert tr.arrival.max() <= 200.0
    long = df["duration"] > 10
    assert (df["phase"] == long.astype(int)).all()  # phase label matches the source drawn
    for lo, hi in [(0, 100), (100, 110), (110, 130), (130, 140), (140, 200)]:
        sel = df[(df["arrival"] >= lo) & (df["arrival"] < hi)]
        # expected share of the long source = mean ramp weight over the window
        grid = np.linspace(lo, hi, 2001)
        share = np.mean([d.weights_at(t)[1] for t in grid])
        sd = math.sqrt(max(share * (1 - share), 1e-9) / len(sel))
        assert abs(long[sel.index].mean() - share) <= 4 * sd + 1e-9, (lo, hi)


def test_named_drift_workload_is_librispeech_then_uniform():
    tr = make_trace("drift", rate=20.0, horizon_s=300.0, seed=6)
    df = tr.to_frame()
    early = df[df["arrival"] < 120]
    late = df[df["arrival"] > 180]
    assert (early["phase"] == 0).all() and (late["phase"] == 1).all()
    assert late["duration"].between(5, 30).all()
    assert early["utt_id"].notna().all()


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.floats(1.0, 100.0), min_size=1, max_size=4),
    ramp=st.floats(0.0, 150.0),
    t=st.floats(0.0, 600.0),
)
def test_drift_weights_are_a_distribution_and_gradual_drift_is_continuous(gaps, ramp, t):
    starts = np.concatenate([[0.0], np.cumsum(gaps)])
    phases = [(float(s), Uniform(1, 2)) for s in starts]
    inner = np.diff(starts)[1:]
    if len(inner) and ramp > inner.min() * (1 + 1e-9):
        # a ramp still running when the next phase starts would make the mix jump there: must be refused
        with pytest.raises(ValueError, match="ramp_s"):
            Drift(phases, ramp_s=ramp)
        return
    d = Drift(phases, ramp_s=ramp)
    w = np.asarray(d.weights_at(t))
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    if ramp > 0:
        eps = 1e-6
        assert np.abs(np.asarray(d.weights_at(t + eps)) - w).max() <= 2 * eps / ramp + 1e-9


def test_drift_schedule_must_cover_the_run():
    d = _two_phase(0.0, end_s=150.0)
    with pytest.raises(ValueError, match="drift schedule ends at 150 s"):
        make_trace(d, rate=10.0, horizon_s=300.0, seed=0)
    assert len(make_trace(d, rate=10.0, horizon_s=140.0, seed=0)) > 0
    with pytest.raises(ValueError, match="start at t=0"):
        Drift([(5.0, Uniform())])
    with pytest.raises(ValueError, match="increase"):
        Drift([(0.0, Uniform()), (50.0, Uniform()), (50.0, Uniform())])
    with pytest.raises(ValueError, match="ramp_s"):
        Drift([(0.0, Uniform())], ramp_s=-1)


# ----------------------------------------------------------------------------- arrivals


def test_poisson_interarrivals_are_exponential():
    a = poisson(np.random.default_rng(7), 4.0, 100_000)
    gaps = np.diff(np.concatenate([[0.0], a]))
    assert stats.kstest(gaps, stats.expon(scale=0.25).cdf).pvalue > 1e-3


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_bursty_gamma_cv_is_one_over_sqrt_burstiness(burstiness):
    rate, n = 5.0, 200_000
    a = bursty(np.random.default_rng(8), rate, n, burstiness=burstiness)
    gaps = np.diff(np.concatenate([[0.0], a]))
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.03)
    assert stats.kstest(gaps, stats.gamma(a=burstiness, scale=1 / (rate * burstiness)).cdf).pvalue > 1e-3


def test_cyclic_rate_modulation_is_visible():
    rate, amp, period = 10.0, 0.6, 60.0
    a = cyclic(np.random.default_rng(9), rate, 300_000, amplitude=amp, period_s=period)
    assert np.all(np.diff(a) >= 0)
    cycles = a[-1] / period
    assert len(a) / a[-1] == pytest.approx(rate, rel=0.01)
    # arrivals per phase bin vs the integral of rate(t) over the bin
    bins = 12
    phase = (a % period) / period
    got = np.bincount((phase * bins).astype(int), minlength=bins)[:bins]
    edges = np.linspace(0, period, bins + 1)
    integral = rate * (np.diff(edges) - amp * period / (2 * np.pi) * np.diff(np.cos(2 * np.pi * edges / period)))
    expect = integral * math.floor(cycles) + 0  # partial last cycle adds a little; compare shares instead
    np.testing.assert_allclose(got / got.sum(), expect / expect.sum(), atol=0.003)
    # peak quarter clearly busier than trough quarter: ratio (1 + 2a/pi)... computed from the integral
    assert got[: bins // 2].sum() / got[bins // 2 :].sum() == pytest.approx(
        integral[: bins // 2].sum() / integral[bins // 2 :].sum(), rel=0.02
    )


@pytest.mark.parametrize("fn", [poisson, bursty, cyclic])
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_rate_must_be_positive(fn, bad):
    with pytest.raises(ValueError, match="rate must be a positive number"):
        fn(np.random.default_rng(0), bad, 10)
    with pytest.raises(ValueError, match="rate must be a positive number"):
        make_trace("uniform", rate=bad, n=10)


def test_bad_arrival_parameters():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="burstiness"):
        bursty(rng, 1.0, 10, burstiness=0)
    with pytest.raises(ValueError, match="amplitude"):
        cyclic(rng, 1.0, 10, amplitude=1.0)
    with pytest.raises(ValueError, match="period_s"):
        cyclic(rng, 1.0, 10, period_s=0)
    with pytest.raises(ValueError, match="allowed values: poisson, bursty, cyclic"):
        make_arrivals("weibull", rng, 1.0, 10)


# ----------------------------------------------------------------------------- traces


def test_unknown_workload_names_allowed_values():
    with pytest.raises(ValueError) as e:
        make_trace("librispeech-other", rate=1.0, n=10)
    msg = str(e.value)
    assert "workload" in msg and "'librispeech-other'" in msg
    for name in workload_names():
        assert name in msg
    assert {"librispeech", "uniform", "mix", "drift", "commonvoice_id"} <= set(workload_names())


@pytest.mark.parametrize("kappa", [0, -3.3, {"en": 0.0}, {"en": -1.0}])
def test_kappa_must_be_positive(kappa):
    with pytest.raises(ValueError, match="kappa must be"):
        make_trace("uniform", rate=1.0, n=10, kappa=kappa)


def test_kappa_per_language_must_cover_the_trace():
    with pytest.raises(ValueError, match="no kappa for language 'en'"):
        make_trace("uniform", rate=1.0, n=10, kappa={"id": 4.0})


def test_trace_needs_a_size():
    with pytest.raises(ValueError, match="n .*or horizon_s"):
        make_trace("uniform", rate=1.0)
    with pytest.raises(ValueError, match="n must be a positive"):
        make_trace("uniform", rate=1.0, n=0)


def test_same_seed_same_trace_and_seeds_differ():
    kw = dict(rate=3.0, n=2000, arrival="bursty", arrival_kw={"burstiness": 0.5})
    a, b, c = (make_trace("mix", seed=s, **kw) for s in (1, 1, 2))
    pd.testing.assert_frame_equal(a.to_frame(), b.to_frame())
    assert not np.array_equal(a.arrival, c.arrival)
    assert a.meta["seed"] == 1 and a.meta["workload"] == "mix"
    h1, h2 = (make_trace("uniform", rate=4.0, horizon_s=500.0, seed=3) for _ in range(2))
    np.testing.assert_array_equal(h1.arrival, h2.arrival)
    assert h1.arrival.max() <= 500.0
    # horizon mode: the count is Poisson(rate x horizon)
    assert abs(len(h1) - 2000) < 4 * math.sqrt(2000)


def test_true_tokens_are_kappa_times_duration_with_the_requested_noise():
    rng = np.random.default_rng(10)
    d = rng.uniform(5, 30, 100_000)
    exact = true_tokens(rng, d, 3.3, noise_cv=0.0)
    np.testing.assert_array_equal(exact, np.maximum(1, np.rint(3.3 * d)))
    noisy = true_tokens(rng, d, 3.3, noise_cv=0.15)
    ratio = noisy / (3.3 * d)
    assert ratio.mean() == pytest.approx(1.0, abs=0.005)
    assert ratio.std() == pytest.approx(0.15, rel=0.05)
    assert true_tokens(rng, np.array([0.01]), 3.3, 0.0)[0] == 1


def test_trace_frame_round_trip_and_validation():
    tr = make_trace("librispeech", rate=2.0, n=50, seed=1)
    back = Trace.from_frame(tr.to_frame())
    np.testing.assert_array_equal(back.arrival, tr.arrival)
    np.testing.assert_array_equal(back.tokens, tr.tokens)
    assert list(back.extra["utt_id"]) == list(tr.extra["utt_id"])
    assert tr.rate == pytest.approx(2.0, rel=0.5)
    with pytest.raises(ValueError, match="missing column"):
        Trace.from_frame(tr.to_frame().drop(columns="tokens"))
    with pytest.raises(ValueError, match="non-decreasing"):
        Trace(np.array([1.0, 0.5]), np.ones(2), np.array(["en", "en"]), np.ones(2, int))
    with pytest.raises(ValueError, match="tokens"):
        Trace(np.array([0.5, 1.0]), np.ones(2), np.array(["en", "en"]), np.ones(3, int))


def test_trace_chunks_continue_in_time_and_reproduce():
    a = list(trace_chunks("uniform", rate=5.0, n=2500, chunk=1000, seed=4))
    b = list(trace_chunks("uniform", rate=5.0, n=2500, chunk=1000, seed=4))
    assert [len(c) for c in a] == [1000, 1000, 500]
    arr = np.concatenate([c.arrival for c in a])
    assert np.all(np.diff(arr) >= 0)
    np.testing.assert_array_equal(arr, np.concatenate([c.arrival for c in b]))
    assert len(arr) / arr[-1] == pytest.approx(5.0, rel=0.1)
    assert not np.array_equal(a[0].duration, a[1].duration)  # chunks use different seeds
