"""Session 13's audit of what the lab and the printout show against what runs.

- ``servesim lab scenarios/disaggregated.yaml`` showed 1 replica: the cluster is
  2 prefill + 2 decode, which the one-number control cannot say. It now shows the
  scenario's 4, fixed (disabled, saying why).
- A menu showed a choice other than the starting scenario's value when that value
  was not among its choices (``workload.num_requests: 750``, or disaggregated's
  3000): the page said one thing and ran another. The menu now holds the value.
- ``servesim run --percentile-metrics ttft`` printed caveats about TPOT and E2EL
  percentiles it did not print. summary.json keeps every metric, and its caveats.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_lab_browser import _chromium
from test_vllm_bench_face import run_cli, small

import sim
from sim.lab.controls import doc_for, scenario_for
from sim.scenario import read_yaml

ROOT = Path(sim.__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
REPLICAS = "cluster.num_replicas"
REQUESTS = "workload.num_requests"


def _setup(base: dict[str, Any]) -> dict[str, Any]:
    """What the page gets from ``/api/setup`` when the lab starts from ``base``."""
    pytest.importorskip("plotly")
    from aiohttp.test_utils import TestClient, TestServer

    from sim.lab.server import make_app

    async def go() -> dict[str, Any]:
        async with TestClient(TestServer(make_app(base, SCENARIOS))) as client:
            answer: dict[str, Any] = await (await client.get("/api/setup")).json()
            return answer

    return asyncio.run(go())


def _controls(setup: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {control["key"]: control for control in setup["controls"]}


def _chat_with(**workload: Any) -> dict[str, Any]:
    base = read_yaml(SCENARIOS / "chat.yaml", "scenario")
    base["workload"] |= workload
    return base


def test_a_disaggregated_base_shows_its_replicas_fixed_at_the_scenario_s_figure() -> None:
    base = read_yaml(SCENARIOS / "disaggregated.yaml", "scenario")
    setup = _setup(base)
    total = scenario_for(base, SCENARIOS).cluster.total_replicas  # type: ignore[union-attr]
    assert setup["values"][REPLICAS] == total == 4
    fixed = _controls(setup)[REPLICAS]["fixed"]
    assert "2 prefill + 2 decode" in fixed
    # Sent back as shown, the scenario is unchanged (no num_replicas written in).
    assert doc_for(setup["values"], base) == base


def test_a_colocated_base_s_replicas_are_not_fixed() -> None:
    setup = _setup(read_yaml(SCENARIOS / "replicas.yaml", "scenario"))
    assert _controls(setup)[REPLICAS]["fixed"] == ""
    assert setup["values"][REPLICAS] == 4  # replicas.yaml's own


@pytest.mark.parametrize("num_requests", [750, 3000])
def test_a_menu_holds_the_starting_scenario_s_value_among_its_choices(num_requests: int) -> None:
    base = _chat_with(num_requests=num_requests)
    setup = _setup(base)
    choices = _controls(setup)[REQUESTS]["choices"]
    assert setup["values"][REQUESTS] == num_requests
    assert num_requests in choices and choices == sorted(choices)
    # The menu's other choices are still there to pick.
    assert {500, 1000, 2000, 5000} <= set(choices)


def test_a_menu_of_the_default_page_has_its_own_choices_only() -> None:
    setup = _setup(read_yaml(SCENARIOS / "chat.yaml", "scenario"))
    assert _controls(setup)[REQUESTS]["choices"] == [500, 1000, 2000, 5000]


@pytest.mark.browser
def test_the_page_shows_what_a_disaggregated_base_runs(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="servesim lab needs the [lab] extra (plotly)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from benchmark_module import load_benchmark

    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install --no-install-recommends chromium)")
    scenario = SCENARIOS / "disaggregated.yaml"
    process, url = load_benchmark("lab_speed").start_lab(ROOT, str(scenario))
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.wait_for_function("window.lab && window.lab.lastId > 0", timeout=60_000)
            replicas = page.locator("#c-cluster-num_replicas")
            requests = page.locator("#c-workload-num_requests")
            shown = {"replicas": replicas.input_value(), "requests": requests.input_value()}
            disabled = replicas.is_disabled()
            page.locator("#lessons button").first.click()  # a lesson's values are chat's
            after_lesson = replicas.input_value()
            browser.close()
    finally:
        process.terminate()
        process.wait(10)
    assert shown == {"replicas": "4", "requests": "3000"}  # disaggregated.yaml's
    assert disabled  # one number cannot say 2 prefill + 2 decode
    assert after_lesson == "4"  # and a lesson's click leaves it


def test_caveats_of_metrics_left_out_are_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 60 requests: every metric's p99 rests on under one sample beyond it (a caveat each).
    summary = run_cli(tmp_path, small(tmp_path), "--percentile-metrics", "ttft")
    printed = capsys.readouterr().out
    caveats = [line for line in printed.splitlines() if line.startswith("CAVEAT: ")]
    assert caveats and all("_ttft_ms" in line for line in caveats), caveats
    # Every caveat summary.json holds about TTFT is printed, and summary.json keeps
    # the others: it holds every metric's percentiles whatever --percentile-metrics says.
    about_ttft = [c for c in summary["caveats"] if "_ttft_ms" in c.split(" ")[0]]
    assert caveats == [f"CAVEAT: {c}" for c in about_ttft]
    assert any(c.startswith("p99_tpot_ms") for c in summary["caveats"])
    assert "p99_tpot_ms" in summary


def test_a_caveat_not_about_one_metric_is_printed_whatever_metrics_are_asked() -> None:
    from sim.metrics.report import format_summary_table

    summary = {
        "completed": 3,
        "mean_ttft_ms": 1.0,
        "p99_tpot_ms": 2.0,
        "caveats": ["p99_tpot_ms from 3 sample(s) is their maximum, not a percentile", "cost: x"],
    }
    printed = format_summary_table(summary, ("ttft",)).splitlines()
    assert "CAVEAT: cost: x" in printed
    assert not any("p99_tpot_ms" in line for line in printed)
    everything = format_summary_table(summary).splitlines()
    assert "CAVEAT: p99_tpot_ms from 3 sample(s) is their maximum, not a percentile" in everything
