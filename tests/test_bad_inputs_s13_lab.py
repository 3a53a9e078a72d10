"""Session 13's audit of what the lab and the printout show against what runs.

- ``servesim lab scenarios/disaggregated.yaml`` showed 1 replica: the cluster is
  2 prefill + 2 decode, which the one-number control cannot say. It now shows the
  scenario's 4, fixed (disabled, saying why).
- A menu showed a choice other than the starting scenario's value when that value
  was not among its choices (``workload.num_requests: 750``, or disaggregated's
  3000): the page said one thing and ran another. The menu now holds the value.
- A slider's knob stopped at its range's end for a starting value beyond it
  (``max_num_seqs: 2048``, a rate of 500): its range now reaches the value.
- A lesson's click put chat's ``max_num_seqs`` on a static scheduler (refused run):
  a lesson the starting scenario cannot take is disabled, with the CLI's line.
- On a static scheduler (no ``max_num_seqs``) the batching controls read "null",
  and on a ``duration_s`` base the requests menu was blank; moving either was a
  refused run. They are fixed, saying why, and a lesson setting one is disabled.
- ``servesim run --percentile-metrics ttft`` printed caveats about TPOT and E2EL
  percentiles it did not print. summary.json keeps every metric, and its caveats.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_lab_browser import _chromium
from test_vllm_bench_face import run_cli, small

import sim
from sim.cli import error_line
from sim.errors import ConfigError
from sim.lab.controls import CONTROLS, RATE_KEY, doc_for, scenario_for
from sim.scenario import read_yaml, set_dotted

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


@contextmanager
def _lab_page(scenario: Path) -> Iterator[Any]:
    """A chromium page on ``servesim lab SCENARIO``, once its first run is drawn (skips
    without the [lab] extra, playwright or chromium)."""
    pytest.importorskip("plotly", reason="servesim lab needs the [lab] extra (plotly)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from benchmark_module import load_benchmark

    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install --no-install-recommends chromium)")
    process, url = load_benchmark("lab_speed").start_lab(ROOT, str(scenario))
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.wait_for_function("window.lab && window.lab.lastId > 0", timeout=60_000)
            yield page
            browser.close()
    finally:
        process.terminate()
        process.wait(10)


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
    with _lab_page(SCENARIOS / "disaggregated.yaml") as page:
        replicas = page.locator("#c-cluster-num_replicas")
        requests = page.locator("#c-workload-num_requests")
        shown = {"replicas": replicas.input_value(), "requests": requests.input_value()}
        disabled = replicas.is_disabled()
        page.locator("#lessons button").first.click()  # a lesson's values are chat's
        after_lesson = replicas.input_value()
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


# Session 13, second pass: a slider's range holds the starting scenario's value.
# A range input cannot stand outside its min/max: its knob sat at an end while the
# page said and ran the scenario's value, and the value could not be reached again.
SYNTHETIC = sorted(
    path.name
    for path in SCENARIOS.glob("*.yaml")
    if read_yaml(path, "scenario").get("workload", {}).get("kind") == "synthetic"
)
OUTSIDE = {  # a value beyond each slider's (and a number box's) own range
    RATE_KEY: 0.1,
    "workload.arrival.burstiness": 8,
    "workload.prompt_tokens.median_tokens": 8,
    "workload.prompt_tokens.sigma": 2.5,
    "workload.output_tokens.median_tokens": 3000,
    "scheduler.max_num_seqs": 2048,
    "scheduler.max_num_batched_tokens": 32768,
    "workload.prefix_groups.num_groups": 2000,
}


def _chat_set(values: dict[str, Any]) -> dict[str, Any]:
    """chat.yaml with ``values`` at their dotted keys, as ``--set`` writes them."""
    base = read_yaml(SCENARIOS / "chat.yaml", "scenario")
    base["workload"]["arrival"] = {"kind": "gamma", "rate_per_s": 10, "burstiness": 1}
    base["workload"]["prefix_groups"] = {"shared_prefix_tokens": 64, "num_groups": 8}
    base["engine"]["max_model_len_tokens"] = 32768
    for key, value in values.items():
        set_dotted(base, key, value, "test")
    scenario_for(base, SCENARIOS)  # a scenario the CLI runs
    return base


def _shows(control: dict[str, Any], value: Any) -> bool:
    """Whether ``control`` (as the page gets it) can show ``value``."""
    if control["kind"] == "select":
        return value is None or value in control["choices"]
    if control["kind"] in ("slider", "number") and isinstance(value, int | float):
        return bool(control["low"] <= value <= control["high"])
    return True


@pytest.mark.parametrize(("key", "value"), [*OUTSIDE.items(), (RATE_KEY, 500)])
def test_a_slider_s_range_holds_the_starting_scenario_s_value(key: str, value: Any) -> None:
    base = _chat_set({key: value})
    setup = _setup(base)
    controls = _controls(setup)
    assert setup["values"][key] == value
    assert _shows(controls[key], value), controls[key]
    # Its own range is kept beyond the value, and no other control's moves.
    own = {c.key: c for c in CONTROLS}
    assert controls[key]["low"] <= own[key].low and controls[key]["high"] >= own[key].high
    assert {k: c for k, c in controls.items() if k != key} == {
        k: c for k, c in _controls(_setup(_chat_set({}))).items() if k != key
    }
    assert doc_for(setup["values"], base) == base


@pytest.mark.parametrize("name", SYNTHETIC)
def test_each_synthetic_scenario_s_shown_values_are_its_own(name: str) -> None:
    base = doc_for({}, read_yaml(SCENARIOS / name, "scenario"))  # as the lab reads it
    setup = _setup(base)
    controls = _controls(setup)
    assert all(_shows(controls[k], v) for k, v in setup["values"].items()), name
    # Sent back as shown, the scenario is the one the lab started from.
    assert doc_for(setup["values"], base) == base
    # A lesson's button is offered only where its values make a scenario that runs.
    for lesson in setup["lessons"]:
        for key, control in controls.items():
            if control["fixed"]:
                assert lesson["values"][key] == setup["values"][key]
        from sim.lab.lessons import LESSON_BY_NAME

        own = LESSON_BY_NAME[lesson["name"]].values
        taken = [f"{k}: {c['fixed']}" for k, c in controls.items() if c["fixed"] and k in own]
        try:
            scenario_for(doc_for(lesson["values"], base), SCENARIOS)
        except ConfigError as error:
            assert lesson["refused"] == (taken[0] if taken else error_line(error))
        else:
            assert lesson["refused"] == (taken[0] if taken else "")


def test_chat_s_lessons_are_refused_where_the_scheduler_takes_none_of_their_keys() -> None:
    # static_vs_continuous batches statically: a lesson's max_num_seqs is not its to take.
    from sim.lab.lessons import LESSON_BY_NAME

    setup = _setup(read_yaml(SCENARIOS / "static_vs_continuous.yaml", "scenario"))
    for lesson in setup["lessons"]:
        own = LESSON_BY_NAME[lesson["name"]].values
        if "scheduler.max_num_seqs" in own:
            assert "this policy (static) has no max_num_seqs" in lesson["refused"]
        else:  # the scheduler's knobs are fixed: the lesson leaves them out
            assert lesson["refused"] == "", lesson
    assert not any(lesson["refused"] for lesson in _setup(_chat_set({}))["lessons"])


@pytest.mark.browser
def test_the_page_s_knobs_stand_at_a_base_s_values_outside_their_ranges(tmp_path: Path) -> None:
    base = read_yaml(SCENARIOS / "static_vs_continuous.yaml", "scenario")
    base["workload"]["arrival"]["rate_per_s"] = 500
    base["workload"]["prompt_tokens"]["sigma"] = 2.5
    scenario = tmp_path / "static.yaml"
    scenario.write_text(yaml.safe_dump(base))
    with _lab_page(scenario) as page:
        # Each knob read back as the page reads a move (lab.js's readInput).
        knobs = page.evaluate(
            """() => Object.fromEntries(window.lab.controls
                 .filter((c) => c.kind === 'slider' && window.lab.values[c.key] !== null)
                 .map((c) => [c.key, readInput(c, document.getElementById(
                     'c-' + c.key.replaceAll('.', '-')))]))"""
        )
        shown = page.evaluate("() => window.lab.values")
        refused = page.locator("#lessons button:disabled").count()
        seqs = page.locator("#c-scheduler-max_num_seqs")
        seqs_said = page.evaluate(
            "() => document.getElementById('c-scheduler-max_num_seqs')"
            ".previousSibling.querySelector('output').textContent"
        )
        seqs_disabled = seqs.is_disabled()
    assert knobs[RATE_KEY] == pytest.approx(500, rel=0.01)  # not the range's 200
    assert knobs["workload.prompt_tokens.sigma"] == 2.5  # not 2
    for key, knob in knobs.items():  # every other knob within its slider's resolution
        assert knob == pytest.approx(shown[key], rel=0.01, abs=0.025), key
    # The static scheduler has no max_num_seqs: its slider is disabled, saying so.
    assert seqs_disabled and seqs_said == " (this policy (static) has no max_num_seqs)"
    # Lessons setting a batching knob the static scheduler lacks (chunked-prefill,
    # bursty-demand); the others keep its scheduler as it is.
    assert refused == 2


# Session 13, third pass: a control the starting scenario has no value for, and
# could not take one at, is fixed (disabled, saying why) rather than showing "null"
# or a blank menu whose every move is a refused run.
POLICIES = sorted(
    name
    for name in SYNTHETIC
    if (read_yaml(SCENARIOS / name, "scenario").get("scheduler") or {}).get("kind")
    not in (None, "continuous")
)
BATCHING = ("scheduler.max_num_seqs", "scheduler.max_num_batched_tokens")


def _moved(control: dict[str, Any]) -> Any:
    """A value the page could give ``control`` by moving it."""
    if control["kind"] == "checkbox":
        return True
    return control["choices"][0] if control["kind"] == "select" else control["low"]


def test_a_static_scheduler_s_batching_controls_are_fixed_saying_why() -> None:
    base = read_yaml(SCENARIOS / "static_vs_continuous.yaml", "scenario")
    controls = _controls(_setup(base))
    for key in (*BATCHING, "scheduler.chunked_prefill"):
        field = key.split(".")[1]
        assert controls[key]["fixed"] == f"this policy (static) has no {field}", key
        with pytest.raises(ConfigError, match=field):  # what a move would have been
            scenario_for(doc_for({key: _moved(controls[key])}, base), SCENARIOS)
    assert not any(c["fixed"] for c in _controls(_setup(_chat_set({}))).values())


@pytest.mark.parametrize("name", POLICIES)
def test_each_policy_s_scheduler_controls_are_fixed_exactly_where_a_move_is_refused(
    name: str,
) -> None:
    base = doc_for({}, read_yaml(SCENARIOS / name, "scenario"))
    controls = _controls(_setup(base))
    for key, control in controls.items():
        if not key.startswith("scheduler."):
            continue
        try:
            scenario_for(doc_for({key: _moved(control)}, base), SCENARIOS)
            refused = ""
        except ConfigError as error:
            refused = str(error)  # a value out of bounds is refused, a policy's own key not
        assert ("Extra inputs are not permitted" in refused) == bool(control["fixed"]), key


VALIDATE = sorted(path.name for path in SCENARIOS.glob("validate_*.yaml"))


@pytest.mark.parametrize("name", VALIDATE)
def test_a_duration_base_s_requests_menu_is_fixed_saying_why(name: str) -> None:
    base = read_yaml(SCENARIOS / name, "scenario")
    setup = _setup(base)
    control = _controls(setup)[REQUESTS]
    duration_s = base["workload"]["duration_s"]
    assert setup["values"][REQUESTS] is None
    assert f"workload.duration_s: {duration_s}" in control["fixed"]
    with pytest.raises(ConfigError, match="give exactly one of num_requests and duration_s"):
        scenario_for(doc_for({REQUESTS: control["choices"][0]}, base), SCENARIOS)
    # Nothing else is fixed: each lesson leaving num_requests alone is offered.
    assert [k for k, c in _controls(setup).items() if c["fixed"]] == [REQUESTS]
    assert any(lesson["refused"] == "" for lesson in setup["lessons"])


def test_blank_lengths_that_a_move_makes_lognormal_are_not_fixed() -> None:
    # summarization's lengths are normal and uniform: no median to show, but moving
    # one makes a lognormal the scenario takes.
    base = read_yaml(SCENARIOS / "summarization.yaml", "scenario")
    setup = _setup(base)
    controls = _controls(setup)
    for key in ("workload.prompt_tokens.median_tokens", "workload.output_tokens.sigma"):
        assert setup["values"][key] is None and controls[key]["fixed"] == ""
        scenario_for(doc_for({key: _moved(controls[key])}, base), SCENARIOS)
    assert not any(c["fixed"] for c in controls.values())
