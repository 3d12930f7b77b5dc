"""Long uploads in the simulator: vLLM's chunks submitted together, the CPU server's one job, the sizing rule.

An upload's E2EL ends at its last chunk's finish, in the Python reference and the compiled engine alike (the
records are identical); the chunk sizing changes the size each chunk shows and nothing else; bad parameters are
errors that name them.
"""

import numpy as np
import pandas as pd
import pytest

from asrsched.core.service import default_service_model
from asrsched.core.uploads import (
    UploadRegistry,
    check_chunk,
    chunk_durations,
    n_chunks,
    sized_duration,
)
from asrsched.core.workloads import Trace, make_trace
from asrsched.sim.upload_study import UploadStudyConfig, upload_runs, upload_source, upload_table
from asrsched.sim.uploads import chunk_capacity, simulate_uploads, split_uploads

SM = default_service_model()


def _trace(n=600, rate=4.0, seed=3, share=0.05):
    return make_trace(upload_source(share, 60.0, 600.0), rate=rate, n=n, seed=seed, kappa=dict(SM.kappa))


def test_chunks_and_sizing_rule():
    assert n_chunks(600) == 20 and n_chunks(600.0000000001) == 20 and n_chunks(601) == 21 and n_chunks(0) == 1
    np.testing.assert_allclose(chunk_durations(75), [30, 30, 15])
    assert sized_duration(75, 0, "chunk") == 30 and sized_duration(75, 2, "chunk") == 15
    assert sized_duration(75, 1, "upload") == 75 and sized_duration(75, 1, "remaining") == 45
    # the arrays the simulator passes: the same formula per element
    np.testing.assert_allclose(sized_duration(np.array([75.0, 75, 75]), np.array([0, 1, 2]), "remaining"), [75, 45, 15])
    with pytest.raises(ValueError, match=r"chunk_index 3 is not a chunk of an upload of 75 s \(3 chunk\(s\)"):
        check_chunk(75, 3)
    with pytest.raises(ValueError, match="chunk_index 1.5"):
        sized_duration(75, 1.5)
    with pytest.raises(ValueError, match="upload_duration_s must be a number of seconds >= 0, got -1"):
        check_chunk(-1, 0)
    with pytest.raises(ValueError, match="sizing: unknown sizing 'whole'; allowed values: chunk, upload, remaining"):
        sized_duration(75, 0, "whole")


def test_registry_names_a_reused_upload_id():
    reg = UploadRegistry(capacity=2)
    assert reg.check("a", 75.0) == 75.0 and reg.check("a", 75.0004) == 75.0
    with pytest.raises(ValueError, match="upload id 'a' was seen with 75 s of audio, now with 90 s"):
        reg.check("a", 90)
    reg.check("b", 1)
    reg.check("c", 2)  # the oldest id is forgotten past the capacity
    assert len(reg) == 2 and reg.check("a", 90) == 90


