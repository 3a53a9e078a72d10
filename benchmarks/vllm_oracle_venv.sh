#!/usr/bin/env bash
# Create an isolated venv holding one pinned vLLM release for benchmarks/vllm_oracle.py.
# vLLM is large (0.11.0: ~5 GB download, ~10 GB on disk), so it never goes into the
# project's own venv or CI's default job; the oracle runs it in a second process.
#
# usage: benchmarks/vllm_oracle_venv.sh VERSION [VENV_ROOT]
#   VENV_ROOT defaults to /work/venvs; the venv is VENV_ROOT/vllm-VERSION.
set -euo pipefail
version="${1:?usage: $0 VERSION [VENV_ROOT]}"
root="${2:-/work/venvs}"
venv="$root/vllm-$version"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
case "$version" in
  0.10.*|0.11.*)
    # Resolve as is (pull the CUDA torch 2.8 build; the scheduler only needs it importable).
    "$venv/bin/pip" install "vllm==$version"
    ;;
  *)
    # Newer releases pin packages this index lacks (flashinfer) and CUDA 13 wheels:
    # install the wheel without its dependencies, CPU torch, then the pure-Python
    # imports the scheduler path needs. `pip check` complains about the torch pin;
    # the scheduler does not use torch kernels.
    "$venv/bin/pip" install --no-deps "vllm==$version"
    "$venv/bin/pip" install torch --index-url https://download.pytorch.org/whl/cpu
    "$venv/bin/pip" install transformers tokenizers pydantic msgspec cloudpickle \
      psutil pyzmq numpy requests tqdm blake3 cachetools sentencepiece protobuf \
      fastapi aiohttp openai prometheus_client prometheus-fastapi-instrumentator \
      pillow regex einops gguf lark diskcache partial-json-parser py-cpuinfo \
      compressed-tensors depyf watchfiles python-json-logger cbor2 setproctitle \
      pybase64 ijson anthropic openai-harmony mistral_common outlines_core xgrammar \
      llguidance lm-format-enforcer six uvloop
    ;;
esac
"$venv/bin/python" -c "import vllm, vllm.v1.core.sched.scheduler; print('vllm', vllm.__version__, 'ok')"
echo "$venv"
