"""``try_grow`` at its edges, by hand: the last free blocks, and a block boundary.

The running loop grows a decoding request through ``try_grow`` (counts only); an
off-by-one there shows only deep in a simulation. Both pools must take the last
free block, refuse one block more, and cross into a new block at exactly
``block_size + 1`` tokens.
"""

from __future__ import annotations

import pytest

from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.request import Request


@pytest.mark.parametrize("pool_type", [BlockPool, PrefixCachingPool])
def test_try_grow_takes_exactly_the_last_free_blocks(pool_type: type[BlockPool]) -> None:
    pool = pool_type(4, 4)
    request = Request(0, 0.0, 8, 8)
    pool.allocate(request, 8)  # 2 blocks, 2 free
    assert pool.try_grow(request, 16)  # 4 blocks: 2 short, 2 free: all taken
    assert (request.num_blocks, pool.num_free_blocks) == (4, 0)
    assert not pool.try_grow(request, 17)  # a fifth block: none free
    assert (request.num_blocks, pool.num_free_blocks) == (4, 0)
    assert pool.try_grow(request, 16)  # nothing short: nothing to take


@pytest.mark.parametrize("pool_type", [BlockPool, PrefixCachingPool])
def test_try_grow_crosses_a_block_at_block_size_plus_one(pool_type: type[BlockPool]) -> None:
    pool = pool_type(8, 4)
    request = Request(0, 0.0, 4, 8)
    pool.allocate(request, 4)  # 1 block, full
    assert pool.try_grow(request, 4) and request.num_blocks == 1
    assert pool.try_grow(request, 5) and request.num_blocks == 2
    assert pool.try_grow(request, 8) and request.num_blocks == 2
    assert pool.try_grow(request, 9) and request.num_blocks == 3
    assert pool.num_free_blocks == 8 - 3
