"""waterfall.png: the first requests as bars coloured by phase, TTFT marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.engine.records import RequestTable
from sim.metrics import figure_draw
from sim.metrics.figure_data import NUM_WATERFALL_REQUESTS, PHASE_COLORS
from sim.metrics.lifecycle import PHASES, SPAN_COLUMNS
from sim.metrics.plots import waterfall_data
from sim.scenario import scenario_from_dict

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small_run(num_requests: int = 60) -> api.Result:
    return api.run(
        scenario_from_dict(
            {
                "cost": {"kind": "linear", "step_overhead_s": 0.001, "per_decode_seq_s": 0.004},
                "workload": {
                    "kind": "synthetic",
                    "num_requests": num_requests,
                    "arrival": {"kind": "poisson", "rate_per_s": 30},
                    "prompt_tokens": {"kind": "fixed", "tokens": 200},
                    "output_tokens": {"kind": "fixed", "tokens": 20},
                },
            }
        )
    )


def test_every_phase_has_a_colour() -> None:
    assert set(PHASE_COLORS) == set(PHASES)
    assert len(set(PHASE_COLORS.values())) == len(PHASES)


def test_run_writes_a_waterfall_of_the_first_requests(tmp_path: Path) -> None:
    result = small_run()
    paths = result.write(tmp_path)
    assert tmp_path / "waterfall.png" in paths
    data = (tmp_path / "waterfall.png").read_bytes()
    assert data.startswith(PNG_MAGIC)
    image = matplotlib.image.imread(tmp_path / "waterfall.png")
    assert image.shape[0] > 300 and image.shape[1] > 1000
    spans = result.spans()
    assert sorted(spans["request_id"].unique()) == list(range(NUM_WATERFALL_REQUESTS))


def test_spans_of_an_untraced_run_cover_each_request_from_arrival_to_finish() -> None:
    result = small_run(20)
    spans = result.spans(20)
    assert list(spans.columns) == SPAN_COLUMNS
    for request_id, mine in spans.groupby("request_id"):
        row = result.raw.requests.set_index("request_id").loc[request_id]
        assert mine["start_s"].iloc[0] == pytest.approx(row["arrival_s"])
        assert mine["end_s"].iloc[-1] == pytest.approx(row["finish_s"])
        assert (mine["start_s"].to_numpy()[1:] == mine["end_s"].to_numpy()[:-1]).all()
        assert list(mine["phase"])[-2:] == ["decode", "detokenize"]


def test_empty_and_unfinished_inputs_still_draw(tmp_path: Path) -> None:
    empty = pd.DataFrame(columns=SPAN_COLUMNS)
    requests = RequestTable({"request_id": np.zeros(0, np.int64), "first_token_s": np.zeros(0)}, {})
    assert (
        figure_draw.draw_waterfall_figure(
            waterfall_data(empty, requests), tmp_path / "a.png"
        ).read_bytes()[:8]
        == PNG_MAGIC
    )
    spans = pd.DataFrame([[0, 0, "way_in", 0.0, 0.5, 0]], columns=SPAN_COLUMNS)
    requests = RequestTable({"request_id": np.array([0]), "first_token_s": np.array([np.nan])}, {})
    assert figure_draw.draw_waterfall_figure(
        waterfall_data(spans, requests), tmp_path / "b.png"
    ).exists()
