"""Issue 39, a new user's round: import-run's counts too large to hold.

An ``input_lens`` of 1e30 in a vllm bench result was cast to int64 and
written to trace.csv as -9223372036854775808 with exit 0 (numpy's only sign
a RuntimeWarning). A count is refused at 2**53, as the CSV trace reader
already refuses one: float64 holds whole numbers exactly only below it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_errors import one_line_error
from test_import_edges import bench, write

from sim.errors import ConfigError
from sim.validation.formats.vllm_bench import read_vllm_bench


@pytest.mark.parametrize("field", ["input_lens", "output_lens"])
@pytest.mark.parametrize("value", [10**30, 2**53, 1e300])
def test_a_token_count_too_large_to_hold_is_refused_naming_it(
    tmp_path: Path, field: str, value: float
) -> None:
    document = bench()
    document[field] = [value, *document[field][1:]]
    with pytest.raises(ConfigError, match=rf"request 0: {field} must be below 2\*\*53"):
        read_vllm_bench(write(tmp_path, document))


def test_the_largest_count_below_the_limit_is_read_exactly(tmp_path: Path) -> None:
    document = bench()
    document["input_lens"] = [2**53 - 1, *document["input_lens"][1:]]
    run = read_vllm_bench(write(tmp_path, document))
    assert int(run.requests["num_prompt_tokens"].max()) == 2**53 - 1


def test_import_run_refuses_it_in_one_line_and_writes_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = bench()
    document["input_lens"] = [10**30, *document["input_lens"][1:]]
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(document))
    out = tmp_path / "out"
    message = one_line_error(capsys, ["import-run", str(source), "--out", str(out)])
    assert str(source) in message and "input_lens" in message
    assert not out.exists()
