"""Load generator: replay a request trace against any OpenAI-compatible transcription endpoint.

A trace (:func:`asrsched.core.workloads.make_trace`: arrival process x duration source)
becomes a *plan* (:func:`asrsched.serving.request_plan.plan_requests`: a real speech clip per request).
:func:`run_load` then sends every request at its arrival time
(open loop, like ``vllm bench serve``; ``max_concurrency`` caps requests in flight),
streaming by default so that the time to the first transcribed text is measured.

Every request is sent ``model``, ``language`` (always: without it vLLM runs an
extra language-detection request), ``response_format`` and ``stream``, and — unless
``vllm_xargs=False`` — ``vllm_xargs = {"audio_duration_s": d, "language": lang}``,
the per-request metadata vLLM passes to its scheduler (the :mod:`asrsched.vllm_plugin.scheduler`
reads it).

Records: one row per planned request, **none dropped** — refused, failed and
timed-out requests keep their row with ``status`` (HTTP status; 0 when no response
came), ``error`` and ``finish = NaN`` (so :func:`asrsched.core.metrics.summarize` counts
them as failed). Columns are the simulator's (:data:`asrsched.sim.records.RECORD_COLUMNS`:
``rid, arrival, duration, language, est_service, tokens, admit, first_token, finish``
and the derived ``queue_delay, ttft, e2el``), so a real run and a simulated run
overlay on one figure, plus ``scheduled, sent, first_byte, end, status, error,
text, text_len, text_tokens, trace_duration, utt_id, clip, server_rid, policy``.
Times are seconds from the start of the run; ``arrival`` is when the request was
actually sent (``scheduled`` when it was due). Without streaming, ``first_token``
is the completion time (TTFT = E2EL), as in ``vllm bench serve``. ``admit``,
``est_service`` and ``service_s`` (admission to completion in the server) are filled
when the server reports them (this package's server does, in its ``asrsched``
response field); else NaN.

CLI: ``asrsched loadgen --url http://127.0.0.1:8000 --rate 2 --n 50 --workload librispeech
--out run.parquet``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.core.policies import validate_policies
from asrsched.core.workloads import Trace, make_trace
from asrsched.serving.request_plan import AUDIO_MODES, plan_requests
from asrsched.vllm_plugin.size_estimate import XARG_DURATION, XARG_LANGUAGE, XARG_POLICY

__all__ = [
    "LOADGEN_COLUMNS",
    "run_load",
    "replay",
    "format_summary",
    "transcription_url",
    "run_coro",
    "main",
]

_SIM_COLUMNS = ["rid", "arrival", "duration", "language", "est_service", "tokens", "admit", "first_token", "finish"]
LOADGEN_COLUMNS = _SIM_COLUMNS + [
    "queue_delay",
    "ttft",
    "e2el",
    "scheduled",
    "sent",
    "first_byte",
    "end",
    "status",
    "error",
    "text",
    "text_len",
    "text_tokens",
    "service_s",
    "trace_duration",
    "utt_id",
    "clip",
    "server_rid",
    "policy",
]
RESPONSE_FORMATS = ("json", "text", "verbose_json")


def transcription_url(url: str) -> str:
    """The full ``/v1/audio/transcriptions`` URL for a base URL (``http://host:port``, ``.../v1``, or full)."""
    u = str(url).strip().rstrip("/")
    if not (u.startswith("http://") or u.startswith("https://")):
        raise ValueError(f"url must start with http:// or https://, got {url!r}")
    if u.endswith("/v1/audio/transcriptions"):
        return u
    if u.endswith("/v1"):
        return u + "/audio/transcriptions"
    return u + "/v1/audio/transcriptions"


# ----------------------------------------------------------------------------- sending


def _error_message(body: bytes | str) -> str:
    s = body.decode(errors="replace") if isinstance(body, (bytes, bytearray)) else str(body)
    with contextlib.suppress(Exception):
        obj = json.loads(s)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return s.strip()[:500]


async def _one(
    client,
    url: str,
    row: dict,
    data: bytes,
    fields: dict,
    t0: float,
    stream: bool,
    fmt: str,
    timeout_s: float,
    rec: dict,
) -> None:
    """Send one request and fill ``rec`` (times relative to ``t0``); never raises."""
    import httpx

    now = lambda: time.monotonic() - t0  # noqa: E731
    rec["sent"] = rec["arrival"] = now()
    files = {"file": (Path(row["path"]).name, data, "audio/wav")}
    pieces: list[str] = []
    extra: dict = {}
    usage: dict = {}

    async def go():
        async with client.stream("POST", url, data=fields, files=files) as r:
            rec["first_byte"] = now()
            rec["status"] = r.status_code
            if r.status_code != 200:
                body = await r.aread()
                rec["error"] = f"HTTP {r.status_code}: {_error_message(body)}"
                if r.headers.get("retry-after"):
                    rec["error"] += f" (Retry-After: {r.headers['retry-after']})"
                return
            if stream:
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        rec["finish"] = now()
                        return
                    try:
                        obj = json.loads(payload)
                    except ValueError:
                        rec["error"] = f"unparseable event: {payload[:200]}"
                        return
                    if "error" in obj or obj.get("object") == "error":
                        rec["error"] = f"stream error: {_error_message(payload)}"
                        return
                    for ch in obj.get("choices") or []:
                        c = (ch.get("delta") or {}).get("content") or ""
                        if c:
                            if math.isnan(rec["first_token"]):
                                rec["first_token"] = now()
                            pieces.append(c)
                    if obj.get("usage"):
                        usage.update(obj["usage"])
                    if obj.get("asrsched"):
                        extra.update(obj["asrsched"])
                rec["error"] = "stream ended without [DONE]"
            else:
                body = await r.aread()
                rec["finish"] = rec["first_token"] = now()
                if fmt == "text":
                    pieces.append(body.decode(errors="replace"))
                else:
                    obj = json.loads(body)
                    pieces.append(str(obj.get("text", "")))
                    usage.update(obj.get("usage") or {})
                    extra.update(obj.get("asrsched") or {})

    try:
        await asyncio.wait_for(go(), timeout_s)
    except TimeoutError:
        rec["error"] = f"client timeout after {timeout_s:g} s (the client disconnected)"
        rec["finish"] = math.nan
    except asyncio.CancelledError:  # the run was stopped (deadline, Ctrl-C): the row stays, marked
        rec["error"] = (
            rec["error"]
            or f"cancelled after {now() - rec['sent']:.3g} s: the run was stopped (the client disconnected)"
        )
        rec["finish"] = math.nan
        rec["end"] = now()
        raise
    except httpx.HTTPError as e:
        rec["error"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        rec["finish"] = math.nan
    except Exception as e:  # a malformed answer must not lose the record
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["finish"] = math.nan
    rec["end"] = now()
    if rec["error"]:
        rec["finish"] = math.nan
    text = "".join(pieces)
    rec["text"] = text
    rec["text_len"] = len(text)
    tt = usage.get("completion_tokens", usage.get("output_tokens"))
    rec["text_tokens"] = (
        float(tt) if isinstance(tt, (int, float)) else (float(len(pieces)) if stream and pieces else math.nan)
    )
    steps = extra.get("decode_steps")
    rec["tokens"] = float(steps) if isinstance(steps, (int, float)) else rec["text_tokens"]
    if isinstance(extra.get("est_service_s"), (int, float)):
        rec["est_service"] = float(extra["est_service_s"])
    if isinstance(extra.get("queue_s"), (int, float)):
        rec["admit"] = rec["sent"] + float(extra["queue_s"])
    if isinstance(extra.get("service_s"), (int, float)):
        rec["service_s"] = float(extra["service_s"])
    rec["server_rid"] = extra.get("rid")
    rec["policy"] = extra.get("policy") or rec.get("policy")


async def run_load(
    url: str,
    plan: pd.DataFrame,
    *,
    model: str = "tiny.en",
    stream: bool = True,
    response_format: str = "json",
    vllm_xargs: bool = True,
    timeout_s: float = 600.0,
    max_concurrency: int | None = None,
    extra_fields: dict | None = None,
    label: str | None = None,
    progress: bool = True,
    run_timeout_s: float | None = None,
    policy: str | None = None,
) -> pd.DataFrame:
    """Send ``plan`` (from :func:`~asrsched.serving.request_plan.plan_requests`) to ``url`` at its arrival times; one record per row.

    See the module docstring for the columns. ``timeout_s`` bounds each request
    (its record then says ``client timeout``); ``max_concurrency`` (None = open loop)
    holds back requests while that many are in flight, as ``vllm bench serve
    --max-concurrency``; ``label`` fills ``policy`` when the server does not report one.
    ``run_timeout_s`` bounds the whole run: what is still waiting or in flight then is
    cancelled (its connection closed) and recorded as such. Faults never lose a row and
    never hang the run: a server that dies mid-run leaves its in-flight requests recorded
    with the connection error and later ones with the refused connection; a cancelled run
    (Ctrl-C) still records every row before the cancellation propagates
    (``records.attrs["stopped"]`` counts the rows it cut short). ``policy`` adds ``"policy": policy``
    to every request's ``vllm_xargs``: a vLLM engine whose plug-in has ``policy_switch`` on then runs its
    waiting queue under that policy (others ignore it).
    """
    import httpx
    from tqdm.auto import tqdm

    endpoint = transcription_url(url)
    if response_format not in RESPONSE_FORMATS:
        raise ValueError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {response_format!r}")
    if stream and response_format == "verbose_json":
        raise ValueError("stream=True needs response_format 'json' or 'text' (servers do not stream verbose_json)")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if max_concurrency is not None and (int(max_concurrency) != max_concurrency or max_concurrency < 1):
        raise ValueError(f"max_concurrency must be an integer >= 1 or None, got {max_concurrency!r}")
    if run_timeout_s is not None and not (isinstance(run_timeout_s, (int, float)) and run_timeout_s > 0):
        raise ValueError(f"run_timeout_s must be a positive number of seconds or None, got {run_timeout_s!r}")
    if policy is not None:
        (policy,) = validate_policies([policy])
        if not vllm_xargs:
            raise ValueError("policy travels in vllm_xargs: it needs vllm_xargs=True")
    need = {"rid", "scheduled", "duration", "language", "path"}
    miss = need - set(plan)
    if miss:
        raise ValueError(f"plan is missing column(s) {', '.join(sorted(miss))}; build it with plan_requests()")
    rows = plan.sort_values("scheduled", kind="stable").to_dict("records")
    blobs = {}
    for r in rows:  # read every clip before the clock starts
        if r["path"] not in blobs:
            blobs[r["path"]] = Path(r["path"]).read_bytes()
    recs = []
    for r in rows:
        recs.append(
            {c: math.nan for c in LOADGEN_COLUMNS}
            | {
                "rid": int(r["rid"]),
                "duration": float(r["duration"]),
                "language": str(r["language"]),
                "scheduled": float(r["scheduled"]),
                "status": 0,
                "error": "",
                "text": "",
                "trace_duration": float(r.get("trace_duration", r["duration"])),
                "utt_id": r.get("utt_id"),
                "clip": Path(r["path"]).name,
                "server_rid": None,
                "policy": label,
            }
        )
    n = len(rows)
    limits = httpx.Limits(
        max_connections=max(16, min(n, 4096) if max_concurrency is None else max_concurrency + 4),
        max_keepalive_connections=32,
    )
    sem = asyncio.Semaphore(int(max_concurrency)) if max_concurrency else None
    bar = tqdm(total=n, desc=f"loadgen {label or ''}".strip(), disable=not progress, leave=False)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)), limits=limits
    ) as client:
        t0 = time.monotonic()

        async def task(row: dict, rec: dict):
            delay = row["scheduled"] - (time.monotonic() - t0)
            if delay > 0:
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    rec["error"] = "cancelled before it was sent: the run was stopped"
                    raise
            fields = {
                "model": model,
                "language": rec["language"],
                "response_format": response_format,
                "stream": "true" if stream else "false",
                **{k: str(v) for k, v in (extra_fields or {}).items()},
            }
            if vllm_xargs:
                xargs = {XARG_DURATION: round(rec["duration"], 4), XARG_LANGUAGE: rec["language"]}
                fields["vllm_xargs"] = json.dumps(xargs | ({XARG_POLICY: policy} if policy else {}))
            if sem is not None:
                async with sem:
                    await _one(
                        client, endpoint, row, blobs[row["path"]], fields, t0, stream, response_format, timeout_s, rec
                    )
            else:
                await _one(
                    client, endpoint, row, blobs[row["path"]], fields, t0, stream, response_format, timeout_s, rec
                )
            bar.update(1)

        tasks = [asyncio.ensure_future(task(r, rec)) for r, rec in zip(rows, recs)]
        interrupted = None
        try:
            _done, pending = await asyncio.wait(tasks, timeout=run_timeout_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
                for t, rec in zip(tasks, recs):
                    if t in pending and "run was stopped" in rec["error"]:
                        rec["error"] += f" at the run deadline ({run_timeout_s:g} s)"
        except asyncio.CancelledError as e:  # the caller stopped the run: finish every row, then re-raise
            interrupted = e
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    bar.close()
    stopped = 0
    for rec in recs:
        if "run was stopped" in rec["error"]:
            stopped += 1
            if math.isnan(rec["sent"]):  # never sent: its end is when the run stopped
                rec["end"] = time.monotonic() - t0
    df = pd.DataFrame(recs, columns=LOADGEN_COLUMNS)
    df["queue_delay"] = df["admit"] - df["arrival"]
    df["ttft"] = df["first_token"] - df["arrival"]
    df["e2el"] = df["finish"] - df["arrival"]
    df = df.sort_values("rid", kind="stable").reset_index(drop=True)
    df.attrs.update({"url": endpoint, "model": model, "stream": stream, "n": n, "stopped": stopped})
    if interrupted is not None:
        run_load.last_records = df  # type: ignore[attr-defined]  # what the CLI writes after Ctrl-C
        raise interrupted
    return df


def run_coro(coro):
    """Run a coroutine to completion from sync code, also inside a running loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def target():
        try:
            box["v"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            box["e"] = e

    th = threading.Thread(target=target, name="asrsched-loadgen")
    th.start()
    th.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


def replay(url: str, trace: Trace | pd.DataFrame, **kw) -> pd.DataFrame:
    """Synchronous :func:`run_load`; ``trace`` may be a ``Trace`` (planned with :func:`~asrsched.serving.request_plan.plan_requests`
    using ``audio``/``pool_size``/``cache``/``seed`` from ``kw``) or a ready plan."""
    pk = {k: kw.pop(k) for k in ("audio", "pool_size", "min_s", "max_s", "seed", "cache") if k in kw}
    plan = trace if isinstance(trace, pd.DataFrame) else plan_requests(trace, progress=kw.get("progress", True), **pk)
    return run_coro(run_load(url, plan, **kw))


def format_summary(records: pd.DataFrame, title: str = "Serving Benchmark Result") -> str:
    """``vllm bench serve``-style text summary of a run."""
    from asrsched.core.metrics import summarize

    s = summarize(records)
    n_fail = int(len(records) - s["completed"])
    lines = [
        f"{'=' * 14} {title} {'=' * 14}",
        f"{'Successful requests:':<40}{s['completed']:>10}",
        f"{'Failed requests:':<40}{n_fail:>10}",
    ]
    if n_fail:
        codes = records.loc[~np.isfinite(records["finish"].to_numpy(float)), "status"].value_counts()
        lines.append(f"{'  by status:':<40}{', '.join(f'{int(k)}: {v}' for k, v in codes.items()):>10}")
    if s.get("duration_s"):
        lines += [
            f"{'Benchmark duration (s):':<40}{s['duration_s']:>10.2f}",
            f"{'Request throughput (req/s):':<40}{s['request_throughput']:>10.3f}",
            f"{'RTFx (audio s per s):':<40}{s['rtfx']:>10.2f}",
        ]
    for m, name in (("ttft", "Time to First Token"), ("e2el", "End-to-end Latency")):
        if f"mean_{m}_ms" not in s:
            continue
        lines.append(f"{'-' * 12}{name}{'-' * 12}")
        lines.append(f"{f'Mean {m.upper()} (ms):':<40}{s[f'mean_{m}_ms']:>10.2f}")
        lines.append(f"{f'Median {m.upper()} (ms):':<40}{s[f'median_{m}_ms']:>10.2f}")
        for p in (90, 99):
            lines.append(f"{f'P{p} {m.upper()} (ms):':<40}{s[f'p{p}_{m}_ms']:>10.2f}")
    lines.append("=" * (30 + len(title)))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="asrsched loadgen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="server base URL (http://host:port) or the full endpoint URL")
    ap.add_argument("--rate", type=float, required=True, help="mean arrival rate, requests/s")
    ap.add_argument("--n", type=int, default=50, help="number of requests")
    ap.add_argument("--workload", default="librispeech", help="duration source (see asrsched.core.workloads)")
    ap.add_argument("--arrival", default="poisson", help="poisson, bursty or cyclic")
    ap.add_argument("--burstiness", type=float, default=None, help="gamma shape for --arrival bursty")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny.en", help="the model name the server expects")
    ap.add_argument("--audio", default="pool", choices=AUDIO_MODES)
    ap.add_argument("--pool-size", type=int, default=40, help="clips per language for --audio pool")
    ap.add_argument("--no-stream", action="store_true", help="plain JSON answers (TTFT = E2EL)")
    ap.add_argument("--response-format", default="json", choices=RESPONSE_FORMATS)
    ap.add_argument("--no-xargs", action="store_true", help="do not send the vllm_xargs form field")
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    ap.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="bound on the whole run (s): what is unfinished then is cancelled and recorded",
    )
    ap.add_argument("--max-concurrency", type=int, default=None, help="cap on requests in flight")
    ap.add_argument("--warmup", type=int, default=0, help="requests sent one by one before the run (not recorded)")
    ap.add_argument("--label", default=None, help="run label (the policy column when the server sends none)")
    ap.add_argument("--out", default=None, help="write records here (.parquet or .csv)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``asrsched loadgen``: replay a trace against an endpoint, print a summary, save the records."""
    a = build_parser().parse_args(argv)
    try:
        transcription_url(a.url)
        if a.n < 1:
            raise ValueError(f"--n must be >= 1, got {a.n}")
        if a.out and not a.out.endswith((".parquet", ".csv")):
            raise ValueError(f"--out must end in .parquet or .csv, got {a.out!r}")
        if a.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {a.warmup}")
        akw = {"burstiness": a.burstiness} if a.burstiness is not None else None
        trace = make_trace(a.workload, rate=a.rate, n=a.n, seed=a.seed, arrival=a.arrival, arrival_kw=akw)
        plan = plan_requests(trace, audio=a.audio, pool_size=a.pool_size, seed=a.seed, progress=not a.quiet)
    except (ValueError, FileNotFoundError) as e:
        print(f"asrsched loadgen: error: {e}", file=sys.stderr)
        return 2
    kw = dict(
        model=a.model,
        stream=not a.no_stream,
        response_format=a.response_format,
        vllm_xargs=not a.no_xargs,
        timeout_s=a.timeout,
        max_concurrency=a.max_concurrency,
        label=a.label,
        progress=not a.quiet,
    )
    try:
        if a.warmup:
            w = plan.sort_values("duration").head(a.warmup).assign(scheduled=0.0)
            run_coro(run_load(a.url, w, **(kw | {"max_concurrency": 1, "progress": False})))
        rec = run_coro(run_load(a.url, plan, **kw, run_timeout_s=a.run_timeout))
    except ValueError as e:
        print(f"asrsched loadgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every row is still recorded (see run_load): write them, then stop
        rec = getattr(run_load, "last_records", None)
        if rec is not None and a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            (rec.to_parquet if a.out.endswith(".parquet") else rec.to_csv)(a.out, index=False)
            print(
                f"interrupted: {len(rec)} rows written to {a.out} ({rec.attrs.get('stopped', 0)} cut short)",
                file=sys.stderr,
            )
        return 130
    print(format_summary(rec))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        (rec.to_parquet if a.out.endswith(".parquet") else rec.to_csv)(a.out, index=False)
        print(f"records: {a.out} ({len(rec)} rows)")
    ok = np.isfinite(rec["finish"].to_numpy(float))
    return 0 if ok.any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
