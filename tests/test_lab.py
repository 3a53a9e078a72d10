"""``servesim lab`` below the browser: controls as scenario keys, the CLI's errors, the
round trip through "copy as scenario", the knee and caption against queueing by hand,
superseded runs, the lessons' claims (the page itself: ``tests/test_lab_browser.py``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.lab.controls import CONTROLS, DEFAULT_DOC, RATE_KEY, doc_for, scenario_for, values_of
from sim.lab.runs import KneeCache, knee, knee_rates, regime, run_doc
from sim.scenario import load_scenario
from sim.workload.arrivals import GammaArrival

ROOT = Path(__file__).resolve().parent.parent


def test_the_default_page_is_scenarios_chat() -> None:
    # The installed package has no scenarios/ folder: its copy must not drift.
    assert scenario_for(doc_for({})) == load_scenario(ROOT / "scenarios" / "chat.yaml")


def test_each_control_writes_the_scenario_key_it_is_named_by() -> None:
    scenario = scenario_for(
        doc_for(
            {
                RATE_KEY: 17.5,
                "workload.arrival.kind": "gamma",
                "workload.arrival.burstiness": 0.25,
                "scheduler.max_num_seqs": 64,
                "scheduler.max_num_batched_tokens": 8192,
                "scheduler.chunked_prefill": False,
                "engine.num_kv_blocks": 5000,
                "workload.prompt_tokens.median_tokens": 300,
                "workload.output_tokens.sigma": 0.2,
                "cluster.num_replicas": 3,
                "cluster.router": "least_outstanding_requests",
                "parallelism.tensor_parallel_size": 2,
                "slo.ttft_ms": 800,
                "slo.tpot_ms": None,
            }
        )
    )
    arrival = scenario.workload.arrival  # type: ignore[union-attr]
    assert isinstance(arrival, GammaArrival)
    assert (arrival.rate_per_s, arrival.burstiness) == (17.5, 0.25)
    policy = scenario.scheduler
    assert (policy.max_num_seqs, policy.max_num_batched_tokens) == (64, 8192)  # type: ignore[union-attr]
    assert policy.chunked_prefill is False  # type: ignore[union-attr]
    assert scenario.engine.num_kv_blocks == 5000
    assert scenario.workload.prompt_tokens.median_tokens == 300  # type: ignore[union-attr]
    assert scenario.cluster is not None and scenario.cluster.num_replicas == 3
    assert scenario.cluster.router == "least_outstanding_requests"
    assert scenario.parallelism.tensor_parallel_size == 2
    assert scenario.slo is not None and (scenario.slo.ttft_ms, scenario.slo.tpot_ms) == (800, None)


def test_a_section_a_control_empties_is_left_out_as_a_file_would_leave_it() -> None:
    doc = doc_for(
        {
            "workload.arrival.kind": "poisson",
            "workload.arrival.burstiness": 0.5,  # no meaning for Poisson arrivals
            "workload.prefix_groups.shared_prefix_tokens": 0,
            "cluster.num_replicas": 1,
            "engine.num_kv_blocks": None,
        }
    )
    assert "burstiness" not in doc["workload"]["arrival"]
    assert "prefix_groups" not in doc["workload"] and "cluster" not in doc
    assert "num_kv_blocks" not in doc["engine"]
    shared = doc_for(
        {"workload.prefix_groups.shared_prefix_tokens": 512, "workload.prefix_groups.num_groups": 4}
    )
    assert shared["workload"]["prefix_groups"] == {"shared_prefix_tokens": 512, "num_groups": 4}


def test_values_read_back_what_the_controls_wrote() -> None:
    values = values_of(DEFAULT_DOC)
    assert set(values) == {c.key for c in CONTROLS}
    assert values[RATE_KEY] == 10 and values["scheduler.chunked_prefill"] is True
    assert values_of(doc_for(values)) == values


def test_a_preset_with_overrides_keeps_them_while_its_name_is_unchanged() -> None:
    base = doc_for({}, {**DEFAULT_DOC, "hardware": {"preset": "h100", "memory_bytes": 64e9}})
    kept = doc_for(values_of(base), base)
    assert kept["hardware"] == {"preset": "h100", "memory_bytes": 64e9}
    assert scenario_for(kept).hardware.memory_bytes == 64e9
    assert doc_for({**values_of(base), "hardware": "h200"}, base)["hardware"] == "h200"


def test_an_unknown_key_is_refused() -> None:
    with pytest.raises(ValueError, match="no control"):
        doc_for({"workload.arrival.rate": 3})


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], cwd=cwd, capture_output=True, text=True
    )


def _post(app: Any, path: str, body: dict[str, object]) -> dict[str, object]:
    """POST ``body`` to ``app`` (an aiohttp application) on a test server."""
    from aiohttp.test_utils import TestClient, TestServer

    async def go() -> dict[str, object]:
        async with TestClient(TestServer(app)) as client:
            response = await client.post(path, json=body)
            assert response.status == 200, await response.text()
            return await response.json()

    return asyncio.run(go())


def test_an_impossible_combination_reads_as_the_cli_prints_it(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from sim.lab.controls import scenario_yaml
    from sim.lab.server import make_app

    # Without chunking a prompt must fit one step's budget (vLLM refuses to start).
    values = {"scheduler.chunked_prefill": False, "scheduler.max_num_batched_tokens": 2048}
    answer = _post(make_app(), "/api/run", {"id": 1, "values": values})
    (tmp_path / "lab.yaml").write_text(scenario_yaml(doc_for(values)))
    printed = _cli("run", "lab.yaml", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert printed.returncode == 2
    assert answer["error"] == printed.stderr.strip()
    assert "max_num_batched_tokens (2048) must be >= engine.max_model_len_tokens" in printed.stderr


def test_copy_as_scenario_reproduces_the_page_s_run_bit_for_bit(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from sim.lab.server import SHOWN_KEYS, make_app

    values = {
        "workload.num_requests": 500,
        RATE_KEY: 14.5,
        "workload.arrival.kind": "gamma",
        "workload.arrival.burstiness": 0.5,
        "scheduler.max_num_seqs": 48,
    }
    page = _post(make_app(), "/api/run", {"id": 1, "values": values})
    (tmp_path / "lab.yaml").write_text(str(page["yaml"]))
    printed = _cli("run", "lab.yaml", "-q", "--out", "out", "--figure-process", "no", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    shown = page["summary"]
    assert isinstance(shown, dict)
    for key in SHOWN_KEYS:
        assert shown[key] == summary[key], key
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    figures = page["figures"]
    assert isinstance(figures, dict)
    drawn_ms = figures["ttft_cdf"]["data"][0]["x"]
    ttft_ms = np.sort(requests["ttft_s"].dropna().to_numpy() * 1000.0)
    assert np.array_equal(np.asarray(drawn_ms), ttft_ms)  # the same numbers, not close ones


# One request at a time, fixed lengths, a linear cost: a textbook single server whose
# service time S is known by hand (notebooks 01 and 05): a prefill step of 100 tokens,
# 1 ms + 100 x 0.1 ms = 11 ms, then 19 decode steps of 1 ms + 8 ms each.
SERVICE_S = 0.001 + 1e-4 * 100 + 19 * (0.001 + 0.008)
ONE_SERVER = {
    "name": "one_server",
    "cost": {
        "kind": "linear",
        "step_overhead_s": 0.001,
        "per_prefill_token_s": 1e-4,
        "per_decode_seq_s": 0.008,
    },
    "scheduler": {"kind": "continuous", "max_num_seqs": 1},
    "engine": {"async_scheduling": False},
    "frontend": {"way_in_s_per_request": 0, "tokenize_s_per_token": 0, "detokenize_s_per_token": 0},
    "workload": {
        "kind": "synthetic",
        "num_requests": 2000,
        "arrival": {"kind": "poisson", "rate_per_s": 0.5 / SERVICE_S},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 20},
    },
}


def test_the_knee_grid_stays_put_as_the_rate_moves() -> None:
    # Moving the slider from 10 to 11 req/s reuses every rate both grids hold.
    a, b = knee_rates(10.0), knee_rates(11.0)
    assert [r for r in a if r >= b[0]] == [r for r in b if r <= a[-1]]
    assert len([r for r in b if r <= a[-1]]) >= len(b) - 1  # at most one new run
    assert a[0] <= 10 / 4 and a[-1] >= 10 * 2
    assert all(math.isclose(y / x, math.sqrt(2)) for x, y in itertools.pairwise(a))


def test_the_knee_saturates_where_a_single_server_s_rate_is() -> None:
    found = knee(ONE_SERVER, KneeCache())
    assert found is not None and found.saturation_rate_per_s is not None
    # The served check fails above mu = 1 / S (the queue grows) and holds below it.
    assert 0.85 / SERVICE_S < found.saturation_rate_per_s < 1.15 / SERVICE_S
    # The p99 TTFT grows with load; with no SLO the capacity is the saturation.
    assert found.p99_ttft_ms[-1] > 10 * found.p99_ttft_ms[0]
    assert found.capacity_rate_per_s == found.saturation_rate_per_s


def test_the_caption_follows_the_utilisation_and_names_the_limit() -> None:
    cache = KneeCache()
    below = run_doc(ONE_SERVER)
    state = regime(below, knee(ONE_SERVER, cache))
    # rho = lambda S = 0.5 by construction; the knee estimates mu within ~15 %.
    assert state.rho is not None and 0.4 < state.rho < 0.6
    # (ρ "≤" where every rate of the grid, up to twice this one, was served.)
    assert "below 1" in state.caption() and f"{state.rho:.2f}" in state.caption()
    over = json.loads(json.dumps(ONE_SERVER))
    over["workload"]["arrival"]["rate_per_s"] = 2.0 / SERVICE_S
    state = regime(run_doc(over), knee(over, cache))
    # Twice mu: the server completes about half the arrivals of the second half.
    assert state.served_ratio is not None and 0.4 < state.served_ratio < 0.6
    assert "above 1" in state.caption()
    # One request at a time: the sequence limit is what binds once requests queue.
    assert state.seqs_share > 0.9 and state.binds == "max_num_seqs"


def test_a_run_that_has_not_started_when_a_newer_one_comes_is_skipped() -> None:
    from sim.lab.server import Lab

    lab = Lab(doc_for({}), ROOT)
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def job(request_id: int) -> dict[str, object]:
        ran.append(request_id)
        if request_id == 1:
            started.set()
            release.wait(10)
        return {"ran": request_id}

    async def go() -> list[dict[str, object]]:
        lab.latest = 1
        first = asyncio.ensure_future(lab.work(1, job))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        lab.latest = 2
        second = asyncio.ensure_future(lab.work(2, job))
        lab.latest = 3
        third = asyncio.ensure_future(lab.work(3, job))
        await asyncio.sleep(0.05)
        release.set()
        return list(await asyncio.gather(first, second, third))

    answers = asyncio.run(go())
    assert ran == [1, 3]  # 2 was superseded before its turn: never run, not queued
    assert answers[1] == {"id": 2, "superseded": True}
    assert answers[2] == {"id": 3, "ran": 3}


def test_a_reloaded_page_counting_from_one_again_is_answered() -> None:
    pytest.importorskip("plotly")
    from aiohttp.test_utils import TestClient, TestServer

    from sim.lab.server import make_app

    values = {"workload.num_requests": 500}

    async def go() -> list[dict[str, object]]:
        async with TestClient(TestServer(make_app())) as client:
            answers = []
            for request_id in (50, 1):  # the old page's last run, then the new page's first
                response = await client.post("/api/run", json={"id": request_id, "values": values})
                answers.append(await response.json())
            return answers

    old, new = asyncio.run(go())
    assert "summary" in old and "summary" in new


def test_the_page_loads_nothing_from_another_host() -> None:
    page = ROOT / "sim" / "lab" / "page"
    for path in page.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path


def test_the_page_s_script_is_plotly_s_own() -> None:
    pytest.importorskip("plotly")
    from sim.lab.server import plotly_script

    assert plotly_script().read_text(errors="replace")[:2000].lower().count("plotly") > 0


def test_a_bad_starting_scenario_is_one_line_and_status_2(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    (tmp_path / "bad.yaml").write_text("workload: {kind: synthetic}\n")
    printed = _cli("lab", "bad.yaml", "--port", "0", cwd=tmp_path)
    assert printed.returncode == 2
    assert printed.stderr.count("\n") == 1 and printed.stderr.startswith(
        "servesim: error: bad.yaml"
    )


def test_a_workload_without_an_arrival_rate_is_refused_at_start(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    (tmp_path / "closed.yaml").write_text((ROOT / "scenarios" / "closed_loop.yaml").read_text())
    printed = _cli("lab", "closed.yaml", "--port", "0", cwd=tmp_path)
    assert printed.returncode == 2
    assert printed.stderr == (
        "servesim: error: closed.yaml: workload.kind: servesim lab drives a synthetic "
        "workload's arrival rate, not a closed_loop one\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["batching", "chunked-prefill", "kv-pressure", "bursty-demand", "capacity"]
)
def test_each_lesson_reproduces_its_notebook_s_claim(name: str) -> None:
    from sim.lab.lessons import LESSON_BY_NAME

    lesson = LESSON_BY_NAME[name]
    holds, detail = lesson.check(lesson.doc(), KneeCache(), ROOT)
    assert holds, detail
    assert (ROOT / lesson.notebook).is_file()
