#!/usr/bin/env bash
# The main job: set up what is missing, then execute the whole notebook series headlessly
# (papermill, default parameters). Figures and tables land in the report gallery figures/ (--gallery),
# executed notebooks in runs/. Extra arguments go to `asrsched run` (e.g. a notebook name, or -p NAME VALUE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
start=$(date +%s)
run_dir="runs/main-$(date -u +%Y%m%dT%H%M%SZ)"
.venv/bin/asrsched run --gallery --run-dir "$run_dir" "$@"
echo "[main] finished in $(( $(date +%s) - start )) s; figures in $(pwd)/figures, executed notebooks in $run_dir"
# every exported figure rendered in chromium: fails on text off the canvas or overlapping text boxes
.venv/bin/asrsched check-figures figures/
# the documentation site, with the notebooks as this run executed them (strict: warnings fail)
bash scripts/docs.sh "$run_dir"
