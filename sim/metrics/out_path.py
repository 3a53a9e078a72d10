"""Check an ``--out`` location before any work starts, and write a run's files all or nothing.

A run can take minutes; finding out only when writing that ``--out`` is a file,
lies under one or cannot be written loses all of it. ``check_out_dir`` (or
``check_out_file``) refuses a bad location in one line, creating nothing: it
probes the nearest existing folder with a temporary directory (which also
catches read-only file systems, where permission bits say nothing to root).
A folder that already holds files is announced on stderr.

``staged`` writes a run's files into a hidden folder inside ``--out`` and moves
them into place once every one is complete (``summary.json`` last): an
interrupted write leaves the folder as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sim.errors import ConfigError

MAX_LISTED = 4
"""Existing files named in the overwrite note; the rest are counted."""


def out_argument(text: str) -> str:
    """argparse ``type`` of every ``--out``: an empty path names no place (``Path("")``
    is the current folder, and ``args.out or default`` would silently take the
    default), so it is refused when the line is parsed."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no folder or file")
    return text


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its nearest ancestor that exists."""
    absolute = path.absolute()
    for candidate in (absolute, *absolute.parents):
        if candidate.exists():
            return candidate
    return Path(absolute.anchor)


def _probe_writable(path: Path, folder: Path, option: str) -> None:
    """A one-line error unless a folder can be created (and removed) in ``folder``."""
    if not folder.is_dir():
        raise ConfigError(f"{option} {path}: {folder} is a file, not a folder")
    try:
        Path(tempfile.mkdtemp(prefix=".servesim-probe-", dir=folder)).rmdir()
    except OSError as error:
        raise ConfigError(f"{option} {path}: cannot write in {folder} ({error.strerror})") from None


def check_out_dir(path: str | Path, option: str = "--out") -> list[str]:
    """Refuse an output folder that cannot be written; the names of what it already
    holds (announced on stderr in one line)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: is a file, not a folder")
    _probe_writable(path, _nearest_existing(path), option)
    existing = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    if existing:
        shown = ", ".join(existing[:MAX_LISTED])
        more = f" and {len(existing) - MAX_LISTED} more" if len(existing) > MAX_LISTED else ""
        print(
            f"servesim: note: {path}/ already holds {shown}{more}; files written now "
            "replace those of the same name, the others stay",
            file=sys.stderr,
        )
    return existing


def check_out_file(path: str | Path, option: str = "--out") -> bool:
    """Refuse an output file that cannot be written; note (and return True) if it exists."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; give a file name")
    _probe_writable(path, _nearest_existing(path.parent), option)
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option} {path}: exists and cannot be replaced (read-only)")
    if path.exists():
        print(f"servesim: note: {path} exists and will be replaced", file=sys.stderr)
        return True
    return False


LAST_MOVED = "summary.json"  # moved last: its presence says the rest is complete


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A hidden folder in ``out`` to write into (module docstring); its files move
    to the same names in ``out`` when the block ends, or are removed if it raises
    (and so are the folders it made for ``out``, left empty: a Ctrl-C on a fresh
    ``--out`` leaves no empty folder behind)."""
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
    complete = False
    try:
        yield stage
        files = sorted(
            (p for p in stage.rglob("*") if p.is_file()),
            key=lambda p: (p.name == LAST_MOVED, str(p)),
        )
        for path in files:
            target = out / path.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        complete = True
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if not complete:
            for folder in made:
                try:
                    folder.rmdir()
                except OSError:  # holds something after all (or is gone): keep the rest
                    break


def unstaged(paths: list[Path], stage: Path, out: Path) -> list[Path]:
    """Where ``paths`` written under ``stage`` are once ``staged`` moved them to ``out``."""
    return [out / Path(p).relative_to(stage) for p in paths]
