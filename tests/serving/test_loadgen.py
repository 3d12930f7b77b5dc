"""The load generator against the real server (uvicorn + faster-whisper tiny.en on loopback), an
unreachable port, and a vLLM-shaped endpoint that records what it was sent."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time

import numpy as np
import pandas as pd
import pytest

from asrsched.core.metrics import latency_cdf, summarize
from asrsched.core.workloads import Uniform, make_trace
from asrsched.serving.app import run_in_thread
from asrsched.serving.comparison import records_to_trace, replay_model
from asrsched.serving.config import ServerConfig
from asrsched.serving.loadgen import LOADGEN_COLUMNS, main, replay, run_coro, run_load
from asrsched.serving.request_plan import plan_requests
from asrsched.sim.engine import RECORD_COLUMNS

pytestmark = pytest.mark.slow

SIM_SHAPE = RECORD_COLUMNS + ["queue_delay", "ttft", "e2el"]


@pytest.fixture(scope="module")
def server(sjf_server):
    """The session's real-Whisper server (tests/serving/conftest.py)."""
    return sjf_server


@pytest.fixture(scope="module")
def plan():
    tr = make_trace(Uniform(lo=2.0, hi=8.0), rate=2.0, n=6, seed=3)
    return plan_requests(tr, pool_size=8, min_s=1.5, max_s=9.0, progress=False)


async def _load_with_lateness_probe(url: str, plan: pd.DataFrame, tick: float = 0.02):
    """``run_load`` with a probe on the same event loop: the probe sleeps ``tick`` s again and again and
    records how late each wake-up is. A request due while the loop was busy (a loaded machine, the
    in-process server holding the GIL) is sent late by about as much as the probe wakes late."""
    late: list[float] = []

    async def probe():
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(tick)
            late.append(loop.time() - t - tick)

    task = asyncio.create_task(probe())
    try:
        rec = await run_load(url, plan, progress=False)
    finally:
        task.cancel()
    return rec, max(late, default=0.0)


def test_replay_records_every_request_in_the_simulators_shape(server, plan):
    rel = np.abs(np.log(plan["duration"] / plan["trace_duration"]))
    assert rel.max() < 0.3, plan[["duration", "trace_duration"]]  # nearest clip of the pool
    tick = 0.02
    rec, loop_late = run_coro(_load_with_lateness_probe(server.url, plan, tick))
    assert list(rec.columns) == LOADGEN_COLUMNS and set(SIM_SHAPE) <= set(rec.columns)
    assert len(rec) == len(plan) and rec["rid"].tolist() == list(range(len(plan)))
    assert (rec["status"] == 200).all() and (rec["error"] == "").all(), rec[["status", "error"]]
    assert np.allclose(rec["duration"], plan["duration"])
    # sent on schedule (open loop): never early, and late by no more than the event loop itself was late
    # (the probe's worst wake-up, plus one probe tick and 50 ms); a generator that waited for earlier
    # responses (closed loop) would be late by service times, which the probe does not see
    lag = rec["arrival"] - rec["scheduled"]
    assert (lag >= -1e-3).all() and (lag <= loop_late + tick + 0.05).all(), (lag.tolist(), loop_late)
    # first text before completion, server-reported admission in between
    assert (rec["ttft"] > 0).all() and (rec["ttft"] <= rec["e2el"]).all()
    assert (rec["admit"] >= rec["arrival"]).all() and (rec["admit"] < rec["first_token"]).all()
    assert (rec["first_byte"] <= rec["first_token"] + 1e-6).all() and (rec["end"] >= rec["finish"]).all()
    assert (rec["text_len"] > 0).all() and (rec["tokens"] == rec["text_tokens"] + 1).all()
    assert (rec["policy"] == "sjf").all() and (rec["est_service"] > 0).all()
    srv = {r["rid"]: r for r in __import__("httpx").get(server.url + "/debug/requests").json()}
    for r in rec.itertuples():
        s = srv[int(r.server_rid)]
        assert s["tokens"] == r.tokens and abs(s["duration"] - r.duration) < 1e-6
    s = summarize(rec)
    assert s["completed"] == len(plan) and s["failed"] == 0 and s["p90_e2el_ms"] >= s["p50_e2el_ms"] > 0
    # the same trace through the simulator gives a table of the same shape: they overlay
    from asrsched.serving.experiment import calibrate, simulate_run

    service = calibrate(pd.DataFrame(list(srv.values())).assign(tokens=lambda d: d["tokens"].astype(float)))
    sim = simulate_run(rec, "sjf", service, slots=1)
    assert set(SIM_SHAPE) <= set(sim.columns) and len(sim) == len(rec)
    assert np.allclose(np.sort(sim["arrival"]), np.sort(rec["arrival"]))
    both = pd.concat([rec[SIM_SHAPE].assign(source="real"), sim[SIM_SHAPE].assign(source="sim")])
    for _, g in both.groupby("source"):
        x, y = latency_cdf(g["e2el"].to_numpy())
        assert len(x) == len(rec) and y[-1] == 1.0
    tr = records_to_trace(rec, service, tokens="measured")
    assert np.array_equal(tr.tokens, rec.sort_values("arrival")["tokens"].astype(int).to_numpy())
    # replaying the measured service times: every simulated request is served as long as the real one
    assert (rec["service_s"] > 0).all()
    for r in rec.itertuples():
        s = srv[int(r.server_rid)]
        assert r.service_s == pytest.approx(s["finish"] - s["admit"], abs=1e-6)
    # (on the model a replay runs on: the calibrated one, with a unit step where a busy machine fitted none)
    rm = replay_model(service)
    rp = simulate_run(rec, "sjf", rm, slots=1, tokens="service").set_index("rid").loc[rec["rid"]]
    served = (rp["finish"] - rm.overhead_s - rp["admit"]).to_numpy()
    step = rm.step_s(1)
    enc = rm.windows(rec["duration"].to_numpy()) * rm.encode_s_per_window
    steps = np.maximum(1, np.rint((rec["service_s"].to_numpy() - enc) / step))
    # the simulator serves exactly the replayed size: encoder windows + whole decode steps ...
    np.testing.assert_allclose(served, enc + steps * step, rtol=0, atol=1e-9)
    # ... which is the measured service time to within half a step wherever the calibrated encoder time
    # leaves room for one decode step (a loaded machine can serve a request faster than the fitted encoder)
    fits = rec["service_s"].to_numpy() - enc >= step / 2
    assert fits.any()
    assert np.all(np.abs(served - rec["service_s"].to_numpy())[fits] <= step / 2 + 1e-9)


