"""The vLLM waiting-queue adapter without an engine (fast; the real-engine tests are in test_vllm_engine.py).

Requests here are stand-ins with the attributes vLLM's ``Request`` exposes to a
queue (``request_id``, ``arrival_time``, ``sampling_params.extra_args`` /
``max_tokens``, ``status``); the same adapter is exercised against a real vLLM
engine in ``tests/vllm_plugin/test_vllm_engine.py``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrsched.core.policies import policy_names
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.vllm_plugin.scheduler import ENV_VARS, PluginConfig, PolicyRequestQueue, SizeEstimator


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def req(rid, arrival, duration=None, *, max_tokens=200, language=None, status="WAITING", **xa):
    extra = dict(xa)
    if duration is not None:
        extra["audio_duration_s"] = duration
    if language is not None:
        extra["language"] = language
    sp = SimpleNamespace(extra_args=extra or None, max_tokens=max_tokens)
    return SimpleNamespace(
        request_id=rid, arrival_time=arrival, sampling_params=sp, status=SimpleNamespace(name=status)
    )


def drain(q):
    out = []
    while q:
        p = q.peek_request()
        r = q.pop_request()
        assert r is p
        out.append(r.request_id)
    return out


# ----------------------------------------------------------------------------- orders


def test_fcfs_sjf_ljf_orders():
    durs = {"a": 12.0, "b": 3.0, "c": 25.0, "d": 7.0}
    for policy, expect in [
        ("fcfs", ["a", "b", "c", "d"]),
        ("sjf", ["b", "d", "a", "c"]),
        ("ljf", ["c", "a", "d", "b"]),
    ]:
        clock = Clock()
        q = PolicyRequestQueue(policy, clock=clock)
        for i, (rid, d) in enumerate(durs.items()):
            q.add_request(req(rid, 900.0 + i, d))
        assert len(q) == 4
        assert drain(q) == expect, policy


def test_hrrn_ages_a_long_request_past_short_ones():
    est = SizeEstimator()
    s_long = est.estimate_from({"audio_duration_s": 28.0}, 200)[0]
    s_short = est.estimate_from({"audio_duration_s": 2.0}, 200)[0]
    assert s_long > 3 * s_short
    clock = Clock(1000.0)
    q = PolicyRequestQueue("hrrn", clock=clock)
    long_ = req("long", 1000.0 - 10 * s_long, 28.0)  # ratio 11
    short = req("short", 1000.0 - 5 * s_short, 2.0)  # ratio 6
    q.add_request(short)
    q.add_request(long_)
    assert q.peek_request() is long_
    # SJF on the same requests admits the short one
    q2 = PolicyRequestQueue("sjf", clock=clock)
    q2.add_request(req("long", long_.arrival_time, 28.0))
    q2.add_request(req("short", short.arrival_time, 2.0))
    assert q2.peek_request().request_id == "short"


def test_hrrn_reranks_as_time_passes_and_pop_returns_the_peeked_request():
    est = SizeEstimator()
    s_long = est.estimate_from({"audio_duration_s": 30.0}, 200)[0]
    s_short = est.estimate_from({"audio_duration_s": 1.0}, 200)[0]
    clock = Clock(100.0)
    q = PolicyRequestQueue("hrrn", clock=clock)
    long_ = req("long", 0.0, 30.0)  # waited 100 s
    short = req("short", 99.0, 1.0)  # waited 1 s
    q.add_request(long_)
    q.add_request(short)
    r_long = 1 + 100 / s_long
    r_short = 1 + 1 / s_short
    first = long_ if r_long > r_short else short
    assert q.peek_request() is first
    # the clock moves on far enough to flip the ranking; the pending peek still binds the pop
    clock.t = 100.0 + 5000.0
    later_long = 1 + 5100 / s_long
    later_short = 1 + 5001 / s_short
    assert (later_long > later_short) != (first is long_)
    assert q.pop_request() is first
    q.add_request(first)
    # a fresh decision at the new time re-ranks
    assert q.peek_request() is (long_ if later_long > later_short else short)


def test_frozen_clock_within_a_step():
    clock = Clock(50.0)
    q = PolicyRequestQueue("hrrn", clock=clock)
    a, b = req("a", 0.0, 20.0), req("b", 45.0, 1.0)
    q.add_request(a)
    q.add_request(b)
    now = q.begin_step()
    assert now == 50.0
    first = q.peek_request()
    clock.t = 1e6  # ignored until end_step
    q.pop_request()
    q.add_request(first)
    assert q.peek_request() is first
    q.end_step()
    assert q._now() == 1e6


# ----------------------------------------------------------------------------- size estimate and fallbacks


def test_estimate_rules():
    sm = default_service_model()
    est = SizeEstimator(sm, default_language="en", unknown_duration_s=30.0)
    e10, info = est.estimate_from({"audio_duration_s": 10.0}, 448)
    assert info["source"] == "duration" and e10 == pytest.approx(sm.service_time(10.0, "en"))
    # language picks kappa; an unknown language falls back to the default one
    e_es, info = est.estimate_from({"audio_duration_s": 10.0, "language": "es"}, 448)
    assert info["language"] == "es" and e_es == pytest.approx(sm.service_time(10.0, "es")) and e_es > e10
    e_xx, info = est.estimate_from({"audio_duration_s": 10.0, "language": "xx"}, 448)
    assert info["language"] == "en" and e_xx == pytest.approx(e10)
    # speech duration (VAD) wins over file duration; a client estimate wins over both
    e_sp, info = est.estimate_from({"audio_duration_s": 10.0, "speech_duration_s": 4.0}, 448)
    assert info["source"] == "speech" and e_sp == pytest.approx(sm.service_time(4.0, "en"))
    e_cl, info = est.estimate_from({"audio_duration_s": 10.0, "est_service_s": 0.123}, 448)
    assert info["source"] == "client" and e_cl == 0.123
    # a chunk of long audio: sized by the whole upload (the default upload_sizing), or by one 30 s window
    e_long, info = est.estimate_from({"audio_duration_s": 95.0}, 448)
    assert e_long == pytest.approx(sm.service_time(95.0, "en")) and info["sizing"] == "upload"
    by_chunk = SizeEstimator(sm, upload_sizing="chunk").estimate_from({"audio_duration_s": 95.0}, 448)[0]
    assert by_chunk == pytest.approx(sm.service_time(30.0, "en"))
    # max_tokens caps the token estimate
    e_cap, _ = est.estimate_from({"audio_duration_s": 10.0}, 5)
    assert e_cap == pytest.approx(sm.service_time(10.0, "en", tokens=5))


def test_fallbacks_language_detection_first_unknown_last_under_sjf(caplog):
    est = SizeEstimator()
    e_det, i_det = est.estimate_from(None, 1)
    e_unk, i_unk = est.estimate_from(None, 448)
    e_bad, i_bad = est.estimate_from({"audio_duration_s": "soon"}, 448)
    e_neg, i_neg = est.estimate_from({"audio_duration_s": -3}, 448)
    assert i_det["source"] == "lang_detect" and i_unk["source"] == "unknown"
    assert i_bad["source"] == "invalid" and i_neg["source"] == "invalid"
    assert e_unk == pytest.approx(est.estimate_from({"audio_duration_s": 30.0}, 448)[0]) == e_bad == e_neg
    e_short = est.estimate_from({"audio_duration_s": 1.0}, 448)[0]
    assert e_det < e_short < e_unk

    clock = Clock()
    q = PolicyRequestQueue("sjf", clock=clock)
    q.add_request(req("unknown", 1.0))
    q.add_request(req("d5", 2.0, 5.0))
    q.add_request(req("detect", 3.0, max_tokens=1))
    q.add_request(req("d20", 4.0, 20.0))
    assert drain(q) == ["detect", "d5", "d20", "unknown"]
    # under FCFS the estimate plays no part
    q = PolicyRequestQueue("fcfs", clock=clock)
    for r in [req("unknown", 1.0), req("d5", 2.0, 5.0), req("detect", 3.0, max_tokens=1)]:
        q.add_request(r)
    assert drain(q) == ["unknown", "d5", "detect"]


# ----------------------------------------------------------------------------- the rest of vLLM's contract


def test_prepend_preempted_goes_to_front_skipped_goes_back_by_policy():
    clock = Clock()
    q = PolicyRequestQueue("sjf", clock=clock)
    rs = {rid: req(rid, float(i), d) for i, (rid, d) in enumerate([("a", 9.0), ("b", 2.0), ("c", 5.0)])}
    for r in rs.values():
        q.add_request(r)
    b = q.pop_request()
    assert b.request_id == "b"
    # vLLM's skip path: pop, then prepend at the end of the pass (status still WAITING)
    q.prepend_requests([b])
    assert q.peek_request() is b
    # a preempted request jumps ahead of the policy order
    a = rs["a"]
    q.remove_request(a)
    a.status = SimpleNamespace(name="PREEMPTED")
    q.prepend_request(a)
    assert drain(q) == ["a", "b", "c"]
    # several preempted: the most recently prepended first (as deque.appendleft in vLLM's FCFS)
    for rid in "xy":
        r = req(rid, 0.0, 1.0, status="PREEMPTED")
        q.prepend_request(r)
    assert drain(q) == ["y", "x"]


def test_remove_semantics_and_iteration():
    clock = Clock()
    q = PolicyRequestQueue("hrrn", clock=clock)
    rs = [req(f"r{i}", float(i), 1.0 + i) for i in range(5)]
    for r in rs:
        q.add_request(r)
    q.remove_request(rs[2])
    with pytest.raises(ValueError, match="not in the waiting queue"):
        q.remove_request(rs[2])
    q.remove_requests([rs[0], rs[2], req("never", 0.0, 1.0)])  # absent ones are ignored
    assert len(q) == 3 and bool(q)
    assert [r.request_id for r in q] == ["r1", "r3", "r4"]  # arrival order
    with pytest.raises(IndexError):
        PolicyRequestQueue("sjf").peek_request()
    with pytest.raises(IndexError):
        PolicyRequestQueue("sjf").pop_request()


def test_order_and_stats():
    clock = Clock()
    q = PolicyRequestQueue("sjf", clock=clock)
    for i, d in enumerate([8.0, 1.0, 4.0]):
        q.add_request(req(f"r{i}", float(i), d))
    assert [r.request_id for r in q.order()] == ["r1", "r2", "r0"]
    assert len(q) == 3  # order() does not consume
    drain(q)
    s = q.stats()
    assert s["decisions"] == 3 and s["depth"] == 0 and s["mean_decision_us"] > 0


@pytest.mark.parametrize("policy", policy_names())
def test_every_registered_policy_works_through_the_adapter(policy):
    clock = Clock(100.0)
    q = PolicyRequestQueue(policy, clock=clock)
    rs = [req(f"r{i}", float(i), 1.0 + 3 * i) for i in range(6)]
    for r in rs:
        q.add_request(r)
    got = drain(q)
    assert sorted(got) == sorted(r.request_id for r in rs)


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "peek", "pop", "remove", "skip", "preempt", "tick", "step"]),
        st.floats(0.0, 29.0),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["fcfs", "sjf", "hrrn", "adaptive"]), script=ops)
def test_random_operation_sequences_keep_the_contract(policy, script):
    """Peek/pop identity, nothing lost or duplicated, under any mix of vLLM's operations."""
    clock = Clock(0.0)
    q = PolicyRequestQueue(policy, clock=clock)
    inside: dict[int, object] = {}
    out: list = []
    n = 0
    peeked = None
    for op, x, k in script:
        if op == "add":
            r = req(f"r{n}", clock.t - x, x)
            n += 1
            q.add_request(r)
            inside[id(r)] = r
            peeked = None
        elif op == "peek" and q:
            peeked = q.peek_request()
        elif op == "pop" and q:
            r = q.pop_request()
            if peeked is not None:
                assert r is peeked
            del inside[id(r)]
            out.append(r)
            peeked = None
        elif op == "remove" and inside:
            r = list(inside.values())[k % len(inside)]
            q.remove_request(r)
            del inside[id(r)]
            peeked = None
        elif op == "skip" and q:  # pop then prepend at the end of the pass
            r = q.pop_request()
            q.prepend_requests([r])
            peeked = None
        elif op == "preempt" and out:
            r = out.pop(k % len(out))
            r.status = SimpleNamespace(name="PREEMPTED")
            q.prepend_request(r)
            inside[id(r)] = r
            peeked = None
        elif op == "tick":
            clock.t += x
        elif op == "step":
            q.begin_step()
            peeked = None
        assert len(q) == len(inside)
        assert {id(r) for r in q} == set(inside)
    q.end_step()
    rest = drain(q)
    assert len(rest) == len(inside)


