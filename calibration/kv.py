"""Preallocated KV cache: one contiguous slot per sequence, every layer.

Layout per layer is ``[num_slots, num_kv_heads, max_len_tokens, head_dim]`` so
that a prefill chunk reads its slot's prefix as a view (no copy) and a decode
batch gathers its slots with one ``index_select``. The cache lives in one flat
buffer per K and V; ``reshape`` re-views it as another ``(num_slots,
max_len_tokens)`` pair without reallocating, which lets a profiler sweep batch
sizes and context lengths inside one memory budget.

Per-slot lengths (tokens already cached) are a host-side numpy array: the
engine knows them without a device round trip, and positions of new tokens
follow from them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from sim.hardware.specs import ModelSpec

IntArray = npt.NDArray[np.int64]


class KVCache:
    """K and V tensors for every layer, sliced into fixed-size sequence slots.

    ``lengths[slot]`` counts tokens already written for that slot. Writing
    (``write``) puts new keys and values at explicit (slot, position) pairs;
    advancing ``lengths`` is the caller's job once a step has finished.
    """

    def __init__(
        self,
        spec: ModelSpec,
        num_slots: int,
        max_len_tokens: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> None:
        if num_slots <= 0 or max_len_tokens <= 0:
            raise ValueError("num_slots and max_len_tokens must be positive")
        self.num_layers = spec.num_layers
        self.num_kv_heads = spec.num_kv_heads
        self.head_dim = spec.head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        self.capacity_tokens = num_slots * max_len_tokens
        shape = (self.num_layers, self.capacity_tokens * self.num_kv_heads * self.head_dim)
        # Random, never zeros: timings on zero data can be optimistic, and
        # unwritten positions must not look like real keys in tests either.
        self._k_flat = torch.empty(shape, dtype=dtype, device=self.device)
        self._v_flat = torch.empty(shape, dtype=dtype, device=self.device)
        self._k_flat.normal_(generator=generator)
        self._v_flat.normal_(generator=generator)
        self.num_slots = 0
        self.max_len_tokens = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.lengths: IntArray = np.zeros(0, dtype=np.int64)
        self.reshape(num_slots, max_len_tokens)

    @property
    def bytes_total(self) -> int:
        """Bytes held by K and V together."""
        return 2 * self._k_flat.numel() * self._k_flat.element_size()

    def reshape(self, num_slots: int, max_len_tokens: int) -> None:
        """Re-view the buffers as ``num_slots`` slots of ``max_len_tokens`` each.

        Contents are not preserved in any meaningful order; lengths reset to 0.
        """
        if num_slots <= 0 or max_len_tokens <= 0:
            raise ValueError("num_slots and max_len_tokens must be positive")
        if num_slots * max_len_tokens > self.capacity_tokens:
            raise ValueError(
                f"{num_slots} slots x {max_len_tokens} tokens exceed the cache "
                f"capacity of {self.capacity_tokens} tokens"
            )
        n = num_slots * self.num_kv_heads * max_len_tokens * self.head_dim
        view = (num_slots, self.num_kv_heads, max_len_tokens, self.head_dim)
        self.k = [self._k_flat[layer, :n].view(view) for layer in range(self.num_layers)]
        self.v = [self._v_flat[layer, :n].view(view) for layer in range(self.num_layers)]
        self.num_slots = num_slots
        self.max_len_tokens = max_len_tokens
        self.lengths = np.zeros(num_slots, dtype=np.int64)

    def write(
        self,
        layer: int,
        slots: torch.Tensor,
        positions: torch.Tensor,
        k_new: torch.Tensor,
        v_new: torch.Tensor,
    ) -> None:
        """Store ``k_new``/``v_new`` (``[T, kv_heads, head_dim]``) at (slot, position) pairs."""
        self.k[layer][slots, :, positions] = k_new
        self.v[layer][slots, :, positions] = v_new

    def check_room(self, slot: int, num_new_tokens: int) -> None:
        """Raise if ``slot`` cannot take ``num_new_tokens`` more tokens."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} outside 0..{self.num_slots - 1}")
        if self.lengths[slot] + num_new_tokens > self.max_len_tokens:
            raise ValueError(
                f"slot {slot} holds {self.lengths[slot]} tokens; {num_new_tokens} more "
                f"exceed max_len_tokens={self.max_len_tokens}"
            )
