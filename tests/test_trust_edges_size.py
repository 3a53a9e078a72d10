"""Replicas count in a run's size (issue 39): 10,000 replicas are refused up front with
the estimate, not after minutes and gigabytes, and nothing in a run is quadratic in them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim import api
from sim.cli import main
from sim.errors import ConfigError
from sim.scenario import load_scenario
from sim.serving import frontend, progress
from sim.serving.frontend import Delivery
from sim.workload import size
from sim.workload.size import (
    BASE_BYTES,
    BYTES_PER_CACHED_BLOCK,
    BYTES_PER_REPLICA,
    BYTES_PER_REQUEST,
    check_run_size,
)

CHAT = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
WORKLOAD = load_scenario(CHAT, ["workload.num_requests=2000"]).workload
BLOCKS = 28_128  # chat.yaml's KV pool on an H100, as vLLM's profile sizes it


def needed_bytes(num_replicas: int, blocks: int) -> int:
    """The estimate by hand: the base (one replica's engine in it), 2,000 requests, each
    further replica's engine, and every replica's prefix-caching pool."""
    return (
        BASE_BYTES
        + 2000 * BYTES_PER_REQUEST
        + (num_replicas - 1) * BYTES_PER_REPLICA
        + num_replicas * blocks * BYTES_PER_CACHED_BLOCK
    )


def test_ten_thousand_prefix_caching_replicas_are_refused_with_the_estimate() -> None:
    memory = 16 * 10**9
    assert needed_bytes(10_000, BLOCKS) > memory  # ~17 GB
    with pytest.raises(ConfigError) as error:
        check_run_size(
            WORKLOAD, memory, num_replicas=10_000, num_kv_blocks=BLOCKS, prefix_caching=True
        )
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        f"cluster: 10,000 replicas need about {needed_bytes(10_000, BLOCKS) / 1e9:,.1f} GB"
    )
    # Says what it estimated and how to go on.
    assert f"~{BYTES_PER_CACHED_BLOCK} B for each of their 28,128 KV blocks" in message
    assert "16.0 GB available" in message and "engine.enable_prefix_caching: false" in message
    fits = int(
        message.split("lower cluster.num_replicas to at most ")[1].split(" ")[0].replace(",", "")
    )
    # The count it offers fits, one more does not.
    assert needed_bytes(fits, BLOCKS) <= memory < needed_bytes(fits + 1, BLOCKS)
    check_run_size(WORKLOAD, memory, num_replicas=fits, num_kv_blocks=BLOCKS, prefix_caching=True)


def test_without_prefix_caching_a_replica_is_small() -> None:
    # 10,000 x 20 KB = 0.2 GB: fits where the prefix caches did not.
    check_run_size(
        WORKLOAD, 16 * 10**9, num_replicas=10_000, num_kv_blocks=BLOCKS, prefix_caching=False
    )


def test_many_replicas_of_large_caches_are_announced_as_slow() -> None:
    # 10,000 x (2 ms + 200,000 blocks x 0.5 us) = 1,020 s = 0.3 h, over the 600 s threshold.
    with pytest.warns(UserWarning, match=r"^cluster: 10,000 replicas will take about 0\.3 h"):
        check_run_size(
            WORKLOAD, 10**15, num_replicas=10_000, num_kv_blocks=200_000, prefix_caching=True
        )


def test_run_refuses_before_building_any_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cluster(*args: object, **kwargs: object) -> None:
        raise AssertionError("built the replicas before the size check")

    monkeypatch.setattr(api, "cluster_for", no_cluster)
    monkeypatch.setattr(size, "available_bytes", lambda: 8 * 10**9)
    argv = ["run", str(CHAT), "--set", "cluster.num_replicas=10000", "-q"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--figure-process", "no"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cluster: 10,000 replicas need about" in err


def test_client_times_look_up_only_the_replicas_asked_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # raw_result asks once per replica about that replica's own times: looking through
    # every replica each time made a 10,000-replica run's results quadratic (hours).
    calls = []
    lookup = frontend._lookup

    def counted(*args: np.ndarray) -> np.ndarray:
        calls.append(1)
        return lookup(*args)

    monkeypatch.setattr(frontend, "_lookup", counted)
    ends = np.array([1.0, 2.0, 3.0])
    delivery = Delivery((r, ends + r, ends + r + 0.5) for r in range(1000))
    got = delivery.client_s([8.0, 9.0], [7, 7])
    assert got.tolist() == [8.5, 9.5]  # replica 7's steps end at 8, 9, 10
    assert len(calls) == 1


def test_building_many_replicas_shows_a_progress_bar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Thousands of prefix caches take minutes to build, before the first request: the
    # bar (shown once the work has taken BAR_DELAY_S, here at once) says it is going on.
    monkeypatch.setattr(progress, "BAR_DELAY_S", 0.0)
    scenario = load_scenario(
        CHAT, ["cluster.num_replicas=12", "workload.num_requests=12", "cost={kind: roofline}"]
    )
    api.run(scenario, progress=True, workers=1)
    err = capsys.readouterr().err
    assert "12/12" in err and "replica" in err
    api.run(scenario, progress=False, workers=1)  # -q: none
    assert "replica" not in capsys.readouterr().err
