"""Old code against new, alternating in one window: every ``check.py`` target measured on two commits.

    python benchmarks/compare.py --base e5deb5a                  # 3 rounds, quick sizes
    python benchmarks/compare.py --base e5deb5a --rounds 5 --write

This machine's speed drifts 20-40 % within minutes, so a number from one run is not comparable
with a number from another run an hour later. Here the base commit is checked out in a
temporary git worktree, and each round runs the targets of ``benchmarks/check.py`` (each
benchmark module's ``check_targets(quick=True)``) once with the base checkout's code and once
with this checkout's, in fresh processes, the order alternating from round to round (base
first in odd rounds). For every target it reports the best value of each side (the largest of
a ``min`` target such as a speed-up ratio, the smallest of a ``max`` target such as
microseconds per decision) and their ratio, new over base, oriented so that ``> 1`` is better.

``--write`` saves ``results/compare.json`` (every round's values, both commits, the machine and
its load, via ``provenance.py``). Targets are matched by name; a target whose name exists on one
side only pairs with an unpaired one whose name differs only in its numbers; any other is listed
on its side alone.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from provenance import provenance  # noqa: E402

OUT = HERE / "results" / "compare.json"
_PROBE = r"""
import json, sys
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import check
rows = check.run_checks(quick=True)
print("@@ROWS@@" + json.dumps([{k: r.get(k) for k in ("name", "value", "target", "unit", "kind")} for r in rows]))
"""


def measure(tree: Path, python: str) -> list[dict]:
    """Every target of ``check.py``, measured by a fresh process in ``tree``'s code."""
    out = subprocess.run([python, "-c", _PROBE], cwd=tree, capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("@@ROWS@@"):
            return json.loads(line[len("@@ROWS@@") :])
    raise RuntimeError(f"no results from {tree}: {out.stderr[-2000:]}")


def key(name: str) -> str:
    """A target's name without its numbers (so a reworded count still pairs)."""
    return re.sub(r"[\d.,]+", "#", name)


def best(values: list[float], kind: str) -> float:
    vals = [v for v in values if v == v]
    if not vals:
        return float("nan")
    return max(vals) if kind == "min" else min(vals)


def compare(base: str, rounds: int, python: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="asrsched-base-") as tmp:
        wt = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(wt), base], cwd=ROOT, check=True, capture_output=True)
        try:
            runs: dict[str, list[list[dict]]] = {"base": [], "new": []}
            order = []
            for r in range(rounds):
                sides = ("base", "new") if r % 2 == 0 else ("new", "base")
                for side in sides:
                    t0 = time.time()
                    runs[side].append(measure(wt if side == "base" else ROOT, python))
                    order.append((r, side, round(time.time() - t0, 1)))
                    print(f"  round {r + 1}/{rounds}: {side} measured in {order[-1][2]} s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT, capture_output=True)
    # pair by the exact name; a name on one side only pairs with an unpaired one whose numbers alone differ
    names = {side: list(dict.fromkeys(row["name"] for rows in rs for row in rows)) for side, rs in runs.items()}
    alias = {}
    for n in names["new"]:
        if n not in names["base"]:
            alias[n] = next(
                (b for b in names["base"] if b not in names["new"] and key(b) == key(n) and b not in alias.values()), n
            )
    table = {}
    for side, rs in runs.items():
        for rows in rs:
            for row in rows:
                k = alias.get(row["name"], row["name"]) if side == "new" else row["name"]
                e = table.setdefault(
                    k,
                    {
                        "name": row["name"],
                        "unit": row["unit"],
                        "kind": row["kind"],
                        "target": row["target"],
                        "base": [],
                        "new": [],
                    },
                )
                e[side].append(row["value"])
                if side == "new":
                    e["name"], e["target"] = row["name"], row["target"]
    rows = []
    for e in table.values():
        b, n = best(e["base"], e["kind"]), best(e["new"], e["kind"])
        better = (n / b if e["kind"] == "min" else b / n) if b == b and n == n and b and n else float("nan")
        rows.append({**e, "base_best": b, "new_best": n, "new_over_base": better})
    return {"base": base, "rounds": rounds, "order": order, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the commit to compare with (the old code)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="the interpreter both sides run with")
    ap.add_argument("--write", action="store_true", help=f"save {OUT.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    t0 = time.time()
    res = compare(args.base, args.rounds, args.python)
    print(f"\n{'target':75s} {'base':>10s} {'new':>10s} {'new/base':>9s}  (>1: better)")
    for r in res["rows"]:
        print(f"{r['name'][:75]:75s} {r['base_best']:10.4g} {r['new_best']:10.4g} {r['new_over_base']:9.3f}")
    if args.write:
        res["provenance"] = provenance(["asrsched", "benchmarks"])
        res["base_commit"] = subprocess.run(
            ["git", "rev-parse", args.base], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        res["wall_s"] = round(time.time() - t0, 1)
        OUT.write_text(json.dumps(res, indent=1, default=float) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
