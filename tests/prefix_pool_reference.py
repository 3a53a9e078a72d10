"""A prefix-caching KV pool written from vLLM v1's rules alone (test reference).

``sim.engine.kv_cache.PrefixCachingPool`` is fast: a bulk free queue, reference
counts for keyed blocks only, lazy key registration, a short path for plain
requests, memoised hits, and block keys from ``sim.engine.kv_blocks``. This pool
is slow and plain, and imports nothing from ``sim`` (the request is only read):
its own block keys, its own counting, one ``OrderedDict`` entry and one
reference count per block. ``tests/test_prefix_cache_reference.py`` plays the
same actions on both and requires the same block ids, free queue, keys, counts
and evictions after each; a bug in the fast pool's keys, queue or counting
(shared code would hide it in both) shows there.

The rules, from the docs of ``sim.engine.kv_cache`` and ``sim.engine.kv_blocks``
(vLLM's ``KVCacheManager`` / ``BlockPool`` / ``FreeKVCacheBlockQueue``):

* Block ``j`` of a request is keyed by content: inside its shareable prefix by
  ``("group", g, j)`` (prefix group ``g``) or by a chain hash of its trace's
  ``block_hash_ids``; past it by the request's own key ``request_id << 32 | j``.
* Free blocks wait in one queue; allocation takes from the head (dropping the
  taken block's key: an eviction), a finished or preempted request's blocks go to
  the tail deepest first, and a hit on a free cached block takes it out. As vLLM
  0.24 does (``free_unhashed_first``), the blocks vLLM has not hashed go to the head
  instead, deepest first: vLLM hashes a block once it is full of computed tokens
  (and any keyed block), so those are the unkeyed blocks past
  ``num_computed_tokens // block_size``.
* A lookup (a request holding nothing and having computed nothing) finds the
  longest run of cached keys from block 0, at most ``num_tokens - 1`` tokens in
  whole blocks. Shareable blocks are keyed in the step that fills them; own keys
  only when the request frees its blocks unfinished (only it can hit them).
* Growth the engine makes by counts alone (``num_free_blocks`` down,
  ``request.num_blocks`` up) took blocks from the head at once: they are taken
  from the queue when the pool is next used (nothing else moved the queue in
  between), and a request is given, at its next use, the last of them taken.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.engine.request import Request

OWN_KEY_BITS = 32  # own key of block j: request_id << 32 | j
TRACE_CHAIN_ROOT = 0x7ACE_1D5  # the documented root of a trace's hash chain


def shareable_blocks(request: Request, block_size: int) -> int:
    """Leading whole blocks of ``request`` whose content other requests may share."""
    if request.block_hash_ids is not None:
        tokens_per_id = request.block_hash_tokens or block_size
        shared_tokens = min(len(request.block_hash_ids) * tokens_per_id, request.num_prompt_tokens)
        return shared_tokens // block_size
    if request.prefix_group is None:
        return 0
    return min(request.num_shared_prefix_tokens, request.num_prompt_tokens) // block_size


def block_key(request: Request, j: int, block_size: int) -> Hashable:
    """The key of ``request``'s block ``j`` (see the module docstring)."""
    if j >= shareable_blocks(request, block_size):
        return (request.request_id << OWN_KEY_BITS) | j
    if request.block_hash_ids is None:
        return ("group", request.prefix_group, j)
    tokens_per_id = request.block_hash_tokens or block_size
    # The trace block holding this engine block's last token, and the chain up to it.
    last_id = ((j + 1) * block_size - 1) // tokens_per_id
    chain = TRACE_CHAIN_ROOT
    for hash_id in request.block_hash_ids[: last_id + 1]:
        chain = hash((chain, hash_id))
    return ("trace", chain) if tokens_per_id == block_size else ("trace", chain, j)


