"""The compiled engine makes exactly the decisions of the Python Engine.

Compared decision by decision: per-request admit / first-token / finish times (exact float
equality), event counts, the sampled timeline, the overload verdict and the adaptive
policy's mode counts; for chunked input, the batches each sink receives.
"""

import numpy as np
import pandas as pd
import pytest

from asrsched.core.policies import POLICIES, make_queue
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.static_policies import register_static_policy, static_key
from asrsched.core.workloads import Trace, make_trace
from asrsched.sim.engine import CollectSink, ParquetSink, SummarySink, simulate, trace_chunks
from asrsched.sim.inputs import compiled_support

COLS = ["admit", "first_token", "finish"]
ADAPTIVE_TIGHT = {"low_depth": 2, "ratio_cap": 3.0}  # switches mode often: every branch is exercised


def _same_run(a, b):
    np.testing.assert_array_equal(a.records[COLS].to_numpy(), b.records[COLS].to_numpy())
    pd.testing.assert_frame_equal(a.records, b.records)
    assert a.events == b.events
    assert a.timeline.equals(b.timeline)
    assert a.overloaded == b.overloaded
    assert a.mode_counts == b.mode_counts
    assert a.n_completed == b.n_completed == a.n_arrivals == b.n_arrivals


@pytest.mark.parametrize(
    "policy, params",
    [("fcfs", None), ("sjf", None), ("ljf", None), ("hrrn", None), ("adaptive", None), ("adaptive", ADAPTIVE_TIGHT)],
)
@pytest.mark.parametrize(
    "workload, rate, M",
    [("librispeech", 3.0, 32), ("librispeech", 18.0, 32), ("uniform", 12.0, 4), ("uniform", 2.0, 1)],
)
def test_numba_and_python_engines_identical(policy, params, workload, rate, M):
    tr = make_trace(workload, rate=rate, n=1500, seed=int(rate) + M)
    a = simulate(
        tr, policy, default_service_model(), max_num_seqs=M, engine="python", warn_overload=False, policy_params=params
    )
    b = simulate(
        tr, policy, default_service_model(), max_num_seqs=M, engine="numba", warn_overload=False, policy_params=params
    )
    assert b.params["engine"] == "numba" and a.params["engine"] == "python"
    _same_run(a, b)
    if policy == "adaptive":  # the run really used the modes it claims
        assert sum(b.mode_counts.values()) == len(tr)
        if rate > 10:
            assert b.mode_counts["sjf"] > 0 and b.mode_counts["hrrn"] > 0


def test_batch_dependent_steps_and_overhead_identical():
    svc = ServiceModel(
        encode_s_per_window=0.03, decode_s_per_token=0.01, decode_batch_slope=0.2, overhead_s=0.5, kappa={"en": 4.0}
    )
    tr = make_trace("uniform", rate=20.0, n=800, seed=5, kappa=4.0)
    for policy in ("hrrn", "adaptive"):
        a = simulate(tr, policy, svc, max_num_seqs=16, engine="python", warn_overload=False)
        b = simulate(tr, policy, svc, max_num_seqs=16, engine="auto", warn_overload=False)
        assert b.params["engine"] == "numba"
        _same_run(a, b)


def test_ties_go_to_submission_order_in_both_engines():
    """Equal sizes arriving together: HRRN, SJF and adaptive all serve in submission order, as FCFS."""
    n = 12
    tr = Trace(
        arrival=np.repeat([0.0, 5.0, 5.0, 9.0], 3),
        duration=np.full(n, 7.0),
        language=np.full(n, "en", object),
        tokens=np.full(n, 20),
    )
    for policy in ("fcfs", "sjf", "hrrn", "adaptive"):
        for engine in ("python", "numba"):
            rec = simulate(tr, policy, max_num_seqs=1, engine=engine, warn_overload=False).records
            assert list(rec.sort_values(["admit", "rid"])["rid"]) == list(range(n)), (policy, engine)


