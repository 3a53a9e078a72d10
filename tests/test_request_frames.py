"""One representation inside: numpy columns (``RequestTable``), a frame only at the edges.

A frame made outside a run (a measured run, a stored table) becomes a table
once, where it comes in (``RequestTable.from_frame``); a disaggregated run's
prefill and decode records are joined on numpy columns, so its summary, like
any run's, is computed before pandas is imported; a result's frame is built
where it is handed out.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.engine.records import RECORD_COLUMNS, REQUEST_COLUMNS, RequestTable, completed_mask
from sim.engine.step_runs import StepTable
from sim.metrics.stats import summarize
from sim.serving.disagg import merge_records

ROOT = Path(__file__).resolve().parent.parent
DISAGGREGATED = ROOT / "scenarios" / "disaggregated.yaml"
JOINED = ("decode_ready_s", "decode_first_scheduled_s", "prefill_replica")
TRANSFER = ("kv_transfer_start_s", "kv_transfer_s")
NAN = math.nan


def measured_frame() -> pd.DataFrame:
    """Three requests as a live-server run records them (``sim.validation.endpoint``):
    an HTTP status that may be missing, an error text, a reason in pandas' text dtype."""
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "arrival_s": [0.0, 1.0, 2.0],
            "ready_s": [0.0, 1.0, 2.0],
            "first_scheduled_s": [NAN, NAN, NAN],
            "first_token_s": [0.5, 1.25, NAN],
            "finish_s": [2.5, 3.0, NAN],
            "num_prompt_tokens": [10, 20, 30],
            "num_output_tokens": [5, 8, 4],
            "num_generated_tokens": [5, 8, 0],
            "rejection_reason": pd.array(["", None, "too long"], dtype="string"),
            "http_status": pd.array([200, 200, None], dtype="Int64"),
            "error": [None, None, "HTTP 400"],
        }
    )


def test_a_frame_from_outside_becomes_numpy_columns_once() -> None:
    table = RequestTable.from_frame(measured_frame())
    assert len(table) == 3 and all(isinstance(table[name], np.ndarray) for name in table.columns)
    # A nullable integer column: float64, NaN where missing, typed back by frame().
    assert table["http_status"].dtype == np.float64
    assert np.isnan(table["http_status"]).tolist() == [False, False, True]
    assert table.nullable == {"http_status": "Int64"}
    assert table["error"].tolist() == [None, None, "HTTP 400"]
    # Only a non-empty reason rejects; the summary counts it so and drops it.
    assert table.rejected.tolist() == [False, False, True]
    assert completed_mask(table).tolist() == [True, True, False]
    no_steps = pd.DataFrame({"start_s": [], "end_s": [], "num_itl_tokens": []})
    summary = summarize(table, StepTable.from_frame(no_steps), [])
    assert summary["completed"] == 2 and summary["num_rejected"] == 1
    # TTFTs 0.5 s and 0.25 s: mean 375 ms; E2ELs 2.5 s and 2.0 s: mean 2250 ms.
    assert summary["mean_ttft_ms"] == pytest.approx(375.0)
    assert summary["mean_e2el_ms"] == pytest.approx(2250.0)
    back = table.frame()
    assert str(back["http_status"].dtype) == "Int64" and back["http_status"].isna().tolist() == [
        False,
        False,
        True,
    ]


@pytest.mark.parametrize("missing", ["arrival_s", "num_output_tokens", "rejection_reason"])
def test_a_frame_lacking_a_request_column_is_named(missing: str) -> None:
    assert missing in (*REQUEST_COLUMNS, "rejection_reason")
    with pytest.raises(ValueError, match=rf"requests frame lacks columns \['{missing}'\]"):
        RequestTable.from_frame(measured_frame().drop(columns=missing))


def test_an_empty_frame_is_an_empty_table() -> None:
    table = RequestTable.from_frame(pd.DataFrame())
    assert len(table) == 0 and not table.rejected.any()
    assert set(REQUEST_COLUMNS) <= set(table.columns)


