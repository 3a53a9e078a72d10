"""The CPU time of vLLM's own n-gram proposer per step, by batch size and context length.

    <python with numba> benchmarks/ngram_proposer_cpu.py --vllm /work/venvs/vllm-0.19.0 \
        [--batches 1,8,32,128,256] [--contexts 256,1024,4096] [--json out.json]

vLLM's n-gram proposer (``vllm/v1/spec_decode/ngram_proposer.py``) runs on the
CPU after every step, for every request that sampled a token (a decode,
matched last step or not, or a prompt's last chunk): a Python loop over the
batch, then a numba kernel that scans each request's whole context for the
longest earlier match of its last n-gram (KMP over the reversed tokens: the
scan is as long whether it finds a match or not). This script loads that
file verbatim from a vLLM install (``--vllm``: a venv, or the folder holding
``vllm/``) and times ``NgramProposer.propose`` as the GPU model runner calls
it (``propose_draft_token_ids``: one sampled token a request, the batch's
``num_tokens_no_spec`` and ``token_ids_cpu``), with vLLM's defaults
(``prompt_lookup_min = prompt_lookup_max = 5``, one numba thread). vLLM's
own ``VllmConfig`` is replaced by the six fields the constructor reads, and
``torch`` (used in a type hint only) by a stub, so any Python with numba runs
it: vLLM 0.19.0 pins ``numba==0.61.2`` (``python3 -m venv v && v/bin/pip
install numba==0.61.2 numpy==2.2.6``), 0.24.0 ``numba==0.65.0``. The
releases differ in ``propose``'s signature (0.24 takes the number of
speculative tokens first, as its model runner passes it each step): the
script reads the signature from the loaded file and calls it as that
release's model runner does, with ``k = 3``; the release it reports comes
from ``vllm/_version.py`` beside the file (an unzipped wheel has it).

Tokens: ``random``, uniform over a 128,256-token vocabulary (Llama 3's), so
the last n-gram has no earlier match (the no-match cost); ``repetitive``,
uniform over 64 tokens, so partial matches keep KMP's fallback busy (about
the most a scan costs). The clock is the thread's CPU time
(``time.thread_time``; on a shared machine wall time counts other processes'
turns too). Prints the median µs per call for each (tokens, batch, context)
and the line ``median = per_call + per_seq × batch +
per_context_token × batch × context`` fitted to the ``random`` cells
(least squares of the relative residual): the coefficients
``sim.cost.speculative.NgramCpu`` takes.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import platform
import re
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = "vllm/v1/spec_decode/ngram_proposer.py"
VOCAB_TOKENS = {"random": 128_256, "repetitive": 64}
MAX_MODEL_LEN_TOKENS = 16_384
K = 3  # num_speculative_tokens, as SpecDecode-Bench ran
# propose's parameters before the optional ones, as the model runner passes them
PROPOSE_ARGS = (
    "num_speculative_tokens",
    "sampled_token_ids",
    "num_tokens_no_spec",
    "token_ids_cpu",
)


def vllm_release(path: Path) -> str:
    """The release ``vllm/_version.py`` beside the proposer's file names, or ``unknown``."""
    version_file = path.parents[2] / "_version.py"  # vllm/v1/spec_decode/x.py -> vllm/
    found = version_file.is_file() and re.search(
        r"^__version__ = version = ['\"]([^'\"]+)['\"]", version_file.read_text(), re.M
    )
    return found.group(1) if found else "unknown"


def load_proposer_module(vllm_root: Path) -> tuple[types.ModuleType, str]:
    """vLLM's ngram_proposer.py, executed as is with stubs for its two vLLM/torch imports."""
    matches = sorted(vllm_root.glob(f"lib/python3*/site-packages/{SOURCE}")) or [vllm_root / SOURCE]
    path = matches[0]
    text = path.read_text()
    stub_config = types.ModuleType("vllm.config")
    stub_config.VllmConfig = object  # type: ignore[attr-defined]
    stub_torch = types.ModuleType("torch")
    stub_torch.Tensor = object  # type: ignore[attr-defined]
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))
    sys.modules["vllm.config"] = stub_config
    sys.modules.setdefault("torch", stub_torch)
    module = types.ModuleType("ngram_proposer")
    module.__file__ = str(path)
    exec(compile(text, str(path), "exec"), module.__dict__)
    return module, hashlib.sha256(text.encode()).hexdigest()


