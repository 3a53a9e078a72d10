"""Regenerate the committed test slices (run by hand; tests never run it).

aic/systems/data/: a pruned copy of aiconfigurator-core 0.12.0's
rtx_pro_6000_server vLLM tables (Apache-2.0, NVIDIA), every kernel variant
kept so that the loader's filtering is exercised; profile/: a few rows of the
LLMServingSim RTX 4090 Llama-3.1-8B profile (MIT, CASYS Lab at KAIST).

    python tests/data/kernels/make_test_data.py /path/to/aiconfigurator_core/systems/data \
        /work/shared/data/llmservingsim/profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
GPU = "rtx_pro_6000_server"
N_K = {4096, 6144, 12288, 16384, 51200, 65536}
M = {1, 2, 3, 4, 8, 16, 17, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
HEADS = {(32, 8, 128), (16, 4, 128)}


def main(aic_data: Path, profile_dir: Path) -> None:
    src, dst = aic_data / GPU, HERE / "aic" / "systems" / "data" / GPU
    shutil.rmtree(HERE / "aic", ignore_errors=True)
    gemm = pd.read_parquet(src / "gemm/vllm/0.24.0/gemm_perf.parquet")
    gemm = gemm[gemm["n"].isin(N_K) & gemm["k"].isin(N_K) & gemm["m"].isin(M)]
    out = dst / "gemm/vllm/0.24.0"
    out.mkdir(parents=True)
    gemm.to_parquet(out / "gemm_perf.parquet", index=False)
    # An older version with one row, to test "newest version when none is given".
    old = dst / "gemm/vllm/0.19.0"
    old.mkdir(parents=True)
    gemm.head(1).to_parquet(old / "gemm_perf.parquet", index=False)
    for name in ("context_attention_perf", "generation_attention_perf"):
        table = pd.read_parquet(src / f"attention/vllm/0.24.0/{name}.parquet")
        keys = zip(table["num_heads"], table["num_key_value_heads"], table["head_dim"], strict=True)
        table = table[[k in HEADS for k in keys]]
        (dst / "attention/vllm/0.24.0").mkdir(parents=True, exist_ok=True)
        table.to_parquet(dst / f"attention/vllm/0.24.0/{name}.parquet", index=False)
    for version in ("0.19.0", "0.24.0"):
        (dst / f"comm/vllm/{version}").mkdir(parents=True)
        shutil.copy(
            src / f"comm/vllm/{version}/custom_allreduce_perf.parquet",
            dst / f"comm/vllm/{version}/custom_allreduce_perf.parquet",
        )
    # NCCL collectives on 2 GPUs (expert-parallel dispatch and combine).
    nccl = sorted(src.glob("comm/nccl/*/nccl_perf.parquet"))[-1]
    table = pd.read_parquet(nccl)
    (dst / "comm/nccl" / nccl.parent.name).mkdir(parents=True)
    table[table["num_gpus"] == 2].to_parquet(
        dst / "comm/nccl" / nccl.parent.name / "nccl_perf.parquet", index=False
    )
    moe = pd.read_parquet(src / "moe/vllm/0.24.0/moe_perf.parquet")
    moe = moe[(moe["hidden_size"] == 2048) & (moe["inter_size"] == 768) & (moe["topk"] == 8)]
    (dst / "moe/vllm/0.24.0").mkdir(parents=True)
    moe.to_parquet(dst / "moe/vllm/0.24.0/moe_perf.parquet", index=False)

    prof = HERE / "profile" / "bf16"
    shutil.rmtree(HERE / "profile", ignore_errors=True)
    (prof / "tp1").mkdir(parents=True)
    shutil.copy(profile_dir / "meta.yaml", prof / "meta.yaml")
    dense = pd.read_csv(profile_dir / "tp1/dense.csv")
    dense[dense["tokens"].isin([1, 2, 16, 64, 128, 512, 2048])].to_csv(
        prof / "tp1/dense.csv", index=False
    )
    att = pd.read_csv(profile_dir / "tp1/attention.csv")
    keep = (att["prefill_chunk"].isin([0, 16, 128, 2048])) & (
        att["n_decode"].isin([0, 1, 8, 64, 256])
    )
    keep &= att["kv_prefill"].isin([0, 16, 1024, 16384]) & att["kv_decode"].isin(
        [0, 16, 128, 1024, 16384]
    )
    att[keep].to_csv(prof / "tp1/attention.csv", index=False)
    seq = pd.read_csv(profile_dir / "tp1/per_sequence.csv")
    seq[seq["sequences"].isin([1, 2, 8, 64, 256])].to_csv(
        prof / "tp1/per_sequence.csv", index=False
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
