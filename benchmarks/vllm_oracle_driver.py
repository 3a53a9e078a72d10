"""vLLM's side of benchmarks/vllm_oracle.py: its v1 scheduler over one trace.

    <vllm venv>/bin/python benchmarks/vllm_oracle_driver.py TRACE.json OUT.jsonl

Runs in the vLLM venv and imports nothing from ``sim``. Builds vLLM's
``Scheduler`` (``AsyncScheduler`` for an async trace) on the CPU with a
config-only model folder and a hand-made KV cache config, feeds it before its
k-th non-empty step the requests servesim's k-th step saw first
(``new_visible``), fabricates the model's output (one token per request that
is not mid-prefill; none for a partial prefill chunk), and writes one line of
decisions per non-empty step, as the servesim side does. Prints the resolved
settings (one line) and the vLLM version as its last line.

Token ids: a prefix group's shared head is ``[group + 1] * length``; the rest
of a prompt and every output token are request-specific (``10_000_000 + id``,
``20_000_000 + id``), so blocks are shared exactly where servesim's keys
(prefix group, block) say they are.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import vllm
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

try:  # moved between releases
    from vllm.utils.hashing import get_hash_fn_by_name
except ImportError:
    from vllm.utils import get_hash_fn_by_name


def _kwargs(target: Any, **candidates: Any) -> dict[str, Any]:
    """The candidates ``target`` accepts (constructors differ across releases)."""
    accepted = inspect.signature(target).parameters
    return {k: v for k, v in candidates.items() if k in accepted}


def build(spec: dict[str, Any]) -> tuple[Scheduler, Any]:
    folder = Path(tempfile.mkdtemp(prefix="vllm-oracle-model-"))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "num_hidden_layers": 1,
                "vocab_size": 32000,
                "max_position_embeddings": spec["max_model_len_tokens"],
                "torch_dtype": "float16",
            }
        )
    )
    max_len = spec["max_model_len_tokens"]
    model_config = ModelConfig(
        **_kwargs(
            ModelConfig,
            model=str(folder),
            tokenizer=str(folder),
            skip_tokenizer_init=True,
            max_model_len=max_len,
            dtype="float16",
            seed=0,
            # 0.10's V0 output processor asks the platform whether it may run
            # async, which the GPU-less UnspecifiedPlatform cannot say (it
            # raises); the v1 scheduler never uses it.
            use_async_output_proc=False,
        )
    )
    cache_config = CacheConfig(
        **_kwargs(
            CacheConfig,
            block_size=spec["block_size_tokens"],
            enable_prefix_caching=spec["enable_prefix_caching"],
            swap_space=0,
        )
    )
    # One more block than servesim's pool: vLLM's block pool keeps block 0 as its
    # null block, never handed out.
    num_blocks = spec["num_kv_blocks"] + 1
    cache_config.num_gpu_blocks = num_blocks
    scheduler_config = SchedulerConfig(
        **_kwargs(
            SchedulerConfig,
            max_num_seqs=spec["max_num_seqs"],
            max_num_batched_tokens=spec["max_num_batched_tokens"],
            max_model_len=max_len,
            enable_chunked_prefill=True,
            async_scheduling=spec["async_scheduling"],
            is_encoder_decoder=False,
        )
    )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=cache_config,
        scheduler_config=scheduler_config,
        device_config=DeviceConfig(device="cpu"),
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["model.layers.0.self_attn.attn"],
                FullAttentionSpec(
                    **_kwargs(
                        FullAttentionSpec,
                        block_size=spec["block_size_tokens"],
                        num_kv_heads=4,
                        head_size=64,
                        dtype=torch.float16,
                        use_mla=False,  # a required field in 0.10
                    )
                ),
            )
        ],
    )
    cls = AsyncScheduler if spec["async_scheduling"] else Scheduler
    scheduler = cls(
        **_kwargs(
            Scheduler.__init__,  # AsyncScheduler takes (*args, **kwargs)
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            log_stats=False,
            block_size=spec["block_size_tokens"],
            hash_block_size=spec["block_size_tokens"],
        )
    )
    hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(spec["block_size_tokens"], hash_fn)
    sc = vllm_config.scheduler_config
    print(
        f"vllm {vllm.__version__}: {cls.__name__} max_num_seqs={sc.max_num_seqs}"
        f" max_num_batched_tokens={sc.max_num_batched_tokens}"
        f" chunked_prefill={sc.enable_chunked_prefill}"
        f" long_prefill_token_threshold={sc.long_prefill_token_threshold}"
        f" prefix_caching={cache_config.enable_prefix_caching}"
        f" block_size={cache_config.block_size} num_blocks={num_blocks}"
        f" policy={sc.policy}",
        flush=True,
    )
    return scheduler, hasher


def make_request(r: dict[str, Any], hasher: Any) -> Request:
    rid = r["request_id"]
    head = r["num_shared_prefix_tokens"]
    group = r["prefix_group"]
    prompt = [group + 1] * head if group is not None else []
    prompt += [10_000_000 + rid] * (r["num_prompt_tokens"] - head)
    params = SamplingParams(max_tokens=r["num_output_tokens"], ignore_eos=True)
    return Request(
        **_kwargs(
            Request,
            request_id=str(rid),
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            eos_token_id=None,
            arrival_time=r["arrival_s"],
            block_hasher=hasher,
        )
    )


def fabricate(scheduler: Scheduler, out: Any) -> Any:
    """The model runner's output for ``out``, read right after ``schedule``: a
    token for each request whose computed tokens reached its known tokens, none
    for a partial prefill chunk (or a recompute not yet caught up)."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        request = scheduler.requests[rid]
        emits = request.num_computed_tokens >= request.num_tokens
        sampled.append([20_000_000 + int(rid)] if emits else [])
    return runner_output(req_ids, sampled)


