"""``read_artifact_head``: an artifact's fields before its bulk, from the start of the file.

Property: for any JSON object, written compactly or indented, plain or gzip, cut
anywhere by ``max_bytes``, the head is the whole file's fields before
``stop_key`` (all of them when there is none), and a bad file raises what
``read_artifact`` raises. The shipped kernel artifacts are checked in
``tests/test_cost_imports.py``'s provenance test.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.cost.provenance as provenance
from sim.cost.provenance import read_artifact, read_artifact_head
from sim.errors import ConfigError

STOP = "tables"
KEYS = st.sampled_from(["format", "format_version", "provenance", STOP, "a", "é", "b\n"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),  # any characters: multi-byte ones may be cut by max_bytes
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=5)


def _write(path: Path, data: dict[str, Any], indent: int | None) -> Path:
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    raw = text.encode("utf-8")
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)
    return path


def _before(data: dict[str, Any], stop_key: str) -> dict[str, Any]:
    return dict(itertools.takewhile(lambda item: item[0] != stop_key, data.items()))


@settings(max_examples=150, deadline=None)
@given(
    data=OBJECTS,
    indent=st.sampled_from([None, 0, 2]),
    name=st.sampled_from(["a.json", "a.json.gz"]),
    max_bytes=st.integers(1, 400),
)
def test_the_head_is_the_whole_file_s_fields_before_the_stop_key(
    tmp_path_factory: pytest.TempPathFactory,
    data: dict[str, Any],
    indent: int | None,
    name: str,
    max_bytes: int,
) -> None:
    path = _write(tmp_path_factory.mktemp("head") / name, data, indent)
    whole = read_artifact(path, "thing")
    head = read_artifact_head(path, "thing", STOP, max_bytes)
    assert head == _before(whole, STOP)


@pytest.mark.parametrize("indent", [None, 2])
def test_a_long_file_s_head_is_read_from_its_head_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None
) -> None:
    data = {"format": "x", "provenance": {"note": "é" * 50}, STOP: list(range(50_000))}
    path = _write(tmp_path / "a.json.gz", data, indent)

    def refuse(path: Path, kind: str) -> dict[str, Any]:
        raise AssertionError("the whole file was read")

    monkeypatch.setattr(provenance, "read_artifact", refuse)
    assert read_artifact_head(path, "thing", STOP) == _before(data, STOP)
    # Cut inside the two-byte 'é's: the head is then not all there (whole file read).
    with pytest.raises(AssertionError, match="whole file"):
        read_artifact_head(path, "thing", STOP, max_bytes=60)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("bad.json", b"{\n  oops"),
        ("list.json", b"[1, 2]"),
        ("bad.json.gz", b"not gzip"),
        ("latin.json", b'{"a": "\xff", "tables": 1}'),
        ("cut.json.gz", gzip.compress(b'{"a": 1, "tables": [1, 2', mtime=0)[:-12]),
    ],
    ids=["bad", "list", "bad-gz", "latin", "cut-gz"],
)
def test_a_bad_file_raises_what_reading_it_whole_raises(
    tmp_path: Path, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    try:
        expected: object = read_artifact(path, "thing")
    except ConfigError as error:
        expected = str(error)
    try:
        got: object = read_artifact_head(path, "thing", STOP)
    except ConfigError as error:
        got = str(error)
    if name == "cut.json.gz":  # its head is whole: only the bulk is cut
        assert got == {"a": 1} and isinstance(expected, str)
    else:
        assert isinstance(got, str) and got == expected


def test_a_missing_file_is_the_same_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="thing not found"):
        read_artifact_head(tmp_path / "none.json", "thing", STOP)
