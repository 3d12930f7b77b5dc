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

The A/B estimator study (notebook 05), measured against a named baseline in the same run:

    python benchmarks/bench_abtest.py --study-only               # ratio + projection (~1 min)
    python benchmarks/bench_abtest.py --study-only --study-full  # + the full 100-replication study, timed 3x
    python benchmarks/bench_abtest.py [--quick] [--study-full]   # SimPy ratio, then the study part

* **ratio**: CPU time of one replication per scenario on the study's path (the ring-buffer
  kernel without unused per-job outputs, the O(n) DQ sweep over every horizon) over the
  **reference path** kept as the tests' oracle (``tests/abtest_oracle.py``, run through
  ``run_replication(..., _paths=(reference_simulate, reference_dq_sweep))``: the linked-list
  kernel with every output and numpy DQ one horizon at a time, i.e. the pre-optimisation
  code), same seeds, estimates asserted equal (1e-9 relative);
* **projected wall time** of the full study on 2 cores: measured CPU per replication
  (every scenario) and per truth job, times the full study's task counts, over 2 cores;
* with ``--study-full``: the full study itself (``run_study`` with 2 workers), wall and CPU,
  timed ``--study-runs`` times (default 3; the best is the result, every run is kept), each
  run with a machine probe before and after (``provenance.machine_probe``).

