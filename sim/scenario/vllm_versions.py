"""The vLLM versions servesim models: the defaults each one changed, and its CPU estimate.

A scenario names the version it stands for (``engine.vllm_version``, default
``NEWEST``); every field left unset whose vLLM default changed between the versions
modelled here follows it (``VllmVersion``'s fields), and so does the engine's CPU
estimate (``engine.cpu`` overrides it). 0.22 to 0.24 keep 0.21's async-scheduling and
CUDA-graph defaults, an assumption (no source read says they changed).
docs/vllm-fidelity.md gives each default's source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.cost.engine_cpu import EngineCpuConfig

# vLLM V1's CPU work per step, by part: docs/vllm-fidelity.md ("The engine's CPU
# work") gives each figure's source (two published, two guesses, one left to a fit).
V1_CPU_ESTIMATE = EngineCpuConfig(
    per_step_s=4e-4,
    scheduler_per_seq_s=1.3e-5,
    sampling_per_seq_s=0.0,
    per_token_s=1e-7,
    non_overlapped_s=1e-4,
)


@dataclass(frozen=True)
class VllmVersion:
    """The defaults of one vLLM minor version that servesim models."""

    name: str  # "major.minor"
    async_scheduling: bool  # --async-scheduling's default (before the exclusions)
    estimate_cudagraph_memory: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS's default
    scheduler_reserve_full_isl: bool  # SchedulerConfig.scheduler_reserve_full_isl's default
    free_unhashed_first: bool  # BlockPool.free_blocks: blocks without a hash to the head
    cpu: EngineCpuConfig  # the engine's CPU work per step (an estimate)


def _version(minor: int) -> VllmVersion:
    return VllmVersion(
        name=f"0.{minor}",
        async_scheduling=minor >= 14,
        estimate_cudagraph_memory=minor >= 21,
        scheduler_reserve_full_isl=minor >= 19,
        free_unhashed_first=minor >= 24,
        cpu=V1_CPU_ESTIMATE,
    )


# From 0.10 (V1 the only engine for the models servesim runs) to 0.24, the version the
# shipped kernel tables were timed with.
VERSIONS: dict[str, VllmVersion] = {v.name: v for v in map(_version, range(10, 25))}
NEWEST = "0.24"

# major.minor, an optional patch, then an optional pre-, post- or dev-release or local tag.
_NUMBER = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:(?:rc|a|b|\.dev|\.post|\+)\S*)?")


def version_problem(name: str) -> str | None:
    """Why ``name`` is not a vLLM version servesim models, or None when it is."""
    match = _NUMBER.fullmatch(name.strip())
    if match is not None and f"{int(match[1])}.{int(match[2])}" in VERSIONS:
        return None
    known = ", ".join(VERSIONS)
    return f"vLLM {name!r} is not a version servesim models; known: {known} (any patch release)"


def vllm_version(name: str) -> VllmVersion:
    """The modelled version ``name`` (``0.19``, ``0.19.0``, ``v0.19.1``) stands for;
    ValueError naming the known ones otherwise."""
    problem = version_problem(name)
    if problem is not None:
        raise ValueError(problem)
    match = _NUMBER.fullmatch(name.strip())
    assert match is not None
    return VERSIONS[f"{int(match[1])}.{int(match[2])}"]
