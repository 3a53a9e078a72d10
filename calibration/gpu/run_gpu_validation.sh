#!/usr/bin/env bash
# The fidelity study on a GPU: Llama-3-8B bf16 on one H200, measured vs simulated.
#
# Usage, from anywhere (the script moves to the repository root):
#   OUT=/some/dir calibration/gpu/run_gpu_validation.sh
# Steps (benchmarks/fidelity.py): calibrate the model on the GPU (`gpu` grid,
# greedy), measure saturation (20 s of overload per chunking mode), one
# engine-overhead run, then measured runs of at least 30 s (about NUM_REQUESTS
# requests) at 30/60/90 % of the measured saturation with chunked prefill on and off
# (the 60 % chunked run twice: noise floor), each predicted out of sample.
# Writes $OUT/results.md, $OUT/results.json, CDF plots, and the raw runs in
# $OUT/runs (requests/steps/tokens parquet). Log: $OUT/study.log.
# Budget: calibration ~3-4 min + 2 x 20 s saturation + 8 runs of ~32 s ≈ 9-10 minutes
# on an H200.
# Dry run of the logic on a CPU (the tiny model, a few seconds per run):
#   DEVICE=cpu SCENARIO=scenarios/validate_tiny_cpu.yaml GRID=small DURATION_S=3 \
#   NUM_REQUESTS=10 SATURATION_S=4 OVERHEAD_S=3 OUT=/tmp/gpu-dry \
#   calibration/gpu/run_gpu_validation.sh
# Needs torch, numpy, pandas, pyarrow, matplotlib, simpy, tqdm, pydantic, pyyaml;
# missing pure-Python ones come from wheels in $WHEELS (fetch_wheels.sh), as in
# run_gpu_calibration.sh. No install of servesim: the repository goes on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/gpu-validation}"
DEVICE="${DEVICE:-cuda}"
GRID="${GRID:-gpu}"
SCENARIO="${SCENARIO:-scenarios/validate_llama8b_h200.yaml}"
DURATION_S="${DURATION_S:-30}"
NUM_REQUESTS="${NUM_REQUESTS:-150}"
SATURATION_S="${SATURATION_S:-20}"
OVERHEAD_S="${OVERHEAD_S:-15}"
WHEELS="${WHEELS:-.whl}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"

missing=$("$PY" - <<'PYEOF'
import importlib.util
mods = ["torch", "numpy", "pandas", "pyarrow", "matplotlib", "simpy", "tqdm", "pydantic", "yaml"]
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
PYEOF
)
source calibration/gpu/wheels.sh
if [ -n "$missing" ]; then install_wheels "missing Python modules: $missing"; fi
if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true; fi

start=$(date +%s)
"$PY" benchmarks/fidelity.py --scenario "$SCENARIO" --device "$DEVICE" --grid "$GRID" \
  --min-duration-s "$DURATION_S" --num-requests "$NUM_REQUESTS" \
  --saturation-duration-s "$SATURATION_S" --overhead-duration-s "$OVERHEAD_S" \
  --out "$OUT" --work "$OUT/runs" 2>&1 | tee "$OUT/study.log"
echo "study done in $(( $(date +%s) - start )) s"
