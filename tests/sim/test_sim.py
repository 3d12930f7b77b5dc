"""The simulator against queueing theory, an independent SimPy model, and its own bookkeeping.

* ``max_num_seqs = 1``, ``overhead_s = 0``, ``noise_cv = 0``: the server is an
  M/G/1 queue. FCFS mean wait must match Pollaczek-Khinchine and non-preemptive
  SJF the M/G/1 priority formula (Cobham; size classes = estimated sizes, FCFS
  within a class), inside a 99 % batch-means confidence interval, at three loads.
* M = 1 FCFS follows the Lindley recursion exactly.
* Every arrival is accounted for; Little's law holds; the sampled timeline (batch
  occupancy, queue depth) agrees with the records at every sample; the exact
  occupancy step functions integrate to lambda W; same seed, same records.
* Per-request results equal the step-by-step SimPy model (benchmarks/simpy_reference.py).
* SJF never admits a job while a strictly shorter one waits; HRRN admits the
  highest ratio, and with equal sizes it is FCFS in submission order (both engines); under HRRN every job's wait obeys a computable bound (and SJF
  breaks that bound on a stream built to starve it).
* Overload warns, completes and reports queue growth; chunked traces and the
  streaming sinks agree with the in-memory run.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sim_oracle import estimated_work
from simpy_reference import simulate_simpy  # noqa: E402

from asrsched.core.policies import policy_names
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import Trace, librispeech_table, make_trace
from asrsched.sim.engine import (
    CollectSink,
    Engine,
    OverloadWarning,
    ParquetSink,
    SimJob,
    SummarySink,
    chunk_jobs,
    simulate,
    trace_chunks,
)

ENC, DEC, KAPPA = 0.04, 0.018, 3.3
# size-independent step cost at batch 1: the slope only matters for batches > 1
MG1 = ServiceModel(
    encode_s_per_window=ENC,
    decode_s_per_token=DEC,
    overhead_s=0.0,
    kappa={"en": KAPPA},
    decode_batch_slope=0.04,
    name="mg1-test",
)
BUILTIN = ["adaptive", "fcfs", "hrrn", "ljf", "random", "sjf"]


# ----------------------------------------------------------------------------- M/G/1 theory


def _service_of_duration(d: np.ndarray) -> np.ndarray:
    """True service time at batch 1 with noise_cv = 0: encoder windows + rint(kappa d) tokens."""
    windows = np.maximum(1, np.ceil(d / 30.0 - 1e-9))
    return ENC * windows + DEC * np.maximum(1, np.rint(KAPPA * d))


def _size_distribution(workload: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct durations, probabilities) -- exact for LibriSpeech, a fine grid for uniform."""
    if workload == "librispeech":
        d = librispeech_table()["duration_s"].to_numpy(float)
        ud, inv = np.unique(d, return_inverse=True)
        return ud, np.bincount(inv) / len(d)
    m = 200_000
    return 5.0 + 25.0 * (np.arange(m) + 0.5) / m, np.full(m, 1.0 / m)


def mg1_mean_wait(workload: str, lam: float, policy: str) -> float:
    """Mean queueing delay of M/G/1 under FCFS (Pollaczek-Khinchine) or non-preemptive SJF.

    SJF orders by the estimate ``enc + kappa d dec``, strictly increasing in ``d``,
    so the priority classes are the distinct durations (ties = same duration,
    served FCFS). Class wait: ``W0 / ((1 - sigma_<) (1 - sigma_<=))`` with
    ``W0 = lam E[S^2] / 2`` and ``sigma`` the load of strictly higher / higher-or-equal
    priority classes. For the uniform split the grid makes ``sigma_< -> sigma_<=``,
    the continuous formula ``W0 / (1 - rho(x))^2``.
    """
    d, p = _size_distribution(workload)
    s = _service_of_duration(d)
    rho = lam * float(p @ s)
    assert rho < 1
    w0 = lam * float(p @ (s * s)) / 2.0
    if policy == "fcfs":
        return w0 / (1.0 - rho)
    cum = np.cumsum(lam * p * s)
    below = cum - lam * p * s
    return float(p @ (w0 / ((1.0 - below) * (1.0 - cum))))


def _rate_for_load(workload: str, rho: float) -> float:
    d, p = _size_distribution(workload)
    return rho / float(p @ _service_of_duration(d))


