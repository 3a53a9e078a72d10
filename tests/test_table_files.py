"""Tables written from columns without pandas give pandas' files.

``write_csv`` against ``DataFrame.to_csv`` byte for byte, ``write_parquet``
against ``DataFrame.to_parquet`` read back (as a frame and as an Arrow
table), on random columns; a run's ``Result.write`` against ``write_outputs``
on its frames; and ``servesim run`` never importing pandas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import api
from sim.engine.records import RequestTable
from sim.metrics import table_files
from sim.metrics.report import write_outputs
from sim.metrics.stats import request_columns
from sim.metrics.table_files import write_csv, write_parquet

ROOT = Path(__file__).parent.parent

texts = st.one_of(
    st.none(),
    st.text(st.characters(codec="utf-8"), max_size=8),
    st.sampled_from(["a,b", 'say "hi"', "two\nlines", "cr\rhere", " padded ", "é✓"]),
)


@st.composite
def tables(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """Columns of the kinds a run stores: float64 (NaN, inf, -0.0), int64, int32, bool,
    text; and float32 (printed by numpy, not ``repr``)."""
    num_rows = draw(st.integers(0, 30))
    floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
    kinds: dict[str, Any] = {
        "f8": lambda: np.array(draw(st.lists(floats, min_size=num_rows, max_size=num_rows))),
        "f4": lambda: np.array(
            draw(st.lists(st.floats(width=32), min_size=num_rows, max_size=num_rows)),
            dtype=np.float32,
        ),
        "i8": lambda: np.array(
            draw(st.lists(st.integers(-(2**62), 2**62), min_size=num_rows, max_size=num_rows)),
            dtype=np.int64,
        ),
        "i4": lambda: np.array(
            draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=num_rows, max_size=num_rows)),
            dtype=np.int32,
        ),
        "bool": lambda: np.array(
            draw(st.lists(st.booleans(), min_size=num_rows, max_size=num_rows)), dtype=bool
        ),
        "text": lambda: np.array(
            draw(st.lists(texts, min_size=num_rows, max_size=num_rows)), dtype=object
        ),
    }
    names = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=6))
    return {f"{kind}_{i}": kinds[kind]() for i, kind in enumerate(names)}


def same_arrow(mine: Path, theirs: Path) -> bool:
    """The same Arrow columns (types, values, NaN stored as null), less pandas' metadata.

    Text compares as text whatever its offsets' width: pandas 3 writes
    ``large_string`` as this module does, pandas 2 ``string``.
    """
    ours, reference = pq.read_table(mine), pq.read_table(theirs)

    def kinds(table: pa.Table) -> list[tuple[str, str]]:
        return [(f.name, str(f.type).replace("large_string", "string")) for f in table.schema]

    same_types = kinds(ours) == kinds(reference)
    return same_types and bool(ours.cast(reference.schema.remove_metadata()).equals(reference))


@settings(max_examples=150, deadline=None)
@given(columns=tables())
def test_files_are_what_pandas_writes(
    columns: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """CSV byte for byte; Parquet the same frame read back and the same Arrow
    columns, without pandas' metadata."""
    folder = tmp_path_factory.mktemp("tables")
    frame = pd.DataFrame(columns)
    frame.to_csv(folder / "pandas.csv", index=False)
    frame.to_parquet(folder / "pandas.parquet", index=False)
    csv_file = write_csv(columns, folder / "mine.csv")
    assert csv_file.read_bytes() == (folder / "pandas.csv").read_bytes()
    mine, theirs = write_parquet(columns, folder / "mine.parquet"), folder / "pandas.parquet"
    pd.testing.assert_frame_equal(pd.read_parquet(mine), pd.read_parquet(theirs))
    assert same_arrow(mine, theirs)
    assert pq.read_schema(mine).metadata is None


