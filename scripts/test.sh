#!/usr/bin/env bash
# The test suite: set up what is missing (including the vLLM CPU engine), then run pytest.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset, or a test file).
# Two pytest-xdist workers (ASRSCHED_TEST_WORKERS=N for another number, 0 for one process); a module's
# tests run on one worker, the modules that start vLLM engines on one worker one after another, and
# the order is in tests/conftest.py.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${ASRSCHED_EXTRAS:-dev,vllm}"
ASRSCHED_EXTRAS="$EXTRAS" bash scripts/bootstrap.sh
# every extra is installed: a test that skips for a missing one fails (tests/conftest.py)
if [[ "$EXTRAS" == *dev* && "$EXTRAS" == *vllm* ]]; then export ASRSCHED_ALL_EXTRAS=1; fi
# OpenMP threads (CTranslate2's, torch's, vLLM's) wait for work by sleeping, not spinning: two workers on two
# cores run servers and engines side by side, and a spinning thread holds the core that a thread of the other
# process needs at its next barrier (the CPU server's policy-order tests beside two busy loops: 60 s spinning,
# 30 s sleeping, 16-19 s alone; the whole suite 922 s -> 822 s in one hour here)
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
start=$(date +%s)
set +e
.venv/bin/python -m pytest -n "${ASRSCHED_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
echo "[test] pytest finished in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
