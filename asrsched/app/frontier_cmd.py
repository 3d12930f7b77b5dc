"""``asrsched frontier``: the latency frontier of every policy, per workload, load and estimate error.

Runs :func:`asrsched.sim.frontier.run_frontier` (or reads a saved study with ``--from``) and prints
:func:`asrsched.sim.frontier_report.recommendations`: per cell, the policy with the lowest P50 E2EL among
those whose P90 (P99) E2EL is no worse than FCFS's at 95 % confidence, with the changes and their CIs.
``--out`` writes ``runs.csv.gz``, ``table.csv``, ``recommendations.csv`` and ``run.json`` (config,
provenance, seconds). Every parameter is checked before any simulation; the exit status is 2 on bad input,
with the flag named.

Service models: ``a100`` (the study's Whisper-large-v3 on an A100, 32 sequences; an engineering estimate,
:func:`asrsched.core.service.default_service_model`), ``h200`` (Whisper-large-v3 on an H200 fitted to published
measurements, :func:`asrsched.profiling.published.published_service_model`, 32 sequences) and ``cpu`` (the packaged measured profile of
Whisper base on 2 CPU threads, :func:`asrsched.profiling.run.packaged_profile`, 4 sequences as vLLM-CPU
runs it).

    asrsched frontier --out figures/02_policy_sweep/frontier          # the full setting
    asrsched frontier --workloads uniform --rhos 0.9 --seeds 3         # one cell, a minute
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from asrsched.app.params import as_flag
from asrsched.sim.frontier import FrontierConfig, run_frontier
from asrsched.sim.frontier_report import frontier_table, recommendations

__all__ = ["main", "service_models", "save_frontier", "load_frontier", "format_recommendations", "SERVICES"]

#: the service models a frontier can run on
SERVICES = ("a100", "h200", "cpu")
_FLAG = {
    "workloads": "--workloads",
    "rhos": "--rhos",
    "errors": "--errors",
    "seeds": "--seeds",
    "n_requests": "--n-requests",
    "warmup_frac": "--warmup-frac",
    "gamma_scales": "--gamma-scales",
    "nudge_quantiles": "--nudge-quantiles",
    "nudge_ms": "--nudge-ms",
    "services": "--services",
    "estimate_error": "--errors",
}


def service_models(names) -> dict:
    """``{name: (service dict or None, max_num_seqs)}`` for names of :data:`SERVICES`."""
    out = {}
    for n in names:
        if n == "a100":
            out[n] = (None, 32)
        elif n == "h200":
            from asrsched.profiling.published import published_service_model

            out[n] = (published_service_model().to_dict(), 32)
        elif n == "cpu":
            from asrsched.profiling.run import packaged_profile

            out[n] = (packaged_profile("base").to_dict(), 4)
        else:
            raise ValueError(f"services: unknown service model {n!r}; choose from {', '.join(SERVICES)}")
    return out


def save_frontier(runs: pd.DataFrame, cfg: FrontierConfig, out, seconds: float, command: str | None = None) -> Path:
    """Write a frontier study to folder ``out`` (runs, table, recommendations, ``run.json``)."""
    from asrsched.core.provenance import provenance

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv.gz", index=False)
    tab = frontier_table(runs)
    tab.to_csv(out / "table.csv", index=False)
    recommendations(tab).to_csv(out / "recommendations.csv", index=False)
    cmd = command or " ".join(shlex.quote(a) for a in ["asrsched", "frontier", *sys.argv[1:]])
    run = dict(config=cfg.to_dict(), seconds=seconds, provenance=provenance(cmd, cfg.to_dict(), paths=("asrsched",)))
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str))
    return out


def load_frontier(folder) -> tuple[pd.DataFrame, dict]:
    """The runs and ``run.json`` of a folder written by :func:`save_frontier` (an error naming a missing file)."""
    folder = Path(folder)
    for name in ("runs.csv.gz", "run.json"):
        if not (folder / name).exists():
            raise FileNotFoundError(f"--from: {folder / name} not found (a folder written by asrsched frontier --out)")
    return pd.read_csv(folder / "runs.csv.gz"), json.loads((folder / "run.json").read_text())


def format_recommendations(rec: pd.DataFrame) -> str:
    """The recommendation table as text: one line per cell and rule, changes vs FCFS with 95 % CIs."""

    def ci(r, m):
        return f"{r[f'{m}_change_pct']:+6.1f} [{r[f'{m}_change_ci_low']:+6.1f}, {r[f'{m}_change_ci_high']:+6.1f}]"

    lines = [
        f"{'service':<6} {'workload':<15} {'rho':>5} {'error':<9} {'rule':<4} {'policy':<20} "
        f"{'P50 change % [95% CI]':<25} {'P90 change %':<25} {'P99 change %':<25}"
    ]
    for _, r in rec.iterrows():
        tag = "" if r["rho"] < 1 else f"  (overload transient, {int(r['n_requests'])} requests)"
        lines.append(
            f"{r['service']:<6} {r['workload']:<15} {r['rho']:>5.2f} {r['error']:<9} {r['rule']:<4} {r['policy']:<20} "
            f"{ci(r, 'p50_e2el_ms'):<25} {ci(r, 'p90_e2el_ms'):<25} {ci(r, 'p99_e2el_ms'):<25}{tag}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    d = FrontierConfig()
    ap = argparse.ArgumentParser(prog="asrsched frontier", description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="from_", help="read a study written by --out instead of simulating")
    ap.add_argument("--out", help="write the study and its tables to this folder")
    ap.add_argument("--workloads", nargs="+", default=list(d.workloads))
    ap.add_argument("--rhos", nargs="+", type=float, default=list(d.rhos), help="loads, fractions of measured capacity")
    ap.add_argument(
        "--errors", nargs="+", default=list(d.errors), help="estimate errors: perfect lognormal real degraded"
    )
    ap.add_argument("--seeds", type=int, default=d.seeds)
    ap.add_argument("--n-requests", type=int, default=d.n_requests)
    ap.add_argument("--warmup-frac", type=float, default=d.warmup_frac)
    ap.add_argument("--gamma-scales", nargs="+", type=float, default=list(d.gamma_scales), help="γ x E[estimate]")
    ap.add_argument("--nudge-quantiles", nargs="+", type=float, default=list(d.nudge_quantiles))
    ap.add_argument("--nudge-ms", nargs="+", type=int, default=list(d.nudge_ms))
    ap.add_argument("--services", nargs="+", default=["a100", "cpu"], help=f"service models: {', '.join(SERVICES)}")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _as_flag(e: Exception) -> str:
    """The error with the parameter named as the user wrote it (``--rhos``, not ``rhos``)."""
    return as_flag(str(e), _FLAG)


def main(argv=None) -> int:
    """``asrsched frontier [flags]`` (see the module docstring); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = _parser().parse_args(argv)
    if a.from_:
        try:
            runs, run = load_frontier(a.from_)
        except FileNotFoundError as e:
            print(f"asrsched frontier: {e}", file=sys.stderr)
            return 2
        print(format_recommendations(recommendations(frontier_table(runs))))
        return 0
    try:
        cfg = FrontierConfig(
            workloads=tuple(a.workloads),
            rhos=tuple(a.rhos),
            errors=tuple(a.errors),
            seeds=a.seeds,
            n_requests=a.n_requests,
            warmup_frac=a.warmup_frac,
            gamma_scales=tuple(a.gamma_scales),
            nudge_quantiles=tuple(a.nudge_quantiles),
            nudge_ms=tuple(a.nudge_ms),
            services=service_models(a.services),
        )
    except ValueError as e:
        print(f"asrsched frontier: {_as_flag(e)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runs = run_frontier(cfg, workers=a.workers, progress=not a.quiet)
    secs = time.perf_counter() - t0
    if a.out:
        save_frontier(runs, cfg, a.out, secs, command=" ".join(shlex.quote(x) for x in ["asrsched", "frontier", *argv]))
    print(format_recommendations(recommendations(frontier_table(runs))))
    print(f"\n{len(runs)} runs in {secs:.0f} s" + (f"; written to {a.out}" if a.out else ""))
    return 0