def _batch_means_ci(x: np.ndarray, batches: int = 20, level: float = 0.99) -> tuple[float, float]:
    bm = np.array([b.mean() for b in np.array_split(x, batches)])
    half = stats.t.ppf(0.5 + level / 2, batches - 1) * bm.std(ddof=1) / np.sqrt(batches)
    return float(bm.mean()), float(half)


@pytest.mark.parametrize("workload", ["librispeech", "uniform"])
@pytest.mark.parametrize("rho", [0.3, 0.6, 0.85])
def test_mg1_fcfs_matches_pollaczek_khinchine_and_sjf_matches_priority_formula(workload, rho):
    lam = _rate_for_load(workload, rho)
    n = 200_000
    tr = make_trace(workload, rate=lam, n=n, seed=11, noise_cv=0.0, kappa=KAPPA)
    theory = {pol: mg1_mean_wait(workload, lam, pol) for pol in ("fcfs", "sjf")}
    assert theory["sjf"] < theory["fcfs"]
    for pol in ("fcfs", "sjf"):
        res = simulate(tr, pol, MG1, max_num_seqs=1)
        rec = res.records
        assert res.n_completed == n
        # the simulated server really is M/G/1: service = enc windows + tokens x step(1)
        svc = rec["finish"] - rec["admit"]
        np.testing.assert_allclose(svc, _service_of_duration(rec["duration"].to_numpy()), rtol=1e-9)
        wait = rec["queue_delay"].to_numpy()[n // 10 :]  # drop the warm-up from an empty system
        mean, half = _batch_means_ci(wait)
        assert abs(mean - theory[pol]) <= half, (
            f"{pol} rho={rho}: simulated mean wait {mean:.4f} s +- {half:.4f}, theory {theory[pol]:.4f} s"
        )
        # the interval is tight enough to mean something: < 10 % of the value
        assert half < 0.10 * theory[pol]
        if rho >= 0.6:  # and it separates the two policies
            other = theory["sjf" if pol == "fcfs" else "fcfs"]
            assert abs(mean - other) > half


def test_fcfs_single_server_follows_lindley_recursion_exactly():
    svc = ServiceModel(
        encode_s_per_window=0.05, decode_s_per_token=0.01, overhead_s=0.02, kappa={"en": 4.0}, decode_batch_slope=0.1
    )
    tr = make_trace("librispeech", rate=2.5, n=3000, seed=5, noise_cv=0.2, kappa=4.0)  # rho ~ 0.87
    rec = simulate(tr, "fcfs", svc, max_num_seqs=1).records
    a = tr.arrival
    s = svc.encode_s_per_window * svc.windows(tr.duration) + tr.tokens * svc.decode_s_per_token
    admit = np.empty(len(tr))
    free = 0.0
    for i in range(len(tr)):
        admit[i] = max(a[i], free)
        free = admit[i] + s[i]
    np.testing.assert_allclose(rec["admit"], admit, rtol=0, atol=1e-9)
    first = admit + svc.encode_s_per_window * svc.windows(tr.duration) + svc.decode_s_per_token
    np.testing.assert_allclose(rec["first_token"], first, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rec["finish"], admit + s + svc.overhead_s, rtol=0, atol=1e-9)
    # E2EL includes the client-side overhead, TTFT does not
    np.testing.assert_allclose(rec["e2el"] - rec["queue_delay"], s + svc.overhead_s, atol=1e-9)


# ----------------------------------------------------------------------------- bookkeeping


@pytest.fixture(scope="module")
def busy_run():
    """A loaded continuous-batching run (M=4, LibriSpeech, ~80 % busy) with an unthinned timeline."""
    svc = ServiceModel(
        encode_s_per_window=0.04, decode_s_per_token=0.018, overhead_s=0.0, kappa={"en": 3.3}, decode_batch_slope=0.04
    )
    tr = make_trace("librispeech", rate=5.0, n=20_000, seed=2, noise_cv=0.15)
    res = simulate(tr, "hrrn", svc, max_num_seqs=4, timeline_points=10**7)
    return tr, svc, res


def test_every_arrival_accounted_for_and_causal(busy_run):
    tr, svc, res = busy_run
    rec = res.records
    assert res.n_arrivals == res.n_completed == len(rec) == len(tr)
    assert rec["rid"].tolist() == list(range(len(tr)))
    np.testing.assert_array_equal(rec["arrival"], tr.arrival)
    np.testing.assert_array_equal(rec["duration"], tr.duration)
    np.testing.assert_array_equal(rec["tokens"], tr.tokens)
    assert rec[["admit", "first_token", "finish"]].notna().all().all()
    assert (rec["admit"] >= rec["arrival"]).all()
    assert (rec["first_token"] > rec["admit"]).all()
    assert (rec["finish"] >= rec["first_token"]).all()
    # never more than max_num_seqs in the engine: sweep admit (+1) / engine finish (-1) events
    ev = np.concatenate([np.c_[rec["admit"], np.ones(len(rec))], np.c_[rec["finish"], -np.ones(len(rec))]])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # at equal times, completions before admissions
    assert np.cumsum(ev[:, 1]).max() == 4
    assert res.timeline["running"].max() == 4


def test_timeline_matches_records_at_every_sample(busy_run):
    """Batch occupancy and queue depth reported by the simulator equal what the records imply."""
    tr, svc, res = busy_run
    rec = res.records
    tl = res.timeline
    assert len(tl) == res.events  # unthinned
    ts = tl["time"].to_numpy()
    admit = np.sort(rec["admit"].to_numpy())
    fin = np.sort(rec["finish"].to_numpy())  # overhead 0: engine finish
    arr = np.sort(rec["arrival"].to_numpy())
    running = np.searchsorted(admit, ts, side="right") - np.searchsorted(fin, ts, side="right")
    waiting = np.searchsorted(arr, ts, side="right") - np.searchsorted(admit, ts, side="right")
    np.testing.assert_array_equal(tl["running"].to_numpy(), running)
    np.testing.assert_array_equal(tl["waiting"].to_numpy(), waiting)
    # the exact step functions hold the same values at every sample
    occ = res.occupancy()
    at = np.searchsorted(occ["time"].to_numpy(), ts, side="right") - 1
    np.testing.assert_array_equal(occ["running"].to_numpy()[at], running)
    np.testing.assert_array_equal(occ["waiting"].to_numpy()[at], waiting)


def _step_average(occ: pd.DataFrame, col: str, t1: float, t2: float) -> float:
    """Integral of a right-continuous step function (value holds from its row's time) over [t1, t2], / (t2 - t1)."""
    t = np.clip(np.append(occ["time"].to_numpy(), np.inf), t1, t2)
    return float((occ[col].to_numpy() * np.diff(t)).sum() / (t2 - t1))


def test_littles_law(busy_run):
    """Exact occupancy integrated over an interior window = arrival rate x mean time in system (and queue).

    Edge effects over 60 % of a 20,000-request run are ~W/T (well under 0.1 %); a 1 % bound
    breaks if any arrival, admission or finish is dropped or misplaced in the step functions.
    """
    tr, svc, res = busy_run
    rec = res.records
    occ = res.occupancy()
    t1, t2 = np.quantile(rec["arrival"], [0.2, 0.8])
    inside = rec[(rec["arrival"] >= t1) & (rec["arrival"] < t2)]
    lam = len(inside) / (t2 - t1)
    for col, delay in (("in_system", "e2el"), ("waiting", "queue_delay")):
        L = _step_average(occ, col, t1, t2)
        assert L == pytest.approx(lam * inside[delay].mean(), rel=0.01), col
        assert res.time_average(col, t1, t2) == pytest.approx(L, rel=1e-9)


@pytest.mark.parametrize("engine", ["python", "numba"])
def test_timeline_time_average_equals_lambda_w(engine):
    """The exact occupancy (every arrival, admission and finish) integrates to lambda W over the run.

    lambda = n / (last finish - first arrival) and W = mean E2EL (mean queue delay, mean engine
    time) from the same run's records; with a client-side overhead the number in system is the
    sum of waiting, running and the requests in their last ``overhead_s``.
    """
    svc = ServiceModel(
        encode_s_per_window=0.04, decode_s_per_token=0.018, overhead_s=0.03, kappa={"en": 3.3}, decode_batch_slope=0.04
    )
    tr = make_trace("librispeech", rate=5.0, n=4000, seed=6, noise_cv=0.15)
    res = simulate(tr, "sjf", svc, max_num_seqs=4, engine=engine)
    rec = res.records
    assert res.params["overhead_s"] == svc.overhead_s
    t0, t1 = float(rec["arrival"].min()), float(rec["finish"].max())
    lam = len(rec) / (t1 - t0)
    occ = res.occupancy()
    assert (np.diff(occ["time"]) > 0).all() and occ.iloc[-1][["in_system", "waiting", "running"]].eq(0).all()
    engine_time = rec["finish"] - svc.overhead_s - rec["admit"]
    for col, w in (
        ("in_system", rec["e2el"].mean()),
        ("waiting", rec["queue_delay"].mean()),
        ("running", engine_time.mean()),
    ):
        assert _step_average(occ, col, t0, t1) == pytest.approx(lam * w, rel=0.01), col
        assert res.time_average(col) == pytest.approx(lam * w, rel=1e-9), col
    L, Lq, Lr = (res.time_average(c) for c in ("in_system", "waiting", "running"))
    assert L == pytest.approx(Lq + Lr + lam * svc.overhead_s, rel=1e-9)
    assert Lr <= 4 + 1e-9 and (occ["running"] <= 4).all()


def test_time_average_bad_input():
    tr = make_trace("uniform", rate=2.0, n=200, seed=1)
    res = simulate(tr, "fcfs", MG1, max_num_seqs=1)
    with pytest.raises(ValueError, match="quantity must be one of"):
        res.time_average("queue")
    with pytest.raises(ValueError, match="t1 > t0"):
        res.time_average("in_system", 5.0, 5.0)
    summary = simulate(tr, "fcfs", MG1, max_num_seqs=1, sink=SummarySink())
    with pytest.raises(ValueError, match="records as a DataFrame"):
        summary.time_average()


def test_same_seed_same_records_and_different_seed_differs():
    recs = []
    for seed in (4, 4, 5):
        tr = make_trace("mix", rate=8.0, n=3000, seed=seed, arrival="bursty", arrival_kw={"burstiness": 0.5})
        recs.append(simulate(tr, "random", max_num_seqs=8, policy_params={"seed": 1}, warn_overload=False).records)
    pd.testing.assert_frame_equal(recs[0], recs[1])
    assert not recs[0]["finish"].equals(recs[2]["finish"])


# ----------------------------------------------------------------------------- independent model


@pytest.mark.parametrize("policy", BUILTIN)
@pytest.mark.parametrize("case", ["m3-librispeech", "m32-uniform-bursty", "m4-overloaded-drift"])
def test_identical_to_simpy_reference(policy, case):
    svc = ServiceModel(
        encode_s_per_window=0.04, decode_s_per_token=0.018, overhead_s=0.03, kappa={"en": 3.3}, decode_batch_slope=0.04
    )
    if case == "m3-librispeech":
        tr, M = make_trace("librispeech", rate=4.0, n=400, seed=21), 3
    elif case == "m32-uniform-bursty":
        tr, M = make_trace("uniform", rate=6.0, n=400, seed=22, arrival="bursty", arrival_kw={"burstiness": 0.3}), 32
    else:
        tr, M = make_trace("drift", rate=12.0, n=400, seed=23), 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        fast = simulate(tr, policy, svc, max_num_seqs=M).records
    ref = simulate_simpy(tr, policy, svc, max_num_seqs=M)
    for c in ("rid", "arrival", "duration", "est_service", "tokens"):
        np.testing.assert_array_equal(fast[c], ref[c])
    for c in ("admit", "first_token", "finish"):
        np.testing.assert_allclose(fast[c], ref[c], rtol=0, atol=1e-9, err_msg=c)


# ----------------------------------------------------------------------------- policy properties end to end


def _waiting_at(rec: pd.DataFrame, t: float) -> pd.DataFrame:
    return rec[(rec["arrival"] <= t) & (rec["admit"] > t)]


@pytest.fixture(scope="module")
def loaded_trace():
    return make_trace("librispeech", rate=11.0, n=1500, seed=8)


def test_sjf_never_admits_while_a_strictly_shorter_job_waits(loaded_trace):
    rec = simulate(loaded_trace, "sjf", max_num_seqs=4, warn_overload=False).records
    arr, adm, est = (rec[c].to_numpy() for c in ("arrival", "admit", "est_service"))
    checked = 0
    for j in range(len(rec)):
        w = (arr <= adm[j]) & (adm > adm[j])
        if w.any():
            checked += 1
            assert est[w].min() >= est[j], f"request {j} admitted while a shorter one waited"
    assert checked > len(rec) // 2  # the queue really was busy


def test_hrrn_admits_the_highest_response_ratio(loaded_trace):
    rec = simulate(loaded_trace, "hrrn", max_num_seqs=4, warn_overload=False).records
    arr, adm, est = (rec[c].to_numpy() for c in ("arrival", "admit", "est_service"))
    checked = 0
    for j in range(len(rec)):
        w = (arr <= adm[j]) & (adm > adm[j])
        if w.any():
            checked += 1
            t = adm[j]
            assert (t - arr[j]) / est[j] >= ((t - arr[w]) / est[w]).max() - 1e-9
    assert checked > len(rec) // 2


def _hrrn_wait_bound(arrival: np.ndarray, engine_finish: np.ndarray, service: np.ndarray, est: np.ndarray):
    """Upper bound on each job's wait under non-preemptive HRRN on one server.

    A job k admitted at t while j waits has ratio >= j's: (t-a_k)/s_k >= (t-a_j)/s_j,
    so a_k <= a_j + (1-c)(t-a_j) with c = min(s)/max(s). The server is busy during
    j's wait, so W_j <= g(W_j) with g(w) = V_j + sum of service of jobs arriving in
    [a_j, a_j + (1-c) w] and V_j the work present at a_j. The bound is
    sup{w : w <= g(w)} -- finite for a finite stream, independent of the policy's
    luck, and it caps starvation.
    """
    c = est.min() / est.max()
    n = len(arrival)
    bound = np.empty(n)
    for j in range(n):
        others = np.arange(n) != j
        present = others & (arrival < arrival[j]) & (engine_finish > arrival[j])
        v = service[present].sum()
        later = others & (arrival >= arrival[j])
        if c >= 1.0:
            offs = np.where(arrival[later] == arrival[j], 0.0, np.inf)
        else:
            offs = (arrival[later] - arrival[j]) / (1.0 - c)
        order = np.argsort(offs, kind="stable")
        offs, s_later = offs[order], service[later][order]
        starts = np.concatenate([[0.0], offs])  # interval m: [starts[m], starts[m+1])
        ends = np.concatenate([offs, [np.inf]])
        g = v + np.concatenate([[0.0], np.cumsum(s_later)])
        feasible = starts <= g
        bound[j] = np.max(np.minimum(g, ends)[feasible])
    return bound


def _single_server(svc_enc=0.04, svc_dec=0.018):
    return ServiceModel(encode_s_per_window=svc_enc, decode_s_per_token=svc_dec, overhead_s=0.0, kappa={"en": KAPPA})


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 3.0, allow_nan=False), min_size=2, max_size=40),
    durations=st.lists(st.floats(0.5, 40.0, allow_nan=False), min_size=40, max_size=40),
)
def test_hrrn_no_job_waits_forever_on_a_bounded_stream(gaps, durations):
    n = len(gaps)
    arrival = np.cumsum(gaps)
    d = np.asarray(durations[:n])
    tokens = np.maximum(1, np.rint(KAPPA * d)).astype(np.int64)
    tr = Trace(arrival, d, np.full(n, "en", dtype=object), tokens)
    svc = _single_server()
    res = simulate(tr, "hrrn", svc, max_num_seqs=1, warn_overload=False)
    rec = res.records
    assert res.n_completed == n and rec["finish"].notna().all()
    service = (rec["finish"] - rec["admit"]).to_numpy()
    bound = _hrrn_wait_bound(arrival, rec["finish"].to_numpy(), service, rec["est_service"].to_numpy())
    assert np.all(rec["queue_delay"].to_numpy() <= bound + 1e-9)


