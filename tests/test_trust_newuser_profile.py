"""Issue 39, a new user's round: ``--profile sweep --sweep-size`` without an end.

``servesim run chat.yaml --profile sweep --sweep-size 99999999`` started a
hundred million runs one after another, writing nothing until all were done:
a hang. The option now takes 2 to ``MAX_SWEEP_SIZE`` benchmarks, refused as
argparse refuses a bad value (usage, one error line naming the option, exit 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.cli.endpoint_options import MAX_SWEEP_SIZE, SWEEP_SIZE

CHAT = str(Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml")


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("size", [str(MAX_SWEEP_SIZE + 1), "99999999", "1"])
def test_a_sweep_size_outside_its_range_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str], command: str, size: str
) -> None:
    argv = [command, CHAT, "--profile", "sweep", "--sweep-size", size]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--out", "unused-never-written"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"argument --sweep-size: expected 2 to {MAX_SWEEP_SIZE:,}" in err.splitlines()[-1]


def test_guidellms_default_is_inside_the_range() -> None:
    assert 2 <= SWEEP_SIZE <= MAX_SWEEP_SIZE
