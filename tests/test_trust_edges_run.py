"""``servesim run`` at its edges (issue 39): a ``--save-*`` file that is the run's
folder, a reader that closes the pipe, a Ctrl-C while a fresh ``--out`` is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_errors import one_line_error
from small_scenario import write_scenario

from sim.api import result as api_result
from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUIET = ["-q", "--figure-process", "no"]


@pytest.mark.parametrize("option", ["--save-detailed", "--save-result"])
@pytest.mark.parametrize("where", ["out", "parent"])
def test_a_save_file_that_is_the_runs_folder_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, where: str
) -> None:
    # A fresh --out: no folder there yet, so only the run would make it one, and the
    # save file's write then failed with IsADirectoryError after the whole run.
    path = write_scenario(tmp_path, "s", 4, 1.0, 16, 4)
    out = tmp_path / "runs" / "s"
    save = out if where == "out" else out.parent
    message = one_line_error(
        capsys, ["run", str(path), "--out", str(out), option, str(save), *QUIET]
    )
    assert message.startswith(f"{option} {save}: is the run's folder (--out {out}) or holds it")
    assert not (tmp_path / "runs").exists()


def test_a_save_file_beside_the_runs_folder_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(tmp_path, "s", 4, 1.0, 16, 4)
    out, save = tmp_path / "out", tmp_path / "out" / "detailed.json"  # inside it: a file
    assert main(["run", str(path), "--out", str(out), "--save-detailed", str(save), *QUIET]) == 0
    assert save.is_file() and (out / "summary.json").is_file()


def test_a_reader_that_closes_the_pipe_ends_the_run_quietly(tmp_path: Path) -> None:
    # `servesim run ... | head`: the reader is gone before the summary is printed (its
    # end of the pipe closed first, so that the very first write fails, every time).
    path = write_scenario(tmp_path, "s", 4, 1.0, 16, 4)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sim.cli", "run", str(path), "--out", str(tmp_path), *QUIET],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1, done.stderr  # as Python's own recipe: 1 on EPIPE
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr  # the flush at exit too


def interrupted_write(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_while_a_fresh_out_is_written_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_scenario(tmp_path, "s", 4, 1.0, 16, 4)
    monkeypatch.setattr(api_result, "write_outputs", interrupted_write)
    out = tmp_path / "runs" / "deep" / "s"  # its parents are fresh too
    assert main(["run", str(path), "--out", str(out), *QUIET]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_keeps_a_folder_that_was_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_scenario(tmp_path, "s", 4, 1.0, 16, 4)
    monkeypatch.setattr(api_result, "write_outputs", interrupted_write)
    (tmp_path / "runs").mkdir()  # there before: kept, though empty
    out = tmp_path / "runs" / "s"
    assert main(["run", str(path), "--out", str(out), *QUIET]) == 130
    assert (tmp_path / "runs").is_dir() and not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # a folder with files of its own: kept as it was
    assert main(["run", str(path), "--out", str(out), *QUIET]) == 130
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
