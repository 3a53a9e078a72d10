"""A run too short to measure a served ratio is refused, not answered "0 req/s".

The served ratio counts completions per arrival over the k arrivals after the
median one (sim.planning.served): it moves in steps of 1 / k, and one request
at the window's edge moves it by a step. Under a light load a run of 2k
requests reads (k - 1) / k and one of 2k + 1 reads 1: below k = 20 the step is
wider than the check's 5 % margin, and the verdict is the run's parity, not
the server's. A 2-row trace used to get "capacity: 0 req/s".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.planning.served import SERVED_MIN_RATIO, served_ratio
from tests.cli_errors import one_line_error

ROOT = Path(__file__).resolve().parent.parent


@given(
    num_in_window=st.integers(1, 19),
    busy_fraction=st.floats(1e-6, 0.49),
    gap_s=st.floats(1e-3, 10.0),
)
def test_a_short_run_is_judged_by_its_parity_not_its_server(
    num_in_window: int, busy_fraction: float, gap_s: float
) -> None:
    # Evenly spaced arrivals, each done well before the next arrives: a server
    # that keeps up with ease, judged unserved or served by one request more.
    def ratio(num_requests: int) -> float:
        arrival_s = np.arange(num_requests) * gap_s
        return served_ratio(arrival_s, arrival_s + busy_fraction * gap_s)

    assert ratio(2 * num_in_window) == pytest.approx((num_in_window - 1) / num_in_window)
    assert ratio(2 * num_in_window) < SERVED_MIN_RATIO <= ratio(2 * num_in_window + 1)


def test_forty_requests_can_read_served() -> None:
    arrival_s = np.arange(40) * 1.0
    assert served_ratio(arrival_s, arrival_s + 1e-3) >= SERVED_MIN_RATIO


def test_capacity_on_a_two_row_trace_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((ROOT / "scenarios" / "azure_trace.yaml").read_text())
    rows = (ROOT / "scenarios" / "data" / "azure_conv_sample.csv").read_text().splitlines()
    (tmp_path / "two.csv").write_text("\n".join(rows[:3]) + "\n")
    doc["workload"]["path"] = "two.csv"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    argv = ["capacity", str(path), "--slo", "ttft_mean_ms=500", "-q", "--out", str(out)]
    message = one_line_error(capsys, argv)
    assert message.startswith("runs of 2 requests cannot tell whether the load is served")
    assert "--num-requests >= 40" in message
