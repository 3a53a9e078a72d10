"""Async scheduling's block hashing, as vLLM hashes a preempted request's blocks.

vLLM caches a request's full blocks from the token ids it knows: in
``KVCacheManager.allocate_slots`` up to ``min(num_computed_tokens + num_new_tokens,
request.num_tokens)``, and under async scheduling in
``AsyncScheduler._update_request_with_output`` up to ``num_computed_tokens -
num_output_placeholders``. A decode step's input token is the sample of the step
before, still in flight when it is planned, so it has no id then: a request
preempted while decoding, its computed tokens on a block boundary, has its last
full block unhashed and finds one block fewer on its return. Synchronous vLLM
knows the token and hashes the block. (vLLM 0.24's own scheduler differs from
servesim on exactly this in the oracle's async trace: request 56, 704 tokens
computed, finds 688; ``benchmarks/vllm_oracle.py``.)
"""

from __future__ import annotations

from functools import partial
from typing import cast

import pytest
from exact_costs import COST, work

from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.serving.simulation import OpenLoop, RawResult, Simulation

BLOCK = 4  # tokens per KV block


def simulate(
    *, async_scheduling: bool, skip_ahead: bool, prompt_a: int, output_b: int, num_blocks: int
) -> RawResult:
    """B (request 0: prompt 4, output ``output_b``) and A (request 1: prompt
    ``prompt_a``, output 8) arrive together in a pool of ``num_blocks`` blocks of 4
    tokens, prefix caching on."""
    build = ContinuousConfig(max_num_seqs=4, max_num_batched_tokens=2048).build
    engine = ReplicaConfig(
        core=CoreConfig(
            make_policy=partial(build, async_scheduling=True) if async_scheduling else build,
            num_kv_blocks=num_blocks,
            block_size_tokens=BLOCK,
            max_model_len_tokens=64,
            enable_prefix_caching=True,
        ),
        cost=COST,
        frontend=NO_FRONTEND,
        skip_ahead=skip_ahead,
    )
    return Simulation(engine).run(cast(OpenLoop, work([0.0, 0.0], [4, prompt_a], [output_b, 8])))


def hit_tokens(raw: RawResult, request_id: int) -> int:
    requests = raw.requests
    row = requests["request_id"].tolist().index(request_id)
    assert requests["num_preemptions"].tolist()[row] == 1
    return int(requests["num_prefix_hit_tokens"].tolist()[row])


@pytest.mark.parametrize("skip_ahead", [True, False])
@pytest.mark.parametrize(("async_scheduling", "num_found_blocks"), [(False, 2), (True, 1)])
def test_a_decode_preempted_on_a_block_boundary_finds_one_block_fewer_under_async(
    skip_ahead: bool, async_scheduling: bool, num_found_blocks: int
) -> None:
    # Blocks 0..4 free. Step 0: B and A (prompt 4) prefill their 4 tokens, one block
    # each (0, 1), and sample. Steps 1-4 decode positions 4-7: a second block each
    # (2, 3) at step 1; after step 4 each has 8 computed tokens (2 full blocks) and 5
    # generated, the last 4 sampled in steps 1-4, one after another.
    # The plan of step 5 (position 8, a third block each): B, the older, takes block 4;
    # A finds none free and, the newest, is preempted: 8 computed tokens, 2 full blocks.
    # Synchronous vLLM knows all 8 token ids (position 7 was sampled by step 3, whose
    # output is in): both blocks hashed. Async: step 4 was planned while step 3 ran,
    # so position 7 had no id then (a placeholder); it is still in flight when step 5
    # is planned (num_computed_tokens 8, one placeholder: 8 - 1 = 7 tokens cached),
    # so only block 0 (tokens 0-3) is hashed.
    # B needs no more blocks (4 + 8 - 1 = 11 tokens: 3 blocks); nothing else takes a
    # block before B finishes and A returns with 9 tokens (4 prompt + 5 generated): it
    # looks up 8 (one left to compute) and finds 2 blocks synchronously, 1 async.
    # Its first admission found nothing, so its hits are those of its return.
    raw = simulate(
        async_scheduling=async_scheduling,
        skip_ahead=skip_ahead,
        prompt_a=4,
        output_b=8,
        num_blocks=5,
    )
    assert hit_tokens(raw, 1) == num_found_blocks * BLOCK


@pytest.mark.parametrize("skip_ahead", [True, False])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_request_preempted_after_its_prompt_keeps_every_full_block(
    skip_ahead: bool, async_scheduling: bool
) -> None:
    # Prompt ids are known at once, so the step that computes a prompt's last chunk
    # hashes all of it, async or not (allocate_slots: min(0 + 8, num_tokens 8) = 8).
    # 4 blocks. Step 0: B (prompt 4) takes block 0, A (prompt 8) blocks 1 2; both
    # sample. The plan of step 1: B (position 4) takes block 3; A (position 8) needs
    # a third block, none is free, and A, the newest, is preempted with 8 computed
    # tokens, its first token sampled by step 0 (in flight, but it computed no
    # output token): both blocks hashed. B (output 4: 4 + 4 - 1 = 7 tokens, 2
    # blocks) takes no other block; A returns with 9 tokens, looks up 8, finds 2 blocks.
    raw = simulate(
        async_scheduling=async_scheduling,
        skip_ahead=skip_ahead,
        prompt_a=8,
        output_b=4,
        num_blocks=4,
    )
    assert hit_tokens(raw, 1) == 2 * BLOCK