class ReferencePrefixPool:
    """vLLM v1's prefix-caching block pool, one block at a time (see the module docstring)."""

    caches_prefixes = True

    def __init__(
        self, num_blocks: int, block_size_tokens: int, free_unhashed_first: bool = False
    ) -> None:
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("a KV pool needs at least one block of at least one token")
        self.free_unhashed_first = free_unhashed_first
        self.num_blocks = num_blocks
        self.block_size_tokens = block_size_tokens
        self.num_free_blocks = num_blocks  # the engine also changes it (growth by counts)
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._refs = [0] * num_blocks  # block -> requests holding it (growth by counts too)
        self._key_of: list[Hashable | None] = [None] * num_blocks
        self._cached: dict[Hashable, int] = {}  # key -> the block a hit takes
        self._copies: dict[Hashable, list[int]] = {}  # key -> later blocks computed alike
        self._blocks: dict[int, list[int]] = {}  # request id -> its blocks, first first
        self._num_hashed: dict[int, int] = {}  # request id -> its leading keyed blocks
        self._filling: dict[int, Request] = {}  # requests with shareable blocks to key
        self._loose: list[int] = []  # taken by growth by counts, not yet given out
        self.num_evictions = 0

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks to hold ``num_tokens`` tokens."""
        size = self.block_size_tokens
        return (num_tokens + size - 1) // size

    def _shareable(self, request: Request) -> int:
        return shareable_blocks(request, self.block_size_tokens)

    # -- growth by counts ---------------------------------------------------------------
    def _settle(self) -> None:
        """Take from the head the blocks growth by counts used since the last call."""
        owed = len(self._queue) - self.num_free_blocks
        if owed > 0:
            self._loose.extend(self._take(owed))

    def _realise(self, request: Request) -> None:
        """Give ``request`` the blocks it grew by counts: the last ones taken."""
        blocks = self._blocks.setdefault(request.request_id, [])
        owed = request.num_blocks - len(blocks)
        for _ in range(max(owed, 0)):
            blocks.append(self._loose.pop(len(self._loose) - owed))
            owed -= 1

    # -- the queue ----------------------------------------------------------------------
    def _take(self, count: int) -> list[int]:
        """``count`` blocks from the queue head, their keys dropped."""
        taken = []
        for _ in range(count):
            if not self._queue:
                raise RuntimeError("the free queue ran out")
            block, _ = self._queue.popitem(last=False)
            self._refs[block] = 1
            if self._key_of[block] is not None:
                self._drop_key(block)
            taken.append(block)
        return taken

    def _drop_key(self, block: int) -> None:
        key = self._key_of[block]
        self._key_of[block] = None
        self.num_evictions += 1
        copies = self._copies.get(key, [])
        if self._cached[key] == block:
            if copies:
                self._cached[key] = copies.pop(0)
            else:
                del self._cached[key]
        else:
            copies.remove(block)
        if key in self._copies and not copies:
            del self._copies[key]

    # -- keys -----------------------------------------------------------------------------
    def block_keys(self, request: Request, stop: int, start: int = 0) -> list[Hashable]:
        """Keys of ``request``'s blocks ``start`` .. ``stop - 1``."""
        return [block_key(request, j, self.block_size_tokens) for j in range(start, stop)]

    def _key_blocks(self, request: Request, num_tokens: int, own: bool) -> None:
        """Key ``request``'s blocks that ``num_tokens`` tokens fill (shareable ones only
        unless ``own``)."""
        rid = request.request_id
        start = self._num_hashed.get(rid, 0)
        stop = num_tokens // self.block_size_tokens
        if not own:
            stop = min(stop, self._shareable(request))
        blocks = self._blocks[rid]
        for j in range(start, stop):
            key, block = block_key(request, j, self.block_size_tokens), blocks[j]
            self._key_of[block] = key
            first = self._cached.setdefault(key, block)
            if first != block:  # the same content computed twice at once: not merged
                self._copies.setdefault(key, []).append(block)
        if stop > start:
            self._num_hashed[rid] = stop

    def _catch_up(self) -> None:
        """Key the shareable blocks filled by steps that did not call the pool."""
        for rid, request in list(self._filling.items()):
            self._key_blocks(request, min(request.num_computed_tokens, request.num_tokens), False)
            if self._num_hashed.get(rid, 0) >= self._shareable(request):
                del self._filling[rid]

    # -- lookups ------------------------------------------------------------------------
    def _hits(self, request: Request) -> list[int]:
        if request.num_blocks or request.num_computed_tokens:
            return []
        self._settle()
        self._catch_up()
        hits = []
        for j in range((request.num_tokens - 1) // self.block_size_tokens):
            block = self._cached.get(block_key(request, j, self.block_size_tokens))
            if block is None:
                break
            hits.append(block)
        return hits

    def num_cached_tokens(self, request: Request) -> int:
        """Tokens of ``request`` already in the cache (whole blocks, < its tokens)."""
        return len(self._hits(request)) * self.block_size_tokens

    def num_missing_blocks(self, request: Request, num_tokens: int) -> int:
        """Free blocks ``request`` would use to hold ``num_tokens`` tokens."""
        if request.num_blocks:
            return max(0, self.blocks_for(num_tokens) - request.num_blocks)
        hits = self._hits(request)
        revived = len([block for block in hits if self._refs[block] == 0])
        return max(0, self.blocks_for(num_tokens) - len(hits)) + revived

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        return self.num_missing_blocks(request, num_tokens) <= self.num_free_blocks

    # -- allocation and release -----------------------------------------------------------
    def allocate(self, request: Request, num_tokens: int) -> None:
        """Grow ``request`` to hold ``num_tokens`` tokens, its cached prefix first."""
        if not self.can_allocate(request, num_tokens):
            raise RuntimeError(f"KV pool overdrawn: request {request.request_id}")
        self._settle()
        rid = request.request_id
        if request.num_blocks == 0:
            hits = self._hits(request)
            for block in hits:
                if self._refs[block] == 0:  # a free cached block leaves the queue
                    del self._queue[block]
                    self.num_free_blocks -= 1
                self._refs[block] += 1
            self._blocks[rid] = list(hits)
            self._num_hashed[rid] = len(hits)
            request.num_blocks = len(hits)
        else:
            self._realise(request)
        blocks = self._blocks[rid]
        new = self.blocks_for(num_tokens) - len(blocks)
        if new > 0:
            blocks.extend(self._take(new))
            self.num_free_blocks -= new
            request.num_blocks = len(blocks)
        self._key_blocks(request, min(num_tokens, request.num_tokens), own=False)
        if self._num_hashed.get(rid, 0) < self._shareable(request):
            self._filling[rid] = request

    def try_grow(self, request: Request, num_tokens: int) -> bool:
        """Grow a running request if the pool can; ``False`` (nothing changed) if not."""
        if not self.can_allocate(request, num_tokens):
            return False
        self.allocate(request, num_tokens)
        return True

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Key the shareable blocks ``num_tokens`` tokens fill, in the step that fills them."""
        rid = request.request_id
        if rid not in self._filling:
            return
        self._settle()
        self._realise(request)
        self._key_blocks(request, min(num_tokens, request.num_tokens), own=False)
        if self._num_hashed.get(rid, 0) >= self._shareable(request):
            del self._filling[rid]

    def free(self, request: Request) -> None:
        """Release ``request``'s blocks, deepest first; unfinished, it keys its own."""
        self._settle()
        rid = request.request_id
        if rid not in self._blocks:
            request.num_blocks = 0
            return
        self._realise(request)
        unfinished = request.num_generated_tokens < request.num_output_tokens
        computed = min(request.num_computed_tokens, request.num_tokens)
        self._key_blocks(request, computed, own=unfinished)
        released = 0
        to_head = []  # deepest first
        blocks = self._blocks.pop(rid)
        for j in reversed(range(len(blocks))):
            block = blocks[j]
            self._refs[block] -= 1
            if self._refs[block] == 0:
                hashed = self._key_of[block] is not None or j < computed // self.block_size_tokens
                if self.free_unhashed_first and not hashed:
                    to_head.append(block)
                else:
                    self._queue[block] = None
                released += 1
        for block in reversed(to_head):  # the deepest ends at the very head
            self._queue[block] = None
            self._queue.move_to_end(block, last=False)
        self._num_hashed.pop(rid, None)
        self._filling.pop(rid, None)
        self.num_free_blocks += released
        request.num_blocks = 0

    # -- inspection (tests/pool_state.py) ------------------------------------------------
    @property
    def num_evictable_blocks(self) -> int:
        """Cached blocks in the free queue."""
        self._settle()
        return len([block for block in self._queue if self._key_of[block] is not None])

    def free_queue(self) -> list[int]:
        """Free blocks, next to be taken first."""
        self._settle()
        return list(self._queue)