def test_mixed_languages_and_vad_estimates_identical():
    """Two languages (two kappas) and a size estimate that differs from the file duration."""
    rng = np.random.default_rng(3)
    tr = make_trace("librispeech", rate=14.0, n=1200, seed=9)
    tr.language = np.where(rng.random(len(tr)) < 0.4, "id", "en").astype(object)
    svc = ServiceModel(
        encode_s_per_window=0.05,
        decode_s_per_token=0.02,
        decode_batch_slope=0.05,
        overhead_s=0.1,
        kappa={"en": 3.3, "id": 5.0},
    )
    vad = tr.duration * rng.uniform(0.5, 1.0, len(tr))
    for policy in ("sjf", "hrrn", "adaptive"):
        a = simulate(tr, policy, svc, max_num_seqs=8, est_duration=vad, engine="python", warn_overload=False)
        b = simulate(tr, policy, svc, max_num_seqs=8, est_duration=vad, engine="numba", warn_overload=False)
        _same_run(a, b)


# ----------------------------------------------------------------------------- chunked input and sinks


class _RecordingSink:
    """A user sink with only ``write(rows)``: keeps each batch as given."""

    def __init__(self):
        self.batches = []

    def write(self, rows):
        self.batches.append(list(rows))

    def result(self):
        return self.batches


def _chunks(rate, n, chunk, seed=0, workload="librispeech"):
    return trace_chunks(workload, rate=rate, n=n, chunk=chunk, seed=seed)


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "ljf", "hrrn", "adaptive"])
@pytest.mark.parametrize("rate, chunk, M, seed", [(16.0, 700, 8, 0), (12.0, 600, 8, 2), (9.0, 97, 4, 5)])
def test_chunked_input_same_batches_as_python(policy, rate, chunk, M, seed):
    """Chunks at loads near and past capacity (a queue carried over the boundaries), flush every 250 records."""
    kw = dict(max_num_seqs=M, flush_every=250, warn_overload=False)
    a = simulate(_chunks(rate, 3000, chunk, seed), policy, sink=_RecordingSink(), engine="python", **kw)
    b = simulate(_chunks(rate, 3000, chunk, seed), policy, sink=_RecordingSink(), engine="numba", **kw)
    assert b.params["engine"] == "numba"
    assert [len(x) for x in a.records] == [len(x) for x in b.records]  # flushed at the same points
    assert len(a.records) > 5
    for xa, xb in zip(a.records, b.records, strict=True):
        assert xa == xb  # same rows, same order, same values (plain Python scalars)
    assert a.events == b.events and a.timeline.equals(b.timeline) and a.mode_counts == b.mode_counts
    assert a.n_completed == b.n_completed == 3000
    # and the chunked compiled run equals the compiled run of the whole trace at once
    whole = Trace.from_frame(pd.concat([t.to_frame() for t in _chunks(rate, 3000, chunk, seed)], ignore_index=True))
    c = simulate(whole, policy, max_num_seqs=M, warn_overload=False)
    rows = pd.DataFrame([r for x in b.records for r in x], columns=c.records.columns[:9]).sort_values("rid")
    np.testing.assert_array_equal(rows[COLS].to_numpy(), c.records[COLS].to_numpy())


def test_chunked_collect_summary_and_parquet_sinks_identical(tmp_path):
    kw = dict(max_num_seqs=16, flush_every=400, warn_overload=False)
    for policy in ("sjf", "adaptive"):
        a = simulate(_chunks(12.0, 2500, 600, seed=2), policy, sink=SummarySink(), engine="python", **kw)
        b = simulate(_chunks(12.0, 2500, 600, seed=2), policy, sink=SummarySink(), engine="numba", **kw)
        assert a.records == b.records  # same batches, so the same float sums and histograms, exactly
        assert b.records["completed"] == 2500
        a = simulate(_chunks(12.0, 2500, 600, seed=2), policy, engine="python", **kw)  # default CollectSink
        b = simulate(_chunks(12.0, 2500, 600, seed=2), policy, sink=CollectSink(), engine="numba", **kw)
        pd.testing.assert_frame_equal(a.records, b.records)
        pa = simulate(
            _chunks(12.0, 2500, 600, seed=2), policy, sink=ParquetSink(tmp_path / f"{policy}-py"), engine="python", **kw
        ).records
        pb = simulate(
            _chunks(12.0, 2500, 600, seed=2), policy, sink=ParquetSink(tmp_path / f"{policy}-nb"), engine="numba", **kw
        ).records
        parts_a, parts_b = sorted(pa.glob("*.parquet")), sorted(pb.glob("*.parquet"))
        assert [p.name for p in parts_a] == [p.name for p in parts_b] and len(parts_a) >= 6
        for x, y in zip(parts_a, parts_b, strict=True):
            pd.testing.assert_frame_equal(pd.read_parquet(x), pd.read_parquet(y))


