#!/usr/bin/env bash
# The quick subset as a new contributor runs it: a fresh venv with only the base install and the test
# tools (pip install -e ".[test]": no Jupyter, plotly, Whisper, server stack or browser), then
# pytest -m "not slow" in one process. Tests that need an extra skip naming it (tests/extras.py); any
# other skip or a failure fails. CI runs it after scripts/test.sh (which runs every test, these included,
# with every extra installed). ASRSCHED_QUICK_VENV=DIR keeps the venv there; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
VENV="${ASRSCHED_QUICK_VENV:-}"
if [ -z "$VENV" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  VENV="$tmp/venv"
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q -e ".[test]"
# the test tools pull in none of the optional stacks
"$VENV/bin/python" - <<'EOF'
import importlib.util
import sys

optional = ("plotly", "jupyterlab", "faster_whisper", "dask", "papermill", "ipywidgets", "starlette", "vllm")
present = [name for name in optional if importlib.util.find_spec(name) is not None]
if present:
    sys.exit(f"[quick] the base install plus the test tools pulls in {present}")
EOF
echo "[quick] fresh venv with .[test] in $(( $(date +%s) - start )) s"
start=$(date +%s)
set +e
env -u ASRSCHED_ALL_EXTRAS -u ASRSCHED_ALLOW_SKIP "$VENV/bin/python" -m pytest -m "not slow" -q -p no:cacheprovider "$@"
rc=$?
set -e
echo "[quick] pytest -m \"not slow\" on the base install finished in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