def runner_output(req_ids: list[str], sampled: list[list[int]]) -> Any:
    """vLLM's ``ModelRunnerOutput`` of the tokens ``sampled`` for each of ``req_ids``."""
    return ModelRunnerOutput(
        **_kwargs(
            ModelRunnerOutput,
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
    )


def decisions(
    scheduler: Scheduler, out: Any, running_before: list[str], waiting_before: set[str]
) -> dict[str, Any]:
    running_after = {r.request_id for r in scheduler.running}
    gone = set(running_before) - running_after
    front = [r.request_id for r in scheduler.waiting if r.request_id in gone]
    scheduled = out.num_scheduled_tokens
    return {
        "scheduled": sorted([int(rid), n] for rid, n in scheduled.items()),
        "admitted": sorted(
            [int(rid), scheduler.requests[rid].num_computed_tokens - n]
            for rid, n in scheduled.items()
            if rid in waiting_before
        ),
        "preempted": [int(rid) for rid in front[::-1]],
    }


def finished_ids(engine_outputs: Any) -> list[int]:
    ids = []
    for outputs in (engine_outputs or {}).values():
        for o in outputs.outputs:
            if o.finish_reason is not None:
                ids.append(int(o.request_id))
    return sorted(ids)


def run(trace: dict[str, Any]) -> list[dict[str, Any]]:
    spec = trace["spec"]
    scheduler, hasher = build(spec)
    by_id = {r["request_id"]: r for r in trace["requests"]}
    feed = trace["new_visible"]
    log: list[dict[str, Any]] = []
    # Async: the engine core's batch queue (EngineCore.step_with_batch_queue),
    # two deep: step N+1 is scheduled before step N's output is in.
    depth = 2 if spec["async_scheduling"] else 1
    queue: deque[tuple[Any, Any, dict[str, Any]]] = deque()
    num_fed = 0
    num_empty = 0
    while True:
        while num_fed <= len(log) and num_fed < len(feed):
            for rid in feed[num_fed]:
                scheduler.add_request(make_request(by_id[rid], hasher))
            num_fed += 1
        if scheduler.has_requests():
            running_before = [r.request_id for r in scheduler.running]
            waiting_before = {r.request_id for r in scheduler.waiting}
            out = scheduler.schedule()
            if out.total_num_scheduled_tokens > 0:
                num_empty = 0
                record = decisions(scheduler, out, running_before, waiting_before)
                log.append(record)
                queue.appendleft((out, fabricate(scheduler, out), record))
                if len(queue) < depth:
                    continue
            elif not queue:
                # Nothing to schedule and nothing in flight where servesim ran a
                # step: log the empty step (a difference) and feed the next one.
                num_empty += 1
                if num_empty > 1 and num_fed >= len(feed):
                    return log
                if num_empty > 1:
                    log.append({key: [] for key in ("scheduled", "admitted", "preempted")})
                    log[-1]["finished"] = []
                continue
        elif not queue:
            if num_fed >= len(feed):
                return log
            log.append({key: [] for key in ("scheduled", "admitted", "preempted", "finished")})
            continue
        if not queue:
            continue
        out, model_output, record = queue.pop()
        record["finished"] = finished_ids(scheduler.update_from_output(out, model_output))


def main() -> int:
    trace = json.loads(Path(sys.argv[1]).read_text())
    log = run(trace)
    with open(sys.argv[2], "w") as f:
        for record in log:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"vllm {vllm.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
