#!/usr/bin/env bash
# Calibrate llama-3-8b and smollm2-135m (bf16, `gpu` grid) on a CUDA machine.
#
# Usage, from anywhere (the script moves to the repository root):
#   OUT=/some/dir calibration/gpu/run_gpu_calibration.sh
# Artifacts: $OUT/cuda-<model>-bf16.json, logs $OUT/<model>.log. Overrides for a
# dry run on a CPU: DEVICE=cpu MODELS=tiny GRID=small DTYPE=fp32.
# Needs torch, numpy, tqdm and pydantic. The H200 image lacks pydantic: wheels
# from calibration/gpu/fetch_wheels.sh in $WHEELS (default .whl) are installed
# into /tmp/site first if pydantic is missing. No network, no install of
# servesim itself: the repository goes on PYTHONPATH.
# Budget: about 5 minutes on an H200 for both models (the 8B model dominates).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-calibration/artifacts}"
DEVICE="${DEVICE:-cuda}"
GRID="${GRID:-gpu}"
DTYPE="${DTYPE:-bf16}"
MODELS="${MODELS:-smollm2-135m llama-3-8b}"
WHEELS="${WHEELS:-.whl}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"

source calibration/gpu/wheels.sh
if ! "$PY" -c "import pydantic" 2>/dev/null; then install_wheels "pydantic is missing"; fi
"$PY" - <<'PYEOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "count", torch.cuda.device_count())
PYEOF
if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true; fi

status=0
for model in $MODELS; do
  start=$(date +%s)
  if "$PY" -m calibration.cli --model "$model" --device "$DEVICE" --dtype "$DTYPE" \
      --grid "$GRID" --no-progress --out "$OUT/$DEVICE-$model-$DTYPE.json" 2>&1 \
      | tee "$OUT/$model.log"; then
    echo "$model: done in $(( $(date +%s) - start )) s"
  else
    echo "$model: FAILED after $(( $(date +%s) - start )) s (see $OUT/$model.log)" >&2
    status=1
  fi
done
exit $status