``quick_ratio()`` and ``check_targets(quick=True)`` give the same at a size that runs in a few
seconds (for ``benchmarks/check.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from abtest_oracle import reference_dq_sweep, reference_simulate  # noqa: E402

from asrsched.abtest import study as S  # noqa: E402
from asrsched.abtest.full_run import FULL  # noqa: E402
from asrsched.abtest.model import SystemConfig, simulate_supermarket  # noqa: E402

N, LAM = 20, 0.8
#: the study targets. The wall-time budget is the issue's target (full study <= 60 s on 2 cores). The ratio
#: floor is a regression guard for the optimised path (measured 1.87-1.93x under load averages 15-18 on the
#: 2-core development machine; the simulation itself, ~85 % of the study, gains least).
STUDY_RATIO_FLOOR = 1.5
STUDY_WALL_TARGET_S = 60.0


def _rep_cpu(scenario: str, rep: int, sd: dict, reference: bool, also: tuple = ()) -> tuple[float, list]:
    c = time.process_time()
    paths = (reference_simulate, reference_dq_sweep) if reference else None
    out = S.run_replication(scenario, rep, sd, also=also, _paths=paths)
    return time.process_time() - c, out["rows"]


def study_ratio(scenarios=("homogeneous", "switchback"), reps: int = 1, n_requests: int = 500_000) -> dict:
    """CPU seconds per replication, reference path / study path, same seeds and estimates (see module doc)."""
    sd = S.StudyConfig(base=S.StudyConfig().base.replace(n_requests=int(n_requests)), reps=2).to_dict()
    S.run_replication(scenarios[0], 99, sd)  # compile / load both kernels' caches
    _rep_cpu(scenarios[0], 99, sd, True)
    t_new = t_ref = 0.0
    for s in scenarios:
        for r in range(reps):
            a, ra = _rep_cpu(s, r, sd, False)
            b, rb = _rep_cpu(s, r, sd, True)
            ea = np.array([x["estimate"] for x in ra], float)
            eb = np.array([x["estimate"] for x in rb], float)
            if not np.allclose(ea, eb, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"{s} rep {r}: study path and reference path disagree")
            t_new += a
            t_ref += b
    return {
        "scenarios": list(scenarios),
        "reps": reps,
        "n_requests": n_requests,
        "new_cpu_s": t_new,
        "reference_cpu_s": t_ref,
        "ratio": t_ref / t_new,
    }


def projected_study_wall(
    cores: int = 2, study: S.StudyConfig | None = None, truth_probe_requests: int = 1_000_000, repeats: int = 2
) -> dict:
    """Projected wall time of the full study on ``cores`` cores from measured CPU per task.

    One replication of every scenario (the full study's experiment length) and one truth-arm
    run of ``truth_probe_requests`` jobs are timed, each the best of ``repeats`` runs (a single
    timing on this shared 2-core machine varied by 10 % from one check to the next); the full
    study runs ``reps`` replications and ``truth_seeds x 4`` truth runs of ``truth_requests`` per
    system (scenarios with the same system share them: ``S.shared_systems``). Perfect packing on
    ``cores`` workers is assumed (a lower bound; the end-to-end run is its own row).
    """
    sc = study or S.StudyConfig(reps=FULL["reps"], truth_requests=FULL["truth_requests"])
    sd = sc.to_dict()
    reps = max(1, int(repeats))
    per = {}
    groups = S.shared_systems(sc)
    for s, also in groups.items():
        per[s] = min(_rep_cpu(s, 0, sd, False, also)[0] for _ in range(reps))
    probe = S.StudyConfig.from_dict(dict(sd, truth_requests=int(truth_probe_requests)))
    best = math.inf
    for _ in range(reps):
        c = time.process_time()
        S.run_truth(sc.scenarios[0], "treatment", 0, probe.to_dict())
        best = min(best, time.process_time() - c)
    per_truth_job = best / (truth_probe_requests + 50_000)
    arms = 4 if sc.slope_h else 2
    truth_cpu = len(groups) * arms * sc.truth_seeds * (sc.truth_requests + 50_000) * per_truth_job
    rep_cpu = sum(per.values()) * sc.reps
    return {
        "per_replication_cpu_s": per,
        "replications_cpu_s": rep_cpu,
        "truth_cpu_s": truth_cpu,
        "cpu_s": rep_cpu + truth_cpu,
        "cores": cores,
        "projected_wall_s": (rep_cpu + truth_cpu) / cores,
        "reps": sc.reps,
        "truth_requests": sc.truth_requests,
    }


def quick_ratio() -> tuple[float, float]:
    """(speed-up of the study's replication path over the reference path, floor), in a few seconds."""
    r = study_ratio(("homogeneous", "small_effect"), reps=1, n_requests=200_000)
    return r["ratio"], STUDY_RATIO_FLOOR


def check_targets(quick: bool = True) -> list[dict]:
    """Targets in the format of ``benchmarks/check.py``: the study-path ratio and the projected 2-core wall time."""
    r = study_ratio(("homogeneous", "small_effect"), reps=1, n_requests=200_000 if quick else 500_000)
    rows = [
        {
            "name": "A/B study replication: reference path / study path",
            "value": r["ratio"],
            "target": STUDY_RATIO_FLOOR,
            "unit": "x",
            "kind": "min",
            "passed": r["ratio"] >= STUDY_RATIO_FLOOR,
            "note": f"CPU time, {len(r['scenarios'])} scenarios x {r['n_requests']:,} jobs, estimates equal",
        }
    ]
    p = projected_study_wall(truth_probe_requests=500_000 if quick else 2_000_000)
    note = (
        f"{p['cpu_s']:.0f} CPU-s projected from 1 replication of each of {len(p['per_replication_cpu_s'])} "
        "systems and a truth probe, perfect packing on 2 cores"
    )
    rows.append(
        {
            "name": "full A/B study (100 reps), projected 2-core wall",
            "value": p["projected_wall_s"],
            "target": STUDY_WALL_TARGET_S,
            "unit": "s",
            "kind": "max",
            "passed": p["projected_wall_s"] <= STUDY_WALL_TARGET_S,
            "note": note,
        }
    )
    rows.append(measured_study_row())
    return rows


def measured_study_row(path: Path | None = None) -> dict:
    """The full study as it last ran end to end (``--study-only --study-full``), read from its committed result.

    The projection above assumes perfect packing and no start-up; the real run (two loky
    workers, their imports, both competing for the two cores' caches) takes longer, and the
    issue's target is about the real run. It takes over a minute, so this row reads the
    committed measurement with its commit instead of re-running it.
    """
    path = path or HERE / "results" / "bench_abtest_study.json"
    rec = json.loads(path.read_text())
    full = (rec.get("study") or {}).get("full")
    prov = rec.get("provenance", {})
    name = "full A/B study (100 reps), measured 2-worker wall (committed run)"
    if not full:
        return {
            "name": name,
            "value": float("nan"),
            "target": STUDY_WALL_TARGET_S,
            "unit": "s",
            "kind": "max",
            "passed": False,
            "note": f"no full run in {path.name}: python benchmarks/bench_abtest.py --study-only --study-full",
        }
    probe = ""
    if full.get("probe_ns_per_job"):
        from provenance import machine_probe

        walls = ", ".join(f"{r['wall_s']:.0f}" for r in full.get("runs", []))
        probe = (
            f"; best of {full.get('best_of', 1)} runs ({walls} s); machine probe "
            f"{min(full['probe_ns_per_job']):.1f}-{max(full['probe_ns_per_job']):.1f} ns/job before/after it, "
            f"{machine_probe():.1f} now (lower is faster)"
        )
    return {
        "name": name,
        "value": float(full["wall_s"]),
        "target": STUDY_WALL_TARGET_S,
        "unit": "s",
        "kind": "max",
        "passed": float(full["wall_s"]) <= STUDY_WALL_TARGET_S,
        "note": f"{full['cpu_s']:.0f} CPU-s in {full['workers']} workers; commit {str(prov.get('commit'))[:10]}"
        f"{'' if prov.get('clean_tree') else ' (dirty tree)'}, {str(prov.get('date_utc'))[:10]} "
        f"({path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}){probe}",
    }


def full_study(workers: int = 2, runs: int = 3) -> dict:
    """The full 100-replication study as notebook 05 runs it (``QUICK = False``), timed end to end ``runs`` times.

    ``wall_s`` is the best of the runs (``timeit``'s rule: on a shared machine the noise only ever
    adds time); every run is kept in ``runs`` with its wall and CPU time and the machine probe
    (``provenance.machine_probe``: a fixed workload, ns per job) measured just before and after it,
    so each wall time can be read against the machine's speed then.
    """
    from provenance import machine_probe

    sc = S.StudyConfig(reps=FULL["reps"], truth_requests=FULL["truth_requests"]).validate()
    out = []
    for _ in range(max(1, int(runs))):
        before = machine_probe()
        t = time.perf_counter()
        res = S.run_study(sc, workers=workers, progress=False)
        wall = time.perf_counter() - t
        out.append({"wall_s": wall, "cpu_s": res.cpu_seconds, "probe_ns_per_job": [before, machine_probe()]})
    best = min(out, key=lambda r: r["wall_s"])
    return dict(best, workers=workers, reps=sc.reps, scenarios=len(sc.scenarios), best_of=len(out), runs=out)


def simpy_supermarket(n_servers: int, lam: float, d: int, n_requests: int, warmup: int, seed: int) -> np.ndarray:
    """Response times of ``n_requests`` jobs (after ``warmup``) in a SimPy supermarket model."""
    import random

    import simpy

    rng = random.Random(seed)
    env = simpy.Environment()
    servers = [simpy.Resource(env, capacity=1) for _ in range(n_servers)]
    resp = np.empty(n_requests)
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
        for i in range(warmup + n_requests):
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


def study_main(full: bool, runs: int = 3) -> dict:
    """The study part: ratio vs the reference path, projected and (``full``) measured wall time."""
    r = study_ratio(tuple(S.SCENARIOS), reps=1)
    p = projected_study_wall()
    out = {"ratio": r, "projection": p}
    print(
        f"A/B study: reference path / study path = {r['ratio']:.2f}x CPU ({r['reference_cpu_s']:.1f} s vs "
        f"{r['new_cpu_s']:.1f} s for one replication of each of {len(r['scenarios'])} scenarios; floor "
        f"{STUDY_RATIO_FLOOR}x)"
    )
    print(
        f"full study projected: {p['cpu_s']:.0f} CPU-s -> {p['projected_wall_s']:.0f} s on 2 cores "
        f"(target <= {STUDY_WALL_TARGET_S:.0f} s)"
    )
    if full:
        f = full_study(runs=runs)
        out["full"] = f
        for r in f["runs"]:
            print(
                f"full study measured: {r['wall_s']:.1f} s wall, {r['cpu_s']:.0f} CPU-s with {f['workers']} workers "
                f"(machine probe {r['probe_ns_per_job'][0]:.1f} / {r['probe_ns_per_job'][1]:.1f} ns per job before "
                "/ after)"
            )
        print(f"full study: best of {f['best_of']}: {f['wall_s']:.1f} s (target <= {STUDY_WALL_TARGET_S:.0f} s)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--study-full", action="store_true", help="also run and time the full A/B study (minutes)")
    ap.add_argument("--study-runs", type=int, default=3, help="time the full study this many times (best is kept)")
    ap.add_argument("--study-only", action="store_true", help="only the A/B study part")
    args = ap.parse_args(argv)
    if args.study_only:
        from provenance import provenance

        res = study_main(full=args.study_full, runs=args.study_runs)
        ok = res["ratio"]["ratio"] >= STUDY_RATIO_FLOOR
        out = HERE / "results" / "bench_abtest_study.json"
        out.write_text(json.dumps({"study": res, "provenance": provenance(), "ok": ok}, indent=2, default=float))
        print(f"wrote {out}")
        return 0 if ok else 1
    n_simpy = 40_000 if args.quick else 200_000
    n_numba = 2_000_000 if args.quick else 10_000_000
    warm = 10_000

    simulate_supermarket(
        SystemConfig(n_servers=N, lam=LAM, n_requests=1000, warmup_requests=0), 0
    )  # compile / load cache
    rows, ok = [], True
    for d in (1, 2):
        cfg = SystemConfig(
            n_servers=N, lam=LAM, control=d, treatment=d, design="control", n_requests=n_numba, warmup_requests=warm
        )
        t = time.process_time()
        tr = simulate_supermarket(cfg, seed=1)
        t_numba = time.process_time() - t
        t = time.process_time()
        rs = simpy_supermarket(N, LAM, d, n_simpy, warm, seed=1)
        t_simpy = time.process_time() - t
        m_n, se_n = _mean_ci(tr.response)
        m_s, se_s = _mean_ci(rs)
        rate_n = (n_numba + warm) / t_numba
        rate_s = (n_simpy + warm) / t_simpy
        agree = abs(m_n - m_s) <= 4 * np.hypot(se_n, se_s)
        row = dict(
            policy="random" if d == 1 else f"pod{d}",
            numba_jobs=n_numba,
            simpy_jobs=n_simpy,
            numba_jobs_per_s=rate_n,
            simpy_jobs_per_s=rate_s,
            ratio=rate_n / rate_s,
            numba_mean_response=m_n,
            numba_se=se_n,
            simpy_mean_response=m_s,
            simpy_se=se_s,
            means_agree=bool(agree),
            mm1_exact=1 / (1 - LAM) if d == 1 else None,
        )
        ok &= bool(agree) and row["ratio"] >= 100
        rows.append(row)

    print(f"Supermarket N={N}, lam={LAM}: numba kernel vs SimPy model (jobs per CPU second, same run)")
    print(
        f"{'policy':8s} {'numba jobs/s':>14s} {'SimPy jobs/s':>13s} {'ratio':>8s}  "
        f"{'mean W numba':>18s} {'mean W SimPy':>18s}  agree"
    )
    for r in rows:
        print(
            f"{r['policy']:8s} {r['numba_jobs_per_s']:14,.0f} {r['simpy_jobs_per_s']:13,.0f} {r['ratio']:7.0f}x  "
            f"{r['numba_mean_response']:10.4f}±{1.96 * r['numba_se']:.4f} "
            f"{r['simpy_mean_response']:10.4f}±{1.96 * r['simpy_se']:.4f}  {r['means_agree']}"
        )
    print(f"ratio (min over policies): {min(r['ratio'] for r in rows):.0f}x  (target >= 100x)")
    study = study_main(full=args.study_full, runs=args.study_runs) if not args.quick or args.study_full else None
    if study is not None:
        ok &= study["ratio"]["ratio"] >= STUDY_RATIO_FLOOR
    from provenance import provenance

    out = HERE / "results" / ("bench_abtest_quick.json" if args.quick else "bench_abtest.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "study": study,
                "provenance": provenance(),
                "machine": platform.platform(),
                "python": platform.python_version(),
                "ok": ok,
            },
            indent=2,
            default=float,
        )
    )
    print(f"wrote {out}; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
