"""What the artifact files share: reading them, their format stamp, one-line errors, provenance.

Every artifact servesim writes (kernel tables, fitted costs, calibrations)
is one JSON object, gzip-compressed when its name ends in ``.gz``, whose
``format`` and ``format_version`` say what it is, with a ``provenance``
block saying where its numbers came from. This module reads such a file,
checks the stamp, validates a pydantic model with the first problem as one
line naming the file and the field, and builds the provenance facts
(``git_revision``, ``utc_now``) the writers record.
"""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import subprocess
import zlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError, format_error

Model = TypeVar("Model", bound=BaseModel)


def write_artifact(data: dict[str, Any], path: str | Path) -> Path:
    """Write an artifact's JSON document ``data`` indented (one space: diffs read
    well, the file stays small), creating folders; NaN refused. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def read_artifact(path: Path, kind: str) -> dict[str, Any]:
    """The JSON object in ``path`` (gunzipped for ``.gz``); ``kind`` names it in errors."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {kind} not found") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read {kind} ({error})") from None
    try:
        text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read {kind} ({error})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path}: not valid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {kind} must be a JSON object")
    return data


# Bytes of text read for an artifact's head: the stamp and provenance come first
# (the writers put them there), well within this.
HEAD_BYTES = 1 << 16


def _head_text(path: Path, max_bytes: int) -> str | None:
    """Up to ``max_bytes`` of ``path``'s text (gunzipped as it is read), or None if
    it cannot be read or decoded (then ``read_artifact`` reports why)."""
    try:
        with path.open("rb") as file:
            if path.name.endswith(".gz"):
                raw = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(
                    file.read(max_bytes), max_bytes
                )
            else:
                raw = file.read(max_bytes)
    except (OSError, zlib.error):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        # Only a character the cut split (at most 3 bytes of it) is not an error.
        if len(raw) < max_bytes or error.start < len(raw) - 3:
            return None
        return raw[: error.start].decode("utf-8")


def _leading_fields(text: str, stop_key: str) -> dict[str, Any] | None:
    """The fields of the JSON object that ``text`` begins with, up to ``stop_key``;
    None unless ``stop_key`` is reached, every field before it whole."""
    decoder = json.JSONDecoder()
    fields: dict[str, Any] = {}
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        return None
    at += 1
    try:
        while True:
            key, at = decoder.raw_decode(text, _skip(text, at))
            at = _skip(text, at)
            if not isinstance(key, str) or text[at : at + 1] != ":":
                return None
            if key == stop_key:
                return fields
            fields[key], at = decoder.raw_decode(text, _skip(text, at + 1))
            at = _skip(text, at)
            if text[at : at + 1] != ",":
                return None  # the object ends (or the head does) before stop_key
            at += 1
    except json.JSONDecodeError:
        return None


def _skip(text: str, at: int) -> int:
    """The index of the first non-whitespace character of ``text`` from ``at``."""
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def read_artifact_head(
    path: Path, kind: str, stop_key: str, max_bytes: int = HEAD_BYTES
) -> dict[str, Any]:
    """The fields of ``path``'s JSON object before ``stop_key`` (its bulk; all of them
    without it), read from the first ``max_bytes`` of its text only, or from the
    whole file (``read_artifact``, and its errors) when they are not all there.

    ``kind: auto`` reads every shipped kernel artifact's provenance before a run:
    ~50 ms for the five read whole, ~3 ms this way.
    """
    text = _head_text(path, max_bytes)
    fields = _leading_fields(text, stop_key) if text is not None else None
    if fields is None:
        whole = read_artifact(path, kind)
        fields = dict(itertools.takewhile(lambda item: item[0] != stop_key, whole.items()))
    return fields


def check_format(
    data: dict[str, Any],
    path: Path,
    kind: str,
    format_name: str,
    format_version: int,
    rerun: str | None = None,
) -> None:
    """ConfigError unless ``data`` is stamped ``format_name``, version ``format_version``.

    ``rerun`` names the command that writes a current file (said on a version mismatch).
    """
    if data.get("format") != format_name:
        raise ConfigError(f"{path}: not a {kind} (format is not {format_name!r})")
    version = data.get("format_version")
    if version != format_version or isinstance(version, bool):  # a true is not 1
        hint = f" ({rerun})" if rerun else ""
        raise ConfigError(
            f"{path}: format_version {version!r}, this servesim reads {format_version}{hint}"
        )


def validated(model: type[Model], data: Any, path: Path, prefix: str = "") -> Model:
    """``model`` validated from ``data``; ConfigError naming ``path`` and the field if bad."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_error(str(path), error, data, prefix)) from None


def command_output(args: list[str]) -> str | None:
    """Stdout of a short command (``git``, ``nvidia-smi``), stripped; None if the command
    is missing, fails, takes over 20 s or prints nothing."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def git_revision(root: Path | None = None) -> str | None:
    """``HEAD`` of the checkout holding servesim (or ``root``), ``+dirty`` if modified.

    None outside a git checkout (an installed package) or without git.
    """
    git = ["git", "-C", str(root if root is not None else Path(__file__).resolve().parents[2])]
    head = command_output([*git, "rev-parse", "HEAD"])
    if head is None:
        return None
    dirty = command_output([*git, "status", "--porcelain", "--untracked-files=no"])
    return f"{head}+dirty" if dirty else head


def utc_now() -> str:
    """Now, as the artifacts record it: ISO 8601 in UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
