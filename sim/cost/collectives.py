"""Collectives priced as NCCL's tuner prices them: (kind, bytes, ranks, link) -> seconds.

NCCL picks an algorithm (ring, tree) and a protocol (LL, LL128, Simple) for
every collective by the time its own cost model predicts, and runs the fastest
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in NCCL's
``src/graph/tuning.cc``, https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc,
read at commit 5067397c; Apache-2.0). This module is that model for the GPUs
of one server (one node), and the price is the fastest pair's time::

    time(kind, algo, proto, bytes) = base[algo][proto]
                                     + hops(kind, algo, n) * hop[fabric][algo][proto]
                                     + bytes / algorithm_bandwidth(kind, algo, proto)

    hops:  ring all-reduce 2 (n - 1) (reduce-scatter then all-gather, each
           n - 1 steps of bytes / n); ring all-gather and reduce-scatter n - 1;
           tree all-reduce 2 (n - 1) within a node (a chain up and down: NCCL's
           log2 depth is across nodes, which a replica here never spans);
           all-to-all n - 1 (one exchange per peer); send/recv 1.
    algorithm bandwidth = bus bandwidth x protocol factor x n / hops for a ring
           (a ring moves each byte (hops / n) times), x 1/2 for a tree
           (up and down); LL moves 8 B of flag per 8 B of data (x 1/2,
           capped at NCCL's LL ceiling), LL128 120 B per 128 B (x 0.92),
           a tree all-reduce x 0.92 then LL / 3.8 and LL128 x 7/9, and NCCL's
           tree correction by message size.

The bus bandwidth is the link's (``LinkSpec.bandwidth_bytes_per_s x
efficiency``: what the Simple protocol reaches). ``base`` and ``hop`` are
NCCL's constants in microseconds (its ``baseLatencies`` and ``hwLatencies``:
NVIDIA's own fit of its kernels' latencies, per fabric: NVLink or PCI); a
link's ``latency_s`` is its Simple ring hop, and the other protocols' hops
keep NCCL's ratio to it (a preset's ``latency_s`` is NCCL's figure, so a
preset prices exactly as NCCL's model). LL128 runs only over NVLink (NCCL
enables it by default only on NVLink paths). Not modelled: NVLS (NVSwitch
multicast), CollNet, PAT, several nodes, and NCCL's channel counts (the
link's bus bandwidth stands for all channels together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from sim.hardware.parallel import LinkSpec

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVE_KINDS: tuple[CollectiveKind, ...] = get_args(CollectiveKind)
Algorithm = Literal["ring", "tree"]
Protocol = Literal["LL", "LL128", "Simple"]
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")

_US = 1e-6  # seconds per microsecond

# NCCL's baseLatencies (us): a collective's fixed cost, kernel launch and
# synchronisation included, by algorithm and protocol (LL, LL128, Simple).
BASE_LATENCY_US: dict[Algorithm, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
}
# NCCL's hwLatencies (us): one hop's latency by fabric, algorithm and protocol.
HOP_LATENCY_US: dict[str, dict[Algorithm, tuple[float, float, float]]] = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
}
# NCCL's llMaxBws for one node of Hopper GPUs (GB/s): LL's ceiling, whatever the
# link (Blackwell's is twice it, Ampere's 87.7; it binds only over NVLink, and
# only for messages large enough that Simple is faster anyway).
LL_MAX_BYTES_PER_S = 141.0e9
# NCCL's treeCorrectionFactor: a tree all-reduce's bandwidth by protocol, for
# messages of 64 B x 2^i (i = 0..23; outside it, 1).
_TREE_CORRECTION: dict[Protocol, tuple[float, ...]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CollectivePrice:
    """One collective's time and the algorithm and protocol NCCL's model picks for it."""

    seconds: float
    algorithm: Algorithm
    protocol: Protocol


def num_hops(kind: CollectiveKind, algorithm: Algorithm, num_ranks: int) -> int:
    """Hops a collective's latency pays (module docstring)."""
    if kind == "all_reduce":
        return 2 * (num_ranks - 1)
    if kind == "send_recv":
        return 1
    return num_ranks - 1  # all-gather, reduce-scatter (ring), all-to-all


