"""Swap space: CPU memory that holds the KV cache of requests preempted by swap.

Preemption by swap (vLLM's ``preemption_mode=swap``) copies a victim's KV
blocks to CPU memory instead of dropping them: the request keeps its
``num_computed_tokens`` and, when readmitted, copies them back instead of
recomputing its prompt and output. Each copy takes

    seconds = num_blocks * bytes_per_block / bandwidth_bytes_per_s

over the host link (PCIe), and is added to the step that does it (the engine
waits for the copy before it can reuse or read the blocks). Only the blocks
holding computed tokens move. When the swap space is full the victim is
preempted by recompute instead (vLLM v0 would abort the request).
"""

from __future__ import annotations

from sim.engine.request import Request


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
        self.num_swap_outs = 0
        self.num_swap_ins = 0
        self.swap_time_s = 0.0

    def transfer_s(self, num_blocks: int) -> float:
        """Seconds to copy ``num_blocks`` blocks one way over the host link."""
        return num_blocks * self.bytes_per_block / self.bandwidth_bytes_per_s

    def swap_out(self, request: Request, num_blocks: int) -> float | None:
        """Hold ``request``'s ``num_blocks`` KV blocks in CPU memory; ``None`` if they do not fit.

        Returns the copy time in seconds. The caller frees the GPU blocks and
        requeues the request (``CoreView.swap_out``) when this succeeds.
        """
        if num_blocks > self.num_free_blocks:
            return None
        self.num_free_blocks -= num_blocks
        self.held[request.request_id] = num_blocks
        self.num_swap_outs += 1
        seconds = self.transfer_s(num_blocks)
        self.swap_time_s += seconds
        return seconds

    def swap_in(self, request: Request) -> float:
        """Release ``request``'s CPU copy as it is readmitted; the copy time (0 if none)."""
        num_blocks = self.held.pop(request.request_id, None)
        if num_blocks is None:
            return 0.0
        self.num_free_blocks += num_blocks
        self.num_swap_ins += 1
        seconds = self.transfer_s(num_blocks)
        self.swap_time_s += seconds
        return seconds