def make_proposer(module: types.ModuleType, max_num_seqs: int) -> Any:
    """``NgramProposer`` built from the fields of ``VllmConfig`` its constructor reads."""
    ns = types.SimpleNamespace
    config = ns(
        speculative_config=ns(prompt_lookup_min=5, prompt_lookup_max=5, num_speculative_tokens=K),
        model_config=ns(max_model_len=MAX_MODEL_LEN_TOKENS),
        scheduler_config=ns(max_num_seqs=max_num_seqs),
        parallel_config=ns(tensor_parallel_size=1),
    )
    return module.NgramProposer(config)  # its constructor runs the numba compile


def propose_parameters(proposer: Any) -> tuple[str, ...]:
    """The leading parameters of this release's ``propose``, in order: 0.19's
    ``(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``, 0.24's with
    ``num_speculative_tokens`` first."""
    names = []
    for name in inspect.signature(proposer.propose).parameters:
        if name not in PROPOSE_ARGS:
            break
        names.append(name)
    if tuple(names) not in (PROPOSE_ARGS, PROPOSE_ARGS[1:]):
        raise SystemExit(f"propose{inspect.signature(proposer.propose)}: parameters not known")
    return tuple(names)


def call_us(
    proposer: Any, tokens: str, batch: int, context: int, repeats: int, rng: np.random.Generator
) -> float:
    """Median µs of CPU time of one ``propose`` over ``batch`` requests of ``context`` tokens."""
    token_ids = np.zeros((batch, MAX_MODEL_LEN_TOKENS), dtype=np.int32)
    token_ids[:, :context] = rng.integers(0, VOCAB_TOKENS[tokens], (batch, context))
    num_tokens = np.full(batch, context, dtype=np.int32)
    sampled = [[int(token_ids[i, context - 1])] for i in range(batch)]
    values = {
        "num_speculative_tokens": K,
        "sampled_token_ids": sampled,
        "num_tokens_no_spec": num_tokens,
        "token_ids_cpu": token_ids,
    }
    args = [values[name] for name in propose_parameters(proposer)]
    samples = []
    for i in range(repeats + 3):  # 3 warm-up calls
        start = time.thread_time()
        proposer.propose(*args)
        if i >= 3:
            samples.append((time.thread_time() - start) * 1e6)
    return statistics.median(samples)


def fit(cells: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares of the median over (1, batch, batch × context), each cell's
    residual relative to its median (so batch 1's 14 µs counts as much as batch
    256's 2 ms); coefficients in s."""
    x = np.array([[1.0, c["batch"], c["batch"] * c["context_tokens"]] for c in cells])
    y = np.array([c["median_us"] * 1e-6 for c in cells])
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    residual = y - x @ coef
    return {
        "per_call_s": float(coef[0]),
        "per_seq_s": float(coef[1]),
        "per_context_token_s": float(coef[2]),
        "max_relative_residual": float(np.max(np.abs(residual) / y)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", type=Path, required=True, help="a vLLM venv or source root")
    parser.add_argument("--batches", default="1,8,32,128,256")
    parser.add_argument("--contexts", default="256,1024,4096")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", help="write the cells and the fit here")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    module, sha256 = load_proposer_module(args.vllm)
    import numba  # only to report the version the kernel ran under

    proposer = make_proposer(module, max(batches))
    rng = np.random.default_rng(0)
    cells = []
    print(f"{'tokens':10} {'batch':>5} {'context':>7} {'median µs':>10} {'µs/seq':>8}")
    for tokens in VOCAB_TOKENS:
        for batch in batches:
            for context in contexts:
                median = call_us(proposer, tokens, batch, context, args.repeats, rng)
                cells.append(
                    {
                        "tokens": tokens,
                        "batch": batch,
                        "context_tokens": context,
                        "median_us": median,
                    }
                )
                print(f"{tokens:10} {batch:>5} {context:>7} {median:>10.1f} {median / batch:>8.2f}")
    line = fit([c for c in cells if c["tokens"] == "random"])
    print(
        f"\nrandom tokens: per call {line['per_call_s'] * 1e6:.1f} µs + "
        f"{line['per_seq_s'] * 1e6:.3f} µs a sequence + "
        f"{line['per_context_token_s'] * 1e9:.3f} ns a context token "
        f"(largest residual {100 * line['max_relative_residual']:.0f} % of a cell)"
    )
    provenance = {
        "vllm": vllm_release(Path(module.__file__)),
        "source": str(module.__file__),
        "source_sha256": sha256,
        "numba": numba.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "prompt_lookup_min": 5,
        "prompt_lookup_max": 5,
        "num_speculative_tokens": K,
    }
    print(
        f"vLLM {provenance['vllm']}: {provenance['source']} (sha256 {sha256[:12]}), "
        f"numba {numba.__version__}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"provenance": provenance, "fit_random": line, "cells": cells}, indent=2)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
