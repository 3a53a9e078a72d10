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

The plain request (no shareable prefix, no hit: every request of a workload
without shared prefixes, unless it was preempted) takes a short path: it is
told apart with one dict lookup (``_cold``), gets fresh blocks in the same
queue pop that settles the inline allocations, and is freed in one slice; the
lookups and key bookkeeping (``sim.engine.prefix_index``) do nothing for it.
"""

from __future__ import annotations

from sim.engine.block_keys import OWN_SHIFT, Key
from sim.engine.free_queue import FreeQueue
from sim.engine.prefix_index import PrefixIndex
from sim.engine.prefix_inspect import PoolInspection
from sim.engine.request import Request


class PrefixCachingPool(PoolInspection, PrefixIndex):
    """A :class:`BlockPool` whose full blocks are cached, shared and evicted as vLLM v1's."""

    __slots__ = ("_loose", "_queue")
    caches_prefixes = True

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        super().__init__(num_blocks, block_size_tokens)
        # Free blocks in eviction order, head first (vLLM's free block queue).
        self._queue = FreeQueue(range(num_blocks))
        self._loose: list[int] = []  # blocks allocated inline, not yet given to a request

    # -- keys (sim.engine.block_keys) ----------------------------------------------
    def num_shareable_blocks(self, request: Request) -> int:
        """Leading whole blocks of ``request`` keyed by content shared across requests."""
        return self._keys.num_shareable(request)

    def block_keys(self, request: Request, stop: int, start: int = 0) -> list[Key]:
        """Keys of ``request``'s blocks ``start`` .. ``stop - 1``."""
        return self._keys.keys(request, stop, start)

    def _cold(self, request: Request) -> bool:
        """Whether ``request``, holding no blocks, is plain and surely hits nothing: no
        shareable prefix, and either computed tokens (no lookup then) or its own first
        block not cached and no other request's blocks waiting to be cached (``_hits``)."""
        return (
            request.prefix_group is None
            and request.block_hash_ids is None
            and (
                request.num_computed_tokens != 0
                or (not self._filling and request.request_id << OWN_SHIFT not in self._cached)
            )
        )

    # -- the BlockPool interface ------------------------------------------------
    def num_cached_tokens(self, request: Request) -> int:
        """Tokens of ``request`` already in the cache (whole blocks, < its tokens)."""
        if request.num_blocks or self._cold(request):
            return 0
        return len(self._hits(request)) * self.block_size_tokens

    def num_missing_blocks(self, request: Request, num_tokens: int) -> int:
        if request.num_blocks or self._cold(request):
            return max(0, self.blocks_for(num_tokens) - request.num_blocks)
        hits = self._hits(request)
        refs = self._refs
        # A hit block in the free queue stops being free when referenced.
        revived = sum(1 for block in hits if refs[block] == 0)
        return max(0, self.blocks_for(num_tokens) - len(hits)) + revived

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        held = request.num_blocks
        if held or self._cold(request):  # no hits: the plain pool's count, inlined
            missing = -(-num_tokens // self.block_size_tokens) - held
            return (missing if missing > 0 else 0) <= self.num_free_blocks
        return self.num_missing_blocks(request, num_tokens) <= self.num_free_blocks

    def allocate(self, request: Request, num_tokens: int) -> None:
        if request.num_blocks or not self._cold(request):
            self._allocate_keyed(request, num_tokens)
            return
        # Plain and no hit: fresh blocks, popped together with those allocated inline
        # since the last settle (``_settle``), which come first; nothing to cache.
        need = -(-num_tokens // self.block_size_tokens)
        if need > self.num_free_blocks:
            self._missing_or_raise(request, num_tokens)
        owed = self._queue.size - self.num_free_blocks  # allocated inline (as _settle)
        if owed < 0:  # (never in the engine: the free count falls only by allocating)
            owed = 0
        if owed + need:
            blocks = self._pop(owed + need)
            if owed:
                self._loose += blocks[:owed]
                del blocks[:owed]
        else:
            blocks = []
        self._blocks[request.request_id] = blocks
        self.num_free_blocks -= need
        request.num_blocks = need

    def _allocate_keyed(self, request: Request, num_tokens: int) -> None:
        """``allocate`` for a request holding blocks, or with a shareable prefix or hit."""
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
            if hits:
                self._num_hashed[rid] = len(hits)
            else:
                self._num_hashed.pop(rid, None)
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
        if self._still_filling(request):
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
        return request.num_blocks != 0 and request.request_id not in self._filling

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
        if not self._still_filling(request):
            del self._filling[rid]

    def free(self, request: Request) -> None:
        owed = self._queue.size - self.num_free_blocks
        if owed > 0:  # _settle, inlined (hot path)
            self._loose += self._pop(owed)
        rid = request.request_id
        blocks = self._blocks.get(rid)
        if blocks is None:
            request.num_blocks = 0
            return
        owed = request.num_blocks - len(blocks)
        if owed > 0:  # _realise, inlined
            loose = self._loose
            blocks += loose[-owed:]
            del loose[-owed:]
        # Own keys matter only to a request that may come back (preempted, not finished);
        # a finished plain request has nothing to cache (no shareable prefix).
        unfinished = request.num_generated_tokens < request.num_output_tokens
        if unfinished or request.prefix_group is not None or request.block_hash_ids is not None:
            num_computed = min(request.num_computed_tokens, request.num_tokens)
            self._register(request, num_computed, unfinished)
        del self._blocks[rid]
        num_keyed = self._num_hashed.pop(rid, 0)  # the leading blocks are the keyed ones
        # Tail first, so the request's deepest blocks are evicted first (vLLM's free):
        # the unkeyed tail (held by this request alone) in one slice, then the keyed.
        queue = self._queue
        if not num_keyed:  # the common case: the list is ours now, reversed in place
            blocks.reverse()
            queue.extend(blocks)
            self.num_free_blocks += len(blocks)
            request.num_blocks = 0
            if self._filling:
                self._filling.pop(rid, None)
            return
        tail = blocks[num_keyed:]
        tail.reverse()
        queue.extend(tail)
        released = len(tail)
        refs = self._refs
        for block in reversed(blocks[:num_keyed]):
            refs[block] -= 1
            if refs[block] == 0:
                queue.append_keyed(block)
                released += 1
        self._filling.pop(rid, None)
        self.num_free_blocks += released
        request.num_blocks = 0

    # -- lazy allocation (skip-ahead) ---------------------------------------------
    def _settle(self) -> None:
        """Pop from the queue head the blocks allocated inline since the last call."""
        owed = self._queue.size - self.num_free_blocks
        if owed > 0:
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
        owed = request.num_blocks - len(blocks)
        if owed > 0:
            loose = self._loose
            blocks.extend(loose[-owed:])
            del loose[-owed:]