def test_in_memory_trace_with_a_sink_runs_compiled():
    tr = make_trace("uniform", rate=3.0, n=900, seed=4)
    a = simulate(tr, "hrrn", sink=SummarySink(), flush_every=100, engine="python", warn_overload=False)
    b = simulate(tr, "hrrn", sink=SummarySink(), flush_every=100, warn_overload=False)
    assert b.params["engine"] == "numba" and a.records == b.records


# ----------------------------------------------------------------------------- static key policies


@pytest.fixture
def static_policies():
    added = []

    def add(name, key):
        added.append(name)
        return register_static_policy(name, key)

    yield add
    for name in added:
        POLICIES.pop(name, None)


def test_static_key_policy_compiled_equals_python(static_policies):
    def key(estimate, arrival, duration, language):  # shortest first, Indonesian jobs as if 2x longer
        return estimate * 2.0 if language == "id" else estimate

    static_policies("sjf_id_penalty", key)
    static_policies("lifo_test", lambda estimate, arrival, duration, language: -arrival)
    rng = np.random.default_rng(0)
    tr = make_trace("librispeech", rate=15.0, n=1500, seed=3)
    tr.language = np.where(rng.random(len(tr)) < 0.3, "id", "en").astype(object)
    svc = ServiceModel(encode_s_per_window=0.05, decode_s_per_token=0.02, overhead_s=0.1, kappa={"en": 3.3, "id": 5.0})
    for name in ("sjf_id_penalty", "lifo_test"):
        a = simulate(tr, name, svc, max_num_seqs=8, engine="python", warn_overload=False)
        b = simulate(tr, name, svc, max_num_seqs=8, warn_overload=False)
        assert b.params["engine"] == "numba"
        _same_run(a, b)
        # chunked, too
        ca = simulate(
            _chunks(15.0, 2000, 500),
            name,
            svc,
            max_num_seqs=8,
            sink=_RecordingSink(),
            flush_every=300,
            engine="python",
            warn_overload=False,
        )
        cb = simulate(
            _chunks(15.0, 2000, 500),
            name,
            svc,
            max_num_seqs=8,
            sink=_RecordingSink(),
            flush_every=300,
            warn_overload=False,
        )
        assert ca.records == cb.records
    # the key really orders: LIFO admits the latest arrival among those waiting
    rec = simulate(tr, "lifo_test", svc, max_num_seqs=8, warn_overload=False).records
    assert not rec.sort_values("admit")["rid"].is_monotonic_increasing
    # the queue is a KeyQueue everywhere else (server, plug-in)
    q = make_queue("sjf_id_penalty")
    assert q.name == "sjf_id_penalty" and static_key("sjf_id_penalty") is not None


def test_static_policy_errors(static_policies):
    with pytest.raises(ValueError, match="built-in policy name"):
        register_static_policy("sjf", lambda e, a, d, lang: e)
    with pytest.raises(TypeError, match="key must be a function"):
        register_static_policy("nope", 3.0)
    static_policies("nan_key", lambda e, a, d, lang: np.nan)
    tr = make_trace("librispeech", rate=5.0, n=50, seed=1)
    with pytest.raises(ValueError, match="returned NaN"):
        simulate(tr, "nan_key")
    with pytest.raises(ValueError, match="takes no parameters"):
        simulate(tr, "nan_key", policy_params={"x": 1})


# ----------------------------------------------------------------------------- dispatch


