"""Continuous batching's settings (names as vLLM's flags) and their fallbacks.

Shared by every policy of the continuous-batching family (``continuous``,
``priority``, ``shortest_prompt_first``, ``least_attained_service``); the
policy itself is ``sim.engine.policies.continuous``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Limits of a policy built without a scenario (no hardware to look up): vLLM's
# defaults for a GPU under 70 GiB serving the OpenAI API. A scenario fills in
# its hardware's defaults instead (sim.engine.policies.vllm_defaults).
FALLBACK_MAX_NUM_SEQS = 256
FALLBACK_MAX_NUM_BATCHED_TOKENS = 2048


class ContinuousSettings(BaseModel):
    """Continuous batching's settings (names as vLLM's flags), shared by the
    policies built on it (``priority``, ``shortest_prompt_first``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int | None = Field(
        default=None, ge=1, description="running requests at most (None: vLLM's default)"
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="tokens computed per step at most (None: vLLM's default)"
    )
    chunked_prefill: bool = Field(default=True, description="cut prompts to fit the budget")
    long_prefill_token_threshold: int = Field(
        default=0,
        ge=0,
        description="0: off; else a request computes at most this many tokens a step",
    )
    max_num_partial_prefills: int = Field(
        default=1,
        ge=1,
        description="vLLM v1 supports only 1 (no limit on concurrent partial prefills)",
    )
    preemption: Literal["recompute", "swap"] = Field(
        default="recompute",
        description=(
            "swap: victims' KV goes to CPU memory (engine.swap_space_bytes), see sim.engine.swap"
        ),
    )

    @property
    def num_seqs_limit(self) -> int:
        """``max_num_seqs``, or the fallback when the scenario has not filled it in."""
        return FALLBACK_MAX_NUM_SEQS if self.max_num_seqs is None else self.max_num_seqs

    @property
    def batched_tokens_limit(self) -> int:
        """``max_num_batched_tokens``, or the fallback when not filled in."""
        tokens = self.max_num_batched_tokens
        return FALLBACK_MAX_NUM_BATCHED_TOKENS if tokens is None else tokens

    def step_token_bound(self, max_model_len_tokens: int) -> int:
        """Most tokens one step can compute (sizes the activation reserve)."""
        return self.batched_tokens_limit

    @field_validator("max_num_partial_prefills")
    @classmethod
    def _v1_has_no_concurrent_partial_prefill(cls, value: int) -> int:
        # vLLM v1 rejects any other value (EngineArgs._check_feature_supported:
        # "Concurrent Partial Prefill is not supported"); its V1 scheduler never
        # reads the field.
        if value != 1:
            raise ValueError(
                f"must be 1: vLLM v1 does not support concurrent partial prefill (got {value})"
            )
        return value
