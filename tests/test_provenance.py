"""The artifact files' shared reading, format stamp, one-line errors and provenance facts."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from sim.cost.provenance import (
    check_format,
    git_revision,
    read_artifact,
    utc_now,
    validated,
)
from sim.errors import ConfigError


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    num_rows: int = Field(ge=1)


def one_line(error: pytest.ExceptionInfo[ConfigError]) -> str:
    assert "\n" not in str(error.value)
    return str(error.value)


def test_plain_and_gzip_files_read_the_same(tmp_path: Path) -> None:
    data = {"format": "x", "format_version": 1, "rows": [1, 2]}
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    assert read_artifact(tmp_path / "a.json", "thing") == data
    assert read_artifact(tmp_path / "a.json.gz", "thing") == data


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("bad.json", b"{\n  oops", "not valid JSON at line 2 column 3"),
        ("list.json", b"[1, 2]", "a thing must be a JSON object"),
        ("bad.json.gz", b"not gzip", "cannot read thing ("),
        ("latin.json", b'{"a": "\xff"}', "cannot read thing ("),
    ],
)
def test_bad_files_are_one_line_naming_the_file(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError) as error:
        read_artifact(path, "thing")
    assert one_line(error).startswith(f"{path}: ") and expected in str(error.value)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        read_artifact(tmp_path / "none.json", "thing")
    assert one_line(error) == f"{tmp_path / 'none.json'}: thing not found"
    with pytest.raises(ConfigError, match="cannot read thing"):
        read_artifact(tmp_path, "thing")  # a folder


def test_the_format_stamp_is_checked_name_first(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    check_format({"format": "f", "format_version": 2}, path, "thing", "f", 2)  # no error
    with pytest.raises(ConfigError) as error:
        check_format({"format": "g", "format_version": 9}, path, "thing", "f", 2)
    assert one_line(error) == f"{path}: not a thing (format is not 'f')"
    with pytest.raises(ConfigError) as error:
        check_format({"format": "f", "format_version": 9}, path, "thing", "f", 2, "run x")
    assert one_line(error) == f"{path}: format_version 9, this servesim reads 2 (run x)"
    with pytest.raises(ConfigError) as error:
        check_format({"format": "f"}, path, "thing", "f", 2)
    assert one_line(error).endswith("format_version None, this servesim reads 2")


def test_validation_names_the_file_and_each_bad_field(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    assert validated(Block, {"source": "s", "num_rows": 3}, path) == Block(source="s", num_rows=3)
    with pytest.raises(ConfigError) as error:
        validated(Block, {"num_rows": 3}, path, "provenance")
    assert one_line(error) == f"{path}: provenance.source: Field required"
    with pytest.raises(ConfigError) as error:
        validated(Block, {"source": "", "num_rows": 0}, path)
    message = one_line(error)
    assert message.startswith(f"{path}: source: String should have at least")
    assert "; num_rows: Input should be greater than or equal to 1" in message
    with pytest.raises(ConfigError) as error:
        validated(Block, None, path)
    assert one_line(error) == f"{path}: Input should be a valid dictionary"


def test_git_revision_of_a_checkout_and_of_a_plain_folder(tmp_path: Path) -> None:
    assert git_revision(tmp_path) is None  # not a checkout
    run = ["git", "-C", str(tmp_path)]
    try:
        subprocess.run([*run, "init", "-q"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.fail("git is needed to test the revision")
    (tmp_path / "f.txt").write_text("one")
    subprocess.run([*run, "add", "f.txt"], check=True)
    subprocess.run(
        [*run, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"], check=True
    )
    head = subprocess.run([*run, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_revision(tmp_path) == head.strip()
    (tmp_path / "f.txt").write_text("two")  # a tracked file modified: dirty
    assert git_revision(tmp_path) == f"{head.strip()}+dirty"


def test_now_is_utc_to_the_second() -> None:
    stamp = dt.datetime.fromisoformat(utc_now())
    assert stamp.utcoffset() == dt.timedelta(0) and stamp.microsecond == 0
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 3600
