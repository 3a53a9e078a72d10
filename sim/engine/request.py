"""A request: what the user asked for, and how far the engine has got with it.

Token counters, as vLLM v1: a step advances ``num_computed_tokens``; when it
catches up with ``num_tokens`` (prompt plus generated) the step samples one
more token. Prefill, chunks, decode and recompute are all this rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Request:
    """One request's spec (first five fields, never mutated) and live state; times
    in seconds, ``None`` until the event happens."""

    request_id: int
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    priority: int = 0
    ready_s: float | None = None
    num_computed_tokens: int = 0
    num_generated_tokens: int = 0
    num_blocks: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    last_token_s: float | None = None
    last_token_step: int | None = None
    num_preemptions: int = 0
    num_swaps: int = 0  # preemptions by swap to CPU memory (included in num_preemptions)
    rejection_reason: str | None = None
    replica: int = 0
    # Prefix caching's spec (sim.engine.kv_blocks): a prefix group sharing
    # ``num_shared_prefix_tokens``, or one hash id per ``block_hash_tokens`` tokens
    # (None: the engine's block size).
    prefix_group: int | None = None
    num_shared_prefix_tokens: int = 0
    block_hash_ids: tuple[int, ...] | None = None
    block_hash_tokens: int | None = None
    # Prompt tokens found in the prefix cache at first admission (not computed).
    num_cached_tokens: int = 0
    # vLLM's PrefixCacheStats over every admission that looked the cache up.
    num_prefix_lookups: int = 0
    num_prefix_query_tokens: int = 0
    num_prefix_hit_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what the KV cache must eventually hold."""
        return self.num_prompt_tokens + self.num_generated_tokens

    @property
    def num_wanted_tokens(self) -> int:
        """Tokens still to compute before the next output token can be sampled."""
        return self.num_prompt_tokens + self.num_generated_tokens - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        """True when one computed token yields the next output token."""
        return self.num_generated_tokens > 0 and self.num_wanted_tokens == 1

    @property
    def max_num_tokens(self) -> int:
        """Largest KV footprint the request can reach (its last token is never computed)."""
        return self.num_prompt_tokens + self.num_output_tokens - 1
