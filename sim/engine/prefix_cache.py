"""Prefix caching as vLLM v1 does it: every full block hashed, one free-block queue.

Block identity (``sim.engine.block_keys``): every full block of a request,
prompt and output, has a key standing for vLLM's chained block hash: the shared
prefix's inside the declared prefix (group or trace ids), else the request's own.

When a block gets its key. vLLM caches a block once it is full, at the
scheduling step that fills it (``cache_full_blocks``), output blocks included.
Here a block of the shareable prefix gets its key then (when allocated for the
step that fills it, or when that step fills a block already held: the continuous
policy calls ``cache_full_blocks``; other policies leave it to the next lookup,
``_catch_up``); a block with the request's own key gets it when the
request frees its blocks unfinished (preempted), and never if it finished.
Nothing can tell the difference: only the request itself can hit its own keys,
and only after freeing (a request holding blocks looks nothing up); a finished
request never comes back; and a key never moves a block in the free queue, so
eviction order is the same. It saves two dict operations per block of every
request (the simulator prices 100k requests in seconds). ``num_evictions``
counts the keys dropped that could still have been hit.

Eviction (vLLM's ``FreeKVCacheBlockQueue``). Blocks have ids; free blocks,
cached or not, wait in one queue. ``free`` appends a request's blocks that no
other request references, tail first (``reversed``), so its deepest blocks are
evicted first; allocation pops from the head and evicts the popped block's key;
a hit on a free cached block takes it out of the queue (``touch``). Blocks are
not de-duplicated: a block computed twice concurrently is cached twice, and a
hit takes the first copy (``get_cached_block``). The queue moves unkeyed blocks
in bulk (``sim.engine.free_queue``), and reference counts are kept for keyed
blocks only: only those can be shared, so an unkeyed block has one holder or none.

Skip-ahead. ``EngineCore._commit_run`` allocates inline (decrements
``num_free_blocks``, increments ``request.num_blocks``). The pool realises that
lazily (``_settle``): before it next reads or changes the queue it pops the
blocks owed from the head (evicting them, exactly what eager allocation would
have popped, since the queue changes only through the pool) into a pool of
anonymous used blocks, which a request takes when it is next touched.

Admission (continuous family): ``num_cached_tokens`` is the longest cached
prefix of a request holding no blocks and no computed tokens (fresh, or
preempted by recompute), in whole blocks and at most ``num_tokens - 1`` tokens
(vLLM's ``get_computed_blocks`` leaves one token to compute); ``can_allocate`` /
``allocate`` on such a request reference those blocks, charging the free ones
to the free count (vLLM's ``get_num_blocks_to_allocate``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.engine.block_keys import BlockKeys, Key, own_key_base
from sim.engine.free_queue import FreeQueue
from sim.engine.kv_pool import BlockPool
from sim.engine.prefix_inspect import PoolInspection
from sim.engine.request import Request


class PrefixCachingPool(PoolInspection, BlockPool):
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
        self._queue = FreeQueue(range(num_blocks))
        # Keyed block id -> requests referencing it. Only keyed blocks can be
        # shared (by a hit), so an unkeyed block has one holder or none, and its
        # entry here is not kept up to date (pops and frees stay bulk operations).
        self._refs = [0] * num_blocks
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

    # -- keys (sim.engine.block_keys) ----------------------------------------------
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
                    queue.remove(block)
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

    def try_grow(self, request: Request, num_tokens: int) -> bool:
        """As the plain pool's: counts only, the block ids realised lazily (as
        ``EngineCore._commit_run``'s inline allocation, see the module's docstring).
        A request with shareable blocks still to fill allocates at once instead,
        so that the blocks this step fills are cached in it (``allocate``)."""
        if not request.num_blocks or request.request_id in self._filling:
            if not self.can_allocate(request, num_tokens):
                return False
            self.allocate(request, num_tokens)
            return True
        return super().try_grow(request, num_tokens)

    def grows_by_count(self, request: Request) -> bool:
        return bool(request.num_blocks) and request.request_id not in self._filling

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
        blocks = self._blocks.pop(rid)
        num_keyed = self._num_hashed.pop(rid)  # the leading blocks are the keyed ones
        # Tail first, so the request's deepest blocks are evicted first (vLLM's free):
        # the unkeyed tail (held by this request alone) in one slice, then the keyed.
        tail = blocks[num_keyed:]
        tail.reverse()
        queue.extend(tail)
        released = len(tail)
        for block in reversed(blocks[:num_keyed]):
            refs[block] -= 1
            if refs[block] == 0:
                queue.append_keyed(block)
                released += 1
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
        key_of, refs, setdefault = self._key_of, self._refs, self._cached.setdefault
        keys: Iterable[Key]
        if start < self.num_shareable_blocks(request):
            keys = self.block_keys(request, num_full, start)
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
        popped, keyed = self._queue.pop(count)
        for block in keyed:
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
