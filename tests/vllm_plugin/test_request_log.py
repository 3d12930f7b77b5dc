"""The middleware's request log: one JSON line per audio request through a real HTTP server (uvicorn behind the
middleware), rotated at its size bound, and never in the request's way: a file that cannot be written, or a
writer stuck on a slow disk, costs lines (counted), not requests or time."""

from __future__ import annotations

import json
import threading
import time

import pytest
from extras import need

need("httpx")
need("soundfile")
from test_middleware import wav  # noqa: E402  (the same WAV maker)

from asrsched.vllm_plugin.middleware import DurationMiddleware  # noqa: E402
from asrsched.vllm_plugin.request_log import FIELDS, RequestLog, from_env  # noqa: E402


def serve(log):
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from asrsched.serving.app import bind_socket

    async def answer(request):
        await request.form()
        return JSONResponse({"text": "ok"})

    app = DurationMiddleware(
        Starlette(routes=[Route("/v1/audio/transcriptions", answer, methods=["POST"])]), request_log=log
    )
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.02)
    return server, th, f"http://127.0.0.1:{sock.getsockname()[1]}"


def post(url, seconds, **data):
    import httpx

    return httpx.post(url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav(seconds))}, data=data, timeout=30)


def test_each_audio_request_leaves_one_line(tmp_path):
    log = RequestLog(tmp_path / "requests.jsonl")
    server, th, url = serve(log)
    try:
        t0 = time.time()
        assert post(url, 7.25, language="id", model="whisper").status_code == 200
        assert post(url, 61.0, language="en", priority="2").status_code == 200
    finally:
        server.should_exit = True
        th.join(10)
    assert log.flush()
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(list(x) == list(FIELDS) for x in lines)
    a, b = lines
    assert a["audio_duration_s"] == 7.25 and a["language"] == "id" and a["n_chunks"] == 1 and a["status"] == 200
    assert b["audio_duration_s"] == 61.0 and b["n_chunks"] == 3 and b["priority"] == 2
    assert t0 <= a["arrival_unix_s"] <= b["arrival_unix_s"] and 0 < a["e2el_s"] < 30
    assert a["speech_duration_s"] is None and a["path"] == "/v1/audio/transcriptions"
    text = (tmp_path / "requests.jsonl").read_text()
    assert "RIFF" not in text and "ok" not in text  # no audio, no transcript
    assert log.stats() == {"written": 2, "dropped": 0, "errors": 0}


def test_rotation_keeps_the_bound(tmp_path):
    log = RequestLog(tmp_path / "r.jsonl", max_bytes=1024, keep=2)
    rec = {k: 1.0 for k in FIELDS}
    for _ in range(60):
        log.write(rec)
    assert log.flush()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["r.jsonl", "r.jsonl.1", "r.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 1024 for f in files)
    assert log.stats()["written"] == 60


def test_a_log_that_cannot_be_written_never_fails_or_delays_a_request(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    broken = RequestLog(blocker / "requests.jsonl")  # its folder is a file: every write fails
    server, th, url = serve(broken)
    try:
        assert all(post(url, 2.0).status_code == 200 for _ in range(3))
    finally:
        server.should_exit = True
        th.join(10)
    assert broken.flush() and broken.stats() == {"written": 0, "dropped": 0, "errors": 3}
    # a writer stuck on a slow disk: requests take no longer, lines beyond the queue are dropped and counted
    slow = RequestLog(tmp_path / "slow.jsonl", queue_size=2)
    monkeypatch.setattr(slow, "_append", lambda line: time.sleep(2.0))
    server, th, url = serve(slow)
    try:
        post(url, 1.0)  # warm the connection path
        t = time.perf_counter()
        assert all(post(url, 1.0).status_code == 200 for _ in range(5))
        per_request = (time.perf_counter() - t) / 5
    finally:
        server.should_exit = True
        th.join(10)
    assert per_request < 0.5, per_request
    assert slow.stats()["dropped"] >= 2


def test_configuration_from_the_environment(tmp_path):
    assert from_env({}) is None
    log = from_env({"ASRSCHED_REQUEST_LOG": str(tmp_path / "e.jsonl"), "ASRSCHED_REQUEST_LOG_MAX_MB": "0.5"})
    assert log.max_bytes == 2**19 and log.keep == 3
    with pytest.raises(ValueError, match="ASRSCHED_REQUEST_LOG_MAX_MB must be a number"):
        from_env({"ASRSCHED_REQUEST_LOG": "x", "ASRSCHED_REQUEST_LOG_MAX_MB": "big"})
    with pytest.raises(ValueError, match="max_bytes: a log file needs at least 1024 bytes"):
        RequestLog(tmp_path / "x", max_bytes=10)
