"""The prefix cache's blocks: what identifies one (its key), and the free-block queue.

**Keys.** vLLM v1 hashes every full block chained on its parent's hash, so two
requests share block ``j`` only if all their tokens up to its end agree.
servesim requests carry no token ids; a key stands for that chain: inside the
shareable prefix ``("group", g, j)`` for prefix group ``g``, or ``("trace", h)``
with ``h`` a chain hash of the trace's ``block_hash_ids`` (``("trace", h, j)``
when a trace id covers ``block_hash_tokens`` other than the block size: ``h``
of the id holding block ``j``'s last token); elsewhere the request's own int key
``request_id << 32 | j``, which only it can hit again. Tuples and ints never
compare equal.

**The free-block queue** (``FreeQueue``), vLLM's ``FreeKVCacheBlockQueue``:
most blocks can never be hit, so they sit in one list read from a moving head
(a request's blocks pushed or popped in one slice). Only keyed blocks, which a
hit can take out of the middle, are tracked one by one (``_marks``); one taken
out leaves a stale entry that pops skip. Blocks put at the head
(``extend_head``, never keyed) wait in ``_front``, popped first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

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


# -- the free-block queue ---------------------------------------------------------

# Entries consumed from the head before the list is trimmed (amortised O(1)).
_TRIM_ENTRIES = 4096


class FreeQueue:
    """Free block ids in eviction order, head first; keyed blocks removable from the middle."""

    __slots__ = ("_base", "_entries", "_front", "_head", "_keyed_at", "_marks", "size")

    def __init__(self, blocks: Iterable[int]) -> None:
        self._entries: list[int] = list(blocks)
        self._head = 0  # index in _entries of the queue's head
        self._base = 0  # absolute position of _entries[0] (grows when trimmed)
        self._keyed_at: dict[int, int] = {}  # keyed free block -> its absolute position
        # Absolute positions, in queue order, of keyed entries not yet popped (stale
        # where ``_keyed_at`` no longer points there).
        self._marks: deque[int] = deque()
        self._front: list[int] = []  # unkeyed blocks put at the head, the next to pop last
        # Blocks in the queue, kept as they change (read on every allocation and free).
        self.size = len(self._entries)

    def extend(self, blocks: list[int]) -> None:
        """Append unkeyed blocks at the tail, in the order given."""
        self._entries += blocks
        self.size += len(blocks)

    def extend_head(self, blocks: list[int]) -> None:
        """Put unkeyed blocks at the head, the first given popped first."""
        self._front += reversed(blocks)
        self.size += len(blocks)

    def append_keyed(self, block: int) -> None:
        """Append a keyed block at the tail, remembering where it is."""
        at = self._base + len(self._entries)
        self._keyed_at[block] = at
        self._marks.append(at)
        self._entries.append(block)
        self.size += 1

    def remove(self, block: int) -> None:
        """Take keyed ``block`` out of the queue (a hit touched it)."""
        del self._keyed_at[block]  # its entry is stale now
        self.size -= 1

    def pop(self, count: int) -> tuple[list[int], list[int]]:
        """Take ``count`` blocks from the head: (all of them, the keyed ones among them)."""
        front = self._front
        if not front:
            return self._pop_entries(count)
        take = min(count, len(front))
        keep = len(front) - take
        popped = front[keep:][::-1]
        del front[keep:]
        self.size -= take
        if take == count:
            return popped, []
        rest, keyed = self._pop_entries(count - take)
        return popped + rest, keyed

    def _pop_entries(self, count: int) -> tuple[list[int], list[int]]:
        """``pop`` from the entries (nothing at the head's front)."""
        entries, head, marks = self._entries, self._head, self._marks
        keyed: list[int] = []
        base = self._base
        if not marks or marks[0] >= base + head + count:  # no keyed entry among them
            popped = entries[head : head + count]
            head += count
        else:
            popped = []
            keyed_at = self._keyed_at
            while len(popped) < count and head < len(entries):
                # The plain entries before the next mark, in one slice.
                plain = (marks[0] if marks else base + len(entries)) - base - head
                take = min(count - len(popped), plain)
                if take > 0:
                    popped += entries[head : head + take]
                    head += take
                    continue
                block, at = entries[head], marks.popleft()
                head += 1
                if keyed_at.get(block) != at:
                    continue  # stale: a hit took the block out
                del keyed_at[block]
                keyed.append(block)
                popped.append(block)
        if len(popped) != count:
            raise RuntimeError(f"popped {len(popped)} of {count} blocks: the free queue ran out")
        if head > _TRIM_ENTRIES and 2 * head > len(entries):
            del entries[:head]
            self._base += head
            head = 0
        self._head = head
        self.size -= count
        return popped, keyed
