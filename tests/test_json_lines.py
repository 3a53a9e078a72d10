"""The shared JSON lines reader: blank lines skipped, every error as ``path, line N: ...``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.workload.json_lines import at_line, json_lines, json_objects, read_text


def test_lines_are_numbered_from_one_counting_blank_ones(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    rows = list(json_lines(path, '{"a": 1}\n\n   \n[2, 3]\n7\n'))
    # Lines 2 and 3 are blank: skipped, but still counted, as an editor shows them.
    assert rows == [
        (f"{path}, line 1", {"a": 1}),
        (f"{path}, line 4", [2, 3]),
        (f"{path}, line 5", 7),
    ]
    assert at_line(path, 12) == f"{path}, line 12"


def test_an_empty_text_has_no_rows(tmp_path: Path) -> None:
    assert list(json_lines(tmp_path / "e.jsonl", "")) == []
    assert list(json_lines(tmp_path / "e.jsonl", "\n \n")) == []


def test_a_bad_line_is_named_with_the_decoders_reason(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    with pytest.raises(ConfigError) as error:
        list(json_lines(path, '{"a": 1}\n{oops\n'))
    text = str(error.value)
    assert text.startswith(f"{path}, line 2: not JSON (") and "\n" not in text


def test_rows_before_a_bad_line_are_yielded_first(tmp_path: Path) -> None:
    rows = json_lines(tmp_path / "c.jsonl", '{"a": 1}\nnope\n')
    assert next(rows)[1] == {"a": 1}  # lazily: the error comes with the bad line
    with pytest.raises(ConfigError, match="line 2: not JSON"):
        next(rows)


def test_objects_must_be_objects(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"x": 1}\n\n{"x": 2}\n', encoding="utf-8")
    assert list(json_objects(path)) == [
        (f"{path}, line 1", {"x": 1}),
        (f"{path}, line 3", {"x": 2}),
    ]
    path.write_text('{"x": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"d.jsonl, line 2: expected a JSON object$"):
        list(json_objects(path))


def test_missing_and_unreadable_files_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nothing.jsonl: file not found$"):
        read_text(tmp_path / "nothing.jsonl")
    with pytest.raises(ConfigError, match="cannot read"):
        read_text(tmp_path)  # a folder
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"bin.jsonl: cannot read \("):
        list(json_objects(binary))
