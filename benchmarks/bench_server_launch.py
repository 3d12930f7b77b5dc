"""Are CPU servers equally fast when launched together? (why the real-engine study starts them one by one)

Run from the repository root (about 4 minutes on 2 cores; real Whisper base)::

    python benchmarks/bench_server_launch.py

Three FCFS servers (``asrsched serve --model base``, identical settings) serve the same
``n`` LibriSpeech-shaped clips, one request at a time, interleaved (request ``i`` goes to
server 0, 1, 2, then ``i + 1`` to 2, 1, 0, ...), so that any drift of the machine hits all
three alike. The server-side service time (admission to completion) of each request is
compared between servers, paired by request: the median ratio of server ``k`` to server 0.
This is done twice: with the three servers **launched at the same moment** (as the study
did first) and **started one after another** (each ready before the next is launched).
A ratio away from 1 means the processes differ in speed, and a policy comparison that
gives each policy its own process measures that difference too.

Writes ``benchmarks/results/bench_server_launch.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))


def measure(together: bool, n: int = 24, seed: int = 3, model: str = "base") -> dict:
    """Median per-server service time and paired ratios to server 0 for one launch mode."""
    from asrsched.core.workloads import make_trace
    from asrsched.serving.experiment import ServerProcess
    from asrsched.serving.loadgen import run_coro, run_load
    from asrsched.serving.request_plan import plan_requests

    plan = plan_requests(make_trace("librispeech", rate=1, n=n, seed=seed), pool_size=24, progress=False)
    if together:
        servers = [ServerProcess("fcfs", model=model).launch() for _ in range(3)]
        for s in servers:
            s.wait_ready()
    else:
        servers = [ServerProcess("fcfs", model=model).start() for _ in range(3)]
    rows = []
    try:
        for i in range(len(plan)):
            for k in [0, 1, 2] if i % 2 == 0 else [2, 1, 0]:
                r = run_coro(
                    run_load(servers[k].url, plan.iloc[[i]].assign(scheduled=0.0), model=model, progress=False)
                )
                rows.append(dict(i=i, server=k, service=float(r["service_s"].iloc[0])))
    finally:
        for s in servers:
            s.stop()
    d = pd.DataFrame(rows)
    p = d.pivot_table(index="i", columns="server", values="service")
    return {
        "launch": "together" if together else "one after another",
        "n_requests": int(n),
        "median_service_s": {int(k): float(v) for k, v in d.groupby("server").service.median().items()},
        "paired_ratio_to_server0": {k: float((p[k] / p[0]).median()) for k in (1, 2)},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="requests per server and launch mode")
    a = ap.parse_args(argv)
    from provenance import provenance

    rows = [measure(True, a.n), measure(False, a.n)]
    rec = {
        "benchmark": "bench_server_launch",
        "provenance": provenance(["asrsched/serving", "benchmarks/bench_server_launch.py"]),
        "rows": rows,
    }
    path = HERE / "results" / "bench_server_launch.json"
    path.write_text(json.dumps(rec, indent=2) + "\n")
    for r in rows:
        print(
            f"{r['launch']:>18}: median service {r['median_service_s']} s; server k / server 0 (paired): "
            + ", ".join(f"{k}: {v:.3f}" for k, v in r["paired_ratio_to_server0"].items())
        )
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
