"""Strict YAML input: duplicate keys and binary files are one-line errors naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.planning.sweep import load_sweep
from sim.scenario import load_scenario
from sim.scenario.strict_yaml import MAX_YAML_BYTES, parse_yaml, read_yaml

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
TWO_WORKLOADS = """\
name: twice
workload:
  kind: synthetic
  num_requests: 10
  arrival: {kind: poisson, rate_per_s: 1.0}
workload:
  kind: synthetic
  num_requests: 20
  arrival: {kind: poisson, rate_per_s: 2.0}
"""


def one_line_error(path: Path, what: str = "scenario") -> str:
    with pytest.raises(ConfigError) as error:
        read_yaml(path, what)
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_whole_block_given_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(TWO_WORKLOADS)
    message = one_line_error(path)
    assert "line 6: duplicate key 'workload' (first at line 2)" in message
    with pytest.raises(ConfigError, match="duplicate key 'workload'"):
        load_scenario(path)


def test_a_nested_duplicate_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "nested.yaml"
    path.write_text("workload:\n  num_requests: 1\n  kind: synthetic\n  num_requests: 2\n")
    assert "line 4: duplicate key 'num_requests' (first at line 2)" in one_line_error(path)
    path.write_text("slo: {ttft_ms: 1, ttft_ms: 2}\n")  # flow style, same line
    assert "duplicate key 'ttft_ms'" in one_line_error(path)


def test_same_keys_in_different_mappings_and_merge_keys_are_fine() -> None:
    doc = parse_yaml("a: {x: 1}\nb: {x: 2}\nbase: &b {y: 1}\nc:\n  <<: *b\n  y: 2\n")
    assert doc == {"a": {"x": 1}, "b": {"x": 2}, "base": {"y": 1}, "c": {"y": 2}}
    assert parse_yaml("[1, 2, 1]") == [1, 2, 1]


def test_a_binary_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0xFF, 0x00]))
    assert "not a text scenario file (byte 0 is not UTF-8)" in one_line_error(path)
    path.write_bytes(b"name: x\x00\x01\x02\n")  # valid UTF-8 but control characters
    one_line_error(path)


def test_syntax_errors_and_missing_files_keep_their_one_line_messages(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    assert "line 2" in one_line_error(path)
    assert "cannot read scenario" in one_line_error(tmp_path / "missing.yaml")


def test_the_cli_refuses_them_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twice, binary = tmp_path / "twice.yaml", tmp_path / "binary.yaml"
    twice.write_text(TWO_WORKLOADS)
    binary.write_bytes(b"\xff\xfe\x00\x00garbage")
    for path in (twice, binary):
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_sweep_file_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: s\nscenario: {SCENARIOS / 'chat.yaml'}\nname: t\n")
    with pytest.raises(ConfigError, match="line 3: duplicate key 'name'"):
        load_sweep(path)


def test_set_values_with_duplicate_keys_are_taken_as_text() -> None:
    # A --set value is parsed as YAML when it parses; a duplicate is not silently merged.
    with pytest.raises(ConfigError):
        load_scenario(SCENARIOS / "chat.yaml", ["slo={ttft_ms: 1, ttft_ms: 2}"])


def test_an_oversized_file_is_refused_by_size_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 40 MB scenario took 46 s of parsing to be refused (issue 30)."""
    path = tmp_path / "big.yaml"
    path.write_text("a: 1\n" + "# padding\n" * (MAX_YAML_BYTES // 10 + 1))

    def no_parse(text: str) -> None:
        raise AssertionError("parsed before the size check")

    monkeypatch.setattr("sim.scenario.strict_yaml.parse_yaml", no_parse)
    with pytest.raises(ConfigError, match=r"big\.yaml: [0-9,]+ bytes is too large for a scenario"):
        read_yaml(path, "scenario")
    path.write_text("a: 1\n" + "# padding\n" * (MAX_YAML_BYTES // 10 - 1))
    monkeypatch.undo()
    assert read_yaml(path, "scenario") == {"a": 1}
