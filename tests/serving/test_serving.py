"""Serving experiment helpers (calibration, comparison table, validation).

Notebook 04's run (real servers, the simulator's errors, the per-cell results) is checked on its dashboard run:
``tests/notebook_checks.py``.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from asrsched.core.service import ServiceModel
from asrsched.serving.experiment import (
    ServingCapacity,
    calibrate,
    capacity_rps,
    comparison_table,
    run_engine_experiment,
    simulate_run,
)
from asrsched.sim.capacity import Capacity


def _records(n=40, enc=0.4, step=0.012, kappa=4.0, seed=0):
    rng = np.random.default_rng(seed)
    d = rng.uniform(2, 34, n)
    tok = np.rint(kappa * d * rng.lognormal(0, 0.1, n))
    win = np.ceil(d / 30)
    service = enc * win + step * tok
    admit = np.cumsum(service) + np.arange(n)
    return pd.DataFrame(
        {
            "duration": d,
            "language": "en",
            "tokens": tok,
            "windows": win,
            "admit": admit,
            "finish": admit + service * rng.lognormal(0, 0.02, n),
            "arrival": admit,
        }
    )


def test_calibrate_recovers_the_service_model_that_made_the_records():
    rec = _records()
    sm = calibrate(rec.assign(client_e2el=rec.finish - rec.arrival + 0.03, server_e2el=rec.finish - rec.arrival))
    assert sm.encode_s_per_window == pytest.approx(0.4, rel=0.1)
    assert sm.decode_s_per_token == pytest.approx(0.012, rel=0.1)
    assert sm.kappa_for("en") == pytest.approx(4.0, rel=0.05)
    assert sm.overhead_s == pytest.approx(0.03, abs=1e-6)
    assert sm.fit["mape"] < 0.05 and sm.fit["n"] == len(rec)
    # 1 / mean service: a server twice as fast has twice the capacity
    cap = capacity_rps(sm, rec["duration"].to_numpy(), "en").rate
    faster = ServiceModel(encode_s_per_window=0.2, decode_s_per_token=0.006, overhead_s=sm.overhead_s, kappa=sm.kappa)
    assert capacity_rps(faster, rec["duration"].to_numpy(), "en", slots=1).rate == pytest.approx(2 * cap, rel=0.02)
    assert capacity_rps(sm, rec["duration"].to_numpy(), "en", slots=3).rate == pytest.approx(3 * cap)
    with pytest.raises(ValueError, match="at least 4"):
        calibrate(rec.head(3))
    # four requests, one of them a hallucination loop (10x the tokens): kappa comes from the other three
    four = rec.head(4).copy()
    four.loc[four.index[0], "tokens"] *= 10
    assert calibrate(four).kappa_for("en") == pytest.approx(4.0, rel=0.15)  # it raised "no language has enough"
    with pytest.raises(ValueError, match="tokens"):
        calibrate(rec.drop(columns="tokens"))


def test_model_capacity_is_a_capacity_of_slots_over_the_mean_estimate_and_names_an_unknown_language():
    sm = ServiceModel(
        encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.05, kappa={"en": 4.0, "es": 5.0}, name="hand"
    )
    d = np.array([5.0, 20.0, 40.0])  # 1, 1 and 2 windows
    by_hand = np.array([0.5 + 4.0 * 5 * 0.01, 0.5 + 5.0 * 20 * 0.01, 1.0 + 4.0 * 40 * 0.01]) + 0.05
    cap = capacity_rps(sm, d, ["en", "es", "en"], slots=2, workload="hand-made")
    assert isinstance(cap, Capacity) and cap.rate == pytest.approx(2 / by_hand.mean(), rel=1e-12)
    assert (cap.workload, cap.max_num_seqs, cap.n_requests, cap.service) == ("hand-made", 2, 3, "hand")
    assert cap.analytic == cap.rate and np.isnan(cap.ci_low) and cap.per_seed == ()
    assert cap.rho(cap.rate_at(0.9)) == pytest.approx(0.9)
    # the same vocabulary round-trips, and an older study's saturation dict reads as one too
    assert ServingCapacity.from_dict(cap.to_dict()) == cap
    old = ServingCapacity.from_dict(
        {"rate_rps": 1.25, "n": 40, "completed": 40, "method": "completions 4..36 of 40", "mean_duration_s": 7.9}
    )
    assert (old.rate, old.n_requests, old.completed, old.rho(1.0)) == (1.25, 40, 40, 0.8)
    # a language the model has no kappa for is an error naming it, not another language's kappa
    with pytest.raises(ValueError, match=r"no kappa for language 'de'; known: en, es"):
        capacity_rps(sm, d, "de")


def test_comparison_table_is_simulated_minus_real_in_percent_of_real():
    real = pd.DataFrame(
        {
            "rho": 1.0,
            "rate": 2.0,
            "policy": "sjf",
            "arrival": [0.0, 1.0, 2.0, 3.0],
            "duration": 5.0,
            "first_token": [1.0, 2.0, 3.0, 4.0],
            "finish": [2.0, 3.5, 5.0, np.nan],
        }
    )
    sim = real.assign(finish=[3.0, 4.5, 6.0, 6.5], mode="sim")
    t = comparison_table(real, sim)
    assert len(t) == 1 and t["completed"].iloc[0] == 3 and t["failed"].iloc[0] == 1
    real_p50 = 1e3 * np.median([2.0, 2.5, 3.0])
    sim_p50 = 1e3 * np.median([3.0, 3.5, 4.0, 3.5])
    assert t["p50_e2el_ms"].iloc[0] == pytest.approx(real_p50)
    assert t["sim_p50_e2el_ms_err_pct"].iloc[0] == pytest.approx(100 * (sim_p50 / real_p50 - 1))
    assert t["sim_p50_ttft_ms_err_pct"].iloc[0] == pytest.approx(0.0)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(policies=["fcfs", "sjff"]), "sjff"),
        (dict(rhos=[0.5, -1]), "rhos"),
        (dict(rhos=[], rates=[0]), "rates"),
        (dict(n_requests=1), "n_requests"),
        (dict(n_probe=2), "n_probe"),
    ],
)
def test_run_experiment_rejects_bad_parameters_before_any_work(kw, msg):
    t = time.monotonic()
    with pytest.raises(ValueError, match=msg):
        run_engine_experiment(**kw, progress=False)
    assert time.monotonic() - t < 2


# ----------------------------------------------------------------------------- one size estimate on every path


class _Recorded(ServiceModel):
    """A service model whose size estimate is not the base formula (and that records how it was asked)."""

    calls: list

    def est_service(self, duration_s, language="en", *, windows=None, max_tokens=None, fallback=None):
        self.calls.append((float(duration_s), language, windows, max_tokens, fallback))
        return (
            2.0 * super().est_service(duration_s, language, windows=windows, max_tokens=max_tokens, fallback=fallback)
            + 0.125
        )


def _server_estimate(srv, duration, language):
    req = srv.make_request(
        b"", duration, language=language, sched_s=0.0, model="tiny.en", response_format="json", stream=False
    )
    return req.job.est_service


def test_a_service_model_that_overrides_est_service_sizes_the_cpu_server_and_the_vllm_plugin_alike():
    from asrsched.serving.config import ServerConfig
    from asrsched.serving.policy_server import PolicyServer
    from asrsched.vllm_plugin.scheduler import SizeEstimator

    sm = _Recorded(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.05, kappa={"en": 4.0, "es": 5.0})
    object.__setattr__(sm, "calls", [])
    srv = PolicyServer(ServerConfig(policy="sjf"), service=sm)
    plugin = SizeEstimator(sm, default_language="en")
    for d, lang, by_hand in (
        (12.0, "es", 0.5 + 5.0 * 12 * 0.01 + 0.05),
        (3.0, "en", 0.5 + 4.0 * 3 * 0.01 + 0.05),
        # a language without a kappa: both size it in the default language's kappa
        (3.0, "fr", 0.5 + 4.0 * 3 * 0.01 + 0.05),
    ):
        expect = 2.0 * by_hand + 0.125  # the override's estimate, not the base formula's
        got_server = _server_estimate(srv, d, lang)
        got_plugin = plugin.estimate_from({"audio_duration_s": d, "language": lang}, 448)[0]
        assert got_server == got_plugin == pytest.approx(expect, rel=1e-12), (d, lang)
    assert len(sm.calls) == 6  # every estimate went through the override: three per path
    # the CPU server's own window count reaches the estimate (long audio planned by the engine)
    assert srv.make_request(
        b"",
        40.0,
        language="en",
        sched_s=0.0,
        model="tiny.en",
        response_format="json",
        stream=False,
        windows=[(0, 1), (1, 2), (2, 3)],
    ).job.est_service == pytest.approx(2.0 * (3 * 0.5 + 4.0 * 40 * 0.01 + 0.05) + 0.125, rel=1e-12)
    assert sm.calls[-1][2] == 3


def test_cpu_server_default_language_must_be_a_language_of_its_size_estimate_model():
    from asrsched.serving.config import ServerConfig
    from asrsched.serving.policy_server import PolicyServer

    sm = ServiceModel(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.05, kappa={"id": 4.0}, name="id")
    with pytest.raises(ValueError, match=r"default_language 'en' .*'id'; allowed values: id$"):
        PolicyServer(ServerConfig(policy="sjf"), service=sm)
    srv = PolicyServer(ServerConfig(policy="sjf", default_language="id"), service=sm)
    # no language (a multilingual engine detects it later) or one without a kappa: the default language's kappa
    assert (
        _server_estimate(srv, 10.0, None)
        == _server_estimate(srv, 10.0, "de")
        == pytest.approx(0.5 + 4.0 * 10 * 0.01 + 0.05, rel=1e-12)
    )


def test_replaying_a_run_in_a_language_the_model_lacks_is_an_error_unless_a_fallback_is_named():
    from asrsched.serving.comparison import records_to_trace

    sm = ServiceModel(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.05, kappa={"en": 4.0, "es": 5.0})
    rec = pd.DataFrame(
        {"rid": [0, 1, 2], "arrival": [0.0, 1.0, 2.0], "duration": [10.0, 20.0, 30.0], "language": ["es", "id", "en"]}
    )
    with pytest.raises(ValueError, match=r"no kappa for language 'id'; known: en, es"):
        records_to_trace(rec, sm)
    with pytest.raises(ValueError, match="no kappa for language 'id'"):  # the replay that calls it says the same
        simulate_run(rec, "fcfs", sm)
    tr = records_to_trace(rec, sm, fallback="en")  # opted in: the English kappa stands in for Indonesian
    assert tr.tokens.tolist() == [50, 80, 120]


@pytest.mark.parametrize("decode_s_per_token", [0.0, 0.02])
def test_a_replay_serves_each_request_for_its_measured_time_even_when_no_decode_cost_was_fitted(decode_s_per_token):
    """Requests far apart (no queueing) on one slot: the replay's service time is the measured one, to half a
    decoder step, whether the calibration fitted a decode cost or not (a busy machine can fit 0)."""
    from asrsched.serving.comparison import REPLAY_STEP_S, replay_model

    sm = ServiceModel(
        encode_s_per_window=0.3, decode_s_per_token=decode_s_per_token, overhead_s=0.05, kappa={"en": 4.0}
    )
    rm = replay_model(sm)
    assert rm.decode_s_per_token == (decode_s_per_token or REPLAY_STEP_S) and rm.encode_s_per_window == 0.3
    assert replay_model(rm) is rm
    service = np.array([0.9, 2.345, 0.5, 4.01])
    rec = pd.DataFrame(
        {
            "rid": np.arange(4),
            "arrival": 100.0 * np.arange(4),
            "duration": [5.0, 12.0, 2.0, 25.0],
            "language": "en",
            "service_s": service,
        }
    )
    out = simulate_run(rec, "fcfs", rm, slots=1, tokens="service").sort_values("rid")
    np.testing.assert_allclose(out["e2el"] - sm.overhead_s, service, atol=rm.decode_s_per_token / 2 + 1e-9)
    if decode_s_per_token == 0:  # the fitted model itself cannot count time in decoder steps
        with pytest.raises(ValueError, match="decode_s_per_token > 0"):
            simulate_run(rec, "fcfs", sm, slots=1, tokens="service")
