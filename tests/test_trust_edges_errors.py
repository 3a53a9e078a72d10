"""Errors name what the user wrote (issue 39): the YAML field, not pydantic's path
through a tagged or untagged union; and a torch option where no model runs is refused,
not silently dropped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import one_line_error

from sim.errors import ConfigError
from sim.planning.sweep import load_sweep
from sim.scenario import load_scenario

# What pydantic calls things, which no scenario, sweep or --set key is.
PYDANTIC = re.compile(
    r"function-|tagged-union|constrained-|\b(int|float|str|list\[\w+\]|dict\[[^\]]*\])\.|"
    r"Spec\b|Config\b|instance of|Unable to extract tag|Input tag"
)


def write(folder: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc))
    return path


def small(**top: Any) -> dict[str, Any]:
    """A scenario without the sections the tests set (scheduler, cost: the defaults)."""
    return {
        "model": "tiny",
        "hardware": "cpu-2core",
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
        **top,
    }


def error_of(path: Path, *sets: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_scenario(path, list(sets))
    message = str(error.value)
    assert "\n" not in message and not PYDANTIC.search(message), message
    return message.removeprefix(f"{path}: ")


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        # A section of a tagged union set without its kind (the defaults have one, a
        # --set into an absent section does not): the kind is the field missing.
        (["scheduler.max_num_seqs=8"], "scheduler.kind: Field required"),
        (["cost.compute_efficiency=0.5"], "cost.kind: Field required"),
        # An unknown kind: the kind field, and the kinds there are.
        (["scheduler.kind=lottery"], "scheduler.kind: unknown kind 'lottery'; expected one of "),
        (["workload.arrival.kind=zipf"], "workload.arrival.kind: unknown kind 'zipf'; expected"),
        (["cost={kind: linear, step_overhead_s: -1}"], "cost.step_overhead_s: Input should be"),
        # A section given as something else: no class name.
        (["hardware=[1]"], "hardware: Input should be a valid dictionary"),
        (["engine.cpu=5"], "engine.cpu: Input should be a valid dictionary"),
    ],
)
def test_tagged_union_fields_are_named_as_written(
    tmp_path: Path, sets: list[str], expected: str
) -> None:
    assert error_of(write(tmp_path, small()), *sets).startswith(expected)


def test_a_field_inside_a_tagged_union_keeps_its_path(tmp_path: Path) -> None:
    # workload (synthetic) > arrival (poisson) > rate_per_s: both tags left out.
    message = error_of(write(tmp_path, small()), "workload.arrival.rate_per_s=-1")
    assert message.startswith("workload.arrival.rate_per_s: Input should be greater than 0")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"seeds": "x"}, "seeds: Input should be a valid integer"),  # int | list[int]
        ({"gpu_price_per_hour": {"h100": -1}}, "gpu_price_per_hour.h100: Input should be greater"),
        ({"gpu_price_per_hour": "x"}, "gpu_price_per_hour: Input should be a valid number"),
    ],
)
def test_a_sweep_files_untagged_unions_name_the_field(
    tmp_path: Path, fields: dict[str, Any], expected: str
) -> None:
    write(tmp_path, small())
    path = write(tmp_path, {"scenario": "s.yaml", "grid": {"seed": [0, 1]}, **fields}, "w.yaml")
    with pytest.raises(ConfigError) as error:
        load_sweep(path)
    message = str(error.value).removeprefix(f"{path}: ")
    # Each member of the union says what it wanted, by the field's own path.
    assert expected in message and not PYDANTIC.search(message), message


def test_the_command_line_says_the_same_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, small())
    argv = ["run", str(path), "--set", "scheduler.kind=lottery", "--out", str(tmp_path / "o")]
    message = one_line_error(capsys, [*argv, "-q", "--figure-process", "no"])
    assert message.startswith(f"{path}: scheduler.kind: unknown kind 'lottery'")


@pytest.mark.parametrize("option", [["--device", "cuda"], ["--dtype", "bf16"], ["--threads", "2"]])
def test_calibrate_from_run_refuses_torch_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    # --from-run fits measured runs: no model runs, so no device is used; --device cuda
    # was taken and dropped, as if the fit had used the GPU.
    argv = ["calibrate", "--model", "tiny", "--from-run", str(tmp_path / "run"), *option]
    message = one_line_error(capsys, argv)
    assert message.startswith(f"{option[0]} {option[1]}: no model runs in this process")


@pytest.mark.parametrize("option", [["--device", "cuda"], ["--threads", "4"]])
def test_measure_endpoint_refuses_torch_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    # A live server runs the model on its own device; nothing is sent (port 9: discard).
    path = write(tmp_path, small())
    argv = ["measure", str(path), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "o")]
    message = one_line_error(capsys, [*argv, *option])
    assert message.startswith(f"{option[0]} {option[1]}: no model runs in this process")
    assert "--endpoint" in message