def _bus_bytes_per_s(link: LinkSpec, algorithm: Algorithm, protocol: Protocol) -> float:
    """The bus bandwidth a protocol reaches on ``link`` (NCCL's refinements)."""
    bus = link.bandwidth_bytes_per_s * link.efficiency
    if algorithm == "ring":
        if protocol == "LL":
            return min(LL_MAX_BYTES_PER_S, bus * 0.5)
        return bus * 0.92 if protocol == "LL128" else bus
    bus *= 0.92  # a tree all-reduce
    if protocol == "LL":
        return min(bus / 3.8, LL_MAX_BYTES_PER_S)
    return bus * 7.0 / 9.0 if protocol == "LL128" else bus


def _hop_s(link: LinkSpec, algorithm: Algorithm, protocol: Protocol) -> float:
    """One hop of ``protocol`` on ``link``: NCCL's figure for the link's fabric, scaled by
    the link's own Simple ring hop (``latency_s``) over NCCL's."""
    table = HOP_LATENCY_US[link.fabric]
    scale = link.latency_s / (table["ring"][2] * _US)
    return table[algorithm][PROTOCOLS.index(protocol)] * _US * scale


def algorithm_time_s(
    kind: CollectiveKind,
    algorithm: Algorithm,
    protocol: Protocol,
    message_bytes: float,
    num_ranks: int,
    link: LinkSpec,
) -> float:
    """NCCL's predicted time of one (algorithm, protocol) for a collective of
    ``message_bytes`` (the whole buffer) over ``num_ranks`` GPUs on ``link``."""
    hops = num_hops(kind, algorithm, num_ranks)
    p = PROTOCOLS.index(protocol)
    latency_s = BASE_LATENCY_US[algorithm][p] * _US + hops * _hop_s(link, algorithm, protocol)
    bus = _bus_bytes_per_s(link, algorithm, protocol)
    if algorithm == "tree":
        algo_bytes_per_s = bus * 0.5
        log_size = int(math.log2(message_bytes / 64)) if message_bytes >= 64 else -1
        if 0 <= log_size < 23:
            algo_bytes_per_s *= _TREE_CORRECTION[protocol][log_size]
    elif kind == "send_recv":
        algo_bytes_per_s = bus  # one hop carries the whole message
    else:
        algo_bytes_per_s = bus * num_ranks / hops
    return latency_s + message_bytes / algo_bytes_per_s


def candidates(kind: CollectiveKind, link: LinkSpec) -> list[tuple[Algorithm, Protocol]]:
    """The (algorithm, protocol) pairs NCCL may run for ``kind`` on ``link``: a tree only
    for an all-reduce; LL128 only over NVLink."""
    algorithms: tuple[Algorithm, ...] = ("ring", "tree") if kind == "all_reduce" else ("ring",)
    protocols = PROTOCOLS if link.fabric == "nvlink" else ("LL", "Simple")
    return [(a, p) for a in algorithms for p in protocols]


def collective_price(
    kind: CollectiveKind, message_bytes: float, num_ranks: int, link: LinkSpec
) -> CollectivePrice:
    """The fastest of ``candidates`` by NCCL's model (0 s on one GPU or for no bytes)."""
    if num_ranks <= 1 or message_bytes <= 0:
        return CollectivePrice(0.0, "ring", "Simple")
    best: CollectivePrice | None = None
    for algorithm, protocol in candidates(kind, link):
        seconds = algorithm_time_s(kind, algorithm, protocol, message_bytes, num_ranks, link)
        if best is None or seconds < best.seconds:
            best = CollectivePrice(seconds, algorithm, protocol)
    assert best is not None  # (every kind has a ring candidate)
    return best


def collective_s(
    kind: CollectiveKind, message_bytes: float, num_ranks: int, link: LinkSpec
) -> float:
    """Seconds of one collective ``kind`` of ``message_bytes`` over ``num_ranks`` GPUs
    on ``link``, as NCCL's model prices the algorithm and protocol it picks."""
    return collective_price(kind, message_bytes, num_ranks, link).seconds
