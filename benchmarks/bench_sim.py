"""Simulator benchmarks: speed against a SimPy baseline, scheduling overhead, a 10M-request run.

Run from the repository root::

    python benchmarks/bench_sim.py            # full: 20k-request SimPy comparisons, 10M-request run
    python benchmarks/bench_sim.py --quick    # minutes less: 5k-request comparisons, 1M-request run

Three measurements, each against a baseline measured in the same run (timings on a
shared machine are noisy; ratios are what carry over):

1. **Simulator vs SimPy.** ``asrsched.sim.engine.simulate`` and the step-by-step SimPy model
   in ``benchmarks/simpy_reference.py`` run the same traces; per-request results must
   agree (|difference| <= 1e-9 s on admit, first token and finish, identical
   everything else) and the speed ratio is SimPy time / simulator time, for the
   default (compiled) engine and, for reference, the pure-Python ``Engine``.
2. **Scheduling decision overhead** per admitted request (push + peek + pop,
   amortised) at queue depths 10 ... 10,000 for fcfs / sjf / hrrn / adaptive, with
   the queue held at that depth; baseline: FCFS (a binary heap) at the same depth.
3. **Bounded memory.** A long run through ``trace_chunks`` + ``SummarySink`` in a fresh
   process, peak RSS (``VmHWM``) against a run 10x shorter and against the bare
   imports: bounded memory means the peak does not grow with the request count.

Writes ``benchmarks/results/bench_sim.json`` (``--quick``: ``bench_sim_quick.json``)
and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from simpy_reference import simulate_simpy  # noqa: E402

from asrsched.core.policies import Job, make_queue  # noqa: E402
from asrsched.core.service import default_service_model  # noqa: E402
from asrsched.core.workloads import make_trace  # noqa: E402
from asrsched.sim.engine import OverloadWarning, SummarySink, simulate, trace_chunks  # noqa: E402

POLICIES = ("fcfs", "sjf", "hrrn", "adaptive")
DEPTHS = (10, 100, 1_000, 10_000)
CHUNK = 100_000  # trace chunk of the memory runs (both runs hold whole chunks, so compare like with like)


# ----------------------------------------------------------------------------- 1. simulator vs SimPy


def bench_vs_simpy(n: int, repeats: int) -> list[dict]:
    """Same trace through both models; identical records asserted; speed ratio."""
    cases = [("librispeech", 2.0, "fcfs"), ("librispeech", 8.0, "hrrn"), ("librispeech", 13.0, "sjf"),
             ("uniform", 1.0, "fcfs"), ("uniform", 4.0, "hrrn")]
    rows = []
    for workload, rate, policy in cases:
        tr = make_trace(workload, rate=rate, n=n, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OverloadWarning)
            t_fast, t_py = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = simulate(tr, policy)  # default engine: compiled for the built-in policies
                t_fast.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                simulate(tr, policy, engine="python")
                t_py.append(time.perf_counter() - t0)
        t_ref = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ref = simulate_simpy(tr, policy)
            t_ref.append(time.perf_counter() - t0)
        fast = res.records
        for c in ("rid", "arrival", "duration", "est_service", "tokens"):
            assert np.array_equal(fast[c].to_numpy(), ref[c].to_numpy()), f"{c} differs"
        diff = max(float(np.max(np.abs(fast[c].to_numpy() - ref[c].to_numpy())))
                   for c in ("admit", "first_token", "finish"))
        assert diff <= 1e-9, f"per-request times differ by {diff} s ({workload}, {rate}, {policy})"
        summ = res.summary()
        rows.append(dict(workload=workload, rate=rate, policy=policy, n=n, sim_s=min(t_fast), simpy_s=min(t_ref),
                         ratio=min(t_ref) / min(t_fast), python_engine_s=min(t_py),
                         python_engine_ratio=min(t_ref) / min(t_py), max_abs_diff_s=diff, sim_events=res.events,
                         mean_running=float(np.average(res.timeline["running"])),
                         p50_e2el_ms=summ["p50_e2el_ms"]))
        print(f"  vs SimPy {workload:11s} {rate:5.1f} req/s {policy:5s}: sim {min(t_fast):7.3f} s, "
              f"SimPy {min(t_ref):7.3f} s, x{rows[-1]['ratio']:.1f} (Python engine x{rows[-1]['python_engine_ratio']:.1f}),"
              f" max |diff| {diff:.1e} s", flush=True)
    return rows


# ----------------------------------------------------------------------------- 2. decision overhead


def _decision_cost(policy: str, depth: int, budget_s: float, rng: np.random.Generator) -> tuple[float, int]:
    """Seconds per (push + peek + pop) with the queue held at ``depth``; and the number of decisions timed."""
    svc = default_service_model()
    d = rng.choice(np.asarray([1.3, 3.0, 5.8, 7.4, 12.0, 20.0, 35.0]), size=depth + 200_000)
    est = np.asarray(svc.service_time(d)).tolist()
    q = make_queue(policy)
    now = 0.0
    for i in range(depth):  # a standing queue that arrived over the last ~depth/10 s
        q.push(Job(i, now - (depth - i) * 0.1, est[i]))
    jobs = [Job(depth + i, 0.0, est[depth + i]) for i in range(200_000)]
    # calibrate the iteration count on a short burst, then time a fixed count
    k, spent = 0, 0.0
    while spent < 0.05 and k < 1000:
        now += 0.1
        j = jobs[k]
        j.arrival = now
        t0 = time.perf_counter()
        q.push(j)
        q.peek(now)
        q.pop(now)
        spent += time.perf_counter() - t0
        k += 1
    per = spent / k
    m = int(min(len(jobs) - k, max(200, budget_s / per)))
    push, peek, pop = q.push, q.peek, q.pop
    t0 = time.perf_counter()
    for i in range(k, k + m):
        now += 0.1
        j = jobs[i]
        j.arrival = now
        push(j)
        peek(now)
        pop(now)
    dt = time.perf_counter() - t0
    assert len(q) == depth
    return dt / m, m


def bench_decisions(budget_s: float) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for depth in DEPTHS:
        base = None
        for policy in POLICIES:
            per, m = _decision_cost(policy, depth, budget_s, rng)
            base = per if policy == "fcfs" else base
            rows.append(dict(policy=policy, depth=depth, us_per_decision=1e6 * per, decisions_timed=m,
                             ratio_vs_fcfs=per / base))
            print(f"  decision {policy:19s} depth {depth:6d}: {1e6 * per:8.2f} us  (x{per / base:.1f} FCFS)",
                  flush=True)
    return rows


# ----------------------------------------------------------------------------- 3. bounded memory


def _big_run(n: int) -> dict:
    """Run in a child process: n LibriSpeech requests at 10 req/s through trace_chunks + SummarySink."""
    t0 = time.perf_counter()
    if n > 0:
        res = simulate(trace_chunks("librispeech", rate=10.0, n=n, chunk=CHUNK, seed=0), "hrrn",
                       sink=SummarySink(), flush_every=50_000)
        summ = res.records
        assert res.n_arrivals == n and summ["completed"] == n
    else:
        summ = {}
    dt = time.perf_counter() - t0
    return dict(n=n, seconds=dt, peak_rss_mb=_peak_rss_mb(), req_per_s=n / dt if n else None,
                p50_e2el_ms=summ.get("p50_e2el_ms"), p99_e2el_ms=summ.get("p99_e2el_ms"),
                request_throughput=summ.get("request_throughput"))


def _peak_rss_mb() -> float:
    """Peak resident set of this process (MB).

    ``VmHWM`` from /proc: unlike ``ru_maxrss`` it is not inherited from the parent
    across fork + exec, so a child measures only itself.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_memory(n: int) -> list[dict]:
    rows = []
    for m in (0, n // 10, n):
        out = subprocess.run([sys.executable, __file__, "--_big", str(m)], capture_output=True, text=True,
                             check=True, cwd=ROOT)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        what = "imports only" if m == 0 else f"{m:,} requests"
        extra = f", {row['seconds']:.1f} s, {row['req_per_s']:,.0f} req/s" if m else ""
        print(f"  memory {what:>20s}: peak RSS {row['peak_rss_mb']:.0f} MB{extra}", flush=True)
    return rows


# ----------------------------------------------------------------------------- main


def _git_state() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "asrsched/sim.py", "asrsched/policies.py"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return {"commit": commit, "sim_or_policies_modified": bool(dirty)}
    except OSError:
        return {}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (1M-request memory run)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    ap.add_argument("--only", choices=("simpy", "decisions", "memory"), default=None,
                    help="run one part; its rows replace those in the existing JSON")
    ap.add_argument("--_big", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._big is not None:
        print(json.dumps(_big_run(args._big)))
        return {}
    quick = args.quick
    out = args.out or HERE / "results" / ("bench_sim_quick.json" if quick else "bench_sim.json")
    n_cmp, repeats, budget, n_big = (5_000, 1, 0.3, 1_000_000) if quick else (20_000, 3, 1.0, 10_000_000)
    simulate(make_trace("librispeech", rate=5.0, n=50, seed=0), "hrrn")  # compile the numba kernels untimed

    prev = json.loads(out.read_text()) if args.only and out.exists() else {}
    if args.only in (None, "simpy"):
        print(f"1. simulator vs SimPy ({n_cmp:,} requests per trace, default service model, max_num_seqs=32)")
        simpy_rows = bench_vs_simpy(n_cmp, repeats)
    else:
        simpy_rows = prev["sim_vs_simpy"]
    if args.only in (None, "decisions"):
        print("2. scheduling decision overhead (push + peek + pop at a held queue depth)")
        dec_rows = bench_decisions(budget)
    else:
        dec_rows = prev["decision_overhead"]
    if args.only in (None, "memory"):
        print(f"3. bounded memory ({n_big:,} requests, trace_chunks + SummarySink, fresh process each)")
        mem_rows = bench_memory(n_big)
    else:
        mem_rows = prev["memory"]

    ratios = [r["ratio"] for r in simpy_rows]
    hrrn_1k = next(r for r in dec_rows if r["policy"] == "hrrn" and r["depth"] == 1000)["us_per_decision"]
    worst_1k = max(r["us_per_decision"] for r in dec_rows if r["depth"] == 1000 and r["policy"] in POLICIES[:4])
    result = {
        "mode": "quick" if quick else "full",
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpu_count": os.cpu_count(), "numpy": np.__version__},
        "git": _git_state(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sim_vs_simpy": simpy_rows,
        "decision_overhead": dec_rows,
        "memory": mem_rows,
        "headline": {
            "simpy_ratio_min": min(ratios), "simpy_ratio_median": float(np.median(ratios)),
            "simpy_ratio_max": max(ratios), "simpy_target": 50.0,
            "hrrn_us_at_depth_1000": hrrn_1k, "worst_us_at_depth_1000": worst_1k, "decision_target_us": 10.0,
            "decision_study_bound_us": 100.0,
            "big_run_n": n_big, "big_run_s": mem_rows[-1]["seconds"],
            "big_run_peak_rss_mb": mem_rows[-1]["peak_rss_mb"],
            "rss_ratio_vs_10x_shorter": mem_rows[-1]["peak_rss_mb"] / mem_rows[1]["peak_rss_mb"],
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    h = result["headline"]
    print("\nsummary")
    print(f"  {'measurement':60s} {'value':>14s}  target")
    print(f"  {'simulator / SimPy speed ratio (min .. max)':60s} {h['simpy_ratio_min']:6.1f} .. "
          f"{h['simpy_ratio_max']:<6.1f}  >= 50x")
    for r in (r for r in dec_rows if r["depth"] == 1000):
        print(f"  {'decision overhead at depth 1,000, ' + r['policy']:60s} {r['us_per_decision']:11.2f} us  <= 10 us")
    print(f"  {f'{n_big:,}-request run: time':60s} {h['big_run_s']:12.1f} s")
    print(f"  {'peak RSS (MB): imports / N/10 / N':60s} {mem_rows[0]['peak_rss_mb']:.0f} / "
          f"{mem_rows[1]['peak_rss_mb']:.0f} / {mem_rows[2]['peak_rss_mb']:.0f}  flat in N")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return result


if __name__ == "__main__":
    main()
