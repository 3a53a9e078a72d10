"""Reading JSON lines files: one loop, one error format, for every reader that takes them.

Traces (Mooncake, ShareGPT-style lists) and measured runs (vLLM's per-request logs,
OTLP exports) are JSON lines: one JSON value a line, blank lines skipped. Every
complaint names ``path, line N`` (from 1, blank lines counted, as an editor shows
them), as the CSV trace readers do. A gzipped file (told by its magic bytes) is read
as the text it holds. It lives here so that ``sim.validation`` may use it too.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sim.errors import ConfigError


def at_line(path: Path, number: int) -> str:
    """How an error names line ``number`` (from 1) of ``path``."""
    return f"{path}, line {number}"


GZIP_MAGIC = b"\x1f\x8b"


def read_text(path: Path) -> str:
    """The file's UTF-8 text (gunzipped if it is gzip), or a one-line ConfigError
    (missing, unreadable, a broken gzip stream, not UTF-8)."""
    try:
        data = path.read_bytes()
        if data.startswith(GZIP_MAGIC):
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, EOFError, zlib.error) as error:
        raise ConfigError(f"{path}: cannot read ({error})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: cannot read ({error.reason} at byte {error.start})") from None


def inner_suffix(path: Path) -> str:
    """The suffix that names the content, lower-case: ``.json`` for ``run.json.gz``."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def json_lines(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of ``text`` (read from ``path``)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        here = at_line(path, number)
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{here}: not JSON ({error.msg})") from None
        yield here, value


def json_objects(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, object)`` for each non-blank line of ``path``; each must be a JSON object."""
    for here, value in json_lines(path, read_text(path)):
        if not isinstance(value, dict):
            raise ConfigError(f"{here}: expected a JSON object")
        yield here, value


def whole_number(value: Any, where: str, field: str, minimum: int) -> int:
    """A JSON value as a whole number >= ``minimum`` (a token count, an id), or a one-line
    ConfigError naming ``where`` and ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {field} must be a number, got {value!r}")
    if value != math.floor(value) or value < minimum:
        raise ConfigError(f"{where}: {field} must be a whole number >= {minimum}, got {value!r}")
    return int(value)
