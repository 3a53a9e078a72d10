"""The compiled loop on a KV pool that cuts a decode run short, against the Python path.

``steps_within_pool`` first tries a cheap bound: ``n`` requests taking ``k`` more
tokens need at most ``n * (k // block_size + 1)`` new blocks. When the free
blocks lie between ``n * (k // block_size)`` and that bound, only the exact count
(``missing(k)``) can say whether the run fits; the property tests' random pools
seldom land there. These cases are built to (numbers in the comments), and the
compiled loop's function (uncompiled: the same code numba compiles) must give
the Python path's results to the bit.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from compiled_runs import assert_identical, simulate

from sim.cost.roofline import RooflineCost
from sim.engine.core_config import CoreConfig
from sim.engine.kv_cache import BlockPool
from sim.engine.policies import ContinuousConfig
from sim.engine.request import Request
from sim.fast import decode_runs
from sim.fast.compiled import loop
from sim.hardware.specs import hardware_preset, model_preset
from sim.serving.replica_config import NO_FRONTEND, ReplicaConfig
from sim.workload.generate import RequestArrays

BLOCK = 16
COST = RooflineCost(model_preset("llama-3-8b"), hardware_preset("h100"))


def engine(num_kv_blocks: int, max_num_batched_tokens: int = 512) -> ReplicaConfig:
    config = ContinuousConfig(
        max_num_seqs=4, max_num_batched_tokens=max_num_batched_tokens, chunked_prefill=True
    )
    core = CoreConfig(config.build, num_kv_blocks, BLOCK, 1024, enable_prefix_caching=False)
    return ReplicaConfig(core, COST, NO_FRONTEND)


def arrays(prompts: list[int], outputs: list[int]) -> RequestArrays:
    n = len(prompts)
    return RequestArrays(
        np.zeros(n), np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
    )


def test_the_cheap_bound_is_not_taken_when_the_pool_lies_just_under_it() -> None:
    # Two requests at 16 computed tokens (1 block each, full) with 40 decode steps
    # left: 40 more tokens take ceil(56 / 16) - 1 = 3 blocks each, 6 in all. With 5
    # free, n (k // bs) = 4 <= 5 < 6 = n (k // bs + 1): the exact count decides.
    # 32 more tokens fit (2 blocks each, 4 <= 5); 33 need 6.
    comp, new, blocks = np.array([15, 15]), np.array([1, 1]), np.array([1, 1])
    rows = np.array([0, 1])
    assert loop.steps_within_pool(BLOCK, 5, comp, blocks, rows, new, 2, 40) == 32
    assert loop.steps_within_pool(BLOCK, 6, comp, blocks, rows, new, 2, 40) == 40
    # The reference's own function says the same.
    pool = BlockPool(7, BLOCK)
    requests = [Request(i, 0.0, 15, 42) for i in range(2)]
    for r in requests:
        pool.allocate(r, 16)
        r.num_computed_tokens = 15
    assert pool.num_free_blocks == 5
    assert decode_runs.steps_within_pool(pool, [(r, 1) for r in requests], 40) == 32


@pytest.mark.parametrize(
    ("prompts", "outputs", "num_kv_blocks", "preempts"),
    [
        # Both prefilled in step 0 (16 tokens, one full block each), then 40 decode
        # steps: 5 of 7 blocks free, inside the cheap bound's gap (see above). The run
        # stops at 32; the next step preempts (the Python path plays it).
        ([16, 16], [41, 41], 7, True),
        # The same with one more free block: the run fits, the loop plays it all.
        ([16, 16], [41, 41], 8, False),
        # Three requests, 8 free after step 0 (3 x 3 = 9 needed for 40 more tokens,
        # 3 x 2 = 6 <= 8 under the cheap bound's floor).
        ([16, 16, 16], [41, 41, 41], 11, True),
        # Uneven: the shortest decides the run (min_left), the pool cuts it first.
        ([16, 32, 20], [60, 45, 70], 12, True),
    ],
)
def test_a_tight_pool_gives_the_python_paths_results(
    prompts: list[int], outputs: list[int], num_kv_blocks: int, preempts: bool
) -> None:
    work, config = arrays(prompts, outputs), engine(num_kv_blocks)
    reference, reference_order, _ = simulate(work, config, "never")
    raw, order, played = simulate(work, config, "python")
    assert_identical(raw, reference)
    assert order == reference_order
    # The case is what it says: a preemption (the loop hands the run to the Python
    # path) exactly when the pool is too small for the whole run.
    assert (int(reference.requests["num_preemptions"].sum()) > 0) == preempts
    assert played == (not preempts)


def test_a_budget_blocked_admission_gives_the_python_paths_results() -> None:
    # Without chunking, budget 24: step 0 prefills r0 (16); r1 (16) waits for the
    # budget. No decode run may follow step 0 (the block lifts after it).
    config = ContinuousConfig(max_num_seqs=4, max_num_batched_tokens=24, chunked_prefill=False)
    core = CoreConfig(config.build, 1000, BLOCK, 1024, enable_prefix_caching=False)
    work = arrays([16, 16], [40, 3])
    replica = ReplicaConfig(core, COST, NO_FRONTEND)
    reference, _, _ = simulate(work, replica, "never")
    raw, _, played = simulate(work, replica, "python")
    assert played
    assert_identical(raw, reference)
    first = reference.requests.sort_values("request_id")["first_scheduled_s"].tolist()
    assert first[1] == reference.steps["end_s"].iloc[0]  # r1 starts when step 0 ends


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")
def test_compiled_by_numba_the_tight_pool_gives_the_same_results() -> None:
    # The same code compiled (numba caches it beside sim/fast/compiled/loop.py).
    for num_kv_blocks in (7, 8):
        work, config = arrays([16, 16], [41, 41]), engine(num_kv_blocks)
        reference, reference_order, _ = simulate(work, config, "never")
        raw, order, played = simulate(work, config, "always")
        assert_identical(raw, reference)
        assert order == reference_order
        assert played == (num_kv_blocks == 8)