@pytest.mark.parametrize(
    "columns",
    [
        {"x": np.array([np.nan, 1.0])},  # one column: an empty field is written as ""
        {"x": np.array([0.1, np.nan], np.float32), "y": np.array([1e300, 5e-324])},
        {
            "x": np.array([1e16, 1e15, 1.2345678901234568e17, 1e-4, 1e-5, -0.0, np.inf, -np.inf]),
            "n": np.arange(8, dtype=np.int32),
            "b": np.arange(8) % 3 == 0,
        },
    ],
)
def test_number_text_at_the_edges_is_pandas(columns: dict[str, np.ndarray], tmp_path: Path) -> None:
    write_csv(columns, tmp_path / "mine.csv")
    pd.DataFrame(columns).to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "mine.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_a_large_table_is_written_a_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_files, "CSV_SLICE_ROWS", 7)
    columns = {"x": np.arange(50) / 3, "n": np.arange(50), "t": np.array(["a"] * 50, object)}
    write_csv(columns, tmp_path / "mine.csv")
    pd.DataFrame(columns).to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "mine.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_bad_columns_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"t\.csv: columns of different lengths"):
        write_csv({"a": np.arange(3), "b": np.arange(2)}, tmp_path / "t.csv")
    with pytest.raises(ValueError, match=r"t\.parquet: .* not 1-D"):
        write_parquet({"a": np.zeros((2, 2))}, tmp_path / "t.parquet")
    with pytest.raises(TypeError, match="column 'r': expected strings or None, got 3"):
        write_parquet({"r": np.array(["x", 3], object)}, tmp_path / "t.parquet")
    with pytest.raises(TypeError, match="column 'd': cannot store dtype"):
        write_parquet({"d": np.array(["2026-01-01"], "datetime64[D]")}, tmp_path / "t.parquet")
    write_csv({}, tmp_path / "none.csv")  # no columns: an empty header, as pandas writes
    pd.DataFrame().to_csv(tmp_path / "none-pandas.csv", index=False)
    assert (tmp_path / "none.csv").read_bytes() == (tmp_path / "none-pandas.csv").read_bytes()


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.num_requests=300"],
        # Some requests rejected: their reasons as text, the others' missing.
        ["workload.num_requests=300", "engine.max_model_len_tokens=1200"],
        # Every request rejected: a column of reasons and nothing else.
        ["workload.num_requests=50", "engine.max_model_len_tokens=16"],
    ],
)
def test_a_run_writes_from_its_columns_what_its_frames_give(
    overrides: list[str], tmp_path: Path
) -> None:
    result = api.run(ROOT / "scenarios" / "chat.yaml", overrides, workers=1)
    formats = ("parquet", "csv")
    written = write_outputs(
        tmp_path / "columns",
        *_columns_of(result),
        result.summary,
        formats,
        write_steps=True,
        plots=False,
    )
    assert "requests" not in vars(result) and "steps" not in vars(result.raw)
    write_outputs(
        tmp_path / "frames",
        result.requests,
        result.raw.steps,
        result.timeseries,
        result.summary,
        formats,
        write_steps=True,
        plots=False,
    )
    for path in written:
        twin = tmp_path / "frames" / path.name
        if path.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(twin))
            assert same_arrow(path, twin)
        else:
            assert path.read_bytes() == twin.read_bytes(), path.name


def _columns_of(result: api.Result) -> tuple[Any, Any, Any]:
    """What ``Result.write`` hands ``write_outputs``: the run's columns."""
    records = result.raw.records
    assert isinstance(records, RequestTable)
    return request_columns(records), result.raw.step_table.columns(), result.raw.series


def test_result_write_keeps_every_request_and_column(tmp_path: Path) -> None:
    overrides = ["workload.num_requests=120", "engine.max_model_len_tokens=1200"]
    result = api.run(ROOT / "scenarios" / "chat.yaml", overrides, workers=1)
    result.write(tmp_path, plots=False)
    back = pd.read_parquet(tmp_path / "requests.parquet")
    pd.testing.assert_frame_equal(back, result.requests)
    rejected = back["rejection_reason"].notna()
    assert 0 < rejected.sum() < len(back)
    assert back.loc[rejected, "rejection_reason"].str.contains("max_model_len").all()


def test_servesim_run_never_imports_pandas(tmp_path: Path) -> None:
    """The summary, the tables and the figures (drawn here or in the figure
    process) all come from the run's columns."""
    code = (
        "import sys\n"
        "from sim.cli import main\n"
        f"status = main(['run', {str(ROOT / 'scenarios' / 'chat.yaml')!r}, '--out', "
        f"{str(tmp_path)!r}, '-q', '--set', 'workload.num_requests=200', "
        # chat.yaml's auto reads H100 kernel tables, which are pandas frames: the
        # run's own path is what this is about.
        "'--set', 'cost.kind=roofline', "
        "'--figure-process', sys.argv[1]])\n"
        "print(json.dumps([status, 'pandas' in sys.modules]))\n"
    )
    for figure_process in ("no", "yes"):
        done = subprocess.run(
            [sys.executable, "-c", "import json\n" + code, figure_process],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, False], done.stderr
        assert {p.name for p in tmp_path.iterdir()} >= {"requests.parquet", "waterfall.png"}