def test_refusals_errors_and_timeouts_keep_their_rows(plan):
    burst = plan.assign(scheduled=0.0)
    with run_in_thread(ServerConfig(policy="fcfs", local_slots=1, queue_limit=1)) as h:
        rec = run_coro(run_load(h.url, burst, progress=False))
        assert len(rec) == len(burst)
        refused = rec[rec["status"] == 503]
        ok = rec[rec["status"] == 200]
        assert len(refused) >= 1 and len(ok) >= 2 and len(refused) + len(ok) == len(rec)
        assert refused["finish"].isna().all() and refused["e2el"].isna().all()
        assert refused["error"].str.contains("HTTP 503").all() and refused["error"].str.contains("Retry-After").all()
        assert (refused["end"] >= refused["arrival"]).all()
        s = summarize(rec)
        assert s["completed"] == len(ok) and s["failed"] == len(refused)

        # a client timeout well below the fastest service time just measured (a fast machine serves a
        # clip in a fraction of a second)
        slow = burst.head(1)
        to = round(min(0.2, 0.3 * float(ok["service_s"].min())), 3)
        t = run_coro(run_load(h.url, slow, timeout_s=to, progress=False))
        assert len(t) == 1 and t["status"].iloc[0] == 0 and f"client timeout after {to:g} s" in t["error"].iloc[0]
        assert math.isnan(t["finish"].iloc[0]) and t["end"].iloc[0] >= to


def test_unreachable_endpoint_records_every_request_as_failed(plan):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    rec = replay(f"http://127.0.0.1:{port}/v1", plan, progress=False, timeout_s=5)
    assert len(rec) == len(plan) and (rec["status"] == 0).all()
    assert rec["error"].str.contains("ConnectError").all() and rec["finish"].isna().all()
    assert summarize(rec)["failed"] == len(plan)


# ----------------------------------------------------------------------------- a vLLM-shaped endpoint