# ----------------------------------------------------------------------------- configuration


def test_config_sources_and_precedence(tmp_path):
    assert PluginConfig.from_sources(None, env={}).policy == "sjf"
    env = {ENV_VARS["policy"]: "HRRN", ENV_VARS["kappa"]: "5.0", ENV_VARS["unknown_duration_s"]: "12"}
    c = PluginConfig.from_sources(None, env=env)
    assert c.policy == "hrrn" and c.unknown_duration_s == 12.0
    assert set(c.service_model.kappa.values()) == {5.0}
    c = PluginConfig.from_sources({"policy": "fcfs", "kappa": {"en": 2.0}}, env=env)
    assert c.policy == "fcfs" and dict(c.service_model.kappa) == {"en": 2.0}
    sm = ServiceModel(
        encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.0, kappa={"de": 4.0}, name="measured"
    )
    path = sm.to_json(tmp_path / "p.json")
    c = PluginConfig.from_sources(
        None,
        env={
            ENV_VARS["service_model"]: str(path),
            ENV_VARS["policy_params"]: json.dumps({"low_depth": 2}),
            ENV_VARS["policy"]: "adaptive",
            ENV_VARS["default_language"]: "de",
        },
    )
    assert c.service_model.name == "measured" and c.policy_params == {"low_depth": 2}
    assert c.default_language == "de"


