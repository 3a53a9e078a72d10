"""The paged KV cache: the plain counting pool, vLLM v1's prefix-caching pool, swap space.

**The plain pool** (``BlockPool``) counts the blocks each request holds, not
which ones: only counts matter for timing and admission.

**Prefix caching** (``PrefixCachingPool``), as vLLM v1: every full block keyed
(a key stands for vLLM's chained block hash, ``sim.engine.kv_blocks``), one
free-block queue. A shareable-prefix block gets its key in the step that fills
it (``cache_full_blocks``; policies that do not call it leave it to the next
lookup, ``_catch_up``); a block with the request's own key only when the request
frees it unfinished (preempted). Nothing can tell the difference (only the
request can hit its own keys, and only after freeing; a key never moves a
block in the queue), and it saves two dict operations per block.

Eviction (vLLM's ``FreeKVCacheBlockQueue``): ``free`` appends a request's
unreferenced blocks tail first, so its deepest are evicted first; from vLLM
0.24 (``free_unhashed_first``) those vLLM has not hashed go to the head
instead. Allocation pops from the head, evicting the popped block's key; a hit
on a free block takes it out of the queue. Blocks are not de-duplicated.
Reference counts are kept for keyed blocks only (an unkeyed block has one
holder or none).

Growth by counts: a skip-ahead decode run allocates inline (counts only); the
pool pops the owed blocks from the head before it next reads or changes the
queue (``_settle``), exactly what eager allocation would have popped, and a
request takes them when next touched (``_realise``). Admission:
``num_cached_tokens`` is the longest cached prefix of a request holding
nothing, in whole blocks and at most ``num_tokens - 1`` tokens (vLLM's
``get_computed_blocks``). A plain request (no shareable prefix, no hit) is told
apart with one dict lookup (``_cold``) and takes a short path.

**Swap space** (``SwapSpace``): preemption by swap copies a victim's computed
KV blocks to CPU memory, ``num_blocks * bytes_per_block /
bandwidth_bytes_per_s`` seconds each way, added to the step that copies; when
the space is full the victim is preempted by recompute instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sim.engine.kv_blocks import OWN_SHIFT, BlockKeys, FreeQueue, Key, own_key_base
from sim.engine.records import RequestTable
from sim.engine.request import Request


class BlockPool:
    """``num_blocks`` blocks of ``block_size_tokens`` tokens each."""

    __slots__ = ("block_size_tokens", "num_blocks", "num_free_blocks")
    caches_prefixes = False  # whether admissions look prefixes up (and count lookups)

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("a KV pool needs at least one block of at least one token")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens (ceiling division)."""
        return -(-num_tokens // self.block_size_tokens)

    def num_cached_tokens(self, request: Request) -> int:
        """Tokens of ``request`` already cached: none without prefix caching."""
        return 0

    def num_missing_blocks(self, request: Request, num_tokens: int) -> int:
        """Blocks ``request`` lacks to hold ``num_tokens`` tokens (0 if enough)."""
        return max(0, self.blocks_for(num_tokens) - request.num_blocks)

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        """Whether ``request`` can grow to hold ``num_tokens`` tokens now."""
        return self.num_missing_blocks(request, num_tokens) <= self.num_free_blocks

    def allocate(self, request: Request, num_tokens: int) -> None:
        """Grow ``request``'s blocks to hold ``num_tokens`` tokens."""
        missing = self._missing_or_raise(request, num_tokens)
        self.num_free_blocks -= missing
        request.num_blocks += missing

    def try_grow(self, request: Request, num_tokens: int) -> bool:
        """Grow a running request's blocks to hold ``num_tokens`` tokens; ``False``
        (nothing changed) if the pool lacks them. The decode hot path: counts only."""
        short = -(-num_tokens // self.block_size_tokens) - request.num_blocks
        if short > self.num_free_blocks:
            return False
        if short > 0:
            self.num_free_blocks -= short
            request.num_blocks += short
        return True

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the blocks ``num_tokens`` tokens fill: nothing to cache here."""

    def _missing_or_raise(self, request: Request, num_tokens: int) -> int:
        """``num_missing_blocks``; a RuntimeError if the pool cannot supply them."""
        missing = self.num_missing_blocks(request, num_tokens)
        if missing > self.num_free_blocks:
            raise RuntimeError(
                f"KV pool overdrawn: request {request.request_id} needs {missing} blocks, "
                f"{self.num_free_blocks} free"
            )
        return missing

    def free(self, request: Request, num_unhashed_tokens: int = 0) -> None:
        """Return all of ``request``'s blocks. ``num_unhashed_tokens``: its last computed
        tokens vLLM has not hashed (``EngineCore._num_unhashed_tokens``)."""
        self.num_free_blocks += request.num_blocks
        request.num_blocks = 0


# -- prefix caching ----------------------------------------------------------------


class PrefixCachingPool(BlockPool):
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
        "free_unhashed_first",
        "num_evictions",
    )
    caches_prefixes = True

    def __init__(
        self, num_blocks: int, block_size_tokens: int, free_unhashed_first: bool = False
    ) -> None:
        super().__init__(num_blocks, block_size_tokens)
        # vLLM >= 0.24: a freed request's unhashed blocks go to the queue's head.
        self.free_unhashed_first = free_unhashed_first
        # Keyed block id -> requests referencing it (stale for unkeyed blocks).
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
        self.num_evictions = 0  # keys dropped that could still have been hit
        # Free blocks in eviction order, head first (vLLM's free block queue).
        self._queue = FreeQueue(range(num_blocks))
        self._loose: list[int] = []  # blocks allocated inline, not yet given to a request

    def _cold(self, request: Request) -> bool:
        """Whether ``request``, holding no blocks, is plain and surely hits nothing: no
        shareable prefix, and either computed tokens or its own first block uncached
        and no blocks waiting to be cached (``_catch_up``)."""
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
        # Plain and no hit: fresh blocks, popped with those owed (``_settle``), first.
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
        """As the plain pool's, but a request with shareable blocks still to fill
        allocates at once, so the blocks this step fills are cached in it."""
        if not request.num_blocks or request.request_id in self._filling:
            if not self.can_allocate(request, num_tokens):
                return False
            self.allocate(request, num_tokens)
            return True
        return super().try_grow(request, num_tokens)

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the shareable blocks ``num_tokens`` tokens fill, in the step that fills
        them (vLLM's ``allocate_slots``): a request admitted later in it hits them."""
        rid = request.request_id
        if rid not in self._filling:
            return
        self._settle()
        self._realise(request)
        self._register(request, min(num_tokens, request.num_tokens), own=False)
        if not self._still_filling(request):
            del self._filling[rid]

    def free(self, request: Request, num_unhashed_tokens: int = 0) -> None:
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
        # Own keys matter only to a request that may come back (preempted).
        unfinished = request.num_generated_tokens < request.num_output_tokens
        # The tokens vLLM hashed: the computed ones, less those it had no ids for.
        num_hashed_tokens = (
            min(request.num_computed_tokens, request.num_tokens) - num_unhashed_tokens
        )
        if unfinished or request.prefix_group is not None or request.block_hash_ids is not None:
            self._register(request, num_hashed_tokens, unfinished)
        del self._blocks[rid]
        num_keyed = self._num_hashed.pop(rid, 0)  # the leading blocks are the keyed ones
        queue = self._queue
        if self.free_unhashed_first:
            # Blocks past those vLLM hashed go to the head, deepest first.
            num_hashed = max(num_keyed, num_hashed_tokens // self.block_size_tokens)
            if num_hashed < len(blocks):
                unhashed = blocks[num_hashed:]
                del blocks[num_hashed:]
                unhashed.reverse()
                queue.extend_head(unhashed)
                self.num_free_blocks += len(unhashed)
        # Tail first (vLLM's free): the unkeyed tail in one slice, then the keyed.
        tail = blocks[num_keyed:] if num_keyed else blocks
        tail.reverse()
        queue.extend(tail)
        released = len(tail)
        if num_keyed:
            refs = self._refs
            for block in reversed(blocks[:num_keyed]):
                refs[block] -= 1
                if refs[block] == 0:
                    queue.append_keyed(block)
                    released += 1
        if self._filling:
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

    # -- the index: hits, caching full blocks, evicting keys -------------------------
    def _hits(self, request: Request) -> list[int]:
        """Block ids of the longest cached prefix of a request holding nothing, at most
        ``num_tokens - 1`` tokens (vLLM computes at least the last one)."""
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
        """Cache ``request``'s blocks that ``num_tokens`` tokens fill (vLLM's
        cache_blocks); past its shareable prefix only if ``own``."""
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
        """Cache the shareable blocks filled since their requests last allocated."""
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


# -- swap space ------------------------------------------------------------------------


class SwapSpace:
    """``capacity_bytes`` of CPU memory in KV blocks of ``bytes_per_block`` bytes."""

    def __init__(
        self, capacity_bytes: float, bytes_per_block: float, bandwidth_bytes_per_s: float
    ) -> None:
        if bytes_per_block <= 0 or bandwidth_bytes_per_s <= 0 or capacity_bytes < 0:
            raise ValueError("swap space: block bytes and bandwidth must be > 0, capacity >= 0")
        self.bytes_per_block = bytes_per_block
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.num_blocks = int(capacity_bytes // bytes_per_block)
        self.num_free_blocks = self.num_blocks
        # request_id -> blocks it holds in CPU memory.
        self.held: dict[int, int] = {}

    def transfer_s(self, num_blocks: int) -> float:
        """Seconds to copy ``num_blocks`` blocks one way over the host link."""
        return num_blocks * self.bytes_per_block / self.bandwidth_bytes_per_s

    def swap_out(self, request: Request, num_blocks: int) -> float | None:
        """Hold ``request``'s ``num_blocks`` blocks in CPU memory: the copy time (s), or
        ``None`` if they do not fit."""
        if num_blocks > self.num_free_blocks:
            return None
        self.num_free_blocks -= num_blocks
        self.held[request.request_id] = num_blocks
        return self.transfer_s(num_blocks)

    def swap_in(self, request: Request) -> float:
        """Release ``request``'s CPU copy as it is readmitted; the copy time (0 if none)."""
        num_blocks = self.held.pop(request.request_id, None)
        if num_blocks is None:
            return 0.0
        self.num_free_blocks += num_blocks
        return self.transfer_s(num_blocks)


# -- the cache's counters ---------------------------------------------------------------


def prefix_cache_summary(requests: RequestTable) -> dict[str, float | int]:
    """summary.json keys, as vLLM's PrefixCacheStats counts them: lookups, tokens
    looked up and found, and the hit rate over looked-up tokens (0 if none)."""
    columns = ("num_prefix_lookups", "num_prefix_query_tokens", "num_prefix_hit_tokens")
    # A table from a frame holds nullable counts as floats, NaN where missing.
    lookups, queries, hits = (int(np.nansum(requests[c])) for c in columns)
    return {
        "prefix_cache_requests": lookups,
        "prefix_cache_query_tokens": queries,
        "prefix_cache_hit_tokens": hits,
        "prefix_cache_hit_rate": hits / queries if queries else 0.0,
    }
