"""Expert parallelism: one MoE layer split over ``ep`` GPUs (vLLM's ``enable_expert_parallel``).

A replica of servesim is one data-parallel rank (``tp`` GPUs) of a group of
``G = ep / tp`` ranks; vLLM's default all-to-all backend
(``allgather_reducescatter``) gathers every rank's tokens, runs the local
experts over all of them and reduce-scatters the results::

    moe_ep_s(T) = all_gather(G * T * hidden * 2 B)    dispatch
                + moe[ep_size = ep](G * T)            local experts over the group's tokens
                + reduce_scatter(G * T * hidden * 2 B)  combine

The local experts come from aiconfigurator's fused-MoE rows at ``ep_size``, or
from a per-layer profile (one GPU holding every expert) at this GPU's share of
the group's (token, expert) pairs: ``G T / ep`` tokens and
``expected_active_experts(G T) / ep`` distinct experts (uniform routing).
Collectives come from the NCCL table when the artifact has one, else NCCL's
model over the link. Assumed: the peers step in lockstep with this replica's
``T`` tokens (vLLM pads every rank's batch to the largest; ``docs/kernels.md``).
"""

from __future__ import annotations

from sim.cost.collectives import CollectiveKind, collective_s
from sim.cost.kernels.artifact import KernelArtifact
from sim.cost.kernels.grid import Grid
from sim.cost.kernels.ops import expected_active_experts
from sim.cost.kernels.tables import collective_grid, moe_grid, moe_layer_grid
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

    __slots__ = (
        "_all_gather", "_experts", "_group_ranks", "_hidden", "_link", "_moe", "_reduce",
        "_top_k", "ep", "profiled",
    )  # fmt: skip

    def __init__(
        self, artifact: KernelArtifact, arch: ModelSpec, ep: int, tp: int, link: LinkSpec
    ) -> None:
        check_expert_parallel(arch, ep, tp)
        assert arch.moe is not None  # checked above (ep > 1 needs experts)
        self.ep = ep
        self._group_ranks = ep // tp
        self._hidden = arch.hidden_size
        self._link = link
        # A per-layer profile's MoE rows where the artifact has them, else aiconfigurator's.
        self.profiled = artifact.has("moe_layer")
        if self.profiled:
            self._moe: Grid = moe_layer_grid(artifact)
        else:
            self._moe = moe_grid(artifact, arch.moe, arch.hidden_size, 1, ep)
        self._experts, self._top_k = arch.moe.num_experts, arch.moe.top_k
        self._all_gather = collective_grid(artifact, "all_gather", ep)
        self._reduce = collective_grid(artifact, "reduce_scatter", ep)

    @property
    def collectives_measured(self) -> bool:
        """Whether the NCCL table timed both collectives (else NCCL's model over the link)."""
        return self._all_gather is not None and self._reduce is not None

    def group_tokens(self, num_tokens: float) -> float:
        """Tokens the MoE kernel sees: this rank's ``T`` times the group's DP ranks."""
        return num_tokens * self._group_ranks

    def experts_point(self, group_tokens: float) -> tuple[float, ...]:
        """Where the experts' table is read for the group's tokens (module docstring)."""
        if not self.profiled:
            return (group_tokens,)
        active = expected_active_experts(group_tokens, self._experts, self._top_k)
        return (group_tokens / self.ep, active / self.ep)

    def collective_s(self, kind: CollectiveKind, grid: Grid | None, message_bytes: float) -> float:
        """One all-gather or reduce-scatter of ``message_bytes`` (the whole buffer)."""
        if grid is not None:
            return grid(message_bytes)
        return collective_s(kind, message_bytes, self.ep, self._link)

    def terms(self, num_tokens: float) -> list[tuple[str, float]]:
        """The layer's three parts (seconds): dispatch, local experts, combine."""
        tokens = self.group_tokens(num_tokens)
        message = tokens * self._hidden * ACTIVATION_BYTES
        return [
            ("moe_all_gather", self.collective_s("all_gather", self._all_gather, message)),
            ("moe", self._moe(*self.experts_point(tokens))),
            ("moe_reduce_scatter", self.collective_s("reduce_scatter", self._reduce, message)),
        ]

    def __call__(self, num_tokens: float) -> float:
        (_, dispatch), (_, experts), (_, combine) = self.terms(num_tokens)
        return dispatch + experts + combine