def test_the_hrrn_bound_has_teeth_sjf_starves_a_long_job():
    """A stream of short jobs slightly above capacity: SJF starves one long job far past the HRRN bound."""
    svc = _single_server()
    short_d = 2.0
    s_short = float(svc.service_time(short_d, tokens=np.rint(KAPPA * short_d)))
    gap = s_short / 1.05
    n_short = 400
    arrival = np.concatenate([[0.0, 0.01], 0.02 + gap * np.arange(n_short)])
    d = np.concatenate([[short_d, 30.0], np.full(n_short, short_d)])
    tokens = np.maximum(1, np.rint(KAPPA * d)).astype(np.int64)
    tr = Trace(arrival, d, np.full(len(d), "en", dtype=object), tokens)
    out = {}
    for pol in ("sjf", "hrrn"):
        rec = simulate(tr, pol, svc, max_num_seqs=1, warn_overload=False).records
        service = (rec["finish"] - rec["admit"]).to_numpy()
        bound = _hrrn_wait_bound(arrival, rec["finish"].to_numpy(), service, rec["est_service"].to_numpy())
        out[pol] = (rec["queue_delay"].iloc[1], bound[1])
    sjf_wait, b = out["sjf"]
    hrrn_wait, _ = out["hrrn"]
    assert hrrn_wait <= b + 1e-9
    assert sjf_wait > 2 * b  # SJF holds the long job back until the short stream ends
    assert sjf_wait > 10 * hrrn_wait


