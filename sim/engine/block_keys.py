"""Block identity for prefix caching: what stands for vLLM's chained block hash.

vLLM v1 hashes every full block of a request's tokens (prompt and output)
chained on its parent block's hash (``hash_block_tokens``), so two requests
share block ``j`` only if all their tokens up to the end of block ``j`` agree.
servesim requests carry no token ids; a block's key stands for that chain:

* inside the declared shareable prefix, ``("group", g, j)`` for a request of
  prefix group ``g`` (its first ``num_shared_prefix_tokens`` tokens are the
  group's), or ``("trace", h)`` with ``h`` a chain hash of the Mooncake-style
  ``block_hash_ids`` (equal ids after equal predecessors, equal blocks). A
  trace whose ids each stand for ``block_hash_tokens`` tokens (Mooncake: 512)
  other than the engine's block size keys engine block ``j`` by the chain up
  to the trace block holding its last token, and ``j``: ``("trace", h, j)``;
* elsewhere the request's own key, the int ``request_id << 32 | j``, which only
  the request itself can hit again (after a recompute preemption).

Tuples and ints never compare equal, so the kinds cannot collide.
"""

from __future__ import annotations

from collections.abc import Hashable

from sim.engine.request import Request

Key = Hashable
OWN_SHIFT = 32  # own key = request_id << OWN_SHIFT | block index
_TRACE_ROOT = 0x7ACE_1D5  # root of the trace key chains


def own_key_base(request: Request) -> int:
    """``request``'s own key of block ``j`` is this plus ``j``."""
    return request.request_id << OWN_SHIFT


class BlockKeys:
    """Keys of requests' blocks of ``block_size_tokens`` tokens (group chains memoised)."""

    __slots__ = ("_group_keys", "block_size_tokens")

    def __init__(self, block_size_tokens: int) -> None:
        self.block_size_tokens = block_size_tokens
        self._group_keys: dict[int, list[Key]] = {}  # prefix group -> its block keys

    def num_shareable(self, request: Request) -> int:
        """Leading whole blocks of ``request`` keyed by content shared across requests."""
        size = self.block_size_tokens
        if request.block_hash_ids is not None:
            per_id = request.block_hash_tokens or size
            return min(len(request.block_hash_ids) * per_id, request.num_prompt_tokens) // size
        if request.prefix_group is None:
            return 0
        return min(request.num_shared_prefix_tokens, request.num_prompt_tokens) // size

    def keys(self, request: Request, stop: int, start: int = 0) -> list[Key]:
        """Keys of ``request``'s blocks ``start`` .. ``stop - 1`` (O(blocks))."""
        shared = self.num_shareable(request)
        keys: list[Key] = []
        if start < shared:
            end = min(stop, shared)
            if request.block_hash_ids is not None:
                keys = self._trace_keys(request, start, end)
            else:
                group = request.prefix_group
                assert group is not None
                chain = self._group_keys.setdefault(group, [])
                chain.extend(("group", group, j) for j in range(len(chain), end))
                keys = chain[start:end]
        base = own_key_base(request)
        keys.extend(range(base + max(start, shared), base + stop))
        return keys

    def _trace_keys(self, request: Request, start: int, end: int) -> list[Key]:
        """Keys of shareable blocks ``start`` .. ``end - 1`` from the trace's hash ids."""
        assert request.block_hash_ids is not None
        size = self.block_size_tokens
        per_id = request.block_hash_tokens or size
        # Trace block of engine block j's last token: ((j + 1) * size - 1) // per_id.
        num_ids = ((end * size - 1) // per_id + 1) if end else 0
        chain: list[int] = []
        parent = _TRACE_ROOT
        for hash_id in request.block_hash_ids[:num_ids]:
            parent = hash((parent, hash_id))
            chain.append(parent)
        if per_id == size:
            return [("trace", chain[j]) for j in range(start, end)]
        return [("trace", chain[((j + 1) * size - 1) // per_id], j) for j in range(start, end)]
