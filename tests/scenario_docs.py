"""A small scenario document that tests extend with the sections they vary."""

from __future__ import annotations

from typing import Any


def small_doc(**top: Any) -> dict[str, Any]:
    """Four short requests on the default model and hardware, roofline cost; ``top`` added."""
    doc: dict[str, Any] = {
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1},
            "prompt_tokens": {"kind": "fixed", "tokens": 32},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
    }
    doc.update(top)
    return doc
