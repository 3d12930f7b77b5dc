"""Re-measure every speed target of the project in one run, in under a minute on 2 cores.

    python benchmarks/check.py            # measure, print one line per target, exit 1 if any misses
    python benchmarks/check.py --write    # ... and rewrite results/check.json and the README table
    python benchmarks/check.py --readme   # only re-render the README table from results/check.json

Each benchmark module exposes ``check_targets(quick=True) -> list[dict]``; every dict
is one target: ``name``, ``value``, ``target``, ``unit``, ``kind`` (``"min"``: the value
must be at least the target, e.g. a speed-up ratio against a baseline measured in the
same run; ``"max"``: at most, e.g. microseconds per decision), ``passed`` and an
optional ``note``. The full-size runs stay in the ``bench_*.py`` scripts with their
own committed results.

The table of targets in ``benchmarks/README.md`` between the ``check:begin`` and
``check:end`` markers is generated from ``results/check.json`` (never typed), and
``tests/project/test_benchmarks_readme.py`` fails when the two disagree.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from provenance import load_average, provenance  # noqa: E402

#: the benchmark modules whose ``check_targets`` this runs, in order
MODULES = ("bench_sim", "bench_fleet", "bench_abtest", "bench_vllm_queue")
RESULTS = HERE / "results" / "check.json"
README = HERE / "README.md"
BEGIN, END = "<!-- check:begin -->", "<!-- check:end -->"


def run_checks(modules=MODULES, quick: bool = True) -> list[dict]:
    """Every target of every module; a module that fails or lacks ``check_targets`` is a failed row."""
    rows: list[dict] = []
    for name in modules:
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(name)
            fn = getattr(mod, "check_targets", None)
            if fn is None:
                raise AttributeError(f"{name}.py has no check_targets(quick=...)")
            got = list(fn(quick=quick))
            if not got:
                raise ValueError(f"{name}.check_targets returned no targets")
        except Exception as exc:  # a broken benchmark is a failed target, not a crash of the check
            traceback.print_exc(limit=3)
            got = [
                {
                    "name": f"{name}: could not measure",
                    "value": float("nan"),
                    "target": float("nan"),
                    "unit": "",
                    "kind": "min",
                    "passed": False,
                    "note": f"{type(exc).__name__}: {exc}",
                }
            ]
        dt = time.perf_counter() - t0
        for r in got:
            r.setdefault("note", "")
            r["module"] = name
            r["module_seconds"] = round(dt, 2)
            rows.append(r)
    return rows


def _fmt(x: float) -> str:
    if x != x:  # nan
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def line(r: dict) -> str:
    """One printed line: name, measured value, floor or ceiling, PASS/FAIL, note."""
    op = "≥" if r["kind"] == "min" else "≤"
    return (
        f"{'PASS' if r['passed'] else 'FAIL'}  {r['name']:<52} {_fmt(r['value']):>10} {r['unit']:<3} "
        f"(target {op} {_fmt(r['target'])} {r['unit']})  {r.get('note', '')}"
    ).rstrip()


def readme_table(record: dict) -> str:
    """The README's table of targets, rendered from a ``check.json`` record."""
    p = record["provenance"]
    out = [
        BEGIN,
        f"Measured by `python benchmarks/check.py --write` at commit `{p['commit'][:10]}`"
        f"{'' if p['clean_tree'] else ' (with local changes)'} on {p['date_utc'][:10]}, {p['cpu_model']}, "
        f"{p['cpu_count']} cores, load average {(p['load_average_start_1_5_15'] or ['?'])[0]} at the start:",
        "",
        "| target | measured | required | met |",
        "|---|---:|---:|:---:|",
    ]
    for r in record["rows"]:
        op = "≥" if r["kind"] == "min" else "≤"
        note = f" ({r['note']})" if r.get("note") else ""
        out.append(
            f"| {r['name']}{note} | {_fmt(r['value'])} {r['unit']} | {op} {_fmt(r['target'])} {r['unit']} | "
            f"{'yes' if r['passed'] else '**missed**'} |"
        )
    out.append(END)
    return "\n".join(out)


def render_readme(record: dict, path: Path = README) -> bool:
    """Replace the marked table in ``path``; returns whether the file changed."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no {BEGIN} ... {END} block to fill")
    new = text[: text.index(BEGIN)] + readme_table(record) + text[text.index(END) + len(END) :]
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite results/check.json and the README table")
    ap.add_argument("--readme", action="store_true", help="only re-render the README table from results/check.json")
    ap.add_argument("--only", nargs="+", choices=MODULES, help="run these modules only (never written)")
    args = ap.parse_args(argv)
    if args.readme:
        render_readme(json.loads(RESULTS.read_text()))
        print(f"rendered {README.relative_to(ROOT)} from {RESULTS.relative_to(ROOT)}")
        return 0
    prov = provenance(load_start=load_average())
    t0 = time.perf_counter()
    rows = run_checks(args.only or MODULES)
    wall = time.perf_counter() - t0
    for r in rows:
        print(line(r))
    n_ok = sum(r["passed"] for r in rows)
    print(
        f"\n{n_ok}/{len(rows)} targets met in {wall:.0f} s "
        f"(load average {(prov['load_average_start_1_5_15'] or ['?'])[0]} at the start, "
        f"{prov['cpu_count']} cores; commit {prov['commit'][:10]}{'' if prov['clean_tree'] else ' + local changes'})"
    )
    if args.write and not args.only:
        prov["load_average_end_1_5_15"] = load_average()
        record = {"benchmark": "check", "wall_s": round(wall, 1), "provenance": prov, "rows": rows}
        RESULTS.write_text(json.dumps(record, indent=2, default=float) + "\n")
        render_readme(record)
        print(f"wrote {RESULTS.relative_to(ROOT)} and the table in {README.relative_to(ROOT)}")
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
