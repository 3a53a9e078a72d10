"""engine.vllm_version reaches the vLLM the shipped kernel tables were timed with (issue 39).

Item 23 of issue 39: 0.24 was refused.

The shipped tables name their vLLM in the file name (``h100_sxm-vllm-0.24.0-...``);
a scenario priced from them must be able to say it stands for that vLLM, and the
default (the newest modelled) must not be older than the newest tables.
"""

from __future__ import annotations

import re

import pytest
from test_engine_cpu import scenario  # a roofline scenario with these engine settings

from sim.cost.kernels.artifact import shipped_kernel_artifacts
from sim.scenario.vllm_versions import NEWEST, VERSIONS, version_problem, vllm_version

# The vLLM release in a shipped table's file name, e.g. "0.24.0".
_TABLE_VLLM = re.compile(r"-vllm-(\d+\.\d+\.\d+)-")


def _table_versions() -> set[str]:
    found = {_TABLE_VLLM.search(p.name) for p in shipped_kernel_artifacts()}
    return {m[1] for m in found if m is not None}


def _minor(name: str) -> tuple[int, int]:
    major, minor = name.split(".")[:2]
    return int(major), int(minor)


def test_the_shipped_tables_name_a_vllm() -> None:
    # The premise of the tests below: the file names carry a version (0.14, 0.19, 0.24 today).
    assert "0.24.0" in _table_versions()


@pytest.mark.parametrize("version", sorted(_table_versions()))
def test_every_vllm_the_shipped_tables_were_timed_with_is_accepted(version: str) -> None:
    assert version_problem(version) is None
    assert scenario(vllm_version=version).engine.vllm_version == version


def test_the_default_is_no_older_than_the_newest_tables() -> None:
    newest_tables = max(map(_minor, _table_versions()))
    assert _minor(NEWEST) >= newest_tables
    assert scenario().engine.vllm_version == NEWEST


@pytest.mark.parametrize("name", ["0.22", "0.23", "0.24", "0.24.0", "v0.24.1"])
def test_the_versions_after_0_21_keep_its_defaults(name: str) -> None:
    # No source says async scheduling or the CUDA-graph estimate changed after 0.21
    # (sim/scenario/vllm_versions.py): both stay on, with 0.21's CPU estimate.
    version, base = vllm_version(name), VERSIONS["0.21"]
    assert (version.async_scheduling, version.estimate_cudagraph_memory, version.cpu) == (
        base.async_scheduling,
        base.estimate_cudagraph_memory,
        base.cpu,
    )
    engine = scenario(vllm_version=name)
    assert engine.async_scheduling and engine.engine.estimate_cudagraph_memory


def test_a_version_past_the_newest_is_still_refused_naming_0_24() -> None:
    problem = version_problem("0.25")
    assert problem is not None and "0.24" in problem and "\n" not in problem
