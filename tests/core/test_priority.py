"""Priority classes (class first, the duration policy inside a class, an optional aging bound): the queue's order
against its definition, names registered on first use, bad input named; in the simulator the higher class's
latency falls, and with the aging bound no lower-class request waits longer than the bound plus one service
time."""

import numpy as np
import pandas as pd
import pytest

from asrsched.core.policies import Job, make_queue, validate_policies
from asrsched.core.priority import ClassQueue, check_priority
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import Trace, make_trace
from asrsched.sim.engine import simulate

SVC = ServiceModel(encode_s_per_window=0.05, decode_s_per_token=0.02, overhead_s=0.0, kappa={"en": 3.3})


def test_class_first_then_the_inner_policy_then_aged_requests():
    q = make_queue("class_sjf")
    jobs = [
        Job(rid=i, arrival=float(i), est_service=s, priority=p)
        for i, (s, p) in enumerate([(5, 1), (1, 1), (9, 0), (3, 0)])
    ]
    for j in jobs:
        q.push(j)
    assert [q.pop(now=10.0).rid for _ in range(4)] == [3, 2, 1, 0]  # class 0 by SJF, then class 1 by SJF
    aged = ClassQueue("sjf", aging_s=5.0)
    for j in jobs:
        aged.push(j)
    # at t = 6 both class-1 jobs have waited >= 5 s (6 and 5): they go first, the longest-waiting first
    assert [aged.pop(now=6.0).rid for _ in range(4)] == [0, 1, 3, 2]
    for j in jobs:
        aged.push(j)
    assert [aged.pop(now=5.5).rid for _ in range(4)] == [0, 3, 2, 1]  # at 5.5 s only the first has aged
    assert len(aged) == 0 and not aged
    assert validate_policies(["CLASS_HRRN_AGE30"]) == ["class_hrrn_age30"]
    assert make_queue("class_gamma_boost_0.5_age10").aging_s == 10.0
    with pytest.raises(ValueError, match="aging_s: the aging bound must be a number of seconds >= 0"):
        ClassQueue("fcfs", aging_s=-1.0)
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        make_queue("class_fifo")
    with pytest.raises(ValueError, match=r"policy 'class_sjf_agesoon': write class_<policy>"):
        make_queue("class_sjf_agesoon")
    assert check_priority(None) == 0 and check_priority("2") == 2
    with pytest.raises(ValueError, match="priority: must be a whole number"):
        check_priority("high")


def _two_classes(rate, n, seed, share_high=0.5):
    tr = make_trace("uniform", rate=rate, n=n, seed=seed, kappa=3.3)
    prio = (np.random.default_rng(seed).random(n) >= share_high).astype(int)  # 0: interactive, 1: batch
    return Trace(tr.arrival, tr.duration, tr.language, tr.tokens, extra=pd.DataFrame({"priority": prio})), prio


def test_the_aging_bound_holds_in_the_simulator():
    """One slot at load 0.9, 70 % interactive (class 0), a 10 s bound. Strict classes let batch requests (class 1)
    wait over 100 s. With the bound, once a batch request has waited 10 s only requests that aged before it are
    admitted ahead of it, so it waits at most the bound, plus the request in service, plus the batch requests
    that aged before it (no non-preemptive order can do better when two age at once): here at most 1.5 service
    times past the bound, and most batch requests that age start within one."""
    probe = make_trace("uniform", rate=1.0, n=2000, seed=1, kappa=3.3)
    rate = 0.9 / float(np.mean(SVC.est_service(probe.duration, probe.language)))
    tr, prio = _two_classes(rate, 8000, 4, share_high=0.7)
    names = ("fcfs", "class_fcfs", "class_fcfs_age10")
    runs = {p: simulate(tr, p, SVC, max_num_seqs=1, warn_overload=False).records.sort_values("rid") for p in names}
    r = runs["class_fcfs_age10"]
    arrival, admit = r.arrival.to_numpy(), r.admit.to_numpy()
    service = (r.finish - r.admit).to_numpy()
    wait = {p: (x.admit - x.arrival).to_numpy() for p, x in runs.items()}
    low = prio == 1
    assert wait["class_fcfs"][low].max() > 100  # strict classes starve the batch class
    late = np.flatnonzero(low & (wait["class_fcfs_age10"] > 10))
    assert len(late) > 50
    for j in late:  # after aging, passed only by requests that aged before it
        aged_at = arrival[j] + 10
        ahead = np.flatnonzero((admit > aged_at) & (admit < admit[j]))
        assert np.all(low[ahead] & (arrival[ahead] < arrival[j])), j
    excess = wait["class_fcfs_age10"][late] - 10
    assert excess.max() <= 1.5 * service.max() and np.mean(excess <= service.max()) > 0.9
    # the interactive class: best under strict classes, and the bound costs it
    p90 = {p: np.percentile(w[~low], 90) for p, w in wait.items()}
    assert p90["class_fcfs"] < p90["class_fcfs_age10"] and p90["class_fcfs"] < 0.5 * p90["fcfs"]
    hi = runs["class_fcfs"][~low]  # FCFS inside the class
    assert (np.diff(hi.sort_values("admit").arrival.to_numpy()) > 0).all()


