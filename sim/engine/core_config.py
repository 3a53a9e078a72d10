"""What one engine core is built from: its policy, its KV pool and its length limit.

Both executors build their cores from one ``CoreConfig``
(``sim.api.build.core_config_for``), so a measured run and its prediction
cannot run different policies, pools or limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore, Scheduler


@dataclass(frozen=True)
class CoreConfig:
    """A policy factory, the KV pool's shape, and the longest request allowed."""

    make_policy: Callable[[], Scheduler]
    num_kv_blocks: int
    block_size_tokens: int
    max_model_len_tokens: int
    enable_prefix_caching: bool = False
    free_unhashed_first: bool = False  # vLLM >= 0.24's free-queue order (PrefixCachingPool)

    def new_block_pool(self) -> BlockPool:
        """An empty KV pool: the prefix-caching pool when enabled, else the plain one."""
        if not self.enable_prefix_caching:
            return BlockPool(self.num_kv_blocks, self.block_size_tokens)
        return PrefixCachingPool(
            self.num_kv_blocks, self.block_size_tokens, self.free_unhashed_first
        )

    def new_core(
        self, replica: int = 0, on_done: Callable[[Request], None] | None = None
    ) -> EngineCore:
        """A fresh engine core: a new policy and an empty pool."""
        return EngineCore(
            self.make_policy(),
            self.new_block_pool(),
            self.max_model_len_tokens,
            replica=replica,
            on_done=on_done,
        )