def _equal_size_trace(n: int, seed: int, grid: float) -> Trace:
    """Equal durations (so equal estimates), random token counts, arrivals on a coarse grid (many ties)."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(np.floor(rng.exponential(0.35, n).cumsum() / grid) * grid)
    d = np.full(n, 8.0)
    tokens = rng.integers(5, 60, n).astype(np.int64)
    return Trace(arrival, d, np.full(n, "en", dtype=object), tokens)


def test_hrrn_with_equal_sizes_is_fcfs_four_jobs_at_zero():
    """The issue's case: four jobs at t = 0 with equal durations are admitted [0, 1, 2, 3] by every engine."""
    tr = Trace(np.zeros(4), np.full(4, 10.0), np.full(4, "en", dtype=object), np.full(4, 33, np.int64))
    for engine in ("python", "numba"):
        for pol in ("fcfs", "sjf", "hrrn"):
            rec = simulate(tr, pol, _single_server(), max_num_seqs=1, engine=engine).records
            assert rec.sort_values("admit", kind="stable")["rid"].tolist() == [0, 1, 2, 3], (engine, pol)
            assert rec["admit"].is_monotonic_increasing and rec["admit"].is_unique, (engine, pol)


@pytest.mark.parametrize("engine", ["python", "numba"])
@pytest.mark.parametrize("M", [1, 3])
def test_hrrn_with_equal_sizes_equals_fcfs(engine, M):
    """Equal estimates: HRRN's ratio order is the arrival order, ties (simultaneous arrivals) in submission order."""
    tr = _equal_size_trace(600, seed=M, grid=1.0)
    assert (np.diff(tr.arrival) == 0).mean() > 0.3  # many simultaneous arrivals
    cols = ["rid", "admit", "first_token", "finish"]
    fcfs = simulate(tr, "fcfs", _single_server(), max_num_seqs=M, engine=engine, warn_overload=False).records
    hrrn = simulate(tr, "hrrn", _single_server(), max_num_seqs=M, engine=engine, warn_overload=False).records
    assert (fcfs["queue_delay"] > 0).mean() > 0.5  # the queue really was busy: ties were decided
    pd.testing.assert_frame_equal(hrrn[cols], fcfs[cols])


