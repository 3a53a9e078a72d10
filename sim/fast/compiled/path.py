"""When and how one fed replica runs compiled (``sim.fast.compiled.loop``).

A single replica (or a fresh round-robin pool) serving an open loop, with
plain continuous batching, a roofline cost, skip-ahead and no shared
prefixes, is what most capacity searches and sweeps simulate. ``run_compiled``
plays such a run in ``sim.fast.compiled.loop.run`` (numba, if installed)
and fills the engine cores' logs with its results, which are the Python
path's to the bit; the result is then built from the cores as after any run.
``why_not`` says why a run is not of that kind; ``run_compiled`` answers
``False``, the cores as they were, when one meets what only the Python path
plays (a preemption, a broken run of tokens); the caller then simulates as usual.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

from sim.cost.roofline import RooflineCost
from sim.engine.kv_cache import BlockPool, PrefixCachingPool, prefix_describer
from sim.engine.scheduler import Continuous, EngineCore
from sim.fast.compiled import layout, loop
from sim.fast.compiled.arrays import LoopArrays
from sim.fast.feed import Submissions
from sim.serving.submission import OpenLoop


@functools.cache
def compiled() -> Callable[..., int] | None:
    """The compiled loop, or None without numba (or where it cannot set up: the
    Python path then runs, with a warning saying why)."""
    try:
        return loop.compile_run()
    except ImportError:
        return None
    except Exception as error:  # e.g. no writable place for numba's cache
        warnings.warn(
            f"the compiled loop is off ({error}); runs take the Python path", stacklevel=2
        )
        return None


def _is_roofline(cost: object) -> bool:
    """Whether ``cost`` prices steps as ``RooflineCost`` does (a relabelled one too)."""
    if not isinstance(cost, RooflineCost):
        return False
    kind = type(cost)
    return (
        kind.step_s is RooflineCost.step_s
        and kind.decode_durations_s is RooflineCost.decode_durations_s
    )


def why_not(
    cores: Sequence[EngineCore], cost: object, skip_ahead: bool, work: OpenLoop
) -> str | None:
    """Why this run cannot take the compiled loop, or None if it can."""
    core = cores[0]  # (a pool's cores are alike)
    policy = core.policy
    if type(policy) is not Continuous or policy.swap is not None:
        return "not plain continuous batching"
    if not _is_roofline(cost):
        return "not a roofline cost"
    if not skip_ahead or any(core.recorder is not None for core in cores):
        return "step by step, or recorded"
    if type(core.kv) not in (BlockPool, PrefixCachingPool) or prefix_describer(work) is not None:
        return "shared prefixes"
    if len(work.num_prompt_tokens) == 0:
        return "no requests, or some rejected"
    # EngineCore.rejection_reason's two limits, for the longest request.
    longest = int((work.num_prompt_tokens + work.num_output_tokens).max())
    if longest > core.max_model_len_tokens:
        return "no requests, or some rejected"
    if core.kv.blocks_for(longest - 1) > core.kv.num_blocks:
        return "some requests rejected"
    return None


def run_compiled(
    cores: Sequence[EngineCore],
    cost: RooflineCost,
    work: OpenLoop,
    tokenize_s_per_token: float,
    run: Callable[..., int],
    tick: Callable[[], None],
) -> bool:
    """Simulate ``work`` on the fresh ``cores`` with ``run`` (several: a round-robin
    pool's, each serving its turns, ``Submissions.dealt``); False, and the cores
    as they were, if the Python path must simulate it instead."""
    shares = Submissions.dealt(work, tokenize_s_per_token, len(cores))
    for core, mine in zip(cores, shares, strict=True):
        if not _run_one(core, cost, work, mine, run, tick):
            for other in cores:  # (the ones before: run, and now dropped)
                other.new_logs()
                other.num_done = other.num_steps = 0
                other.last_end_s = 0.0
            return False
    return True


def _run_one(
    core: EngineCore,
    cost: RooflineCost,
    work: OpenLoop,
    mine: Submissions,
    run: Callable[..., int],
    tick: Callable[[], None],
) -> bool:
    """One core's run of its submissions ``mine``; False if the loop could not play it."""
    arrays = LoopArrays.build(core, cost, work, mine)
    args = arrays.args()
    while True:
        status = run(*args)
        if status == layout.UNSUPPORTED:
            return False
        arrays.flush_into(core)
        core.num_done = arrays.num_done  # what the progress bar reads
        tick()
        if status == layout.DONE:
            break
    if arrays.num_done != len(mine.order):
        return False  # some never ran: the Python path records them unfinished
    core.num_steps = int(arrays.state[layout.NUM_STEPS])
    core.last_end_s = float(arrays.clock[layout.LAST_END])
    arrays.write_records(core, work, mine.order)
    return True
