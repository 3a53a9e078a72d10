"""``sim.api.result``: the shared summary header, and a result's files drawn apart or here.

``summary_header`` names what ran, for a simulated run (``build_result``) and a
measured one (``calibration.measure``) alike. ``Result.figure_job`` is the data
``servesim run`` hands to its figure process; ``Result.write(plots=False)``
writes the rest meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.api.result import Result, engine_settings, summary_header
from sim.metrics.figure_draw import draw_prepared
from sim.metrics.report import FigureJob, draw_figures, prepare_figures
from sim.scenario import Scenario, scenario_from_dict

HEADER_KEYS = [
    "scenario",
    "seed",
    "model",
    "hardware",
    "cost_model",
    "policy",
    "num_kv_blocks",
    "engine_settings",
]


def _scenario(num_requests: int = 50) -> Scenario:
    return scenario_from_dict(
        {
            "name": "header",
            "seed": 7,
            "cost": {"kind": "roofline"},
            "scheduler": {"kind": "continuous", "max_num_seqs": 8},
            "engine": {"num_kv_blocks": 300, "block_size_tokens": 16, "max_model_len_tokens": 4800},
            "workload": {
                "kind": "synthetic",
                "num_requests": num_requests,
                "arrival": {"kind": "poisson", "rate_per_s": 20},
                "prompt_tokens": {"kind": "fixed", "tokens": 32},
                "output_tokens": {"kind": "fixed", "tokens": 4},
            },
        }
    )


@pytest.fixture(scope="module")
def result() -> Result:
    return api.run(_scenario())


# --- summary_header -------------------------------------------------------------------------


def test_the_header_names_what_ran_in_a_fixed_order() -> None:
    scenario = _scenario()
    config = api.core_config_for(scenario)
    header = summary_header(scenario, config, "measured")
    assert list(header) == HEADER_KEYS
    assert header["scenario"] == "header" and header["seed"] == 7
    assert (header["model"], header["hardware"]) == (scenario.model.name, scenario.hardware.name)
    assert header["cost_model"] == "measured"
    assert header["policy"] == "continuous"
    assert header["num_kv_blocks"] == 300  # the scenario's own count
    assert header["engine_settings"] == engine_settings(scenario, config)
    assert header["engine_settings"]["max_num_seqs"] == 8


def test_a_simulated_summary_opens_with_the_header(result: Result) -> None:
    engine = api.engine_for(result.scenario)
    expected = summary_header(result.scenario, engine.core, engine.cost.label)
    header = {key: result.summary[key] for key in HEADER_KEYS}
    assert header == expected
    assert result.summary["cost_model"].startswith("roofline")
    # The header keys come first after the metrics, in the header's order.
    keys = list(result.summary)
    start = keys.index("scenario")
    assert keys[start : start + len(HEADER_KEYS)] == HEADER_KEYS


def test_the_header_is_one_object_on_the_api_face() -> None:
    assert api.summary_header is summary_header
    assert "summary_header" in api.__all__


# --- Result.figure_job and Result.write(plots=False) ----------------------------------------


def test_the_figure_job_carries_what_write_draws(result: Result, tmp_path: Path) -> None:
    job = result.figure_job(tmp_path)
    assert job.out_dir == tmp_path
    # The run's columns, not frames: they are cut into arrays without pandas.
    assert job.requests is result.raw.records and job.timeseries is result.raw.series
    assert job.slo == result.scenario.slo
    assert job.waterfall is not None
    spans, records = job.waterfall
    assert list(spans) == list(result.spans().itertuples(index=False, name=None))
    assert records is result.raw.records
    assert prepare_figures(job).names() == ["latency_cdf.png", "timeseries.png", "waterfall.png"]


def test_write_without_plots_writes_only_the_tables(result: Result, tmp_path: Path) -> None:
    written = result.write(tmp_path, plots=False)
    assert sorted(p.name for p in written) == ["requests.parquet", "summary.json", "timeseries.csv"]
    assert not list(tmp_path.glob("*.png"))


def test_tables_here_and_figures_apart_make_what_write_makes(
    result: Result, tmp_path: Path
) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    together = result.write(whole)
    apart = result.write(split, plots=False) + draw_figures(result.figure_job(split))
    assert [p.name for p in together] == [p.name for p in apart]
    for name in ("requests.parquet", "summary.json", "timeseries.csv"):
        assert (whole / name).read_bytes() == (split / name).read_bytes(), name
    for name in prepare_figures(result.figure_job(split)).names():
        assert (split / name).stat().st_size > 10_000, name


def test_draw_figures_draws_only_the_named_ones(result: Result, tmp_path: Path) -> None:
    job = result.figure_job(tmp_path)
    assert draw_prepared(prepare_figures(job), ["waterfall.png"]) == [tmp_path / "waterfall.png"]
    assert [p.name for p in tmp_path.iterdir()] == ["waterfall.png"]
    assert draw_prepared(prepare_figures(job), []) == []
    assert draw_prepared(prepare_figures(job), ["no-such.png"]) == []


def test_without_a_waterfall_there_is_no_waterfall_png(result: Result, tmp_path: Path) -> None:
    job = FigureJob(tmp_path, result.raw.records, result.timeseries)
    assert prepare_figures(job).names() == ["latency_cdf.png", "timeseries.png"]
    assert [
        p.name for p in draw_prepared(prepare_figures(job), ["waterfall.png", "timeseries.png"])
    ] == ["timeseries.png"]
    assert np.isfinite(result.requests["finish_s"]).all()  # the run itself was complete


def test_write_expands_the_step_log_only_to_write_it(tmp_path: Path) -> None:
    """The step log is kept by runs; one row per step (tens of millions at a million
    requests) is built only for ``steps.parquet``, as columns: no frame of it
    (``RawResult.steps``, cached in the instance once built) is made."""
    result = api.run(_scenario())
    assert "steps" not in vars(result.raw)
    written = result.write(tmp_path / "plain", plots=False)
    assert "steps" not in vars(result.raw)
    assert not any(path.name.startswith("steps") for path in written)
    written = result.write(tmp_path / "with", write_steps=True, plots=False)
    assert "steps" not in vars(result.raw)
    table = next(path for path in written if path.name.startswith("steps"))
    pd.testing.assert_frame_equal(pd.read_parquet(table), result.raw.steps)
    assert len(result.raw.steps) == result.raw.step_table.num_steps
