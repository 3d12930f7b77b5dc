"""``asrsched replay LOG``: what each policy would do to a deployment's own traffic.

Reads a request log written by the vLLM middleware (JSON lines, :mod:`asrsched.vllm_plugin.request_log`) or a
CSV of arrival times and audio durations (optional language and priority), checks it (an error names the rows
and the problem, before any simulation), and prints each policy's predicted P50/P90/P99 E2EL and P50 TTFT with
95 % block-bootstrap CIs, the capacity the service model has for these requests and the load ρ they imply
(:func:`asrsched.sim.replay.replay_policies`). ``--out DIR`` writes ``replay.csv`` and ``replay.json`` (the setting and
provenance). Exit status 2 on bad input.

    asrsched replay requests.jsonl --service cpu --policies fcfs sjf hrrn nudge_m4_1.35
    asrsched replay traffic.csv --service profile.json --max-num-seqs 8
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from asrsched.app.params import as_flag
from asrsched.sim.replay import REPLAY_METRICS, read_requests, replay_policies

__all__ = ["main", "format_replay"]


def format_replay(tab, info: dict) -> str:
    """The replay as text: the load line, then one line per policy with each metric and its 95 % CI (s)."""
    lines = [
        f"{info['n_requests']} requests over {info['span_s']:.0f} s: {info['rate_rps']:.3g} req/s = rho "
        f"{info['rho']:.2f} of the capacity {info['capacity_rps']:.3g} req/s of {info['service']} "
        f"(max_num_seqs {info['max_num_seqs']}); 95 % CIs from a block bootstrap over {info['blocks']} blocks",
        f"{'policy':<22}" + "".join(f"{m.replace('_ms', ' (s)'):>28}" for m in REPLAY_METRICS),
    ]
    for _, r in tab.iterrows():
        cells = "".join(
            f"{r[m] / 1e3:>10.2f} [{r[m + '_ci_low'] / 1e3:6.2f}, {r[m + '_ci_high'] / 1e3:6.2f}]"
            for m in REPLAY_METRICS
        )
        lines.append(f"{r['policy']:<22}{cells}")
    return "\n".join(lines)


def _service(name: str):
    from asrsched.app.frontier_cmd import SERVICES, service_models
    from asrsched.core.service import as_service_model

    if name in SERVICES:
        sdict, mns = service_models([name])[name]
        return as_service_model(sdict), mns
    p = Path(name)
    if not p.exists():
        raise ValueError(f"--service: {name!r} is neither {' nor '.join(SERVICES)} nor a service-model JSON file")
    return as_service_model(p), 32


def main(argv=None) -> int:
    """``asrsched replay LOG [flags]`` (see the module docstring); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="asrsched replay", description=__doc__.split("\n")[0])
    ap.add_argument("log", help="a request log (.jsonl) or a CSV with arrival_s and duration_s columns")
    ap.add_argument("--service", default="a100", help="a100, h200, cpu, or a service-model JSON (a profile)")
    ap.add_argument("--policies", nargs="+", default=["fcfs", "sjf", "hrrn"])
    ap.add_argument("--max-num-seqs", type=int, default=None, help="default: 32 (a100, h200, a JSON), 4 (cpu)")
    ap.add_argument("--estimate-error", default="real", help="perfect, lognormal, real or degraded")
    ap.add_argument("--block-s", type=float, default=60.0, help="block length of the bootstrap over time (s)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write replay.csv and replay.json here")
    a = ap.parse_args(argv)
    flags = {"block_s": "--block-s", "n_boot": "--n-boot", "estimate_error": "--estimate-error"}
    try:
        sm, mns = _service(a.service)
        req = read_requests(a.log)
        tab, info = replay_policies(
            req,
            sm,
            a.policies,
            max_num_seqs=a.max_num_seqs or mns,
            estimate_error=a.estimate_error,
            block_s=a.block_s,
            n_boot=a.n_boot,
            seed=a.seed,
        )
    except (ValueError, FileNotFoundError) as e:
        msg = as_flag(str(e), flags)
        if msg.startswith("unknown policy"):
            msg = "--policies: " + msg
        print(f"asrsched replay: {msg}", file=sys.stderr)
        return 2
    print(format_replay(tab, info))
    if a.out:
        from asrsched.core.provenance import provenance

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        tab.to_csv(out / "replay.csv", index=False)
        cmd = " ".join(shlex.quote(x) for x in ["asrsched", "replay_policies", *argv])
        (out / "replay.json").write_text(
            json.dumps({**info, "provenance": provenance(cmd, vars(a))}, indent=1, default=str)
        )
    return 0
