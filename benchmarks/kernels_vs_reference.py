"""Compare two kernel-table artifacts of one model: ours (timed here) vs a reference.

    python benchmarks/kernels_vs_reference.py --ours cuda-llama.json.gz \\
        --reference benchmarks/data/h200_sxm-vllm-llama-3.1-8b.json.gz --model llama-3.1-8b

Prints, and writes as markdown with ``--out``, the ratio ours / reference for
the operators both price: each dense GEMM of the model at several token
counts, decode attention at several batches and contexts, and whole steps
(a decode step, a prefill step) composed by ``KernelCost`` from each
artifact. A ratio above 1 means our measurement is slower. Used by
``calibration/gpu/run_gpu_kernels.sh`` to set servesim's reference engine
(eager PyTorch) against aiconfigurator's H200 tables (vLLM kernels).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.cost.base import StepShape  # noqa: E402
from sim.cost.kernels.artifact import load_kernel_artifact  # noqa: E402
from sim.cost.kernels.cost import KernelCost  # noqa: E402
from sim.hardware.specs import (  # noqa: E402
    HF_CONFIGS,
    ModelSpec,
    load_architecture,
    model_preset,
)

TOKENS = (1, 16, 64, 256, 1024, 2048)
DECODES = ((1, 1024), (16, 1024), (64, 1024), (64, 4096), (256, 1024))
STEPS = {
    "decode 64 x 1k context": StepShape(num_decode_seqs=64, num_decode_context_tokens=64 * 1024),
    "decode 256 x 1k context": StepShape(num_decode_seqs=256, num_decode_context_tokens=256 * 1024),
    "prefill 1 x 2048": StepShape.build([(2048, 0)]),
    "mixed 2048 chunk + 32 decodes": StepShape.build([(2016, 0)], [1024] * 32),
}


def rows(ours: KernelCost, reference: KernelCost) -> list[tuple[str, float, float]]:
    """(what, ours in ms, reference in ms) for every compared operator or step."""
    out = []
    for name, (n, k) in ours.shapes.gemms.items():
        for m in TOKENS:
            out.append((f"{name} ({n}x{k}) m={m}", ours.gemm_s(m, n, k), reference.gemm_s(m, n, k)))
    for batch, context in DECODES:
        out.append(
            (
                f"decode attention b={batch} kv={context}",
                ours.decode_attention_s(batch, batch * context),
                reference.decode_attention_s(batch, batch * context),
            )
        )
    for name, shape in STEPS.items():
        out.append((f"step: {name}", ours.step_s(shape), reference.step_s(shape)))
    return [(what, a * 1e3, b * 1e3) for what, a, b in out]


def render(table: list[tuple[str, float, float]], ours: str, reference: str) -> str:
    lines = [
        "| operator | ours (ms) | reference (ms) | ours / reference |",
        "|---|---|---|---|",
    ]
    lines += [f"| {w} | {a:.4f} | {b:.4f} | {a / b:.2f} |" for w, a, b in table]
    return f"ours: `{ours}`\n\nreference: `{reference}`\n\n" + "\n".join(lines) + "\n"


def architecture(name: str) -> ModelSpec:
    """A Hugging Face preset or config.json, else a servesim model preset (e.g. tiny)."""
    if name in HF_CONFIGS or Path(name).exists():
        return load_architecture(name)
    return model_preset(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--model", required=True, help="architecture preset or config.json")
    parser.add_argument("--out", type=Path, help="write the table as markdown here")
    args = parser.parse_args()
    arch = architecture(args.model)
    ours = KernelCost(arch, load_kernel_artifact(args.ours))
    reference = KernelCost(arch, load_kernel_artifact(args.reference))
    text = render(rows(ours, reference), ours.label, reference.label)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
