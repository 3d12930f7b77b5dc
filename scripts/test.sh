#!/usr/bin/env bash
# The test suite: set up what is missing (including the vLLM CPU engine), then run pytest.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset, or a test file).
set -euo pipefail
cd "$(dirname "$0")/.."
ASRSCHED_EXTRAS="${ASRSCHED_EXTRAS:-dev,vllm}" bash scripts/bootstrap.sh
start=$(date +%s)
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
echo "[test] pytest finished in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
