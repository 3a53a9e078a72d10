"""The vLLM versions servesim models: the defaults each one changed, and its CPU estimate.

A scenario names the version it stands for (``engine.vllm_version``, default
``NEWEST``); every scenario field left unset whose vLLM default changed
between the versions modelled here follows it:

- ``engine.async_scheduling``: on by default from 0.14.0 (release notes:
  "Async scheduling is now enabled by default", vLLM PR #27614), off before
  (an opt-in ``--async-scheduling`` since PR #19970, 0.10). Pipeline
  parallelism and draft-model speculation keep it off in every version
  servesim models (``Scenario.async_scheduling``).
- ``engine.estimate_cudagraph_memory``: vLLM subtracts an estimate of the CUDA
  graphs' memory from the KV budget from 0.21 on
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``), not before.
- ``scheduler.scheduler_reserve_full_isl``: from 0.19.0 vLLM admits a waiting
  request only if the KV pool's free blocks hold its whole sequence after its
  prefix-cache hits, not just its first chunk (vLLM PR #37307,
  ``SchedulerConfig.scheduler_reserve_full_isl``, default True); 0.18.1 and
  before check the chunk alone. Read from each release's wheel (vLLM's source):
  absent from 0.17.1, 0.18.0 and 0.18.1, True in 0.19.0, 0.20.2, 0.21.0,
  0.22.1, 0.23.0 and 0.24.0 (0.21 moved it into ``allocate_slots``, the same
  check); vLLM's own scheduler agrees step by step (docs/vllm-fidelity.md).
- the free-queue order (``PrefixCachingPool``'s ``free_unhashed_first``): from
  0.24.0 ``BlockPool.free_blocks`` puts a freed request's blocks without a hash
  (its last, partly filled one) at the head of the free queue, to be evicted
  first, and its cached blocks at the tail; 0.23.0 and before append them all
  to the tail, deepest first. Read in each release's ``vllm/v1/core/block_pool.py``
  (append in 0.10.2, 0.11.0, 0.19.0 to 0.23.0; prepend in 0.24.0); vLLM's own
  scheduler agrees step by step (docs/vllm-fidelity.md).
- the engine's CPU work per step (``sim.cost.engine_cpu``): ESTIMATES from
  public sources, the same for every V1 version here (no public source
  measures them version by version); ``engine.cpu`` overrides them.

0.22 to 0.24 (0.24: the vLLM the shipped kernel tables were timed with,
``*-vllm-0.24.0-*``) are modelled with 0.21's defaults: no public source read
for servesim says async scheduling's or the CUDA-graph estimate's default, or
the V1 engine's CPU work, changed after 0.21, so those keep their 0.21 values
(an assumption, not a finding); the admission check and the free-queue order
were read in each.

Unchanged across these versions, so not in the table: the batch limits
vLLM picks from the device's memory (``sim.engine.policies.vllm_defaults``:
vLLM PR #17073, in 0.9, and #17885 for A100s) and prefix caching on by default
(V1's default since 0.8). Sources and figures: docs/vllm-fidelity.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.cost.engine_cpu import EngineCpuConfig

# vLLM V1's CPU work per step, by part (docs/vllm-fidelity.md, "The engine's CPU
# work", gives each source): ~0.4 ms of engine loop per step whatever its size
# (published: a profile of vLLM 0.27's engine loop, 541 µs a step, 22 % of it a
# stub executor); the scheduler ~13 µs per running sequence (published, the same
# profile: 12.7 µs; measured here with vLLM's own scheduler on a 2-core VM,
# benchmarks/vllm_scheduler_cpu.py: the same order, CPU-dependent); the rest of a
# sequence's engine-core work 0 (unmeasured, no public figure: a fit sets it);
# ~0.1 µs per token of input preparation (a guess: numpy fills of ids, positions
# and slot mappings); ~0.1 ms that async scheduling cannot hide (a guess: the gap
# between one step's CUDA-graph replay and the next's launch).
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


# From 0.10 (V1 the only engine for the models servesim runs) to the newest modelled:
# 0.24, the version the shipped kernel tables were timed with (0.22-0.24 keep 0.21's
# defaults, an assumption: see the module docstring).
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
