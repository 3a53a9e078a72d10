"""The terms of a kernel-table step price: what each is and where its seconds come from.

``KernelCost._build_terms`` lists them once; ``step_s`` sums them in list order
(``num_layers`` times the per-layer ones, then the once-a-step ones),
``breakdown_s`` lists their rows, ``op_source`` and the label read their sources.
Each term has a ``Kind`` (what it prices) and each row a ``Source`` (``measured``:
a table's rows; ``derived``: another head layout's; ``bandwidth``: bytes at the
datasheet rate; ``link``: a collective over the link; ``none``: 0 s on one GPU).
``ABLATIONS`` switch parts off (``KernelCost(disabled_terms=...)``), named in the
label. Adding a term: ``docs/dev/adding-a-cost-term.md``.
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
    """One term of a step's price: ``price`` of the counts its ``scope`` names, in
    seconds (one layer's for a per-layer term); ``rows``, the same split into
    ``sources``' rows for a term of several ops (None: one row, the term's name)."""

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


def total_s(rows: Iterable[tuple[str, float]]) -> float:
    """The rows' seconds added in order from 0.0: a term's price is the sum of its rows."""
    total = 0.0
    for _, seconds in rows:
        total += seconds
    return total


def term(
    name: str,
    kind: Kind,
    scope: Scope,
    source: Source,
    price: Callable[..., float],
) -> Term:
    """A term of one row, named as the term."""
    return Term(name, kind, scope, {name: source}, price)
