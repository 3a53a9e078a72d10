"""Prefix caching: KV blocks named by the hash of their token prefix, shared, LRU-evicted.

A request describes its shareable prompt prefix in one of two ways:

* ``prefix_group`` and ``num_shared_prefix_tokens``: every request of a group
  starts with the same ``num_shared_prefix_tokens`` tokens (a system prompt);
* ``block_hash_ids``: one id per block of the prompt, Mooncake-trace style,
  equal ids meaning equal content given equal predecessors.

Block ``j`` of a request is identified by a chain hash, ``key_j =
hash((key_{j-1}, x_j))`` with ``x_j`` the block's index (groups) or its hash id
(traces), so that a block is only ever shared together with everything before
it, as in vLLM. Only whole blocks of the shareable prefix are cached.

:class:`PrefixCachingPool` keeps :class:`sim.engine.kv_pool.BlockPool`'s interface
and counts. A request's first ``len(held)`` blocks are cached blocks it
references (shared, reference-counted); the rest are private. Cached blocks no
request references stay cached but count as free (they are evictable) and sit
in an LRU list; when an allocation needs them, the least recently used go
first. Eviction is lazy: ``num_free_blocks`` may be decremented anywhere (the
core's skip-ahead path allocates inline), and the pool realises the evictions
that implies (``_settle``) before it next reads or reorders the LRU list,
which evicts exactly the blocks eager eviction would have.

Admission (continuous family): ``num_cached_tokens`` gives the longest cached
prefix of a fresh request in whole blocks, never the whole prompt (at least one
token is computed, as vLLM); ``can_allocate`` / ``allocate`` on a request with
no blocks reference those blocks (charging the evictable ones to the free
count). Newly computed full blocks of the shareable prefix are registered when
they are allocated for a step (vLLM v1 caches at scheduling time; the KV is
written before attention reads it in the same forward pass) and when the
request frees its blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import pandas as pd

from sim.engine.kv_pool import BlockPool
from sim.engine.records import completed_mask
from sim.engine.request import Request

# Roots of the two key chains, so group keys and trace keys never coincide by design.
_GROUP_ROOT = 0x5EED_6A0B
_TRACE_ROOT = 0x7ACE_1D5


class PrefixCachingPool(BlockPool):
    """A :class:`BlockPool` whose shareable prefix blocks are cached and shared."""

    __slots__ = (
        "_group_keys",
        "_held",
        "_lru",
        "_refs",
        "num_evictions",
    )

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        super().__init__(num_blocks, block_size_tokens)
        self._refs: dict[int, int] = {}  # cached block key -> requests referencing it
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced keys, oldest first
        self._held: dict[int, list[int]] = {}  # request_id -> keys of its first blocks
        self._group_keys: dict[int, list[int]] = {}  # prefix group -> chain keys (memo)
        self.num_evictions = 0

    # -- keys -------------------------------------------------------------------
    def block_keys(self, request: Request) -> list[int]:
        """Chain keys of the request's shareable whole blocks, first block first."""
        size = self.block_size_tokens
        if request.block_hash_ids is not None:
            keys, parent = [], _TRACE_ROOT
            for hash_id in request.block_hash_ids[: request.num_prompt_tokens // size]:
                parent = hash((parent, hash_id))
                keys.append(parent)
            return keys
        if request.prefix_group is None:
            return []
        count = min(request.num_shared_prefix_tokens, request.num_prompt_tokens) // size
        chain = self._group_keys.get(request.prefix_group)
        if chain is None:
            chain = self._group_keys[request.prefix_group] = []
        parent = chain[-1] if chain else hash((_GROUP_ROOT, request.prefix_group))
        while len(chain) < count:
            parent = hash((parent, len(chain)))
            chain.append(parent)
        return chain[:count]

    def _hits(self, request: Request) -> list[int]:
        """Keys of the longest cached prefix of a fresh request, whole prompt excluded."""
        if request.num_blocks or request.num_computed_tokens:
            return []
        self._settle()
        limit = (request.num_prompt_tokens - 1) // self.block_size_tokens
        hits = []
        refs = self._refs
        for key in self.block_keys(request)[:limit]:
            if key not in refs:
                break
            hits.append(key)
        return hits

    # -- the BlockPool interface ------------------------------------------------
    def num_cached_tokens(self, request: Request) -> int:
        """Prompt tokens of ``request`` already in the cache (whole blocks, < prompt)."""
        return len(self._hits(request)) * self.block_size_tokens

    def num_missing_blocks(self, request: Request, num_tokens: int) -> int:
        if request.num_blocks:
            return max(0, self.blocks_for(num_tokens) - request.num_blocks)
        hits = self._hits(request)
        refs = self._refs
        # Hit blocks nobody references leave the free (evictable) count when referenced.
        revived = sum(1 for key in hits if refs[key] == 0)
        return max(0, self.blocks_for(num_tokens) - len(hits)) + revived

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        return self.num_missing_blocks(request, num_tokens) <= self.num_free_blocks

    def allocate(self, request: Request, num_tokens: int) -> None:
        missing = self._missing_or_raise(request, num_tokens)
        if not request.num_blocks:
            hits = self._hits(request)
            refs, lru = self._refs, self._lru
            for key in hits:
                if refs[key] == 0:
                    del lru[key]
                refs[key] += 1
            self._held[request.request_id] = hits
            request.num_blocks = len(hits)
        self.num_free_blocks -= missing
        request.num_blocks = max(request.num_blocks, self.blocks_for(num_tokens))
        self._register(request, num_tokens)

    def free(self, request: Request) -> None:
        self._register(request, request.num_computed_tokens)
        self._settle()
        held = self._held.pop(request.request_id, [])
        refs, lru = self._refs, self._lru
        released = 0
        # Deepest blocks first into the LRU list, so they are evicted first (as vLLM).
        for key in reversed(held):
            refs[key] -= 1
            if refs[key] == 0:
                lru[key] = None
                released += 1
        self.num_free_blocks += request.num_blocks - len(held) + released
        request.num_blocks = 0

    # -- cache maintenance ------------------------------------------------------
    def _register(self, request: Request, num_tokens: int) -> None:
        """Cache the request's shareable blocks that ``num_tokens`` tokens fill."""
        num_full = min(num_tokens // self.block_size_tokens, request.num_blocks)
        held = self._held.get(request.request_id)
        if held is None or len(held) >= num_full:
            return
        keys = self.block_keys(request)
        refs = self._refs
        self._settle()
        for j in range(len(held), min(num_full, len(keys))):
            key = keys[j]
            if key in refs:
                # Computed concurrently by another request: this copy stays private.
                return
            refs[key] = 1  # the request's private block j becomes cached block j
            held.append(key)

    def _settle(self) -> None:
        """Evict LRU blocks that allocations since the last call have taken."""
        lru, refs = self._lru, self._refs
        while len(lru) > self.num_free_blocks:
            key, _ = lru.popitem(last=False)
            del refs[key]
            self.num_evictions += 1

    # -- inspection (tests, metrics) ----------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently in the cache, referenced or not."""
        self._settle()
        return len(self._refs)

    @property
    def num_evictable_blocks(self) -> int:
        """Cached blocks no request references (counted as free)."""
        self._settle()
        return len(self._lru)

    def ref_count(self, key: int) -> int | None:
        """Requests referencing cached block ``key``; ``None`` if not cached."""
        self._settle()
        return self._refs.get(key)

    def held_keys(self, request: Request) -> list[int]:
        """Keys of the cached blocks ``request`` references (its first blocks)."""
        return list(self._held.get(request.request_id, []))

    def lru_keys(self) -> list[int]:
        """Evictable keys, next to be evicted first."""
        self._settle()
        return list(self._lru)


def prefix_describer(work: object) -> Callable[[Request], None] | None:
    """A function filling in a request's prefix fields from an open-loop workload.

    ``work`` may carry ``prefix_group`` with ``num_shared_prefix_tokens``
    (arrays indexed by request id) and/or ``block_hash_ids`` (a sequence of
    tuples); returns ``None`` when it carries neither (the fast path).
    """
    groups = getattr(work, "prefix_group", None)
    shared = getattr(work, "num_shared_prefix_tokens", None)
    hash_ids = getattr(work, "block_hash_ids", None)
    if groups is None and hash_ids is None:
        return None
    group_list: list[int] | None = None if groups is None else groups.tolist()
    shared_list: list[int] | None = None if shared is None else shared.tolist()

    def describe(request: Request) -> None:
        i = request.request_id
        if group_list is not None and shared_list is not None:
            request.prefix_group = group_list[i]
            request.num_shared_prefix_tokens = shared_list[i]
        if hash_ids is not None:
            request.block_hash_ids = hash_ids[i]

    return describe


def prefix_cache_summary(requests: pd.DataFrame) -> dict[str, float | int]:
    """summary.json keys: prompt tokens of completed requests found in the cache
    at first admission, and their share of all their prompt tokens (0 when off)."""
    done = completed_mask(requests)
    prompt = int(requests["num_prompt_tokens"].to_numpy()[done].sum())
    cached = int(requests["num_cached_tokens"].to_numpy()[done].sum())
    return {
        "prefix_cache_hit_tokens": cached,
        "prefix_cache_hit_rate": cached / prompt if prompt else 0.0,
    }