def test_split_uploads_keeps_audio_tokens_and_arrival():
    tr = _trace()
    ct = split_uploads(tr, sizing="remaining")
    k = np.maximum(1, np.ceil(tr.duration / 30 - 1e-9)).astype(int)
    assert len(ct.trace) == k.sum() and (k > 1).sum() >= 20
    per = pd.DataFrame({"u": ct.upload, "d": ct.trace.duration, "t": ct.trace.tokens, "a": ct.trace.arrival})
    g = per.groupby("u")
    np.testing.assert_allclose(g.d.sum().to_numpy(), tr.duration)
    assert (ct.trace.duration <= 30 + 1e-9).all() and (ct.trace.tokens >= 1).all()
    # tokens split in proportion to audio: the sum is kept but for chunks raised to one token
    assert np.all(np.abs(g.t.sum().to_numpy() - tr.tokens) <= k)
    np.testing.assert_array_equal(g.a.first().to_numpy(), tr.arrival)
    assert (g.a.nunique() == 1).all()
    np.testing.assert_allclose(ct.est_duration, tr.duration[ct.upload] - 30 * ct.chunk_index)
    seq = split_uploads(tr, mode="sequence", sizing="upload")
    assert len(seq.trace) == len(tr) and (seq.est_duration == tr.duration).all()
    with pytest.raises(ValueError, match="sizing: the sequence mode runs an upload as one job"):
        split_uploads(tr, mode="sequence", sizing="chunk")
    with pytest.raises(ValueError, match="mode: unknown 'batch'; allowed values: chunks, streamed, sequence"):
        split_uploads(tr, mode="batch")


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "hrrn", "nudge_m4_0.5", "class_sjf_age5"])
@pytest.mark.parametrize("sizing", ["chunk", "upload", "remaining"])
def test_upload_e2el_ends_at_last_chunk_in_both_engines(policy, sizing):
    tr = _trace()
    tr = Trace(
        tr.arrival, tr.duration, tr.language, tr.tokens, extra=pd.DataFrame({"priority": np.arange(len(tr)) % 2})
    )
    cap = chunk_capacity(tr, SM)
    tr = Trace(
        tr.arrival * (len(tr) / tr.arrival[-1]) / (0.9 * cap), tr.duration, tr.language, tr.tokens, extra=tr.extra
    )
    engines = ["python"] if policy.startswith("class_") else ["python", "numba"]  # classes: Python engines only
    got = {}
    for eng in engines:
        res, up = simulate_uploads(tr, policy, SM, sizing=sizing, engine=eng, warn_overload=False)
        assert res.params["engine"] == eng
        r = res.records.sort_values("rid")
        ct = split_uploads(tr, sizing=sizing)
        last = r.groupby(ct.upload).finish.max().to_numpy()
        np.testing.assert_array_equal(up.e2el.to_numpy(), last - tr.arrival)
        np.testing.assert_array_equal(up.n_chunks.to_numpy(), np.bincount(ct.upload))
        assert (up.ttft <= up.e2el).all() and (up.queue_delay >= 0).all()
        got[eng] = (r, up)
    if len(got) == 2:
        cols = ["rid", "admit", "first_token", "finish", "est_service", "tokens"]
        pd.testing.assert_frame_equal(
            got["python"][0][cols].reset_index(drop=True), got["numba"][0][cols].reset_index(drop=True)
        )


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "hrrn"])
@pytest.mark.parametrize("sizing", ["chunk", "upload", "remaining"])
def test_a_streamed_uploads_chunk_is_submitted_when_the_one_before_finishes(policy, sizing):
    tr = _trace(n=500)
    cap = chunk_capacity(tr, SM, mode="streamed")
    assert cap == chunk_capacity(tr, SM)  # the same work: streaming changes the order, not the capacity
    tr = Trace(tr.arrival * (len(tr) / tr.arrival[-1]) / (0.9 * cap), tr.duration, tr.language, tr.tokens)
    res, up = simulate_uploads(tr, policy, SM, mode="streamed", sizing=sizing, warn_overload=False)
    assert res.params["engine"] == "python"
    ct = split_uploads(tr, mode="streamed", sizing=sizing)
    r = res.records.sort_values("rid").reset_index(drop=True)
    later = np.flatnonzero(ct.follows >= 0)
    assert len(later) >= 100 and (ct.follows[later] == later - 1).all()
    # chunk i + 1 arrives as chunk i's last decode step ends (the engine's time, before the client's overhead)
    np.testing.assert_allclose(r.arrival.to_numpy()[later], r.finish.to_numpy()[later - 1] - SM.overhead_s)
    first = ct.follows < 0
    np.testing.assert_array_equal(r.arrival.to_numpy()[first], tr.arrival)
    assert (r.admit >= r.arrival).all()
    # one slot at a time: a chunk is admitted only after the one before it finished
    assert (r.admit.to_numpy()[later] >= r.finish.to_numpy()[later - 1] - SM.overhead_s).all()
    last = r.groupby(ct.upload).finish.max().to_numpy()
    np.testing.assert_array_equal(up.e2el.to_numpy(), last - tr.arrival)
    with pytest.raises(ValueError, match="engine: the compiled engine does not run follows"):
        simulate_uploads(tr, policy, SM, mode="streamed", sizing=sizing, engine="numba")


def test_streamed_and_submitted_together_agree_on_one_upload_alone():
    # one slot and nothing else queued: chunks submitted together and one after another run back to back
    tr = Trace(np.array([0.0]), np.array([95.0]), np.array(["en"], dtype=object), np.array([400]))
    one = {
        m: simulate_uploads(tr, "fcfs", SM, mode=m, max_num_seqs=1, warn_overload=False)[0]
        for m in ("chunks", "streamed")
    }
    cols = ["rid", "admit", "first_token", "finish", "tokens"]
    pd.testing.assert_frame_equal(
        one["chunks"].records.sort_values("rid")[cols].reset_index(drop=True),
        one["streamed"].records.sort_values("rid")[cols].reset_index(drop=True),
    )
    # a short request arriving during the upload's first chunk: FCFS puts it behind the three remaining chunks
    # submitted together, but before the streamed upload's next chunk (which arrives later)
    tr2 = Trace(np.array([0.0, 1.0]), np.array([95.0, 5.0]), np.array(["en", "en"], dtype=object), np.array([400, 20]))
    e2el = {
        m: simulate_uploads(tr2, "fcfs", SM, mode=m, max_num_seqs=1, warn_overload=False)[1].e2el[1]
        for m in ("chunks", "streamed")
    }
    assert e2el["streamed"] < e2el["chunks"] / 2


