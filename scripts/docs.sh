#!/usr/bin/env bash
# The documentation site: the API reference from the docstrings, the guides, the bibliography, the
# changelog and the notebooks (with their outputs when given the main job's run folder).
# Strict: a warning or a broken reference to an asrsched name fails the build.
#   bash scripts/docs.sh [RUN_DIR]     -> docs/_build/html/index.html
set -euo pipefail
cd "$(dirname "$0")/.."
out="${ASRSCHED_DOCS_OUT:-docs/_build/html}"
rm -rf docs/_generated/api  # autosummary writes a page per module and never removes one: no page of a module that is gone
ASRSCHED_DOCS_NOTEBOOKS="${1:-}" .venv/bin/python -m sphinx -b html -W --keep-going -n -E -q docs "$out"
echo "[docs] site in $(pwd)/$out/index.html"
