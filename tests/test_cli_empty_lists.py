"""An empty list given on the command line is an error, not the default.

``--metric-percentiles ""`` used to fall back to 90,99 silently: a user who
asked for no percentiles (or whose shell variable was empty) got numbers they
did not ask for, with nothing said. vLLM's own parser rejects both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_errors import run_error

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("flag", "words"),
    [("--metric-percentiles", "comma-separated numbers"), ("--percentile-metrics", "ttft")],
)
def test_an_empty_list_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, words: str
) -> None:
    scenario = str(ROOT / "scenarios" / "chat.yaml")
    message = run_error(capsys, tmp_path, scenario, "--num-prompts", "20", flag, "")
    assert message.startswith(flag) and words in message
    assert not (tmp_path / "err").exists()  # refused before any work
