"""Issue 39, a new user's round: calibrate's and measure's sampling options.

``calibrate --seed -1`` ended in numpy's ValueError traceback ("expected
non-negative integer"); ``calibrate --temperature nan`` passed its ``< 0``
check; ``validate``/``measure --top-k 0`` said "sampling: Input should be
greater than or equal to 1", naming a model, not the option the user typed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_errors import one_line_error

pytest.importorskip("torch")

TINY = str(Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml")


@pytest.mark.parametrize(
    ("option", "value"), [("--seed", "-1"), ("--temperature", "nan"), ("--temperature", "-1")]
)
def test_calibrate_refuses_a_bad_seed_or_temperature_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    out = tmp_path / "artifact.json"
    argv = ["calibrate", "--model", "tiny", "--grid", "ci", f"{option}={value}", "--out", str(out)]
    message = one_line_error(capsys, argv)
    assert message.startswith(f"{option} must be") and value in message
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--top-k", "0"), ("--top-p", "2"), ("--top-p", "0"), ("--temperature", "-1")],
)
def test_validate_names_the_sampling_option_the_user_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    out = tmp_path / "out"
    argv = ["validate", TINY, f"{option}={value}", "--out", str(out), "-q"]
    message = one_line_error(capsys, argv)
    assert message.startswith(f"{option} ") and "sampling" not in message
    assert not out.exists()
