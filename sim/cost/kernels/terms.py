"""The terms of a kernel-table step price: what each is and where its seconds come from.

``KernelCost`` builds its list of terms once (``KernelCost.terms``, in
``KernelCost._build_terms``), and everything that reads a price reads that list:
``step_s`` sums the terms in list order (``num_layers`` times the per-layer ones,
then the once-a-step ones), ``breakdown_s`` lists their rows, ``op_source`` and
the label read their sources. A term is one of:

- ``gemm``: one GEMM of the layer (``qkv_proj``, ``o_proj``, ...) or the LM head;
- ``sampler``: the sampler, where a table times it;
- ``moe``: the fused MoE kernel (an expert-parallel group's collectives with it);
- ``attention``: the layer's attention, by phase (prefill, decode, or one varlen
  kernel over both);
- ``memory``: the memory-bound ops the tables leave out (norms, activation,
  rotary, KV-cache write, embedding, final norm, sampler), from bytes and bandwidth;
- ``profile``: a per-layer profile's own ops;
- ``communication``: all-reduces across the tensor-parallel group and pipeline
  stage transfers (a collective is added here as one more term).

The engine's CPU work is ``sim.cost.engine_cpu``'s, around the GPU's price.
A source is ``measured`` (a table's rows), ``derived`` (another head layout's
rows), ``bandwidth`` (bytes at the GPU's datasheet rate), ``link`` (a ring over
the link: no table timed this group or hop), ``measured+link`` (expert-parallel
MoE: experts from the table, collectives over the link) or ``none`` (an
all-reduce on one GPU, 0 s).

Parts of the list a scenario can switch off (ablations, ``ABLATIONS``) are the
configuration of the list (``KernelCost(disabled_terms=...)``), named in the label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Source = Literal["measured", "derived", "bandwidth", "link", "measured+link", "none"]
Kind = Literal["gemm", "moe", "attention", "memory", "sampler", "profile", "communication"]
# Where a term sits: each layer, priced from the step's tokens (``layer``) or its
# whole shape (``attention``), or once a step, from its tokens and sequences (``step``).
Scope = Literal["layer", "attention", "step"]

# What can be switched off, and the phrase the label gives it when that changes a price.
ABLATIONS: Mapping[str, str] = MappingProxyType(
    {
        # A mixed step's attention as pure prefill plus pure decode even where the
        # tables have the one varlen kernel (or, for FA2 tables, a carried factor).
        "mixed_attention": "attention as two kernels",
        # The memory-bound ops left out: what the tables priced before they were added.
        "memory_ops": "no memory-bound ops",
        # A profile's skew fit not applied: uneven decodes priced at their mean KV.
        "skew": "no skew fit",
    }
)


@dataclass(frozen=True, slots=True)
class Term:
    """One term of a step's price.

    ``price`` takes the step's tokens (``layer``), its shape (``attention``) or its
    tokens and sequences (``step``) and gives seconds (one layer's for a per-layer
    term). ``rows`` gives the same seconds split into ``sources``' rows, for a term
    that groups several ops (None: one row, the term's name).
    """

    name: str
    kind: Kind
    scope: Scope
    sources: Mapping[str, Source]  # each breakdown row's source, by row name
    price: Callable[..., float]
    rows: Callable[..., Iterable[tuple[str, float]]] | None = None

    def breakdown(self, *counts: object) -> Iterable[tuple[str, float]]:
        """The term's rows (name, seconds) for a step of these counts (``price``'s)."""
        if self.rows is None:
            return ((self.name, self.price(*counts)),)
        return self.rows(*counts)


def term(
    name: str,
    kind: Kind,
    scope: Scope,
    source: Source,
    price: Callable[..., float],
) -> Term:
    """A term of one row, named as the term."""
    return Term(name, kind, scope, {name: source}, price)