# ----------------------------------------------------------------------------- adaptive limits


def test_adaptive_reduces_to_fcfs_sjf_and_hrrn_at_its_limits(loaded_trace):
    def run(pol, **kw):
        return simulate(loaded_trace, pol, max_num_seqs=4, warn_overload=False, policy_params=kw or None).records

    cols = ["rid", "admit", "first_token", "finish"]
    pd.testing.assert_frame_equal(run("adaptive", low_depth=10**9)[cols], run("fcfs")[cols])
    pd.testing.assert_frame_equal(run("adaptive", low_depth=0, ratio_cap=float("inf"))[cols], run("sjf")[cols])
    pd.testing.assert_frame_equal(run("adaptive", low_depth=0, ratio_cap=1.0)[cols], run("hrrn")[cols])
    res = simulate(loaded_trace, "adaptive", max_num_seqs=4, warn_overload=False)
    assert sum(res.mode_counts.values()) == len(loaded_trace)
    assert res.mode_counts["fcfs"] > 0 and res.mode_counts["sjf"] > 0


# ----------------------------------------------------------------------------- overload, throughput


def test_overload_warns_completes_and_reports_queue_growth():
    tr = make_trace("librispeech", rate=40.0, n=6000, seed=9)
    with pytest.warns(OverloadWarning):
        res = simulate(tr, "fcfs", max_num_seqs=8)
    assert res.n_completed == len(tr)
    assert res.overloaded
    capacity = res.summary()["request_throughput"]
    # the queue grows at roughly (arrival rate - service rate)
    assert 0.5 * (tr.rate - capacity) < res.queue_growth_per_s < 1.5 * (tr.rate - capacity)


