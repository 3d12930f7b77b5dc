"""The duration middleware for vLLM's OpenAI server, in front of a real Starlette app over real HTTP.

The official ``openai`` client posts to an app that records the form it receives (what vLLM's
endpoint would parse), wrapped in :class:`asrsched.vllm_plugin.middleware.DurationMiddleware`.
The real-vLLM check (SJF order for a client that sends no ``vllm_xargs``) is in
``tests/vllm_plugin/test_vllm_server.py``.
"""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np
import pytest
from extras import need

need("soundfile")

import soundfile as sf

from asrsched.vllm_plugin.middleware import STATS, DurationMiddleware, parse_multipart, rewrite_multipart

SR = 16000


def wav(seconds: float, *, speech_s: float | None = None, seed: int = 0) -> bytes:
    """A WAV of ``seconds``: a tone for ``speech_s`` seconds in the middle, silence around it."""
    n = int(seconds * SR)
    x = np.zeros(n, np.float32)
    s = int((speech_s if speech_s is not None else seconds) * SR)
    a = (n - s) // 2
    t = np.arange(s) / SR
    x[a : a + s] = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    x += 1e-4 * np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    b = io.BytesIO()
    sf.write(b, x, SR, format="WAV", subtype="PCM_16")
    return b.getvalue()


@pytest.fixture(scope="module")
def echo_server():
    """uvicorn on loopback: an app that answers with the multipart fields it got, behind the middleware."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from asrsched.serving.app import bind_socket

    async def echo(request):
        form = await request.form()
        fields = {
            k: (v if isinstance(v, str) else f"<file {len(await v.read())} bytes>") for k, v in form.multi_items()
        }
        return JSONResponse({"text": json.dumps(fields)})

    app = DurationMiddleware(
        Starlette(
            routes=[
                Route("/v1/audio/transcriptions", echo, methods=["POST"]),
                Route("/v1/other", echo, methods=["POST"]),
            ]
        )
    )
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    th.join(10)


def test_openai_client_without_xargs_gets_the_duration_injected(echo_server):
    OpenAI = need("openai").OpenAI  # noqa: N806 (installed with vLLM; the client under test)

    client = OpenAI(base_url=echo_server + "/v1", api_key="none")
    raw = client.audio.transcriptions.with_raw_response.create(
        model="whisper", file=("a.wav", wav(7.25)), language="en"
    )
    got = json.loads(raw.parse().text)
    assert json.loads(got["vllm_xargs"]) == {"audio_duration_s": 7.25}
    assert got["file"] == f"<file {len(wav(7.25))} bytes>" and got["model"] == "whisper" and got["language"] == "en"
    assert raw.headers["x-asrsched-audio-duration-s"] == "7.25"
    assert int(raw.headers["x-asrsched-middleware-us"]) >= 0


def test_bracketed_fields_from_a_dict_are_merged_into_one_json_field(echo_server):
    OpenAI = need("openai").OpenAI  # noqa: N806

    client = OpenAI(base_url=echo_server + "/v1", api_key="none")
    r = client.audio.transcriptions.create(
        model="whisper",
        file=("a.wav", wav(3.0)),
        extra_body={"vllm_xargs": {"tag": "x1", "priority_hint": 2.5, "ids": [1, 2]}},
    )
    got = json.loads(r.text)
    assert not any(k.startswith("vllm_xargs[") for k in got), got  # vLLM would have dropped these
    assert json.loads(got["vllm_xargs"]) == {"tag": "x1", "priority_hint": 2.5, "ids": [1, 2], "audio_duration_s": 3.0}
    # a duration the client sends wins (as a JSON string, the form vLLM documents)
    r = client.audio.transcriptions.create(
        model="whisper",
        file=("a.wav", wav(3.0)),
        extra_body={"vllm_xargs": json.dumps({"audio_duration_s": 9.0, "k": "v"})},
    )
    assert json.loads(json.loads(r.text)["vllm_xargs"]) == {"audio_duration_s": 9.0, "k": "v"}


def test_vad_speech_duration_when_asked_and_bad_bodies_pass_through(echo_server):
    import httpx

    body = wav(10.0, speech_s=4.0)
    r = httpx.post(
        echo_server + "/v1/audio/transcriptions",
        files={"file": ("a.wav", body, "audio/wav")},
        data={"vllm_xargs": json.dumps({"asrsched_vad": "energy"})},
    )
    xa = json.loads(json.loads(r.json()["text"])["vllm_xargs"])
    assert xa["audio_duration_s"] == 10.0 and "asrsched_vad" not in xa
    assert xa["speech_duration_s"] == pytest.approx(4.0, abs=0.5)
    # not audio / bad JSON / other paths / not multipart: exactly what the client sent
    for files, data, path in (
        ({"file": ("t.txt", b"plain text", "text/plain")}, {}, "/v1/audio/transcriptions"),
        ({"file": ("a.wav", body, "audio/wav")}, {"vllm_xargs": "{bad"}, "/v1/audio/transcriptions"),
        ({"file": ("a.wav", body, "audio/wav")}, {}, "/v1/other"),
    ):
        r = httpx.post(echo_server + path, files=files, data=data)
        got = json.loads(r.json()["text"])
        assert got.get("vllm_xargs") == data.get("vllm_xargs") and "x-asrsched-audio-duration-s" not in r.headers


def test_rewrite_is_byte_exact_for_the_other_parts_and_its_cost_is_small():
    import httpx

    sizes = {}
    for seconds in (5.0, 30.0, 600.0):
        audio = wav(seconds)
        req = httpx.Request(
            "POST",
            "http://x/v1/audio/transcriptions",
            files={"file": ("a.wav", audio, "audio/wav")},
            data={"model": "m", "language": "en", "vllm_xargs[tag]": "t"},
        )
        body, ctype = req.read(), req.headers["content-type"]
        new, xa = rewrite_multipart(body, ctype)
        parts = {
            p["name"]: new[p["start"] : p["end"]] for p in parse_multipart(new, ctype.split("boundary=")[1].encode())
        }
        assert parts["file"] == audio and parts["model"] == b"m" and parts["language"] == b"en"
        want = {"tag": "t", "audio_duration_s": seconds}
        if seconds > 30:  # a long upload: its id and total duration for the plug-in's upload sizing
            want.update(upload_duration_s=seconds, upload_id=xa["upload_id"])
        assert json.loads(parts["vllm_xargs"]) == want == xa
        reps = 20 if seconds < 100 else 5
        t0 = time.perf_counter()
        for _ in range(reps):
            rewrite_multipart(body, ctype)
        sizes[seconds] = (time.perf_counter() - t0) / reps
    print(
        "\nmiddleware rewrite cost per request: " + ", ".join(f"{s:g} s WAV {1e6 * c:.0f} us" for s, c in sizes.items())
    )
    # header-only: a 10-minute upload costs a buffer copy, not a decode (generous bound for a busy machine)
    assert sizes[5.0] < 0.01 and sizes[600.0] < 0.25
    assert STATS.summary()["requests"] >= 0
