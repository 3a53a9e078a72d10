"""The prefix-caching pool as it was before its free queue went bulk (test reference).

``sim.engine.kv_cache.PrefixCachingPool`` keeps vLLM's free block queue in
a list with bulk pushes and pops (``sim.engine.kv_blocks``). This is the
earlier implementation, one ``OrderedDict`` entry and one reference count per
block, kept only so that ``tests/test_prefix_cache_reference.py`` can check
that the fast one allocates, evicts and frees exactly the same block ids.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sim.engine.kv_blocks import BlockKeys, Key, own_key_base
from sim.engine.kv_cache import BlockPool
from sim.engine.request import Request


class ReferencePrefixPool(BlockPool):
    """A :class:`BlockPool` whose full blocks are cached, shared and evicted as vLLM v1's."""

    __slots__ = (
        "_blocks",
        "_cached",
        "_copies",
        "_filling",
        "_hit_memo",
        "_key_of",
        "_keys",
        "_loose",
        "_num_hashed",
        "_queue",
        "_refs",
        "num_evictions",
    )
    caches_prefixes = True

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        super().__init__(num_blocks, block_size_tokens)
        # Free blocks in eviction order, head first (vLLM's free block queue).
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._refs = [0] * num_blocks  # block id -> requests referencing it
        self._key_of: list[Key | None] = [None] * num_blocks  # block id -> key if cached
        self._cached: dict[Key, int] = {}  # key -> first cached block holding it
        self._copies: dict[Key, list[int]] = {}  # key -> later copies (rare)
        self._blocks: dict[int, list[int]] = {}  # request id -> its block ids, in order
        self._num_hashed: dict[int, int] = {}  # request id -> its leading cached blocks
        self._filling: dict[int, Request] = {}  # holders of shareable blocks not yet full
        self._loose: list[int] = []  # blocks allocated inline, not yet given to a request
        self._keys = BlockKeys(block_size_tokens)
        self._hit_memo: tuple[int, int, list[int]] | None = None  # (id, tokens, hit blocks)
        self.num_evictions = 0

    # -- keys (sim.engine.kv_blocks) ----------------------------------------------
    def num_shareable_blocks(self, request: Request) -> int:
        """Leading whole blocks of ``request`` keyed by content shared across requests."""
        return self._keys.num_shareable(request)

    def block_keys(self, request: Request, stop: int, start: int = 0) -> list[Key]:
        """Keys of ``request``'s blocks ``start`` .. ``stop - 1``."""
        return self._keys.keys(request, stop, start)

    # -- hits ----------------------------------------------------------------------
    def _hits(self, request: Request) -> list[int]:
        """Block ids of the longest cached prefix of a request holding nothing.

        At most ``num_tokens - 1`` tokens, in whole blocks: vLLM computes at
        least the last token (its logits give the next one).
        """
        if request.num_blocks or request.num_computed_tokens:
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
        shared = min(self.num_shareable_blocks(request), stop)
        for key in self.block_keys(request, shared):
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

    def num_cached_tokens(self, request: Request) -> int:
        """Tokens of ``request`` already in the cache (whole blocks, < its tokens)."""
        return len(self._hits(request)) * self.block_size_tokens

    # -- the BlockPool interface ------------------------------------------------
    def num_missing_blocks(self, request: Request, num_tokens: int) -> int:
        if request.num_blocks:
            return max(0, self.blocks_for(num_tokens) - request.num_blocks)
        hits = self._hits(request)
        refs = self._refs
        # A hit block in the free queue stops being free when referenced.
        revived = sum(1 for block in hits if refs[block] == 0)
        return max(0, self.blocks_for(num_tokens) - len(hits)) + revived

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        return self.num_missing_blocks(request, num_tokens) <= self.num_free_blocks

    def allocate(self, request: Request, num_tokens: int) -> None:
        self._missing_or_raise(request, num_tokens)
        self._settle()
        rid = request.request_id
        refs, queue = self._refs, self._queue
        if not request.num_blocks:
            hits = self._hits(request)
            for block in hits:  # touch: a free hit block leaves the queue
                if refs[block] == 0:
                    del queue[block]
                    self.num_free_blocks -= 1
                refs[block] += 1
            self._blocks[rid] = list(hits)
            self._num_hashed[rid] = len(hits)
            request.num_blocks = len(hits)
        else:
            self._realise(request)
        blocks = self._blocks[rid]
        missing = self.blocks_for(num_tokens) - len(blocks)
        if missing > 0:
            blocks += self._pop(missing)
            self.num_free_blocks -= missing
            request.num_blocks = len(blocks)
        # Draft tokens beyond the request's tokens are not cached (vLLM caps likewise).
        self._register(request, min(num_tokens, request.num_tokens), own=False)
        if self._num_hashed[rid] < self.num_shareable_blocks(request):
            self._filling[rid] = request

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the shareable blocks ``num_tokens`` tokens fill, in the step that fills
        them, as vLLM's ``allocate_slots`` does for every scheduled request: a request
        admitted later in the same step hits them. (Own-key blocks wait, see above.)"""
        rid = request.request_id
        if rid not in self._filling:
            return
        self._settle()
        self._realise(request)
        self._register(request, min(num_tokens, request.num_tokens), own=False)
        if self._num_hashed[rid] >= self.num_shareable_blocks(request):
            del self._filling[rid]

    def free(self, request: Request) -> None:
        self._settle()
        rid = request.request_id
        if rid not in self._blocks:
            request.num_blocks = 0
            return
        self._realise(request)
        # Own keys matter only to a request that may come back (preempted, not finished).
        unfinished = request.num_generated_tokens < request.num_output_tokens
        self._register(request, min(request.num_computed_tokens, request.num_tokens), unfinished)
        refs, queue = self._refs, self._queue
        released = 0
        # Tail first, so the request's deepest blocks are evicted first (vLLM's free).
        for block in reversed(self._blocks.pop(rid)):
            refs[block] -= 1
            if refs[block] == 0:
                queue[block] = None
                released += 1
        del self._num_hashed[rid]
        self._filling.pop(rid, None)
        self.num_free_blocks += released
        request.num_blocks = 0

    # -- cache maintenance ------------------------------------------------------
    def _register(self, request: Request, num_tokens: int, own: bool) -> None:
        """Cache ``request``'s blocks that ``num_tokens`` tokens fill (vLLM's cache_blocks);
        past its shareable prefix only if ``own`` (see the module's docstring)."""
        rid = request.request_id
        start = self._num_hashed[rid]
        num_full = num_tokens // self.block_size_tokens
        if not own:
            num_full = min(num_full, self.num_shareable_blocks(request))
        if num_full <= start:
            return
        blocks = self._blocks[rid]
        key_of, setdefault = self._key_of, self._cached.setdefault
        keys: Iterable[Key]
        if start < self.num_shareable_blocks(request):
            keys = self.block_keys(request, num_full, start)
        else:  # only the request's own keys (the common case): no list built
            base = own_key_base(request)
            keys = range(base + start, base + num_full)
        for j, key in enumerate(keys, start):
            block = blocks[j]
            key_of[block] = key
            if setdefault(key, block) != block:  # computed twice concurrently: no dedup
                self._copies.setdefault(key, []).append(block)
        self._num_hashed[rid] = num_full
        self._hit_memo = None

    def _catch_up(self) -> None:
        """Cache the shareable blocks that requests have filled since they last
        allocated (a step that fills a block without needing a new one does not
        call the pool), before anyone looks the cache up."""
        done = []
        for rid, request in self._filling.items():
            self._register(request, min(request.num_computed_tokens, request.num_tokens), False)
            if self._num_hashed[rid] >= self.num_shareable_blocks(request):
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

    def _settle(self) -> None:
        """Pop from the queue head the blocks allocated inline since the last call."""
        queue = self._queue
        owed = len(queue) - self.num_free_blocks
        if owed <= 0:
            return
        self._loose += self._pop(owed)

    def _pop(self, count: int) -> list[int]:
        """Take ``count`` blocks from the queue head, evicting their keys (get_new_blocks)."""
        popitem = self._queue.popitem
        popped = [popitem(False)[0] for _ in range(count)]
        key_of, refs = self._key_of, self._refs
        for block in popped:
            refs[block] = 1
            if key_of[block] is not None:
                self._evict(block)
        return popped

    def _realise(self, request: Request) -> None:
        """Give ``request`` the inline-allocated blocks it counts but does not list."""
        blocks = self._blocks.setdefault(request.request_id, [])
        self._num_hashed.setdefault(request.request_id, 0)
        owed = request.num_blocks - len(blocks)
        if owed > 0:
            loose = self._loose
            blocks.extend(loose[-owed:])
            del loose[-owed:]

    # -- inspection (tests, metrics) ----------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a key (cached), referenced or not."""
        self._settle()
        return sum(1 for key in self._key_of if key is not None)

    @property
    def num_evictable_blocks(self) -> int:
        """Cached blocks in the free queue (no request references them)."""
        self._settle()
        key_of = self._key_of
        return sum(1 for block in self._queue if key_of[block] is not None)

    def free_queue(self) -> list[int]:
        """Free block ids, next to be allocated (and evicted) first."""
        self._settle()
        return list(self._queue)

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
        return self._refs[block]

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
