"""``import-run --prefix-tokens`` (issue 39): a prefix longer than a prompt is refused,
and the declared prefix travels with ``trace.csv``, so replaying the trace keeps it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from cli_errors import one_line_error

from sim import api
from sim.cli import main
from sim.scenario import scenario_from_dict
from sim.validation.importers import import_run

DATA = Path(__file__).parent / "data" / "imports"
VLLM_BENCH = DATA / "vllm_bench_detailed.json"
BLOCK_TOKENS = 16


def test_a_prefix_longer_than_a_prompt_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shortest = int(import_run(VLLM_BENCH).requests["num_prompt_tokens"].min())
    out = tmp_path / "imported"
    argv = ["import-run", str(VLLM_BENCH), "--out", str(out)]
    message = one_line_error(capsys, [*argv, "--prefix-tokens", str(shortest + 1)])
    assert message.startswith(f"--prefix-tokens {shortest + 1}: longer than 1 of the 4 prompts")
    assert f"the shortest has {shortest} tokens" in message
    assert not out.exists()
    # As long as the shortest prompt: fine.
    assert main([*argv, "--prefix-tokens", str(shortest)]) == 0


def hits(workload: dict[str, Any]) -> list[int]:
    """Each request's prompt tokens found in the prefix cache, replaying ``workload``."""
    result = api.run(scenario_from_dict(scenario(workload)))
    return list(result.requests["num_prefix_hit_tokens"])


def scenario(workload: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "replay",
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {"kind": "roofline"},
        "engine": {"block_size_tokens": BLOCK_TOKENS},
        "workload": workload,
    }


def test_the_declared_prefix_travels_with_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A measured run stand-in: 6 requests of 100-token prompts, 2 s apart (each done
    # long before the next: a hit finds the previous request's blocks cached).
    measured = {
        "kind": "synthetic",
        "num_requests": 6,
        "arrival": {"kind": "poisson", "rate_per_s": 0.5},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 4},
    }
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(scenario(measured)))
    detailed = tmp_path / "detailed.json"
    run = ["run", str(tmp_path / "m.yaml"), "--out", str(tmp_path / "m"), "-q"]
    assert main([*run, "--figure-process", "no", "--save-detailed", str(detailed)]) == 0
    capsys.readouterr()
    out = tmp_path / "imported"
    prefix_tokens = 70  # 4 whole blocks of 16 (64 tokens) shareable, as vLLM hashes full blocks
    assert main(["import-run", str(detailed), "--out", str(out), "--prefix-tokens", "70"]) == 0
    printed = capsys.readouterr().out
    trace = pd.read_csv(out / "trace.csv")
    assert list(trace.columns) == ["timestamp", "prompt_tokens", "output_tokens", "hash_ids"]
    assert set(trace["hash_ids"]) == {0}  # one group: every prompt starts alike
    # import-run prints the workload that replays it, prefix included.
    workload = json.loads(printed.split("replay with the prefix: workload: ")[1].splitlines()[0])
    assert workload["hash_ids_column"] == "hash_ids"
    assert workload["hash_block_tokens"] == prefix_tokens
    whole_blocks = prefix_tokens // BLOCK_TOKENS * BLOCK_TOKENS
    assert hits(workload) == [0] + [whole_blocks] * 5
    # Without the column named, the same trace replays with no shared prefix.
    plain = {k: v for k, v in workload.items() if k not in ("hash_ids_column", "hash_block_tokens")}
    assert hits(plain) == [0] * 6


def test_without_a_prefix_the_trace_keeps_its_three_columns(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    assert main(["import-run", str(VLLM_BENCH), "--out", str(out)]) == 0
    assert list(pd.read_csv(out / "trace.csv").columns) == [
        "timestamp",
        "prompt_tokens",
        "output_tokens",
    ]
