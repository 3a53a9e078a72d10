"""Speed paths: accelerators that run a stretch of work exactly as the reference would.

The reference modules (``sim.engine``, ``sim.serving``) never import these but
at one door, ``sim.serving.simulation``: it asks ``faster_core`` for each
replica's engine core (the decode cohort, ``cohort``) and offers an open loop's
whole run to ``open_loop.run`` (the compiled loop, worker processes, feeds).
An accelerator either takes the work on, giving byte-identical results (tests
compare both paths bit for bit), or declines (``None``) and the reference runs.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.engine.kv_cache import BlockPool
from sim.engine.request import Request
from sim.engine.scheduler import Continuous, EngineCore, Scheduler
from sim.fast.cohort import CohortCore


def faster_core(
    policy: Scheduler,
    kv: BlockPool,
    max_model_len_tokens: int,
    replica: int = 0,
    on_done: Callable[[Request], None] | None = None,
) -> EngineCore | None:
    """An engine core that advances steady decoders in aggregate (``sim.fast.cohort``),
    for plain continuous batching only (a subclass plans its own way); ``None``
    otherwise. The caller drives it in skip-ahead mode, as the simulator's replica."""
    if type(policy) is not Continuous:
        return None
    return CohortCore(policy, kv, max_model_len_tokens, replica, on_done)
