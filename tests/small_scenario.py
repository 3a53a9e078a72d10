"""A small synthetic scenario written to a YAML file, for tests that run the CLI or
``api.run`` on a path (figures, processes): fixed lengths, Poisson arrivals, roofline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_scenario(
    folder: Path,
    name: str,
    num_requests: int,
    rate_per_s: float,
    prompt_tokens: int,
    output_tokens: int,
    **workload: Any,
) -> Path:
    """``folder / (name + ".yaml")``: ``num_requests`` requests of fixed lengths."""
    doc = {
        "name": name,
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": prompt_tokens},
            "output_tokens": {"kind": "fixed", "tokens": output_tokens},
            **workload,
        },
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