def test_engine_choice_and_errors():
    tr = make_trace("librispeech", rate=5.0, n=200, seed=1)
    assert simulate(tr, "adaptive").params["engine"] == "numba"
    assert simulate(tr, "adaptive", policy_params={"ratio_cap": 2.0}).params["engine"] == "numba"
    assert simulate(tr, "random", policy_params={"seed": 1}).params["engine"] == "python"
    assert "'random'" in compiled_support(["random"]) and "queue object" in compiled_support([make_queue("fcfs")])
    assert compiled_support(["fcfs", "sjf", "ljf", "hrrn", "adaptive"]) is None
    with pytest.raises(ValueError, match="engine='numba' cannot run this: policy 'random'"):
        simulate(tr, "random", engine="numba")
    with pytest.raises(ValueError, match="engine: must be"):
        simulate(tr, "fcfs", engine="gpu")
    for engine in ("python", "auto"):  # the same parameter checks on both paths
        with pytest.raises(ValueError, match="ratio_cap"):
            simulate(tr, "adaptive", policy_params={"ratio_cap": 0.5}, engine=engine)
        with pytest.raises(TypeError, match="unexpected keyword"):
            simulate(tr, "sjf", policy_params={"bogus": 1}, engine=engine)
    with pytest.raises(ValueError, match="est_duration has"):
        simulate(tr, "sjf", est_duration=np.ones(3))
    with pytest.raises(ValueError, match="est_duration needs an in-memory"):
        simulate(_chunks(5.0, 100, 50), "sjf", est_duration=np.ones(100))
    with pytest.raises(ValueError, match="max_num_seqs"):
        simulate(tr, "sjf", max_num_seqs=0)


def test_builtin_name_reregistered_takes_python_engine():
    from asrsched.core.policies import KeyQueue, register_policy

    original = POLICIES["sjf"]
    try:
        register_policy("sjf")(lambda: KeyQueue(lambda j: -j.arrival, name="sjf"))
        tr = make_trace("librispeech", rate=12.0, n=300, seed=2)
        assert simulate(tr, "sjf", warn_overload=False).params["engine"] == "python"
    finally:
        POLICIES["sjf"] = original


# ----------------------------------------------------------------------------- streaming helpers


@pytest.mark.parametrize(
    "workload, kw",
    [
        ("librispeech", {}),
        ("uniform", {"kappa": {"en": 4.0}}),
        ("commonvoice_id", {"kappa": {"id": 5.0}, "noise_cv": 0.3}),
        ("librispeech", {"arrival": "bursty", "arrival_kw": {"burstiness": 0.5}}),
    ],
)
def test_trace_chunks_draw_what_make_trace_draws(workload, kw):
    """trace_chunks skips the transcripts but must draw the same arrivals, durations and tokens."""
    from asrsched.sim.engine import trace_chunks as chunks

    got = list(chunks(workload, rate=7.0, n=2500, chunk=1000, seed=11, **kw))
    assert [len(t) for t in got] == [1000, 1000, 500]
    t0 = 0.0
    for i, tr in enumerate(got):
        seed = int(np.random.SeedSequence([11, i]).generate_state(1)[0])
        ref = make_trace(workload, rate=7.0, n=len(tr), seed=seed, **kw)
        np.testing.assert_array_equal(tr.arrival, ref.arrival + t0)
        np.testing.assert_array_equal(tr.duration, ref.duration)
        np.testing.assert_array_equal(tr.tokens, ref.tokens)
        assert list(tr.language) == list(ref.language) and tr.meta == ref.meta
        t0 = float(tr.arrival[-1])


def test_summary_histogram_is_the_searchsorted_binning():
    from asrsched.sim.records import histogram_add

    bins = SummarySink.BINS
    rng = np.random.default_rng(0)
    v = np.concatenate(
        [
            rng.lognormal(0, 3, 200_000),
            bins,
            np.nextafter(bins, np.inf),
            np.nextafter(bins, -np.inf),
            [0.0, -1.0, np.nan, 1e7, np.inf, -np.inf],
        ]
    )
    h = np.zeros(len(bins), np.int64)
    histogram_add(bins, SummarySink._LOG_LO, SummarySink._LOG_STEP, v, h)
    ref = np.bincount(np.clip(np.searchsorted(bins, v, side="right") - 1, 0, len(bins) - 1), minlength=len(bins))
    np.testing.assert_array_equal(h, ref)