@pytest.mark.parametrize(
    "src,match",
    [
        ({"policy": "shortest"}, "allowed values: .*fcfs.*hrrn"),
        ({"polcy": "sjf"}, "unknown asrsched config key.*allowed: policy"),
        ({"kappa": -1}, "kappa must be a positive"),
        ({"unknown_duration_s": 0}, "unknown_duration_s must be a positive"),
        ({"policy": "adaptive", "policy_params": {"low_depth": -1}}, "low_depth"),
        ({"service_model": {"kappa": {"en": 3}}}, "missing required field"),
        # the default language must be one the service model has a kappa for: checked when the config is built
        ({"default_language": "fr"}, r"default_language 'fr' .*allowed values: de, en, es, id$"),
        ({"kappa": {"es": 4.0}}, r"default_language 'en' .*allowed values: es$"),
        ({"policy_switch": "sometimes"}, r"policy_switch must be true or false .*got 'sometimes'"),
    ],
)
def test_config_errors_name_the_problem(src, match):
    with pytest.raises(ValueError, match=match):
        PluginConfig.from_sources(src, env={})


def test_policy_switch_is_off_by_default_and_read_from_either_source():
    assert PluginConfig.from_sources(None, env={}).policy_switch is False
    assert PluginConfig.from_sources({"policy_switch": True}, env={}).policy_switch is True
    assert PluginConfig.from_sources(None, env={ENV_VARS["policy_switch"]: "1"}).policy_switch is True
    assert (
        PluginConfig.from_sources({"policy_switch": "off"}, env={ENV_VARS["policy_switch"]: "1"}).policy_switch is False
    )


