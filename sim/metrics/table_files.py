"""A run's tables written from numpy columns, without pandas (issue 16: instant small runs).

Importing pandas costs ~0.3 s, as much as the simulation of a small run. These
writers give what ``DataFrame.to_parquet`` and ``DataFrame.to_csv`` (``index=False``)
give for the same columns (1-D arrays of one length: numbers, booleans, or
objects holding strings and ``None``):

- Parquet through pyarrow alone: the same types and values, NaN as null, text
  as ``large_string`` (an object column without text as nulls, as pandas, unless
  ``text`` names it), snappy; only pandas' own schema metadata is missing, which
  ``pd.read_parquet`` does not need to read back the same frame.
- CSV with pandas' text: floats' shortest round trip, NaN and missing strings
  empty, quoting by Python's ``csv`` module (as pandas), ``\\n`` line ends.
"""

from __future__ import annotations

import csv
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pyarrow as pa

Columns = Mapping[str, npt.NDArray[Any]]
CSV_SLICE_ROWS = 65_536  # rows turned into text at once by ``write_csv``


def _check(columns: Columns, path: Path) -> int:
    """The number of rows: every column 1-D, of one length."""
    lengths = {name: np.shape(values) for name, values in columns.items()}
    shapes = set(lengths.values())
    if len(shapes) > 1 or any(len(shape) != 1 for shape in shapes):
        raise ValueError(f"{path.name}: columns of different lengths or not 1-D: {lengths}")
    return next(iter(shapes))[0] if shapes else 0


def _strings(values: npt.NDArray[Any], name: str) -> list[str | None]:
    """An object column as strings and ``None`` (NaN counts as missing, as pandas has it)."""
    out: list[str | None] = []
    for value in values.tolist():
        if value is None or (isinstance(value, float) and value != value):
            out.append(None)
        elif isinstance(value, str):
            out.append(value)
        else:
            raise TypeError(f"column {name!r}: expected strings or None, got {value!r}")
    return out


def _validity(valid: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.uint8] | None, int]:
    """Arrow's validity bitmap's bytes (least significant bit first) and null count;
    None: no null."""
    num_nulls = int(valid.size - np.count_nonzero(valid))
    if not num_nulls:
        return None, 0
    return np.packbits(valid, bitorder="little"), num_nulls


def _arrow_array(values: npt.NDArray[Any], name: str, text: bool = False) -> pa.Array:
    """One column as an Arrow array, built from its buffers (``pa.array`` imports pandas,
    the very import this module avoids); ``text``: an object column stored as text."""
    # Imported here: pyarrow (an optional extra, ~0.2 s) loads only where a Parquet
    # file is read or written.
    import pyarrow as pa

    size = values.size
    if values.dtype.kind == "O":
        strings = _strings(values, name)
        if not text and all(s is None for s in strings):  # nothing to type it: nulls, as pandas
            return pa.Array.from_buffers(pa.null(), size, [None], size)
        encoded = [b"" if text is None else text.encode("utf-8") for text in strings]
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, count=size), out=offsets[1:])
        bits, num_nulls = _validity(np.array([text is not None for text in strings], bool))
        bitmap = None if bits is None else pa.py_buffer(bits)
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(pa.large_string(), size, buffers, num_nulls)
    if values.dtype.kind == "b":
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), size, [None, data])
    if values.dtype.kind not in "iuf":
        raise TypeError(f"column {name!r}: cannot store dtype {values.dtype} in parquet")
    kind = pa.from_numpy_dtype(values.dtype)
    bits, num_nulls = _validity(~np.isnan(values)) if values.dtype.kind == "f" else (None, 0)
    bitmap = None if bits is None else pa.py_buffer(bits)
    data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(kind, size, [bitmap, data], num_nulls)


def write_parquet(columns: Columns, path: str | Path, text: Collection[str] = ()) -> Path:
    """Write ``columns`` to ``path`` as ``DataFrame(columns).to_parquet(path, index=False)``
    would, less pandas' metadata (see the module's docstring); the object columns named
    in ``text`` as a frame's text-dtype columns (``large_string``, even all missing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    _check(columns, out)
    arrays = [
        _arrow_array(np.asarray(values), name, name in text) for name, values in columns.items()
    ]
    pq.write_table(pa.Table.from_arrays(arrays, names=list(columns)), out, compression="snappy")
    return out


def _text(values: npt.NDArray[Any], name: str) -> list[str]:
    """One column as pandas' ``to_csv`` prints it (float64: Python's ``repr``, the same
    text as numpy's ``astype(str)``, ~1.7x faster)."""
    kind = values.dtype.kind
    if kind == "O":
        return ["" if text is None else text for text in _strings(values, name)]
    if kind == "f" and values.dtype.itemsize == 8:
        text = list(map(repr, values.tolist()))
        for index in np.flatnonzero(np.isnan(values)).tolist():
            text[index] = ""
        return text
    if kind in "iub":
        return list(map(str, values.tolist()))
    printed = values.astype(str)  # other floats: numpy's own text for their width
    if kind == "f":
        printed[np.isnan(values)] = ""
    return printed.tolist()


def write_csv(columns: Columns, path: str | Path) -> Path:
    """Write ``columns`` to ``path`` as ``DataFrame(columns).to_csv(path, index=False)`` does."""
    out = Path(path)
    num_rows = _check(columns, out)
    arrays = [(name, np.asarray(values)) for name, values in columns.items()]
    # Numbers never need quotes: their rows are joined directly (~2x faster
    # than the csv module, which text columns need for their quoting, and a
    # lone column too: the module writes a row of one empty field as "").
    plain = len(arrays) > 1 and all(values.dtype.kind in "iubf" for _, values in arrays)
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(list(columns))
        # A slice at a time: as Python strings a row takes ~50 bytes a column.
        for start in range(0, num_rows, CSV_SLICE_ROWS):
            part = slice(start, start + CSV_SLICE_ROWS)
            rows = zip(*[_text(values[part], name) for name, values in arrays], strict=True)
            if plain:
                handle.write("".join([",".join(row) + "\n" for row in rows]))
            else:
                writer.writerows(rows)
    return out
