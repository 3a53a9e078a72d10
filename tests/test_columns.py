"""Columns: row-interleaved groups per dtype, split back into columns exactly."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.engine.columns import Columns

DTYPES = {"a": "i4", "t": "f8", "b": "i8", "c": "i4", "u": "f8"}


def test_append_and_group_extends_build_the_same_rows() -> None:
    by_value, by_group = Columns(DTYPES), Columns(DTYPES)
    rows = [(1, 0.5, 10, 2, 1.5), (3, 2.5, 30, 4, 3.5)]
    for a, t, b, c, u in rows:
        by_value.append(a, t, b, c, u)
        by_group.group("i4", ("a", "c")).extend((a, c))
        by_group.group("f8", ("t", "u")).extend((t, u))
        by_group.group("i8", ("b",)).append(b)
    for columns in (by_value, by_group):
        frame = columns.frame()
        assert list(frame.columns) == list(DTYPES)
        assert [str(frame[name].dtype) for name in DTYPES] == [
            "int32",
            "float64",
            "int64",
            "int32",
            "float64",
        ]
        expected = pd.DataFrame(rows, columns=list(DTYPES)).astype(
            {"a": "int32", "b": "int64", "c": "int32"}
        )
        pd.testing.assert_frame_equal(frame, expected)
        assert len(columns.frame()) == 2


def test_a_caller_stating_the_wrong_layout_is_refused() -> None:
    columns = Columns(DTYPES)
    with pytest.raises(ValueError, match=r"i4 columns are \['a', 'c'\]"):
        columns.group("i4", ("c", "a"))
    with pytest.raises(ValueError, match="None"):
        Columns({"t": "f8"}).group("i4", ("a",))


def test_views_share_memory_and_the_groups_grow_once_they_are_gone() -> None:
    columns = Columns({"x": "i4", "y": "i4"})
    columns.append(1, 2)
    columns.append(3, 4)
    views = columns.views()
    assert views["y"].tolist() == [2, 4]
    assert not views["y"].flags["C_CONTIGUOUS"]  # a strided view of the group
    with pytest.raises(BufferError):
        columns.append(5, 6)  # a view holds the group's buffer
    del views
    columns.append(5, 6)  # the views are gone, so the group may grow
    assert columns.views()["x"].tolist() == [1, 3, 5]


def test_no_rows() -> None:
    columns = Columns(DTYPES)
    assert columns.frame().shape == (0, 5)


@given(
    st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            st.floats(allow_nan=False),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.floats(allow_nan=True),
        ),
        max_size=30,
    )
)
def test_every_value_comes_back_in_its_column(
    rows: list[tuple[int, float, int, int, float]],
) -> None:
    columns = Columns(DTYPES)
    for row in rows:
        columns.append(*row)
    views = columns.views()
    for k, name in enumerate(DTYPES):
        got, want = views[name].tolist(), [row[k] for row in rows]
        # Exact, NaN standing for itself.
        assert [("nan" if g != g else g) for g in got] == [("nan" if w != w else w) for w in want]
