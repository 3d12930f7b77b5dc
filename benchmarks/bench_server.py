"""Server benchmarks: scheduling overhead against inference time, and throughput at saturation per policy.

Run from the repository root::

    python benchmarks/bench_server.py            # 12-request bursts, 2 rounds
    python benchmarks/bench_server.py --quick    # 6-request bursts, 1 round

Every figure is a ratio against a baseline measured in the same run (the machine is
shared: absolute times are noisy, and the load average is recorded beside them):

1. **Scheduling overhead per request, in process**: reading the duration from the WAV
   header (:func:`asrsched.whisper.audio.audio_info` on the uploaded bytes), the size estimate,
   and push + pop of the policy's queue held at depth 1 / 16 / 256, for fcfs, sjf, hrrn.
   Baseline: the inference time of the same clip (real faster-whisper ``tiny.en``,
   median of 3). Ratio = overhead / inference.
2. **Scheduling overhead inside the real server**: the server's own ``sched_s`` per
   request (multipart parse, header read, checks, estimate, queue push and pop) against
   its service time, and the HTTP overhead (client E2EL minus the server's
   arrival-to-finish) — from sequential requests over loopback.
3. **Throughput at saturation**: per policy, a fresh one-worker server gets a burst of N
   requests at once (the same clips each time); throughput = N / (last completion - first
   send), and requests per CPU-second of the process (server + client; robust to other
   jobs on a shared machine, which stretch wall time but not our CPU time). Policies run
   in the order A B C, then C B A (drift cancels); ratio vs FCFS, which must lie within
   5 % (the policies only reorder the same work).

Writes ``benchmarks/results/bench_server.json`` (``--quick``: ``bench_server_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asrsched.core.policies import Job, make_queue  # noqa: E402
from asrsched.core.workloads import make_trace  # noqa: E402
from asrsched.serving.app import run_in_thread  # noqa: E402
from asrsched.serving.config import ServerConfig  # noqa: E402
from asrsched.serving.loadgen import run_coro, run_load  # noqa: E402
from asrsched.serving.request_plan import plan_requests  # noqa: E402
from asrsched.serving.whisper_engine import WhisperEngine, cpu_service_model  # noqa: E402
from asrsched.whisper.audio import audio_info, load_audio  # noqa: E402
from asrsched.whisper.corpus import build_corpus  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import load_average, provenance  # noqa: E402

POLICIES = ("fcfs", "sjf", "hrrn")
DEPTHS = (1, 16, 256)


def loadavg() -> float:
    return float(os.getloadavg()[0])


def overhead_in_process(wav: bytes, n_ops: int = 3200) -> dict:
    """Microseconds per request: header read + estimate, and push + pop at each depth per policy."""
    sm = cpu_service_model("tiny.en")
    t = time.perf_counter()
    for _ in range(n_ops):
        d = audio_info(wav).duration_s
        sm.service_time(d, "en")
    header_us = 1e6 * (time.perf_counter() - t) / n_ops
    rng = np.random.default_rng(0)
    out = {"header_and_estimate_us": header_us, "queue_us": {}}
    for pol in POLICIES:
        out["queue_us"][pol] = {}
        for depth in DEPTHS:
            q = make_queue(pol)
            now = 0.0
            for i in range(depth):
                q.push(Job(rid=i, arrival=now, est_service=float(rng.uniform(0.3, 3.0))))
            jobs = [Job(rid=depth + i, arrival=0.0, est_service=float(rng.uniform(0.3, 3.0))) for i in range(n_ops)]
            for j in jobs[:200]:  # warm-up (a JIT-compiled ranking compiles on first use), not timed
                now += 0.01
                j.arrival = now
                q.push(j)
                q.pop(now)
            jobs = jobs[200:]
            t = time.perf_counter()
            for j in jobs:  # one arrival and one admission per request, depth held constant
                now += 0.01
                j.arrival = now
                q.push(j)
                q.pop(now)
            out["queue_us"][pol][str(depth)] = 1e6 * (time.perf_counter() - t) / len(jobs)
    return out


def burst_throughput(policy: str, plan, rounds_log: list) -> tuple[float, float]:
    """(requests per wall second, requests per CPU second of this process) for one burst."""
    with run_in_thread(ServerConfig(policy=policy, local_slots=1)) as h:
        c0 = time.process_time()
        rec = run_coro(run_load(h.url, plan.assign(scheduled=0.0), progress=False))
        cpu = time.process_time() - c0
    ok = rec[rec["status"] == 200]
    if len(ok) != len(plan):
        raise RuntimeError(f"{policy}: {len(plan) - len(ok)} requests failed: {rec['error'].unique()}")
    span = float(ok["finish"].max() - rec["arrival"].min())
    thr = len(ok) / span
    rounds_log.append(
        {
            "policy": policy,
            "throughput_rps": thr,
            "makespan_s": span,
            "cpu_s": cpu,
            "requests_per_cpu_s": len(ok) / cpu,
            "loadavg": loadavg(),
        }
    )
    return thr, len(ok) / cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None, help="requests per saturation burst")
    a = ap.parse_args(argv)
    n_burst = a.n or (6 if a.quick else 12)
    rounds = 1 if a.quick else 2
    load_start = load_average()
    res: dict = {"params": {"n_burst": n_burst, "rounds": rounds}}
    t_all = time.perf_counter()

    # 1. in-process overhead vs inference of the same (median-length) clip
    clip = build_corpus("en", 1, min_s=5.5, max_s=7.0, seed=0, progress=False).iloc[0]
    wav = Path(clip["path"]).read_bytes()
    eng = WhisperEngine("tiny.en", cpu_threads=os.cpu_count() or 2)
    audio = load_audio(clip["path"])
    eng.transcribe(audio, "en")  # warm-up
    inf = [eng.transcribe(audio, "en")["total_s"] for _ in range(3)]
    inference_s = float(np.median(inf))
    ov = overhead_in_process(wav)
    res["in_process"] = {
        "clip_s": float(clip["audio_s"]),
        "inference_s": inference_s,
        **ov,
        "ratio_to_inference": {
            pol: {d: (ov["header_and_estimate_us"] + us) * 1e-6 / inference_s for d, us in v.items()}
            for pol, v in ov["queue_us"].items()
        },
    }
    print(f"inference of a {clip['audio_s']:.1f} s clip: {1e3 * inference_s:.0f} ms (median of 3)")
    print(f"header read + estimate: {ov['header_and_estimate_us']:.1f} us")
    for pol, v in ov["queue_us"].items():
        print(
            f"  {pol:5s} push+pop "
            + ", ".join(f"depth {d}: {us:.1f} us" for d, us in v.items())
            + f"  -> total/inference at depth 256: {res['in_process']['ratio_to_inference'][pol]['256']:.1e}"
        )

    # 2. overhead measured by the real server, sequential requests over loopback
    tr = make_trace("librispeech", rate=1.0, n=8, seed=5)
    plan = plan_requests(tr, pool_size=12, max_s=20.0, progress=False)
    with run_in_thread(ServerConfig(policy="sjf", local_slots=1)) as h:
        rec = run_coro(run_load(h.url, plan.assign(scheduled=0.0), max_concurrency=1, progress=False))
        import httpx

        srv = {r["rid"]: r for r in httpx.get(h.url + "/debug/requests").json()}
    rows = [(srv[int(r.server_rid)], r) for r in rec.itertuples() if r.server_rid is not None]
    sched = np.array([s["sched_s"] for s, _ in rows])
    service = np.array([s["finish"] - s["admit"] for s, _ in rows])
    http = np.array([r.e2el - (s["finish"] - s["arrival"]) for s, r in rows])
    res["in_server"] = {
        "n": len(rows),
        "sched_ms_median": 1e3 * float(np.median(sched)),
        "sched_ms_max": 1e3 * float(sched.max()),
        "service_ms_median": 1e3 * float(np.median(service)),
        "sched_over_service_median": float(np.median(sched / service)),
        "http_overhead_ms_median": 1e3 * float(np.median(http)),
        "http_over_e2el_median": float(np.median(http / rec["e2el"].to_numpy())),
    }
    r2 = res["in_server"]
    print(
        f"in the server (n={r2['n']}): scheduling {r2['sched_ms_median']:.2f} ms/request (max {r2['sched_ms_max']:.2f})"
        f" vs service {r2['service_ms_median']:.0f} ms -> ratio {r2['sched_over_service_median']:.1e}; "
        f"HTTP overhead {r2['http_overhead_ms_median']:.1f} ms ({100 * r2['http_over_e2el_median']:.2f} % of E2EL)"
    )

    # 3. throughput at saturation per policy (same clips, A B C C B A)
    tr = make_trace("librispeech", rate=1.0, n=n_burst, seed=9)
    plan = plan_requests(tr, pool_size=12, max_s=20.0, progress=False)
    order = list(POLICIES) + (list(reversed(POLICIES)) if rounds > 1 else [])
    log: list = []
    thr: dict = {p: [] for p in POLICIES}
    cpu: dict = {p: [] for p in POLICIES}
    for pol in order:
        w, c = burst_throughput(pol, plan, log)
        thr[pol].append(w)
        cpu[pol].append(c)
        print(f"  burst {pol}: {w:.3f} req/s wall, {c:.3f} req per CPU-s (load avg {log[-1]['loadavg']:.1f})")
    mean = {p: float(np.mean(v)) for p, v in thr.items()}
    mean_cpu = {p: float(np.mean(v)) for p, v in cpu.items()}
    ratio = {p: mean[p] / mean["fcfs"] for p in POLICIES}
    ratio_cpu = {p: mean_cpu[p] / mean_cpu["fcfs"] for p in POLICIES}
    within = all(abs(r - 1) <= 0.05 for r in ratio.values())
    within_cpu = all(abs(r - 1) <= 0.05 for r in ratio_cpu.values())
    res["saturation"] = {
        "n_burst": n_burst,
        "rounds": log,
        "mean_throughput_rps": mean,
        "ratio_vs_fcfs": ratio,
        "within_5pct": within,
        "mean_requests_per_cpu_s": mean_cpu,
        "cpu_ratio_vs_fcfs": ratio_cpu,
        "cpu_within_5pct": within_cpu,
    }
    print(
        "throughput at saturation vs FCFS, wall clock: "
        + ", ".join(f"{p} {r:.3f}" for p, r in ratio.items())
        + f" -> {'within' if within else 'NOT within'} 5 %"
    )
    print(
        "requests per CPU-second vs FCFS (contention-robust): "
        + ", ".join(f"{p} {r:.3f}" for p, r in ratio_cpu.items())
        + f" -> {'within' if within_cpu else 'NOT within'} 5 %"
    )
    res["provenance"] = provenance(
        ["asrsched/serving", "asrsched/core", "benchmarks/bench_server.py"], load_start=load_start
    )
    res["total_s"] = time.perf_counter() - t_all
    out = Path(__file__).parent / "results" / ("bench_server_quick.json" if a.quick else "bench_server.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {out} in {res['total_s']:.0f} s")
    return 0 if (within or within_cpu) else 1


if __name__ == "__main__":
    raise SystemExit(main())
