"""``asrsched classes``: interactive and batch priority classes on one engine, with and without an aging bound.

Runs :func:`asrsched.sim.class_study.class_runs` and prints :func:`~asrsched.sim.class_study.class_table`: per
load and policy, the interactive class's P50/P90 E2EL, the batch class's throughput and worst wait, each against
FCFS with a 95 % CI, and how far past the bound the worst batch wait went. ``--out DIR`` writes ``runs.csv``,
``table.csv`` and ``run.json`` (config, provenance). Exit status 2 on bad input, naming the flag.

    asrsched classes --service cpu --out figures/02_policy_sweep/classes
"""

from __future__ import annotations

import argparse
import sys
import time

from asrsched.app.params import as_flag
from asrsched.core.policies import validate_policies
from asrsched.sim.class_study import ClassStudyConfig, class_runs, class_table

__all__ = ["main"]

_FLAG = {
    "workload": "--workload",
    "rhos": "--rhos",
    "interactive_share": "--interactive-share",
    "aging_s": "--aging-s",
    "seeds": "--seeds",
    "services": "--service",
}


def main(argv=None) -> int:
    """``asrsched classes [flags]``; the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    d = ClassStudyConfig()
    ap = argparse.ArgumentParser(prog="asrsched classes", description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default=d.workload)
    ap.add_argument("--rhos", nargs="+", type=float, default=list(d.rhos))
    ap.add_argument("--interactive-share", type=float, default=d.interactive_share)
    ap.add_argument("--inner", default=d.inner, help="the policy inside each class")
    ap.add_argument("--aging-s", nargs="+", type=float, default=list(d.aging_s))
    ap.add_argument("--seeds", type=int, default=d.seeds)
    ap.add_argument("--n-requests", type=int, default=d.n_requests)
    ap.add_argument("--service", default="cpu", help="a100 or cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    try:
        from asrsched.app.frontier_cmd import service_models

        sdict, mns = service_models([a.service])[a.service]
        cfg = ClassStudyConfig(
            workload=a.workload,
            rhos=tuple(a.rhos),
            interactive_share=a.interactive_share,
            inner=a.inner,
            aging_s=tuple(a.aging_s),
            seeds=a.seeds,
            n_requests=a.n_requests,
            max_num_seqs=mns,
            service=sdict,
        )
        validate_policies(cfg.policies())
    except ValueError as e:
        print(f"asrsched classes: {as_flag(str(e), _FLAG)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runs = class_runs(cfg, workers=a.workers, progress=False)
    secs = time.perf_counter() - t0
    tab = class_table(runs)
    cols = ["rho", "policy", "interactive_p90_e2el_ms_change_pct", "batch_throughput_rps_change_pct"]
    cols += ["batch_max_wait_ms_change_pct", "worst_past_bound_s", "max_service_s"]
    print(tab[cols].round(1).to_string(index=False))
    if a.out:
        from dataclasses import asdict

        from asrsched.app.paths import write_study

        conf = {**asdict(cfg), "service_name": a.service}
        write_study(a.out, "classes", argv, conf, secs, {"runs.csv": runs, "table.csv": tab})
    return 0
