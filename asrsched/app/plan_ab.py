"""``asrsched plan-ab``: how long to run an A/B test of ASR routing or scheduling, per design and estimator.

Runs the precision study of :mod:`asrsched.abtest.planner` for one fleet setting (or reads a
saved one with ``--from``), then prints :mod:`asrsched.abtest.plan_report`'s plan: the required
experiment length for the effect at the stated power and level, the minimum detectable effect
at the longest simulated length, each estimator's status and the recommendation; with ``--out``
it writes the study (``estimates.csv.gz``, ``truth.csv``, ``run.json`` with provenance) and the
tables there. Every parameter is checked before any simulation; the exit status is 2 on bad
input, with the flag named.

Example (the ASR fleet defaults: 4 replicas at rho 0.95, FCFS -> HRRN and random -> least-work)::

    asrsched plan-ab --effect 0.10 --power 0.8 --level 0.05
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from asrsched.abtest.plan_report import (
    check_target,
    law_table,
    mixed_gain_table,
    plan_recommendation,
    plan_table,
    precision_table,
)
from asrsched.abtest.planner import PlanConfig, PlanResult
from asrsched.app.params import as_flag

__all__ = ["main", "save_plan", "load_plan", "format_plan"]

_FLAG = {  # PlanConfig field -> the flag a user wrote
    "workload": "--workload",
    "n_replicas": "--n-replicas",
    "rho": "--rho",
    "lengths_s": "--lengths",
    "reps": "--reps",
    "truth_seeds": "--truth-seeds",
    "block_s": "--block-s",
    "burn_in_s": "--burn-in-s",
    "extra_blocks": "--extra-blocks",
    "routing_designs": "--routing-designs",
    "scheduling_designs": "--scheduling-designs",
    "effect": "--effect",
    "power": "--power",
    "level": "--level",
    "max_bias": "--max-bias",
    "at_length_s": "--mde-at",
}


def _as_flag(e: Exception) -> str:
    """The error with the parameter named as the user wrote it (``--rho``, not ``rho``)."""
    return as_flag(str(e), _FLAG)


def save_plan(res: PlanResult, out, command: str | None = None) -> Path:
    """Write a precision study to folder ``out``: estimates, truth and ``run.json`` (config, provenance, seconds)."""
    from asrsched.core.provenance import provenance

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    res.estimates.to_csv(out / "estimates.csv.gz", index=False)
    res.truth.to_csv(out / "truth.csv", index=False)
    cmd = command or " ".join(shlex.quote(a) for a in ["asrsched", "plan-ab", *sys.argv[1:]])
    run = dict(
        config=res.config.to_dict(),
        seconds=res.seconds,
        provenance=provenance(cmd, res.config.to_dict(), paths=("asrsched",)),
    )
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str))
    return out


def load_plan(folder) -> PlanResult:
    """Read a precision study written by :func:`save_plan` (an error naming the missing file)."""
    folder = Path(folder)
    for name in ("estimates.csv.gz", "truth.csv", "run.json"):
        if not (folder / name).exists():
            raise FileNotFoundError(f"--from: {folder / name} not found (a folder written by asrsched plan-ab --out)")
    run = json.loads((folder / "run.json").read_text())
    return PlanResult(
        PlanConfig.from_dict(run["config"]),
        pd.read_csv(folder / "estimates.csv.gz"),
        pd.read_csv(folder / "truth.csv"),
        float(run.get("seconds", 0.0)),
    )


def _blocks(items: list[str]) -> tuple:
    """``["60:15"]`` -> ``((60.0, 15.0),)``; an error naming ``--extra-blocks`` otherwise."""
    out = []
    for it in items:
        try:
            b, u = (float(x) for x in str(it).split(":"))
        except ValueError:
            raise ValueError(f"--extra-blocks: need BLOCK:BURN_IN seconds such as 60:15, got {it!r}") from None
        out.append((b, u))
    return tuple(out)


def _len(s: float) -> str:
    if s != s or s == float("inf"):
        return "never"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def format_plan(plan: pd.DataFrame, laws: pd.DataFrame) -> str:
    """The plan as a plain-text table, one row per design and estimator, then the sd laws."""
    rows = []
    for r, law in zip(plan.itertuples(), laws.itertuples()):
        rows.append(
            {
                "test": r.factor,
                "design": r.setting,
                "estimator": r.label,
                "length": _len(r.required_s),
                "requests": "-" if r.required_requests == float("inf") else f"{r.required_requests:,.0f}",
                f"MDE at {r.mde_at_s / 60:.0f} min": "-" if r.mde_pct == float("inf") else f"{r.mde_pct:.1f} %",
                "bias ratio": "-"
                if law.bias_ratio != law.bias_ratio
                else f"{law.bias_ratio:.2f} [{law.bias_ratio_ci_lo:.2f}, {law.bias_ratio_ci_hi:.2f}]",
                "sd ~ T^b": f"{law.sd_exponent:.2f} [{law.sd_exponent_ci_lo:.2f}, {law.sd_exponent_ci_hi:.2f}]",
                "status": r.status + (" <- recommended" if r.recommended else ""),
            }
        )
    return pd.DataFrame(rows).to_string(index=False)


def _parser() -> argparse.ArgumentParser:
    d = PlanConfig()
    ap = argparse.ArgumentParser(
        prog="asrsched plan-ab",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The study behind the plan: asrsched.abtest.planner (simulation) and asrsched.abtest.plan_report "
        "(power model). Lengths are seconds of traffic, warm-up included.",
    )
    ap.add_argument("--effect", type=float, default=0.10, help="relative change of mean E2EL to detect (0.10 = 10 %%)")
    ap.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    ap.add_argument("--level", type=float, default=0.05, help="significance level (default 0.05)")
    ap.add_argument("--max-bias", type=float, default=0.25, help="largest relative bias to recommend (default 0.25)")
    ap.add_argument(
        "--mde-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="experiment length of the MDE column (default: the longest)",
    )
    ap.add_argument("--workload", default=d.workload)
    ap.add_argument("--n-replicas", type=int, default=d.n_replicas)
    ap.add_argument("--rho", type=float, default=d.rho, help="offered load, fraction of fleet capacity")
    ap.add_argument("--routing", nargs=2, metavar=("CONTROL", "TREATMENT"), default=None, help="router pair")
    ap.add_argument("--scheduling", nargs=2, metavar=("CONTROL", "TREATMENT"), default=None, help="policy pair")
    ap.add_argument("--router", default=d.scheduling_router, help="router of the scheduling test")
    ap.add_argument("--routing-designs", nargs="*", default=list(d.routing_designs))
    ap.add_argument("--scheduling-designs", nargs="*", default=list(d.scheduling_designs))
    ap.add_argument("--lengths", type=float, nargs="+", default=list(d.lengths_s), help="experiment lengths (s)")
    ap.add_argument("--reps", type=int, default=d.reps, help="experiments per design and length")
    ap.add_argument("--truth-seeds", type=int, default=d.truth_seeds)
    ap.add_argument("--block-s", type=float, default=d.block_s, help="switchback block length (s)")
    ap.add_argument("--burn-in-s", type=float, default=d.burn_in_s, help="switchback burn-in (s)")
    ap.add_argument(
        "--extra-blocks",
        nargs="*",
        default=[f"{b:g}:{u:g}" for b, u in d.extra_blocks],
        metavar="BLOCK:BURN_IN",
        help="more block settings of the block designs, e.g. 60:15 120:30 (default: %(default)s)",
    )
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    ap.add_argument("--cache", default="runs/plan-cache", help="task cache folder ('' for none)")
    ap.add_argument("--from", dest="from_dir", default=None, help="read a saved study instead of simulating")
    ap.add_argument("--out", default=None, help="write the study and the tables into this folder")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``asrsched plan-ab`` (exit 2 on bad input, naming the flag)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        check_target(args.effect, args.power, args.level)
        if args.from_dir:
            res = load_plan(args.from_dir)
        else:
            d = PlanConfig()
            cfg = d.replace(
                workload=args.workload,
                n_replicas=args.n_replicas,
                rho=args.rho,
                routing_control=(args.routing or (d.routing_control, d.routing_treatment))[0],
                routing_treatment=(args.routing or (d.routing_control, d.routing_treatment))[1],
                scheduling_control=(args.scheduling or (d.scheduling_control, d.scheduling_treatment))[0],
                scheduling_treatment=(args.scheduling or (d.scheduling_control, d.scheduling_treatment))[1],
                scheduling_router=args.router,
                routing_designs=tuple(args.routing_designs),
                scheduling_designs=tuple(args.scheduling_designs),
                lengths_s=tuple(args.lengths),
                reps=args.reps,
                truth_seeds=args.truth_seeds,
                block_s=args.block_s,
                burn_in_s=args.burn_in_s,
                extra_blocks=_blocks(args.extra_blocks),
                seed=args.seed,
            )
            cfg.validate()
            from asrsched.sim.parallel import run_study

            t0 = time.perf_counter()
            res = run_study(cfg, workers=args.workers, cache_dir=args.cache or None)
            print(f"simulated {len(res.estimates):,} experiments in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        prec = precision_table(res)
        laws = law_table(res, prec)
        plan = plan_table(res, args.effect, args.power, args.level, args.max_bias, args.mde_at, laws=laws)
    except (ValueError, FileNotFoundError) as e:
        print(f"asrsched plan-ab: error: {_as_flag(e)}", file=sys.stderr)
        return 2
    c = res.config
    print(
        f"A/B plan: {c.n_replicas} replicas, rho {c.rho:g}, {c.workload}; mean E2EL change of "
        f"{100 * args.effect:g} %, power {args.power:g}, level {args.level:g}; {c.reps} experiments per design "
        f"at lengths {', '.join(f'{x:g}' for x in c.lengths_s)} s"
    )
    print(format_plan(plan, laws))
    print(plan_recommendation(plan, res))
    gain = mixed_gain_table(res)
    if len(gain):
        print("mixed DQ's sd gain over the better / worse DQ (95 % CI), per experiment length:")
        for g in gain.itertuples():
            print(
                f"  {g.factor} {g.length_s / 60:.0f} min: {g.gain_over_better:.2f} [{g.gain_over_better_ci_lo:.2f}, "
                f"{g.gain_over_better_ci_hi:.2f}] / {g.gain_over_worse:.2f} [{g.gain_over_worse_ci_lo:.2f}, "
                f"{g.gain_over_worse_ci_hi:.2f}]"
            )
    if args.out:
        cmd = " ".join(shlex.quote(a) for a in ["asrsched", "plan-ab", *argv])
        out = save_plan(res, args.out, command=cmd) if not args.from_dir else Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        prec.to_csv(out / "precision.csv", index=False)
        laws.to_csv(out / "laws.csv", index=False)
        plan.to_csv(out / "plan.csv", index=False)
        gain.to_csv(out / "mixed_dq_gain.csv", index=False)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
