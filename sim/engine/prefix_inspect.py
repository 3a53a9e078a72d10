"""Read-only views of a prefix-caching pool: its queue, blocks, keys and counts.

Used by tests and metrics, never on the simulator's hot path (some are
O(pool)). A mixin of ``sim.engine.prefix_cache.PrefixCachingPool``, which
holds the state named below.
"""

from __future__ import annotations

from sim.engine.block_keys import Key
from sim.engine.free_queue import FreeQueue
from sim.engine.request import Request


class PoolInspection:
    """Inspection methods of :class:`~sim.engine.prefix_cache.PrefixCachingPool`."""

    __slots__ = ()
    # The pool's state (sim.engine.prefix_cache), read here.
    _queue: FreeQueue
    _key_of: list[Key | None]
    _refs: list[int]
    _cached: dict[Key, int]
    _blocks: dict[int, list[int]]
    _num_hashed: dict[int, int]
    _loose: list[int]

    def _settle(self) -> None:
        raise NotImplementedError  # the pool's

    def _realise(self, request: Request) -> None:
        raise NotImplementedError  # the pool's

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a key (cached), referenced or not."""
        self._settle()
        return sum(1 for key in self._key_of if key is not None)

    @property
    def num_evictable_blocks(self) -> int:
        """Cached blocks in the free queue (no request references them)."""
        self._settle()
        return self._queue.num_keyed

    def free_queue(self) -> list[int]:
        """Free block ids, next to be allocated (and evicted) first."""
        self._settle()
        return self._queue.blocks()

    def block_ids(self, request: Request) -> list[int]:
        """``request``'s block ids, first block first."""
        self._settle()
        if request.request_id not in self._blocks:
            return []
        self._realise(request)
        return list(self._blocks[request.request_id])

    def block_key(self, block: int) -> Key | None:
        """The key block ``block`` is cached under; ``None`` if it is not cached."""
        self._settle()
        return self._key_of[block]

    def block_ref_count(self, block: int) -> int:
        """Requests referencing block ``block`` (0: it is in the free queue)."""
        self._settle()
        if self._key_of[block] is not None:
            return self._refs[block]
        # Unkeyed: held by one request (or allocated inline, not yet listed) or free.
        held = block in self._loose or any(block in ids for ids in self._blocks.values())
        return int(held)

    def cached_block(self, key: Key) -> int | None:
        """The block a hit on ``key`` would take; ``None`` if ``key`` is not cached."""
        self._settle()
        return self._cached.get(key)

    def held_keys(self, request: Request) -> list[Key]:
        """Keys of ``request``'s cached blocks (its leading ones)."""
        key_of = self._key_of
        return [
            key_of[b]
            for b in self.block_ids(request)[: self._num_hashed.get(request.request_id, 0)]
        ]

    def num_loose_blocks(self) -> int:
        """Blocks allocated inline and not yet listed under a request."""
        self._settle()
        return len(self._loose)