def test_light_load_does_not_warn():
    tr = make_trace("librispeech", rate=2.0, n=3000, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverloadWarning)
        res = simulate(tr, "fcfs")
    assert not res.overloaded


def test_no_throughput_loss_across_policies_at_saturation():
    """All policies saturate the engine at the same request rate (the study's 'no throughput loss')."""
    tr = make_trace("librispeech", rate=25.0, n=8000, seed=12)
    thr = {}
    for pol in ("fcfs", "sjf", "hrrn", "adaptive"):
        res = simulate(tr, pol, warn_overload=False)
        thr[pol] = res.summary()["request_throughput"]
    assert max(thr.values()) / min(thr.values()) < 1.02, thr
    assert max(thr.values()) < 0.9 * tr.rate  # it really was saturated


# ----------------------------------------------------------------------------- chunks, sinks, inputs


def test_chunked_trace_equals_one_trace_and_sinks_agree(tmp_path):
    chunks = list(trace_chunks("librispeech", rate=6.0, n=5000, chunk=1200, seed=3))
    assert [len(c) for c in chunks] == [1200, 1200, 1200, 1200, 200]
    whole = Trace(
        np.concatenate([c.arrival for c in chunks]),
        np.concatenate([c.duration for c in chunks]),
        np.concatenate([c.language for c in chunks]),
        np.concatenate([c.tokens for c in chunks]),
    )
    assert np.all(np.diff(whole.arrival) >= 0)
    ref = simulate(whole, "sjf").records
    streamed = simulate(iter(chunks), "sjf", flush_every=700).records
    pd.testing.assert_frame_equal(ref, streamed)
    # bounded-memory summary agrees with the exact one
    summ = simulate(iter(chunks), "sjf", sink=SummarySink()).records
    exact = simulate(whole, "sjf").summary()
    assert summ["completed"] == exact["completed"] == 5000
    assert summ["request_throughput"] == pytest.approx(exact["request_throughput"], rel=1e-12)
    assert summ["max_queue_delay_ms"] == pytest.approx(exact["max_queue_delay_ms"], rel=1e-12)
    for m in ("ttft", "e2el", "queue_delay"):
        assert summ[f"mean_{m}_ms"] == pytest.approx(exact[f"mean_{m}_ms"], rel=1e-9)
        for p in (50, 90, 99):
            assert summ[f"p{p}_{m}_ms"] == pytest.approx(exact[f"p{p}_{m}_ms"], rel=0.006, abs=0.1)
    # parquet sink: same rows on disk
    path = simulate(whole, "sjf", sink=ParquetSink(tmp_path / "rec"), flush_every=2000).records
    back = pd.read_parquet(path).sort_values("rid").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, ref[back.columns.tolist()], check_dtype=False)


