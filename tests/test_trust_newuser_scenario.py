"""Issue 39, a new user's round: a scenario's ``model:`` that is no model.

``model: ""`` was taken for a path, anchored at the scenario's folder, and
refused as "<folder>/config.json: no such config.json file", a file the user
never named; ``model: null`` or ``5`` got pydantic's "Input should be a
valid dictionary", which names none of the three forms ``model:`` takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import run_error

SCENARIO: dict[str, Any] = {
    "name": "tiny",
    "hardware": "h100",
    "workload": {
        "kind": "synthetic",
        "num_requests": 5,
        "arrival": {"kind": "poisson", "rate_per_s": 5},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 10},
    },
}


def _model_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], model: Any) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "model": model}))
    message = run_error(capsys, tmp_path, str(path))
    assert message.startswith(f"{path}: model: ") and not (tmp_path / "err").exists()
    return message.removeprefix(f"{path}: model: ")


@pytest.mark.parametrize("model", ["", "   "])
def test_an_empty_model_name_is_an_unknown_preset_not_the_scenarios_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str
) -> None:
    message = _model_error(tmp_path, capsys, model)
    assert "config.json file" not in message and str(tmp_path) not in message
    assert "unknown model preset" in message and "llama-3-8b" in message


@pytest.mark.parametrize("model", [None, 5, True, ["llama-3-8b"]])
def test_a_model_of_another_type_names_the_forms_it_may_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: Any
) -> None:
    message = _model_error(tmp_path, capsys, model)
    assert "preset name" in message and "config.json path" in message
    assert "mapping" in message and "valid dictionary" not in message
