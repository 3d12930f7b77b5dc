"""Command line: ``asrsched <command>``.

* ``asrsched list`` — the notebooks and their parameters;
* ``asrsched run [NB ...] [-p NAME VALUE] [--params FILE] [--gallery] [--formats F ...] [--timeout S]
  [--run-dir D] [--figures D]`` — execute one notebook, several, or (no names) the whole series
  with papermill; executed copies, figures and tables go to ``runs/<timestamp>/``; ``--gallery``
  writes the figures into the report gallery ``figures/<notebook>/`` and rewrites
  ``figures/README.md`` (what ``bash scripts/main.sh`` does). Folders are under the project
  (``$ASRSCHED_ROOT``, the checkout at or above the current directory, or the current directory);
* ``asrsched export FIG.html ... --formats pdf png`` — write exported figures again in other formats;
* ``asrsched check-figures DIR|SVG ...`` — fail when exported figures hide data (clipped points with no label,
  changes below -100 %) or have unreadable text (off the canvas, overlapping, a single-tick axis);
* ``asrsched simulate --workload W --rate R --policy P`` — one simulator run, printed
  as ``vllm bench serve``-style metrics;
* ``asrsched sweep --rates 1 5 10 --policies fcfs sjf hrrn`` — a cached, resumable sweep
  (``--address`` sends it to a Dask cluster).

Other parts add their own commands (``asrsched <cmd> --help``): profile, serve,
loadgen (see README). ``asrsched --version`` prints the version.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from asrsched import __version__
from asrsched.app.params import parse_value

__all__ = ["main", "COMMANDS"]

# name -> "module:function" taking argv (lazy, so a missing optional part fails only when used)
COMMANDS: dict[str, str] = {}
COMMANDS["serve"] = "asrsched.serving.cli:main"
COMMANDS["loadgen"] = "asrsched.serving.loadgen:main"
COMMANDS["dashboard"] = "asrsched.app.dashboard:main"
COMMANDS["plan-ab"] = "asrsched.app.plan_ab:main"
COMMANDS["frontier"] = "asrsched.app.frontier_cmd:main"
COMMANDS["replay"] = "asrsched.app.replay_cmd:main"
COMMANDS["classes"] = "asrsched.app.class_cmd:main"
COMMANDS["uploads"] = "asrsched.app.upload_cmd:main"


def _cmd_list(args) -> int:
    from asrsched.app.runner import notebook_parameters, notebooks

    for nb in notebooks():
        print(nb.stem)
        for k, v in notebook_parameters(nb).items():
            print(f"    {k} = {v}")
    return 0


def _cmd_run(args) -> int:
    from asrsched.app import paths
    from asrsched.app.gallery import write_gallery
    from asrsched.app.params import load_params, params_for, small_params
    from asrsched.app.runner import figures_root_for, notebook_parameters, resolve, run_notebook, run_series

    params = small_params() if args.small else load_params(args.params)
    cli_params = {k: parse_value(v) for k, v in (args.param or [])}
    if args.notebooks and len(args.notebooks) == 1:
        nb = resolve(args.notebooks[0])
        p = {**params_for(nb.stem, params, notebook_parameters(nb)), **cli_params}
        run_dir = Path(args.run_dir or paths.new_run_dir())
        figs = figures_root_for(run_dir, figures_root=args.figures, gallery=args.gallery)
        r = run_notebook(nb, p, run_dir=run_dir, figures_root=figs, timeout_s=args.timeout, formats=args.formats)
        print(f"{r.notebook}: {r.status} in {r.seconds:.0f} s -> {r.output}")
        index = write_gallery(figs, run_dir=run_dir)  # the index of the folder the exports went to
        print(f"figures and tables: {figs / r.notebook} (index {index})")
        if r.error:
            print(r.error, file=sys.stderr)
        return 0 if r.status == "ok" else 1
    if cli_params:
        params.setdefault("*", {}).update(cli_params)
    run_dir = Path(args.run_dir or paths.new_run_dir())
    df = run_series(
        args.notebooks or None,
        params,
        run_dir=run_dir,
        figures_root=args.figures,
        timeout_s=args.timeout,
        gallery=args.gallery,
        formats=args.formats,
    )
    print(df[["notebook", "status", "seconds"]].to_string(index=False))
    print(
        f"total {df.seconds.sum():.0f} s; figures and tables in "
        f"{figures_root_for(run_dir, figures_root=args.figures, gallery=args.gallery)}"
    )
    return 0 if (df.status == "ok").all() else 1


def _cmd_export(args) -> int:
    from asrsched.figures.reexport import reexport

    for f in args.figures:
        written = reexport(f, tuple(args.formats), out_dir=args.out_dir)
        print(", ".join(str(p) for p in written.values()))
    return 0


def _cmd_check_figures(args) -> int:
    from asrsched.figures.layout_check import main as check_main

    return check_main(list(args.paths))


def _cmd_simulate(args) -> int:
    from asrsched.sim.sweep import run_point

    r = run_point(
        workload=args.workload,
        rate=args.rate,
        policy=args.policy,
        seed=args.seed,
        n_requests=args.n_requests,
        max_num_seqs=args.max_num_seqs,
        service=json.loads(open(args.profile).read()) if args.profile else None,
        kappa=args.kappa,
    )
    width = max(map(len, r))
    for k, v in r.items():
        print(f"{k:<{width}}  {v:.3f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0


def _cmd_sweep(args) -> int:
    from asrsched.core.metrics import relative_change
    from asrsched.sim.sweep import run_sweep

    df = run_sweep(
        args.rates,
        args.policies,
        args.workloads,
        args.seeds,
        n_requests=args.n_requests,
        max_num_seqs=args.max_num_seqs,
        service=args.profile,
        cache_dir=args.cache,
        workers=args.workers,
        address=args.address,
    )
    if args.out:
        df.to_csv(args.out, index=False)
    rc = relative_change(df)
    cols = [c for c in rc if c.endswith("_change_pct")]
    print(rc[["workload", "rate", "policy", *cols]].round(1).to_string(index=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="asrsched", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"asrsched {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list notebooks and parameters").set_defaults(fn=_cmd_list)

    r = sub.add_parser(
        "run",
        help="execute notebooks with papermill",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Execute notebooks headlessly (papermill) with parameters.\n\n"
        "Where things go (under the project: $ASRSCHED_ROOT, the checkout at or above the current\n"
        "directory, else the current directory):\n"
        "  runs/<timestamp>/                    executed notebooks, summary.csv\n"
        "  runs/<timestamp>/figures/<notebook>/ figures (html, png, svg), tables (csv), run.json\n"
        "  figures/<notebook>/                  the report gallery: only with --gallery (scripts/main.sh)",
        epilog="Parameter values (-p NAME VALUE) are Python literals; quote them for the shell:\n"
        "  asrsched run 03 -p RATE 8                       a number\n"
        '  asrsched run 02 -p RATES "[5, 15, 25]" -p N_REQUESTS 500\n'
        "  asrsched run 03 -p PHASES \"[[0, 'librispeech'], [60, 'uniform']]\"\n"
        "  asrsched run 01 -p MODEL tiny.en              a bare word stays a string (or -p MODEL \"'tiny.en'\")\n"
        "  asrsched run 02 -p KAPPA None -p CACHE_DIR None   None, True, False as in Python\n"
        "  asrsched run 02 --small                         the small set (notebooks/small_params.json)\n"
        "  asrsched run --params my_params.json            a JSON file {notebook: {NAME: value}}\n"
        "  asrsched run --gallery                          every notebook, default parameters, into figures/\n"
        "  asrsched run 02 --formats html png svg pdf      also write PDFs\n"
        "A value must be of its default's kind (a number, True/False, a string, a list, a dict; None goes\n"
        "anywhere), and a list missing a bracket is an error, before anything runs.\n"
        "`asrsched list` shows every notebook's parameters and defaults.",
    )
    r.add_argument("notebooks", nargs="*", help="names, stems or numbers, e.g. 02 or 02_policy_sweep (default: all)")
    r.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="set a parameter; VALUE is a Python literal (number, string, list, None, True); "
        "repeatable; wins over --params",
    )
    src = r.add_mutually_exclusive_group()
    src.add_argument("--params", help="JSON parameter file {notebook stem, number or '*': {NAME: value}}")
    src.add_argument(
        "--small",
        action="store_true",
        help="each notebook's small parameter set (notebooks/small_params.json: about 30 s a notebook)",
    )
    r.add_argument(
        "--gallery",
        action="store_true",
        help="write figures into the report gallery figures/<notebook>/ and rewrite figures/README.md "
        "(the main job, bash scripts/main.sh, does this); default: into the run folder",
    )
    r.add_argument(
        "--formats",
        nargs="+",
        default=None,
        metavar="FMT",
        help="formats of every exported figure: html png svg pdf (default: html png svg)",
    )
    r.add_argument("--timeout", type=int, default=900, help="execution timeout per cell (s)")
    r.add_argument(
        "--run-dir", default=None, help="folder for the executed notebooks and summary.csv (default runs/<timestamp>)"
    )
    r.add_argument(
        "--figures",
        default=None,
        help="figures root to write into instead (default runs/<timestamp>/figures, or figures/ with --gallery)",
    )
    r.set_defaults(fn=_cmd_run)

    e = sub.add_parser(
        "export",
        help="write exported figures (.html) again as pdf/png/svg",
        description="Write figures that a notebook exported (their .html) again in other formats, "
        "house size and layout. Example: asrsched export "
        "runs/02_policy_sweep/<run>/throughput.html --formats pdf",
    )
    e.add_argument("figures", nargs="+", help="exported .html files (or their stem with the folder)")
    e.add_argument("--formats", nargs="+", default=["pdf"], metavar="FMT", help="html png svg pdf (default pdf)")
    e.add_argument("--out-dir", default=None, help="folder to write into (default: beside the .html)")
    e.set_defaults(fn=_cmd_export)

    c = sub.add_parser(
        "check-figures",
        help="fail when exported figures hide data or have unreadable text",
        description="Render exported SVGs in Chromium and report text that runs off the canvas or "
        "overlaps other text, numeric axes with a single tick label, and (from the HTML export beside "
        "each SVG) data clipped at a fixed axis range with no label saying its value and relative "
        "changes below -100 %% (exit 1). Example: asrsched check-figures figures/",
    )
    c.add_argument("paths", nargs="+", help="SVG files or folders (searched recursively)")
    c.set_defaults(fn=_cmd_check_figures)

    s = sub.add_parser("simulate", help="one simulator run")
    s.add_argument("--workload", default="librispeech")
    s.add_argument("--rate", type=float, default=10.0)
    s.add_argument("--policy", default="fcfs")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--n-requests", type=int, default=2000)
    s.add_argument("--max-num-seqs", type=int, default=32)
    s.add_argument("--kappa", type=float, default=None)
    s.add_argument("--profile", default=None, help="service-model JSON")
    s.set_defaults(fn=_cmd_simulate)

    w = sub.add_parser("sweep", help="rates x policies x workloads x seeds")
    w.add_argument("--rates", type=float, nargs="+", default=[1, 5, 10, 15, 20, 25])
    w.add_argument("--policies", nargs="+", default=["fcfs", "sjf", "hrrn"])
    w.add_argument("--workloads", nargs="+", default=["librispeech", "uniform"])
    w.add_argument("--seeds", type=int, nargs="+", default=[0])
    w.add_argument("--n-requests", type=int, default=2000)
    w.add_argument("--max-num-seqs", type=int, default=32)
    w.add_argument("--profile", default=None, help="service-model JSON")
    w.add_argument("--cache", default="runs/sweep-cache")
    w.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    w.add_argument("--address", default=None, help="Dask scheduler address, or 'local'")
    w.add_argument("--out", default=None, help="write the full table as CSV")
    w.set_defaults(fn=_cmd_sweep)

    for name, target in COMMANDS.items():
        p = sub.add_parser(name, help=f"see asrsched {name} --help", add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(fn=None, target=target)
    return ap


def _dispatch(target: str, argv: list[str]) -> int:
    import importlib

    mod, fn = target.split(":")
    f: Callable[[list[str]], int] = getattr(importlib.import_module(mod), fn)
    return int(f(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    """The ``asrsched`` command: dispatch to a subcommand; the exit status (2 for bad input, named)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return _dispatch(COMMANDS[argv[0]], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"asrsched: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