def test_est_duration_changes_only_the_estimate():
    svc = ServiceModel(encode_s_per_window=0.04, decode_s_per_token=0.018, overhead_s=0.03, kappa={"en": 3.3})
    tr = make_trace("librispeech", rate=3.0, n=500, seed=1)
    est_d = tr.duration * 0.5  # e.g. speech time measured by a VAD
    a = simulate(tr, "fcfs", svc, est_duration=est_d).records
    b = simulate(tr, "fcfs", svc).records
    expect = 0.04 * np.maximum(1, np.ceil(est_d / 30 - 1e-9)) + 3.3 * est_d * 0.018 + 0.03
    np.testing.assert_allclose(a["est_service"], expect, rtol=1e-12)
    pd.testing.assert_frame_equal(a[["admit", "finish"]], b[["admit", "finish"]])  # FCFS ignores sizes
    with pytest.raises(ValueError, match="est_duration"):
        simulate(tr, "fcfs", est_duration=est_d[:10])


@pytest.mark.parametrize("bad", [0, -3])
def test_bad_max_num_seqs(bad):
    tr = make_trace("uniform", rate=1.0, n=5, seed=0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        simulate(tr, "fcfs", max_num_seqs=bad)


def test_unknown_policy_fails_before_any_work():
    def exploding():
        raise AssertionError("the trace was read before the policy name was checked")
        yield  # pragma: no cover

    with pytest.raises(ValueError, match="allowed values: .*fcfs"):
        simulate(exploding(), "shortest")
    assert set(BUILTIN) <= set(policy_names())


def test_collect_sink_empty_trace():
    res = simulate(iter([]), "fcfs", sink=CollectSink())
    assert res.n_arrivals == 0 and len(res.records) == 0


# ----------------------------------------------------------------------------- the Engine's public API (the fleet's)


def test_chunk_jobs_builds_the_jobs_simulate_submits():
    tr = make_trace("mix", rate=5.0, n=40, seed=3)
    jobs = list(chunk_jobs(tr, MG1, rid_base=100))
    assert [j.rid for j in jobs] == list(range(100, 140))
    assert [j.arrival for j in jobs] == tr.arrival.tolist() and [j.tokens for j in jobs] == tr.tokens.tolist()
    assert [j.est_service for j in jobs] == np.broadcast_to(
        MG1.est_service(tr.duration, tr.language), (len(tr),)
    ).tolist()
    assert [j.enc_s for j in jobs] == (MG1.windows(tr.duration) * MG1.encode_s_per_window).tolist()
    half = tr.duration / 2  # est_duration changes the estimate only
    vad = list(chunk_jobs(tr, MG1, half))
    assert [j.est_service for j in vad] == np.broadcast_to(MG1.est_service(half, tr.language), (len(tr),)).tolist()
    assert [j.enc_s for j in vad] == [j.enc_s for j in jobs] and [j.rid for j in vad] == list(range(40))


def test_outstanding_work_counts_estimates_only_and_matches_the_reference():
    eng = Engine("fcfs", MG1, max_num_seqs=3)
    # rid 0, 1 run (estimates 50 and 10 tokens; true 200 each); a slot stays free, so the clock stops at
    # the first step boundary at or after the horizon
    eng.submit(SimJob(0, 0.0, 1.0, 15.0, "en", 200, ENC))
    eng.submit(SimJob(1, 0.0, 1.0, 3.0, "en", 200, ENC))
    est = [50.0, 10.0, 30.0]
    assert eng.outstanding_work(0.0, est) == eng.queued_est == 2.0  # nothing admitted yet
    eng.run_until(0.5)
    eng.submit(SimJob(2, 0.5, 3.0, 9.0, "en", 200, ENC))  # waits until the next decision point
    st2 = MG1.step_s(2)
    done = (0.5 - 2 * ENC) / st2  # decode steps done by 0.5 s
    w = eng.outstanding_work(0.5, est)
    assert w == pytest.approx(estimated_work(eng, 0.5, est), rel=1e-12)
    assert w == pytest.approx(3.0 + (50 - done) * st2, abs=1.01 * st2)  # rid 1 ran past its estimate: zero left
    big = [500.0, 500.0, 30.0]  # another estimate list is not served from the cache
    assert eng.outstanding_work(0.5, big) == pytest.approx(estimated_work(eng, 0.5, big), rel=1e-12)
    assert eng.outstanding_work(0.5, big) == pytest.approx(3.0 + (1000 - 2 * done) * st2, abs=2.01 * st2)
    eng.run_until(float("inf"))  # drained
    assert eng.outstanding_work(1e9, est) == estimated_work(eng, 1e9, est) == 0.0


def test_set_policy_reorders_the_waiting_queue_only():
    eng = Engine("fcfs", MG1, max_num_seqs=1)
    sizes = [5.0, 9.0, 1.0, 4.0]
    for i, s in enumerate(sizes):
        eng.submit(SimJob(i, 0.0, s, s, "en", 10, ENC))
    eng.run_until(1e-9)  # rid 0 admitted; 1, 2, 3 wait
    q = eng.q
    eng.set_policy("FCFS")
    assert eng.q is q  # already that policy: nothing changes
    eng.set_policy("sjf")
    assert eng.q is not q and eng.q.name == "sjf" and sorted(j.rid for j in eng.q) == [1, 2, 3]
    eng.run_until(float("inf"))
    eng.flush()
    r = eng.sink.result().sort_values("admit")
    assert r.rid.tolist() == [0, 2, 3, 1]  # shortest first after the switch; rid 0 kept running