def test_a_column_set_later_must_have_a_value_per_row() -> None:
    table = RequestTable.from_frame(measured_frame())
    table["engine_finish_s"] = table["finish_s"]
    assert table.columns[-1] == "engine_finish_s"
    with pytest.raises(ValueError, match="2 values for 3 rows"):
        table["engine_finish_s"] = np.zeros(2)


def test_the_join_is_in_id_order_with_nan_where_a_pool_never_saw_the_request() -> None:
    # Request 5: prefilled on replica 0, moved, decoded on replica 1; request 3: one
    # output token, done on the prefill side; request 4: rejected on the decode side.
    def records(ids: list[int], replica: int, ready_s: list[float]) -> dict[str, np.ndarray]:
        columns = {name: np.zeros(len(ids), dtype=dtype) for name, dtype in RECORD_COLUMNS.items()}
        columns["request_id"] = np.array(ids, dtype=np.int64)
        columns["ready_s"] = np.array(ready_s)
        columns["replica"] = np.full(len(ids), replica, dtype=np.int32)
        columns["num_prefix_lookups"] = np.ones(len(ids), dtype=np.int64)
        return columns

    prefill = records([5, 3], 0, [0.1, 0.2])
    decode = records([4, 5], 1, [0.3, 0.9])
    transfers = {
        "request_id": np.array([5]),
        "kv_transfer_start_s": np.array([0.5]),
        "kv_transfer_s": np.array([0.4]),
    }
    joined = merge_records(prefill, decode, transfers)
    assert list(joined) == [*RECORD_COLUMNS, *JOINED, *TRANSFER]
    assert joined["request_id"].tolist() == [3, 4, 5]
    assert joined["replica"].tolist() == [0, 1, 1]
    # The queue is the prefill side's; the decode side's ready time is when the KV landed.
    assert joined["ready_s"].tolist() == [0.2, 0.3, 0.1]
    assert joined["decode_ready_s"][1:].tolist() == [0.3, 0.9]
    assert np.isnan(joined["decode_ready_s"][0])
    np.testing.assert_array_equal(joined["prefill_replica"], [0.0, NAN, 0.0])
    np.testing.assert_array_equal(joined["kv_transfer_s"], [NAN, NAN, 0.4])
    assert joined["num_prefix_lookups"].tolist() == [1, 1, 2]  # both sides of request 5


def test_a_disaggregated_run_is_summarised_from_columns_before_pandas_loads() -> None:
    code = (
        "import sys\n"
        "from sim import api\n"
        "from sim.engine.records import RequestTable\n"
        f"r = api.run({str(DISAGGREGATED)!r}, "
        "['workload.num_requests=40', 'cost.kind=roofline'], workers=1)\n"
        "print('pandas' in sys.modules, isinstance(r.raw.records, RequestTable), end=' ')\n"
        "print(r.summary['completed'], len(r.requests), 'pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "False True 40 40 True"


def test_a_disaggregated_frame_types_the_prefill_replica_as_a_nullable_integer() -> None:
    overrides = ["workload.num_requests=30", "engine.max_model_len_tokens=1200"]
    result = api.run(DISAGGREGATED, overrides, workers=1)
    records = result.raw.records
    assert records.rejected.any()  # some prompts exceed 1200 tokens: rejected at intake
    frame = result.raw.requests
    names = [*RECORD_COLUMNS, *JOINED, *TRANSFER, "rejection_reason"]
    assert list(frame.columns) == [*names, "engine_first_token_s", "engine_finish_s"]
    assert str(frame["prefill_replica"].dtype) == "Int32"
    # Missing exactly where a request never reached a prefill replica: the rejected.
    assert frame["prefill_replica"].isna().tolist() == records.rejected.tolist()
    for request_id in records["request_id"][completed_mask(records)][:5].tolist():
        times = result.token_times_s(request_id)
        row = records.find(request_id)[0]
        assert len(times) == records["num_generated_tokens"][row]
        assert times[0] == records["first_token_s"][row] and times[-1] == records["finish_s"][row]
