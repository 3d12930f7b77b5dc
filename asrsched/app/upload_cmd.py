"""``asrsched uploads``: short requests beside 1-10-minute uploads, per policy and chunk sizing, in the simulator.

Runs :func:`asrsched.sim.upload_study.upload_runs` and prints :func:`~asrsched.sim.upload_study.upload_table`: per
load, policy, engine behaviour (``chunks``: vLLM's chunks submitted together, a non-streamed request; ``streamed``:
one after another, a streamed request; ``sequence``: the CPU server's one job) and sizing, the short requests' P50/P90 E2EL and the uploads' P50/P90 E2EL (an upload ends at its last chunk),
each with its change against FCFS on chunk-sized chunks (95 % CI). ``--out DIR`` writes ``runs.csv``,
``table.csv`` and ``run.json`` (config, provenance). Exit status 2 on bad input, naming the flag.

    asrsched uploads --out figures/02_policy_sweep/uploads
"""

from __future__ import annotations

import argparse
import sys
import time

from asrsched.app.params import as_flag
from asrsched.sim.upload_study import UploadStudyConfig, upload_runs, upload_table

__all__ = ["main"]

_FLAG = {
    "rhos": "--rhos",
    "upload_share": "--upload-share",
    "upload_lo_s": "--upload-s",
    "policies": "--policies",
    "sizings": "--sizings",
    "seeds": "--seeds",
    "services": "--service",
}


def main(argv=None) -> int:
    """``asrsched uploads [flags]``; the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    d = UploadStudyConfig()
    ap = argparse.ArgumentParser(prog="asrsched uploads", description=__doc__.split("\n")[0])
    ap.add_argument("--rhos", nargs="+", type=float, default=list(d.rhos))
    ap.add_argument("--upload-share", type=float, default=d.upload_share, help="share of requests that are uploads")
    ap.add_argument("--upload-s", nargs=2, type=float, default=[d.upload_lo_s, d.upload_hi_s], metavar=("LO", "HI"))
    ap.add_argument("--policies", nargs="+", default=list(d.policies), help="nudge_m4: Nudge-M at the median")
    ap.add_argument("--sizings", nargs="+", default=list(d.sizings))
    ap.add_argument("--seeds", type=int, default=d.seeds)
    ap.add_argument("--n-requests", type=int, default=d.n_requests)
    ap.add_argument("--service", default="a100", help="a100, h200 or cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    try:
        from asrsched.app.frontier_cmd import service_models

        sdict, mns = service_models([a.service])[a.service]
        cfg = UploadStudyConfig(
            rhos=tuple(a.rhos),
            upload_share=a.upload_share,
            upload_lo_s=a.upload_s[0],
            upload_hi_s=a.upload_s[1],
            policies=tuple(a.policies),
            sizings=tuple(a.sizings),
            seeds=a.seeds,
            n_requests=a.n_requests,
            max_num_seqs=mns,
            service=sdict,
        )
    except ValueError as e:
        print(f"asrsched uploads: {as_flag(str(e), _FLAG)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runs = upload_runs(cfg, workers=a.workers, progress=False)
    secs = time.perf_counter() - t0
    tab = upload_table(runs)
    cols = ["rho", "policy", "short_p50_e2el_ms", "short_p90_e2el_ms", "upload_p50_e2el_ms", "upload_p90_e2el_ms"]
    cols += [c + "_change_pct" for c in ("short_p50_e2el_ms", "short_p90_e2el_ms", "upload_p50_e2el_ms")]
    print(tab[cols].round(1).to_string(index=False))
    if a.out:
        from dataclasses import asdict

        from asrsched.app.paths import write_study

        conf = {**asdict(cfg), "service_name": a.service}
        write_study(a.out, "uploads", argv, conf, secs, {"runs.csv": runs, "table.csv": tab})
    return 0
