"""What a prefix-caching pool holds, read for tests' checks (some O(pool)).

``PrefixCachingPool`` keeps no inspection methods: these read its fields, after
popping the blocks allocated inline since it last looked (``_settle``), as the
pool itself does before it reads its queue. ``ReferencePrefixPool``
(``prefix_pool_reference``) answers with its own methods of the same names.
"""

from __future__ import annotations

from typing import Any

from sim.engine.kv_blocks import FreeQueue, Key
from sim.engine.kv_cache import PrefixCachingPool
from sim.engine.request import Request


def queue_blocks(queue: FreeQueue) -> list[int]:
    """The queue's blocks, head first: those put at the head (``extend_head``), then
    the entries (stale ones left by hits skipped)."""
    marks, keyed_at, start = set(queue._marks), queue._keyed_at, queue._base + queue._head
    entries = enumerate(queue._entries[queue._head :], start)
    front = queue._front[::-1]
    return front + [b for at, b in entries if at not in marks or keyed_at.get(b) == at]


def free_queue(pool: Any) -> list[int]:
    """Free block ids, next to be allocated (and evicted) first."""
    if not isinstance(pool, PrefixCachingPool):
        return pool.free_queue()
    pool._settle()
    return queue_blocks(pool._queue)


def num_cached_blocks(pool: Any) -> int:
    """Blocks holding a key (cached), referenced or not."""
    pool._settle()
    return sum(1 for key in pool._key_of if key is not None)


def num_evictable_blocks(pool: Any) -> int:
    """Cached blocks in the free queue (no request references them)."""
    if not isinstance(pool, PrefixCachingPool):
        return pool.num_evictable_blocks
    pool._settle()
    return len(pool._queue._keyed_at)


def block_ids(pool: Any, request: Request) -> list[int]:
    """``request``'s block ids, first block first."""
    pool._settle()
    if request.request_id not in pool._blocks:
        return []
    pool._realise(request)
    return list(pool._blocks[request.request_id])


def block_key(pool: Any, block: int) -> Key | None:
    """The key block ``block`` is cached under; ``None`` if it is not cached."""
    pool._settle()
    return pool._key_of[block]


def block_ref_count(pool: Any, block: int) -> int:
    """Requests referencing block ``block`` (0: it is in the free queue)."""
    pool._settle()
    if not isinstance(pool, PrefixCachingPool) or pool._key_of[block] is not None:
        return pool._refs[block]
    # Unkeyed: held by one request (or allocated inline, not yet listed) or free.
    return int(block in pool._loose or any(block in ids for ids in pool._blocks.values()))


def cached_block(pool: Any, key: Key) -> int | None:
    """The block a hit on ``key`` would take; ``None`` if ``key`` is not cached."""
    pool._settle()
    return pool._cached.get(key)


def held_keys(pool: Any, request: Request) -> list[Key]:
    """Keys of ``request``'s cached blocks (its leading ones)."""
    num_hashed = pool._num_hashed.get(request.request_id, 0)
    return [pool._key_of[b] for b in block_ids(pool, request)[:num_hashed]]


def block_keys(pool: Any, request: Request, stop: int, start: int = 0) -> list[Key]:
    """Keys of ``request``'s blocks ``start`` .. ``stop - 1``."""
    if not isinstance(pool, PrefixCachingPool):
        return pool.block_keys(request, stop, start)
    return pool._keys.keys(request, stop, start)


def num_loose_blocks(pool: Any) -> int:
    """Blocks allocated inline and not yet listed under a request."""
    pool._settle()
    return len(pool._loose)


def grows_by_count(pool: Any, request: Request) -> bool:
    """Whether ``try_grow`` grows ``request`` by counts alone (no shareable block
    still to key), as a decode run's inline allocation does."""
    return request.num_blocks != 0 and request.request_id not in pool._filling
