#!/usr/bin/env bash
# Run HERE (with network), once, before a GPU session: downloads the pure-Python
# dependencies the H200 image lacks (pydantic and its needs; torch, numpy and
# tqdm are there) as Python 3.12 wheels into .whl/ at the repository root.
# .whl/ must be ignored by git (echo /.whl/ >> .git/info/exclude) and named in
# the device run's `carry`; run_gpu_calibration.sh installs from it.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${1:-.whl}"
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dest" \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0
ls -la "$dest"
