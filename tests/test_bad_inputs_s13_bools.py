"""Session 13: true is not a number. pydantic's lax mode read a true or false given where a
number is wanted as 1 or 0 (``--set workload.arrival.rate_per_s=true`` ran at 1 request
per second, ``--set seed=true`` ran seed 1, a YAML ``max_num_seqs: yes`` was 1). Every
configuration model (``sim.config.Frozen``) now refuses it in one line naming the field;
a field that takes a bool still does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.planning.plan_file import PlanConfig
from sim.scenario import load_scenario
from tests.cli_errors import one_line_error, run_error

CHAT = "scenarios/chat.yaml"


@pytest.mark.parametrize(
    ("setting", "field", "value"),
    [
        ("workload.arrival.rate_per_s=true", "workload.arrival.rate_per_s", "true"),
        ("seed=true", "seed", "true"),
        ("scheduler.max_num_seqs=yes", "scheduler.max_num_seqs", "true"),  # YAML 1.1's yes
        ("parallelism.tensor_parallel_size=true", "parallelism.tensor_parallel_size", "true"),
        ("workload.num_requests=false", "workload.num_requests", "false"),
    ],
)
def test_a_bool_set_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setting: str, field: str, value: str
) -> None:
    message = run_error(capsys, tmp_path, CHAT, "--set", setting)
    assert message.startswith(f"{CHAT}: {field}"), message
    assert message.endswith(f"not {value}") or f"not {value};" in message, message


def test_a_bool_in_a_scenario_file_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(Path(CHAT).read_text())
    doc["workload"]["prompt_tokens"] = {"kind": "fixed", "tokens": 100}
    doc["workload"]["priority"] = {"kind": "classes", "weights": [0.5, True]}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    message = run_error(capsys, tmp_path, str(scenario))
    assert (
        message
        == f"{scenario}: workload.priority.weights.1: Input should be a valid number, not true"
    )


def test_a_bool_key_where_a_number_is_wanted_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sets = ["scheduler.mode=weighted", "scheduler.weights={0: 4, true: 1}"]
    message = run_error(
        capsys,
        tmp_path,
        "scenarios/priority.yaml",
        *[arg for value in sets for arg in ("--set", value)],
    )
    assert message.startswith("scenarios/priority.yaml: scheduler.weights.true:"), message


def test_a_sweep_file_s_bool_seeds_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenario: {Path(CHAT).resolve()}\nseeds: true\n")
    message = one_line_error(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "o"), "-q"])
    assert message.startswith(f"{sweep}: seeds: "), message
    assert "not true" in message, message


def test_fields_that_take_a_bool_still_do() -> None:
    scenario = load_scenario(
        CHAT,
        [
            "engine.enable_prefix_caching=true",
            "scheduler.chunked_prefill=false",
            "scheduler.max_num_batched_tokens=8192",
        ],
    )
    assert scenario.engine.enable_prefix_caching is True
    assert scenario.scheduler.chunked_prefill is False
    assert PlanConfig(chunked_prefill=[True, False]).chunked_prefill == [True, False]
    # A number where a number is wanted is unchanged, a whole one in a float field too.
    assert load_scenario(CHAT, ["workload.arrival.rate_per_s=3"]).workload.arrival.rate_per_s == 3
