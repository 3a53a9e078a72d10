#!/usr/bin/env bash
# Time Llama-3.1-8B's operators on this GPU (servesim calibrate --kernels) and set
# them against aiconfigurator-core's H200 rows for the same shapes (issue 11, item 8).
#
# Usage, from anywhere (the script moves to the repository root):
#   OUT=/some/dir calibration/gpu/run_gpu_kernels.sh
# Writes $OUT/cuda-llama-3.1-8b-bf16-kernels.json.gz, $OUT/kernels_vs_h200.md and a log.
# Dry run on a CPU: DEVICE=cpu MODEL=tiny GRID=small DTYPE=fp32 REFERENCE=<an artifact of tiny>.
# Needs torch, numpy, pandas, pydantic and pyyaml (see run_gpu_calibration.sh for
# wheels). Budget: about 2 minutes on an H200.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-runs/gpu-kernels}"
DEVICE="${DEVICE:-cuda}"
MODEL="${MODEL:-llama-3.1-8b}"
GRID="${GRID:-gpu}"
DTYPE="${DTYPE:-bf16}"
REFERENCE="${REFERENCE:-benchmarks/data/h200_sxm-vllm-llama-3.1-8b.json.gz}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OURS="$OUT/$DEVICE-$MODEL-$DTYPE-kernels.json.gz"
"$PY" -m sim.cli calibrate --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" \
  --grid "$GRID" --kernels --out "$OURS" 2>&1 | tee "$OUT/calibrate.log"
"$PY" benchmarks/kernels_vs_reference.py --ours "$OURS" --reference "$REFERENCE" \
  --model "$MODEL" --out "$OUT/kernels_vs_h200.md"
