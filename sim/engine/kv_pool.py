"""The paged KV cache: a pool of fixed-size blocks, counted, not addressed.

Only counts matter for timing and admission, so the pool tracks how many
blocks each request holds rather than which ones (the nano-vllm interface:
``can_allocate / allocate / can_append / free``). Prefix sharing, which needs
block identities, can replace this class without touching the policies.
"""

from __future__ import annotations

from sim.engine.request import Request


class BlockPool:
    """``num_blocks`` blocks of ``block_size_tokens`` tokens each."""

    __slots__ = ("block_size_tokens", "num_blocks", "num_free_blocks")
    # Whether admissions look prefixes up (vLLM's enable_prefix_caching): the
    # prefix-caching pool says yes, and only then are lookups counted.
    caches_prefixes = False

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("a KV pool needs at least one block of at least one token")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens (ceiling division)."""
        return -(-num_tokens // self.block_size_tokens)

    def num_cached_tokens(self, request: Request) -> int:
        """Tokens of ``request`` already cached (not to compute): none without prefix
        caching (``sim.engine.prefix_cache.PrefixCachingPool`` overrides this)."""
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
        """Grow a running request's blocks to hold ``num_tokens`` tokens if the pool
        has them; ``False`` (nothing changed) if not. The hot path of a decode
        crossing into a new block: counts only, no lookup."""
        short = -(-num_tokens // self.block_size_tokens) - request.num_blocks
        if short > self.num_free_blocks:
            return False
        if short > 0:
            self.num_free_blocks -= short
            request.num_blocks += short
        return True

    def grows_by_count(self, request: Request) -> bool:
        """Whether ``try_grow`` grows ``request`` by counts alone, and
        ``cache_full_blocks`` does nothing for it (a request advanced in aggregate must)."""
        return True

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Cache the blocks ``num_tokens`` tokens fill, when a step fills one without a
        new allocation (vLLM's ``allocate_slots`` caches at once): nothing to cache here
        (``sim.engine.prefix_cache.PrefixCachingPool`` overrides this)."""

    def _missing_or_raise(self, request: Request, num_tokens: int) -> int:
        """``num_missing_blocks``; a RuntimeError if the pool cannot supply them."""
        missing = self.num_missing_blocks(request, num_tokens)
        if missing > self.num_free_blocks:
            raise RuntimeError(
                f"KV pool overdrawn: request {request.request_id} needs {missing} blocks, "
                f"{self.num_free_blocks} free"
            )
        return missing

    def free(self, request: Request) -> None:
        """Return all of ``request``'s blocks to the pool."""
        self.num_free_blocks += request.num_blocks
        request.num_blocks = 0
