# Sourced by run_gpu_calibration.sh and run_gpu_validation.sh (from the repository
# root, with $PY, $WHEELS and $PYTHONPATH set): install_wheels WHY puts the wheels
# fetch_wheels.sh left in $WHEELS into /tmp/site (no network, no dependencies) and on
# PYTHONPATH; without wheels it stops the script (exit 3), WHY saying what is missing.
install_wheels() {
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site "$WHEELS"/*.whl
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
  else
    echo "$1, and no wheels in $WHEELS: run calibration/gpu/fetch_wheels.sh" >&2
    exit 3
  fi
}
