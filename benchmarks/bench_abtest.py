"""Supermarket-model benchmark: the numba kernel vs a SimPy model of the same system.

Run from the repository root::

    python benchmarks/bench_abtest.py            # 200k SimPy jobs, 10M numba jobs per policy
    python benchmarks/bench_abtest.py --quick    # 40k SimPy jobs, 2M numba jobs

System (both simulators): N = 20 FCFS servers at rate 1, Poisson arrivals at total
rate N * 0.8, exponential service, each job routed on arrival by Power-of-d (d sampled
servers without replacement, join the one with the fewest jobs, ties at random);
d = 1 (random) and d = 2. The SimPy model is a straightforward one: one
``simpy.Resource`` per server, a source process and one process per job, Python's ``random`` for sampling.

Measured in the same run (timings on a shared machine are noisy; the ratio is what
carries over): jobs simulated per CPU second (``time.process_time``) of each, the ratio
numba / SimPy (target >= 100x), and the mean response time of each with a batch-means
95 % CI (they must agree: |difference| <= 4 combined standard errors), next to the
exact M/M/1 value 1/(1 - 0.8) = 5 for d = 1. Writes
``benchmarks/results/bench_abtest[_quick].json``; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from asrsched.abtest.model import SystemConfig, simulate  # noqa: E402

N, LAM = 20, 0.8


def simpy_supermarket(n_servers: int, lam: float, d: int, n_jobs: int, warmup: int, seed: int) -> np.ndarray:
    """Response times of ``n_jobs`` jobs (after ``warmup``) in a SimPy supermarket model."""
    import random

    import simpy

    rng = random.Random(seed)
    env = simpy.Environment()
    servers = [simpy.Resource(env, capacity=1) for _ in range(n_servers)]
    resp = np.empty(n_jobs)
    ids = range(n_servers)
    rate = n_servers * lam

    def job(i, srv):
        t0 = env.now
        with srv.request() as req:
            yield req
            yield env.timeout(rng.expovariate(1.0))
        if i >= warmup:
            resp[i - warmup] = env.now - t0

    def source():
        for i in range(warmup + n_jobs):
            yield env.timeout(rng.expovariate(rate))
            cand = rng.sample(ids, d)  # random order: the first shortest is a uniform tie-break
            best = min(cand, key=lambda s: len(servers[s].queue) + servers[s].count)
            env.process(job(i, servers[best]))

    env.process(source())
    env.run()
    return resp


def _mean_ci(x: np.ndarray, batches: int = 20) -> tuple[float, float]:
    b = np.array([v.mean() for v in np.array_split(x, batches)])
    return float(x.mean()), float(b.std(ddof=1) / np.sqrt(batches))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n_simpy = 40_000 if args.quick else 200_000
    n_numba = 2_000_000 if args.quick else 10_000_000
    warm = 10_000

    simulate(SystemConfig(n_servers=N, lam=LAM, n_jobs=1000, warmup_jobs=0), 0)  # compile / load cache
    rows, ok = [], True
    for d in (1, 2):
        cfg = SystemConfig(n_servers=N, lam=LAM, control=d, treatment=d, design="control", n_jobs=n_numba,
                           warmup_jobs=warm)
        t = time.process_time()
        tr = simulate(cfg, seed=1)
        t_numba = time.process_time() - t
        t = time.process_time()
        rs = simpy_supermarket(N, LAM, d, n_simpy, warm, seed=1)
        t_simpy = time.process_time() - t
        m_n, se_n = _mean_ci(tr.response)
        m_s, se_s = _mean_ci(rs)
        rate_n = (n_numba + warm) / t_numba
        rate_s = (n_simpy + warm) / t_simpy
        agree = abs(m_n - m_s) <= 4 * np.hypot(se_n, se_s)
        row = dict(policy="random" if d == 1 else f"pod{d}", numba_jobs=n_numba, simpy_jobs=n_simpy,
                   numba_jobs_per_s=rate_n, simpy_jobs_per_s=rate_s, ratio=rate_n / rate_s,
                   numba_mean_response=m_n, numba_se=se_n, simpy_mean_response=m_s, simpy_se=se_s,
                   means_agree=bool(agree), mm1_exact=1 / (1 - LAM) if d == 1 else None)
        ok &= bool(agree) and row["ratio"] >= 100
        rows.append(row)

    print(f"Supermarket N={N}, lam={LAM}: numba kernel vs SimPy model (jobs per CPU second, same run)")
    print(f"{'policy':8s} {'numba jobs/s':>14s} {'SimPy jobs/s':>13s} {'ratio':>8s}  "
          f"{'mean W numba':>18s} {'mean W SimPy':>18s}  agree")
    for r in rows:
        print(f"{r['policy']:8s} {r['numba_jobs_per_s']:14,.0f} {r['simpy_jobs_per_s']:13,.0f} {r['ratio']:7.0f}x  "
              f"{r['numba_mean_response']:10.4f}±{1.96 * r['numba_se']:.4f} "
              f"{r['simpy_mean_response']:10.4f}±{1.96 * r['simpy_se']:.4f}  {r['means_agree']}")
    print(f"ratio (min over policies): {min(r['ratio'] for r in rows):.0f}x  (target >= 100x)")
    out = HERE / "results" / ("bench_abtest_quick.json" if args.quick else "bench_abtest.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "machine": platform.platform(), "python": platform.python_version(),
                               "ok": ok}, indent=2))
    print(f"wrote {out}; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
