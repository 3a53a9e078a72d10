"""The command line's one-line errors, as the tests of its subcommands read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main

PREFIX = "servesim: error: "


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``servesim argv`` in-process: it must exit 2 with one line on stderr,
    ``servesim: error: ...``, and no traceback. Returns the message after the prefix."""
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(PREFIX) and "Traceback" not in err, err
    return err.removeprefix(PREFIX).strip()


def run_error(capsys: pytest.CaptureFixture[str], folder: Path, *args: str) -> str:
    """``one_line_error`` of ``servesim run ARGS`` writing (if it got that far) into
    ``folder / "err"``, quietly and with no figure process."""
    argv = ["run", *args, "--out", str(folder / "err"), "-q", "--figure-process", "no"]
    return one_line_error(capsys, argv)