def test_a_request_names_the_policy_it_switches_to_and_an_unknown_one_is_logged_not_refused(caplog):
    from asrsched.vllm_plugin.size_estimate import XARG_POLICY, requested_policy

    known = frozenset(policy_names())
    assert requested_policy(req("a", 0.0, 5.0, **{XARG_POLICY: "SJF"}), "fcfs", known) == "sjf"
    assert requested_policy(req("b", 0.0, 5.0, **{XARG_POLICY: "sjf"}), "sjf", known) is None  # already in force
    assert requested_policy(req("c", 0.0, 5.0), "fcfs", known) is None  # names none: the policy in force stays
    assert requested_policy(req("d", 0.0), "fcfs", known) is None  # no extra_args at all
    # a family's member, not registered when the server started, registers itself and is switched to
    assert requested_policy(req("f", 0.0, 5.0, **{XARG_POLICY: "Nudge_M4_0.731"}), "fcfs", known) == "nudge_m4_0.731"
    assert "nudge_m4_0.731" in policy_names()
    with caplog.at_level("WARNING", logger="asrsched.vllm_plugin.scheduler"):
        assert requested_policy(req("e", 0.0, 5.0, **{XARG_POLICY: "shortest"}), "hrrn", known) is None
    assert (
        "request e asks for policy 'shortest', which is unknown" in caplog.text and "queued under hrrn" in caplog.text
    )


def test_config_env_json_error():
    with pytest.raises(ValueError, match="ASRSCHED_POLICY_PARAMS must be JSON"):
        PluginConfig.from_sources(None, env={ENV_VARS["policy_params"]: "{low_depth: 2"})


def test_a_default_language_without_a_kappa_fails_when_the_config_is_built_not_at_the_first_request():
    with pytest.raises(ValueError, match=r"default_language 'pt' .*allowed values: de, en, es, id"):
        PluginConfig.from_sources(None, env={ENV_VARS["default_language"]: "pt"})
    with pytest.raises(ValueError, match=r"default_language 'en' .*allowed values: id"):  # the estimator checks too
        SizeEstimator(ServiceModel(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.0, kappa={"id": 4.0}))
    c = PluginConfig.from_sources(None, env={ENV_VARS["default_language"]: "es"})
    est = SizeEstimator(c.service_model, default_language=c.default_language)
    # no language, or one without a kappa: sized (and logged) in the default language's kappa
    for xa in ({"audio_duration_s": 10.0}, {"audio_duration_s": 10.0, "language": "pt"}):
        e, info = est.estimate_from(xa, 448)
        assert info["language"] == "es" and e == pytest.approx(c.service_model.est_service(10.0, "es"), rel=1e-12)


def test_estimates_are_monotone_in_duration():
    est = SizeEstimator()
    d = np.linspace(0.5, 30, 40)
    e = [est.estimate_from({"audio_duration_s": float(x)}, 448)[0] for x in d]
    assert np.all(np.diff(e) > 0)
