"""Expert parallelism: one MoE layer split over ``ep`` GPUs (vLLM's ``enable_expert_parallel``).

A replica of servesim is one data-parallel rank (``tp`` GPUs) of a group of
``G = ep / tp`` ranks; vLLM's default all-to-all backend
(``allgather_reducescatter``) gathers every rank's tokens, runs the local
experts over all of them and reduce-scatters the results::

    moe_ep_s(T) = all_gather(G * T * hidden * 2 B)    dispatch
                + moe[ep_size = ep](G * T)            local experts over the group's tokens
                + reduce_scatter(G * T * hidden * 2 B)  combine

Collectives come from the NCCL table (``collective``) when the artifact has
it, else a ring over the link. Assumed, not modelled: the peers step in
lockstep with this replica's ``T`` tokens (vLLM pads every rank's batch to
the largest: exact for the rank with the largest batch); see
``docs/kernels.md``, "Expert parallelism".
"""

from __future__ import annotations

from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.tables import collective_grid, moe_grid
from sim.errors import ConfigError
from sim.hardware.parallel import LinkSpec
from sim.hardware.specs import ModelSpec

ACTIVATION_BYTES = 2  # bf16 hidden states on the wire


def check_expert_parallel(arch: ModelSpec, ep: int, tp: int) -> None:
    """ConfigError naming ``expert_parallel_size`` when ``ep`` does not fit ``arch`` at ``tp``."""
    if ep == 1:
        return
    where = "cost.expert_parallel_size"
    if arch.moe is None:
        raise ConfigError(f"{where} {ep}: model {arch.name} has no experts (not an MoE model)")
    if arch.moe.num_experts % ep:
        raise ConfigError(
            f"{where} {ep} does not divide model {arch.name}'s {arch.moe.num_experts} experts"
        )
    if ep % tp:
        raise ConfigError(
            f"{where} {ep} is not a multiple of tensor_parallel_size {tp} (ep = dp x tp)"
        )


class ExpertParallelMoE:
    """One MoE layer's time (seconds) on one GPU of an expert-parallel group, by local tokens."""

    __slots__ = ("_all_gather", "_group_ranks", "_hidden", "_link", "_moe", "_reduce", "ep")

    def __init__(
        self, artifact: KernelArtifact, arch: ModelSpec, ep: int, tp: int, link: LinkSpec
    ) -> None:
        check_expert_parallel(arch, ep, tp)
        assert arch.moe is not None  # checked above (ep > 1 needs experts)
        self.ep = ep
        self._group_ranks = ep // tp
        self._hidden = arch.hidden_size
        self._link = link
        self._moe: Grid = moe_grid(artifact, arch.moe, arch.hidden_size, 1, ep)
        self._all_gather = collective_grid(artifact, "all_gather", ep)
        self._reduce = collective_grid(artifact, "reduce_scatter", ep)

    @property
    def collectives_measured(self) -> bool:
        """Whether the NCCL table timed both collectives (else a ring over the link)."""
        return self._all_gather is not None and self._reduce is not None

    def group_tokens(self, num_tokens: float) -> float:
        """Tokens the MoE kernel sees: this rank's ``T`` times the group's DP ranks."""
        return num_tokens * self._group_ranks

    def collective_s(self, grid: Grid | None, message_bytes: float) -> float:
        """One all-gather or reduce-scatter of ``message_bytes`` (the whole buffer)."""
        if grid is not None:
            return grid(message_bytes)
        g, link = self.ep, self._link
        per_byte = 1.0 / (link.bandwidth_bytes_per_s * link.efficiency)
        return (g - 1) / g * message_bytes * per_byte + (g - 1) * link.latency_s

    def __call__(self, num_tokens: float) -> float:
        tokens = self.group_tokens(num_tokens)
        message = tokens * self._hidden * ACTIVATION_BYTES
        return (
            self.collective_s(self._all_gather, message)
            + self._moe(tokens)
            + self.collective_s(self._reduce, message)
        )