def _capture_server():
    """A minimal OpenAI/vLLM-shaped transcription endpoint that records each form it receives."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    seen = []

    async def endpoint(request):
        form = await request.form()
        f = form["file"]
        seen.append({k: v for k, v in form.items() if k != "file"} | {"file_bytes": len(await f.read())})
        if form.get("stream") != "true":
            return JSONResponse({"text": "hello world"})

        async def events():
            for piece in ("hello", " world"):
                yield (
                    "data: "
                    + json.dumps(
                        {
                            "id": "trsc-1",
                            "object": "transcription.chunk",
                            "choices": [{"delta": {"content": piece}, "finish_reason": None}],
                        }
                    )
                    + "\n\n"
                )
            yield (
                "data: "
                + json.dumps(
                    {
                        "id": "trsc-1",
                        "object": "transcription.chunk",
                        "choices": [],
                        "usage": {"prompt_tokens": 0, "completion_tokens": 2, "total_tokens": 2},
                    }
                )
                + "\n\n"
            )
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/audio/transcriptions", endpoint, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    th = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not srv.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", seen, srv, th


def test_sends_model_language_and_vllm_xargs_and_reads_vllm_events(plan):
    url, seen, srv, th = _capture_server()
    try:
        rec = run_coro(run_load(url + "/v1", plan.head(3), model="openai/whisper-large-v3", progress=False))
        assert len(seen) == 3
        for form, r in zip(sorted(seen, key=lambda f: f["file_bytes"]), rec.sort_values("duration").itertuples()):
            assert form["model"] == "openai/whisper-large-v3" and form["language"] == "en"
            assert form["stream"] == "true" and form["response_format"] == "json"
            xa = json.loads(form["vllm_xargs"])
            assert xa["language"] == "en" and abs(xa["audio_duration_s"] - r.duration) < 1e-3
        assert (rec["status"] == 200).all() and (rec["text"] == "hello world").all()
        assert (rec["text_tokens"] == 2).all() and (rec["tokens"] == 2).all()
        assert rec["est_service"].isna().all() and rec["admit"].isna().all()  # vLLM reports neither
        assert (rec["ttft"] <= rec["e2el"]).all()
        named = run_coro(run_load(url, plan.head(1), policy="HRRN", progress=False))  # for a switching engine
        assert json.loads(seen[-1]["vllm_xargs"])["policy"] == "hrrn" and (named["status"] == 200).all()
        plain = run_coro(run_load(url, plan.head(1), stream=False, vllm_xargs=False, progress=False))
        assert "vllm_xargs" not in seen[-1] and seen[-1]["stream"] == "false"
        assert plain["text"].iloc[0] == "hello world" and plain["ttft"].iloc[0] == plain["e2el"].iloc[0]
    finally:
        srv.should_exit = True
        th.join(5)


# ----------------------------------------------------------------------------- planning, validation, CLI


def test_exact_audio_matches_trace_durations_and_bad_input_fails_early(plan):
    tr = make_trace("librispeech", rate=1.0, n=2, seed=11)
    ex = plan_requests(tr, audio="exact", progress=False)
    assert np.all(np.abs(ex["duration"] / ex["trace_duration"] - 1) < 0.15), ex[["duration", "trace_duration"]]
    assert set(ex["utt_id"]) == set(tr.extra["utt_id"])
    with pytest.raises(ValueError, match="pool, exact"):
        plan_requests(tr, audio="tts")
    with pytest.raises(ValueError, match="pool_size"):
        plan_requests(tr, pool_size=1)
    for kw, msg in (
        (dict(response_format="srt"), "json, text, verbose_json"),
        (dict(stream=True, response_format="verbose_json"), "stream=True"),
        (dict(timeout_s=0), "timeout_s"),
        (dict(max_concurrency=0), "max_concurrency"),
        (dict(policy="shortest"), "shortest"),
        (dict(policy="sjf", vllm_xargs=False), "needs vllm_xargs"),
    ):
        with pytest.raises(ValueError, match=msg):
            run_coro(run_load("http://127.0.0.1:1", plan, progress=False, **kw))
    with pytest.raises(ValueError, match="http://"):
        run_coro(run_load("127.0.0.1:8000", plan, progress=False))
    with pytest.raises(ValueError, match="missing column"):
        run_coro(run_load("http://127.0.0.1:1", plan.drop(columns="path"), progress=False))


def test_cli_replays_and_writes_records(server, tmp_path, capsys):
    out = tmp_path / "run.parquet"
    # commonvoice_id is Indonesian: tiny.en refuses it with a 400 that the records keep
    rc = main(
        [
            "--url",
            server.url,
            "--rate",
            "4",
            "--n",
            "3",
            "--workload",
            "commonvoice_id",
            "--pool-size",
            "4",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    df = pd.read_parquet(out)
    assert rc == 1 and len(df) == 3 and (df["status"] == 400).all() and df["error"].str.contains("English-only").all()
    rc = main(["--url", server.url, "--rate", "4", "--n", "3", "--pool-size", "4", "--out", str(out), "--quiet"])
    df = pd.read_parquet(out)
    text = capsys.readouterr().out
    assert rc == 0 and len(df) == 3 and (df["status"] == 200).all()
    assert "Successful requests:" in text and "Median E2EL (ms):" in text and "Request throughput" in text
    assert main(["--url", server.url, "--rate", "1", "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["--url", "ftp://x", "--rate", "1"]) == 2
    assert main(["--url", server.url, "--rate", "-1"]) == 2
    assert "rate" in capsys.readouterr().err