def test_the_cpu_server_reads_a_requests_priority_and_names_a_bad_one():
    """The HTTP form's ``priority`` (or ``vllm_xargs``'s) reaches the job the server queues; a value that is not a
    whole number is a 400 naming the parameter."""
    import asyncio
    import io
    import json

    from extras import need

    need("starlette")
    import soundfile as sf
    from starlette.datastructures import FormData, UploadFile

    from asrsched.serving.config import ServerConfig
    from asrsched.serving.form import parse_form
    from asrsched.serving.policy_server import PolicyServer

    b = io.BytesIO()
    sf.write(b, np.zeros(16000, np.float32), 16000, format="WAV")
    cfg = ServerConfig(policy="class_sjf", warmup=False)

    def parse(**fields):
        form = FormData([("file", UploadFile(io.BytesIO(b.getvalue()), filename="a.wav")), *fields.items()])
        return asyncio.run(parse_form(form, "transcribe", cfg, None))

    _, dur, f = parse(priority="1")
    assert f["priority"] == 1 and parse(vllm_xargs=json.dumps({"priority": 2}))[2]["priority"] == 2
    assert parse()[2]["priority"] == 0
    bad = parse(priority="urgent")
    assert (
        bad.status_code == 400 and b"priority must be a whole number" in bad.body and b'"param":"priority"' in bad.body
    )
    srv = PolicyServer(cfg)
    kw = dict(language="en", sched_s=0.0, model="tiny.en", response_format="json", stream=False)
    jobs = [srv.make_request(b"", d, priority=p, **kw).job for d, p in ((2.0, 1), (9.0, 0), (5.0, 0))]
    q = make_queue(cfg.policy)
    for j in jobs:
        q.push(j)
    assert [q.pop(now=1.0).duration for _ in range(3)] == [5.0, 9.0, 2.0]


def test_the_vllm_plugin_queue_honours_the_request_priority():
    """vLLM's ``Request.priority`` reaches the plug-in's job: class first, SJF inside the class."""
    from types import SimpleNamespace

    from asrsched.vllm_plugin.scheduler import PolicyRequestQueue

    def req(i, dur, prio):
        xa = {"audio_duration_s": dur, "language": "en"}
        return SimpleNamespace(
            request_id=f"r{i}",
            arrival_time=100.0 + i,
            priority=prio,
            sampling_params=SimpleNamespace(extra_args=xa, max_tokens=440),
            status=SimpleNamespace(name="WAITING"),
        )

    q = PolicyRequestQueue("class_sjf")
    for r in (req(0, 3.0, 1), req(1, 20.0, 0), req(2, 8.0, 0), req(3, 1.0, 1)):
        q.add_request(r)
    got = []
    while q:
        got.append(q.pop_request().request_id)
    assert got == ["r2", "r1", "r3", "r0"]


def test_the_class_study_reports_the_trade_and_the_bound():
    """The interactive/batch study on four slots: strict classes cut the interactive P90 and stretch the batch
    class's worst wait; with each bound the worst batch wait stays within the bound plus one service time; the
    batch class's throughput is the same (the engine serves the same work)."""
    from asrsched.sim.class_study import ClassStudyConfig, class_runs, class_table

    cfg = ClassStudyConfig(rhos=(0.9,), seeds=6, n_requests=1000, aging_s=(10.0, 60.0), service=SVC.to_dict())
    runs = class_runs(cfg, workers=1, progress=False)
    assert len(runs) == 6 * 4 and set(runs.policy) == set(cfg.policies())
    tab = class_table(runs).set_index("policy")
    assert tab.loc["class_sjf", "interactive_p90_e2el_ms_change_ci_high"] < 0
    assert tab.loc["class_sjf", "batch_max_wait_ms_change_pct"] > 0
    for a in (10.0, 60.0):
        row = tab.loc[f"class_sjf_age{a:g}"]
        assert row.worst_past_bound_s <= row.max_service_s
    assert abs(tab.batch_throughput_rps_change_pct).max() < 2.0
    with pytest.raises(ValueError, match="interactive_share: must lie in"):
        ClassStudyConfig(interactive_share=0.0)


def test_a_transcription_requests_priority_travels_in_vllm_xargs(caplog):
    """vLLM's transcription API has no priority field: the middleware moves the form's ``priority`` into
    ``vllm_xargs``, where the plug-in reads it; a value that is not a whole number is logged and served as 0."""
    import io
    import json
    from types import SimpleNamespace

    from extras import need

    need("soundfile")
    import soundfile as sf

    from asrsched.vllm_plugin.middleware import rewrite_multipart
    from asrsched.vllm_plugin.request_queue import request_priority

    b = io.BytesIO()
    sf.write(b, np.zeros(16000, np.float32), 16000, format="WAV")
    bnd = "XyZ"
    body = (
        f'--{bnd}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'.encode()
        + b.getvalue()
        + f'\r\n--{bnd}\r\nContent-Disposition: form-data; name="priority"\r\n\r\n2\r\n--{bnd}--\r\n'.encode()
    )
    new, xargs = rewrite_multipart(body, f"multipart/form-data; boundary={bnd}")
    assert xargs["priority"] == 2 and b'name="priority"' not in new and b'"priority": 2' in new

    def req(xa, prio=0):
        return SimpleNamespace(request_id="r", priority=prio, sampling_params=SimpleNamespace(extra_args=xa))

    assert request_priority(req({"priority": 2})) == 2 and request_priority(req({}, prio=3)) == 3
    with caplog.at_level("WARNING", logger="asrsched.vllm_plugin.scheduler"):
        assert request_priority(req({"priority": "urgent"})) == 0
    assert "priority: must be a whole number" in caplog.text and "served as priority 0" in caplog.text
    assert json.loads(json.dumps(xargs))["audio_duration_s"] == 1.0
