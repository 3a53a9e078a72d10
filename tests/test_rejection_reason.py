"""``rejection_reason`` is a text column wherever a request table is: the reason where
a request was turned away, missing where it was accepted; never a float column of NaN
(a run without rejections), in the frame and in the files read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.engine.records import reason_column, text_dtype
from sim.validation.runs import request_table

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scenarios" / "chat.yaml"
CASES = {
    "none rejected": ["workload.num_requests=40"],
    "some rejected": ["workload.num_requests=40", "engine.max_model_len_tokens=1200"],
    "all rejected": ["workload.num_requests=20", "engine.max_model_len_tokens=16"],
}


def _check_text(reasons: pd.Series, rejected: np.ndarray) -> None:
    assert pd.api.types.is_string_dtype(reasons.dtype) and reasons.dtype == text_dtype()
    np.testing.assert_array_equal(reasons.notna().to_numpy(), rejected)
    assert all(isinstance(text, str) and text for text in reasons[rejected])


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_a_run_s_frame_and_files_hold_the_reasons_as_text(
    overrides: list[str], tmp_path: Path
) -> None:
    result = api.run(CHAT, overrides, workers=1)
    rejected = result.raw.records.rejected
    assert rejected.sum() == result.summary["num_rejected"]
    _check_text(result.requests["rejection_reason"], rejected)
    # Written from the run's columns (no frame): read back as the frame has it.
    result.write(tmp_path / "columns", plots=False)
    back = pd.read_parquet(tmp_path / "columns" / "requests.parquet")
    _check_text(back["rejection_reason"], rejected)
    pd.testing.assert_series_equal(back["rejection_reason"], result.requests["rejection_reason"])


def test_a_disaggregated_run_s_frame_holds_text() -> None:
    overrides = ["workload.num_requests=30", "engine.max_model_len_tokens=1200"]
    result = api.run(ROOT / "scenarios" / "disaggregated.yaml", overrides, workers=1)
    assert "prefill_replica" in result.raw.records  # the joined records
    _check_text(result.requests["rejection_reason"], result.raw.records.rejected)


def test_reason_column_maps_ids_and_stays_text_without_reasons() -> None:
    ids = pd.Series([4, 7, 9], index=[10, 11, 12])
    with_reasons = reason_column(ids, {7: "too long", 8: "elsewhere"})
    assert with_reasons.isna().tolist() == [True, False, True]
    assert with_reasons[11] == "too long" and with_reasons.index.tolist() == [10, 11, 12]
    for reasons in (reason_column(ids, {}), reason_column(ids, {99: "another request"})):
        _check_text(reasons, np.zeros(3, dtype=bool))


def test_an_imported_run_s_table_holds_text() -> None:
    times = np.array([0.0, 1.0])
    table = request_table(
        times, times + 0.1, times + 0.2, times + 0.5, np.array([5, 6]), np.array([2, 3])
    )
    _check_text(table["rejection_reason"], np.zeros(2, dtype=bool))