def test_follows_names_a_bad_row():
    from asrsched.sim.engine import simulate

    tr = _trace(n=20)
    with pytest.raises(ValueError, match="follows: row 3 follows 5, which is not -1 or an earlier row"):
        simulate(tr, "fcfs", SM, follows=np.array([-1, -1, -1, 5] + [-1] * 16))
    with pytest.raises(ValueError, match="follows: need 20 integers"):
        simulate(tr, "fcfs", SM, follows=np.zeros(3, int))
    # no row follows another: the reference's records are those of a run without follows
    a = simulate(tr, "sjf", SM, follows=np.full(20, -1), warn_overload=False).records
    b = simulate(tr, "sjf", SM, engine="python", warn_overload=False).records
    pd.testing.assert_frame_equal(a, b)


def test_sizing_changes_only_the_size_a_chunk_shows():
    tr = _trace(n=400)
    est = {s: split_uploads(tr, sizing=s) for s in ("chunk", "upload")}
    res = {s: simulate_uploads(tr, "fcfs", SM, sizing=s, warn_overload=False)[1] for s in est}
    # FCFS never reads sizes: the same schedule under every sizing
    pd.testing.assert_frame_equal(res["chunk"], res["upload"])
    r_sjf = {s: simulate_uploads(tr, "sjf", SM, sizing=s, warn_overload=False)[0].records for s in est}
    up = est["chunk"].upload
    long_chunk = np.isin(up, np.flatnonzero(tr.duration > 30))
    e_chunk = r_sjf["chunk"].sort_values("rid").est_service.to_numpy()
    e_up = r_sjf["upload"].sort_values("rid").est_service.to_numpy()
    np.testing.assert_allclose(e_chunk[~long_chunk], e_up[~long_chunk])
    assert (e_up[long_chunk] > e_chunk[long_chunk]).all()


def test_upload_study_small():
    cfg = UploadStudyConfig(rhos=(0.8,), seeds=2, n_requests=400, policies=("fcfs", "sjf"), upload_share=0.05)
    runs = upload_runs(cfg, workers=1, progress=False)
    assert len(runs) == 2 * (2 * 3 + 2 * 3 + 2)  # chunks and streamed under each sizing, and one job
    assert runs.n_uploads.min() >= 5 and (runs.upload_p50_e2el_ms > runs.short_p50_e2el_ms).all()
    t = upload_table(runs)
    base = t[t.policy == "fcfs/chunks/chunk"].iloc[0]
    assert base.short_p50_e2el_ms_change_pct == pytest.approx(0.0)
    # SJF with chunks sized by their upload serves short requests no later than SJF on chunk-sized chunks
    sjf = t.set_index("policy")
    assert sjf.loc["sjf/chunks/upload", "short_p90_e2el_ms"] <= 1.05 * sjf.loc["sjf/chunks/chunk", "short_p90_e2el_ms"]
    with pytest.raises(ValueError, match="upload_lo_s: need 30 s < upload_lo_s <= upload_hi_s"):
        UploadStudyConfig(upload_lo_s=20)
    with pytest.raises(ValueError, match="sizings: unknown sizing 'all'"):
        UploadStudyConfig(sizings=("all",))
    with pytest.raises(ValueError, match="policies: unknown policy"):
        UploadStudyConfig(policies=("fcfs", "sjff"))


def test_uploads_command_names_the_flag(capsys):
    from asrsched.app.upload_cmd import main

    assert main(["--upload-s", "10", "600"]) == 2
    assert "asrsched uploads: --upload-s: need 30 s < upload_lo_s" in capsys.readouterr().err
    assert main(["--policies", "fcfs", "sjff"]) == 2
    assert "--policies: unknown policy" in capsys.readouterr().err
    assert main(["--rhos", "0.8", "--seeds", "2", "--n-requests", "300", "--policies", "fcfs", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "fcfs/chunks/chunk" in out and "fcfs/sequence/upload" in out
