"""``servesim lab`` in a real browser: Debian's chromium driven by Playwright for Python.

The test starts ``servesim lab`` as a user would, loads the page, moves the load
slider past saturation and checks that the knee's marker moves and p99 TTFT rises
on the page, turns chunked prefill off under a budget too small for it and checks
the CLI's one-line error shows, and saves a screenshot. Every request the page
makes is watched: one to any host but this machine fails the test (the page must
work offline). Skipped, saying why, only where chromium or playwright is missing
(``.ci/run`` installs both); ``SERVESIM_LAB_SCREENSHOT=path`` keeps the screenshot.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from benchmark_module import load_benchmark

import sim

pytestmark = pytest.mark.browser

# The tree whose ``sim`` this test imports: the server it starts runs that one.
ROOT = Path(sim.__file__).resolve().parent.parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
RATE_SLIDER = "#c-workload-arrival-rate_per_s"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _chromium() -> str | None:
    given = os.environ.get("SERVESIM_CHROMIUM")
    if given:
        return given
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@pytest.fixture(scope="module")
def lab_url() -> Iterator[str]:
    pytest.importorskip("plotly", reason="servesim lab needs the [lab] extra (plotly)")
    process, url = load_benchmark("lab_speed").start_lab(ROOT)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _slider_position(low: float, high: float, rate: float) -> int:
    """The log slider's position (0-1000) of ``rate`` (``lab.js``'s ``toSlider``)."""
    import math

    return round(1000 * math.log(rate / low) / math.log(high / low))


def test_the_lab_in_a_browser(lab_url: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install --no-install-recommends chromium)")
    outside: list[str] = []

    def watch(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if urlsplit(url).hostname not in LOCAL_HOSTS:
            outside.append(url)
            route.abort()  # type: ignore[attr-defined]
        else:
            route.continue_()  # type: ignore[attr-defined]

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1250})
        page.route("**/*", watch)
        page.goto(lab_url)
        # The first run and its knee (the compiled loop may still be loading: minutes
        # the very first time numba compiles it on a machine).
        page.wait_for_function("window.lab && window.lab.drawnKnee > 0", timeout=300_000)

        def state() -> dict[str, float]:
            return page.evaluate(
                """() => {
                  const knee = document.getElementById('knee').data;
                  const marker = knee.find((t) => t.name === 'this run');
                  return { markerRate: marker.x[0],
                           p99: Number(document.getElementById('s-p99_ttft_ms').dataset.value),
                           rho: window.lab.rho };
                }"""
            )

        before = state()
        assert before["markerRate"] == 10  # chat.yaml's rate
        # Past saturation: the chat scenario on an H100 saturates near 25 req/s.
        page.fill(RATE_SLIDER, str(_slider_position(0.25, 200, 60)))
        page.wait_for_function(
            "window.lab.drawnKnee === window.lab.lastId && window.lab.lastId > 1", timeout=120_000
        )
        after = state()
        assert after["markerRate"] > 2 * before["markerRate"]  # the knee's marker moved
        assert after["p99"] > 5 * before["p99"]  # and p99 TTFT rose, on the page
        assert "above 1" in page.inner_text("#caption")
        page.screenshot(path=str(tmp_path / "lab.png"), full_page=True)
        kept = os.environ.get("SERVESIM_LAB_SCREENSHOT")
        if kept:
            page.screenshot(path=kept, full_page=True)

        # No chunking with a 2,048-token budget: vLLM refuses to start, and so does the page.
        page.uncheck("#c-scheduler-chunked_prefill")
        page.wait_for_selector("#error:not([hidden])", timeout=60_000)
        error = page.inner_text("#error")
        assert error.startswith("servesim: error: lab.yaml: scheduler.max_num_batched_tokens")
        assert "\n" not in error.strip()
        browser.close()
    assert outside == [], f"the page asked other hosts for {outside}"
