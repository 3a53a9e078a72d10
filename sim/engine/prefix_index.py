"""The prefix cache's index: hit lookups, caching full blocks, evicting keys.

The base of ``sim.engine.prefix_cache.PrefixCachingPool`` (whose docstring says
when a block gets its key and what a hit is), holding the general paths: a
request with a shareable prefix, or one back from a preemption whose own
blocks may still be cached. The pool answers the common plain request (no
shareable prefix, no hit) without coming here.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.engine.block_keys import BlockKeys, Key, own_key_base
from sim.engine.kv_pool import BlockPool
from sim.engine.request import Request


class PrefixIndex(BlockPool):
    """Requests' blocks and the keys cached in them, looked up and kept up to date;
    the base of :class:`~sim.engine.prefix_cache.PrefixCachingPool`, which adds the
    free queue and the allocation interface."""

    __slots__ = (
        "_blocks",
        "_cached",
        "_copies",
        "_filling",
        "_hit_memo",
        "_key_of",
        "_keys",
        "_num_hashed",
        "_refs",
        "num_evictions",
    )

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        super().__init__(num_blocks, block_size_tokens)
        # Keyed block id -> requests referencing it. Only keyed blocks can be
        # shared (by a hit), so an unkeyed block has one holder or none, and its
        # entry here is not kept up to date (pops and frees stay bulk operations).
        self._refs = [0] * num_blocks
        self._key_of: list[Key | None] = [None] * num_blocks  # block id -> key if cached
        self._cached: dict[Key, int] = {}  # key -> first cached block holding it
        self._copies: dict[Key, list[int]] = {}  # key -> later copies (rare)
        self._blocks: dict[int, list[int]] = {}  # request id -> its block ids, in order
        # Request id -> its leading cached blocks; absent for none (plain requests).
        self._num_hashed: dict[int, int] = {}
        self._filling: dict[int, Request] = {}  # holders of shareable blocks not yet full
        self._keys = BlockKeys(block_size_tokens)
        self._hit_memo: tuple[int, int, list[int]] | None = None  # (id, tokens, hit blocks)
        self.num_evictions = 0

    def _settle(self) -> None:
        raise NotImplementedError  # the pool's

    def _hits(self, request: Request) -> list[int]:
        """Block ids of the longest cached prefix of a request holding nothing.

        At most ``num_tokens - 1`` tokens, in whole blocks: vLLM computes at
        least the last token (its logits give the next one).
        """
        if request.num_blocks or request.num_computed_tokens:
            return []
        if (
            request.prefix_group is None
            and request.block_hash_ids is None
            and not self._filling
            and own_key_base(request) not in self._cached
        ):
            # The common case, answered with one lookup: no shared prefix, no other
            # request's blocks to cache first (``_catch_up``), and its own first
            # block not cached (it has own keys only after freeing blocks unfinished,
            # and a hit is a chain from block 0).
            return []
        self._settle()
        if self._filling:
            self._catch_up()
        num_tokens = request.num_tokens
        memo = self._hit_memo
        if memo is not None and memo[0] == request.request_id and memo[1] == num_tokens:
            return memo[2]
        hits: list[int] = []
        cached = self._cached
        stop = (num_tokens - 1) // self.block_size_tokens
        shared = min(self._keys.num_shareable(request), stop)
        for key in self._keys.keys(request, shared):
            block = cached.get(key)
            if block is None:
                break
            hits.append(block)
        if len(hits) == shared:  # then the request's own blocks, built one by one
            base = own_key_base(request)
            for j in range(shared, stop):
                block = cached.get(base + j)
                if block is None:
                    break
                hits.append(block)
        self._hit_memo = (request.request_id, num_tokens, hits)
        return hits

    def _register(self, request: Request, num_tokens: int, own: bool) -> None:
        """Cache ``request``'s blocks that ``num_tokens`` tokens fill (vLLM's cache_blocks);
        past its shareable prefix only if ``own`` (see the pool's docstring). Its
        leading cached blocks are counted in ``_num_hashed`` (absent: none)."""
        rid = request.request_id
        start = self._num_hashed.get(rid, 0)
        num_full = num_tokens // self.block_size_tokens
        shareable = self._keys.num_shareable(request)
        if not own and num_full > shareable:
            num_full = shareable
        if num_full <= start:
            return
        blocks = self._blocks[rid]
        key_of, refs, setdefault = self._key_of, self._refs, self._cached.setdefault
        keys: Iterable[Key]
        if start < shareable:
            keys = self._keys.keys(request, num_full, start)
        else:  # only the request's own keys (the common case): no list built
            base = own_key_base(request)
            keys = range(base + start, base + num_full)
        for j, key in enumerate(keys, start):
            block = blocks[j]
            key_of[block] = key
            refs[block] = 1  # keyed now, so counted: its one holder (unkeyed blocks are unshared)
            if setdefault(key, block) != block:  # computed twice concurrently: no dedup
                self._copies.setdefault(key, []).append(block)
        self._num_hashed[rid] = num_full
        self._hit_memo = None

    def _still_filling(self, request: Request) -> bool:
        """Whether ``request`` holds shareable blocks not yet cached (not yet full)."""
        return self._num_hashed.get(request.request_id, 0) < self._keys.num_shareable(request)

    def _catch_up(self) -> None:
        """Cache the shareable blocks that requests have filled since they last
        allocated (a step that fills a block without needing a new one does not
        call the pool), before anyone looks the cache up."""
        done = []
        for rid, request in self._filling.items():
            self._register(request, min(request.num_computed_tokens, request.num_tokens), False)
            if not self._still_filling(request):
                done.append(rid)
        for rid in done:
            del self._filling[rid]

    def _evict(self, block: int) -> None:
        """Drop the key of ``block`` (a cached block being reused)."""
        key = self._key_of[block]
        self._key_of[block] = None
        self.num_evictions += 1
        self._hit_memo = None
        copies = self._copies.get(key)
        if self._cached[key] == block:
            if copies:
                self._cached[key] = copies.pop(0)
            else:
                del self._cached[key]
        else:
            assert copies is not None
            copies.remove(block)
        if copies is not None and not copies:
            del self._copies[key]
