"""Issue 39 item 11: a run whose clock cannot resolve its latencies is refused.

Simulated times are absolute float64 seconds: at 1e12 s two neighbouring times are
1.2e-4 s apart, so a few-ms step loses its digits (TPOT 5.86 instead of 6.10 ms at
1e-12 req/s, every latency 0.00 at 1e-15). Below ``MAX_CLOCK_S`` the same requests,
each alone in the system, get the same latencies as at an ordinary low rate, to a
bound worked out from float64's spacing there.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim import api
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict
from sim.workload.arrivals import MAX_CLOCK_S
from tests.cli_errors import run_error

NUM_REQUESTS = 20


def _doc(**workload: Any) -> dict[str, Any]:
    return {
        "name": "clock",
        "seed": 1,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": NUM_REQUESTS,
            "arrival": {"kind": "poisson", "rate_per_s": 1e-3},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 20, "max_tokens": 2000},
            "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 300},
            **workload,
        },
    }


def _run(**workload: Any) -> api.Result:
    return api.run(scenario_from_dict(_doc(**workload), "<test>"))


@pytest.mark.parametrize("rate_per_s", [1e-12, 1e-15])
def test_a_rate_whose_horizon_the_clock_cannot_resolve_is_refused(rate_per_s: float) -> None:
    # 20 requests at 1e-12 req/s: the last arrives at exactly 20 / rate = 2e13 s
    # (vllm bench's spacing), where float64 times are 2**-8 s = 3.9 ms apart.
    with pytest.raises(ConfigError, match=r"^workload\.arrival\.rate_per_s: .*precision"):
        _run(arrival={"kind": "poisson", "rate_per_s": rate_per_s})


def test_a_duration_that_spreads_arrivals_past_the_horizon_is_refused() -> None:
    # 1e-9 req/s for 1e12 s: ~1000 arrivals, nearly all beyond 2**32 s.
    with pytest.raises(ConfigError, match=r"^workload\.duration_s: "):
        _run(num_requests=None, duration_s=1e12, arrival={"kind": "poisson", "rate_per_s": 1e-9})


def test_think_times_that_take_the_clock_past_the_horizon_are_refused() -> None:
    # One user, 20 requests, 1e9 s of thinking before each: 2e10 s > 2**32 s.
    workload = {
        "kind": "closed_loop",
        "num_users": 1,
        "num_requests": NUM_REQUESTS,
        "think_time_s": {"kind": "fixed", "value_s": 1e9},
        "prompt_tokens": {"kind": "fixed", "tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 10},
    }
    doc = {**_doc(), "workload": workload}
    with pytest.raises(ConfigError, match=r"^workload\.think_time_s: "):
        api.run(scenario_from_dict(doc, "<test>"))


def test_the_cli_refuses_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "clock.yaml"
    path.write_text(yaml.safe_dump(_doc(arrival={"kind": "poisson", "rate_per_s": 1e-12})))
    message = run_error(capsys, tmp_path, str(path))
    assert "workload.arrival.rate_per_s" in message and "precision" in message


def test_below_the_horizon_the_same_requests_get_the_same_latencies() -> None:
    # The same seed draws the same lengths and the same arrival gaps, rescaled so the
    # last arrival is at N / rate: at 1e-3 req/s (2e4 s) and at a rate that puts it
    # just below MAX_CLOCK_S, every request is served alone (gaps of hours against
    # service times of seconds), so in exact arithmetic every latency is the same.
    near_rate = NUM_REQUESTS / (0.99 * MAX_CLOCK_S)
    low, near = _run(), _run(arrival={"kind": "poisson", "rate_per_s": near_rate})
    assert float(near.raw.records["arrival_s"].max()) == pytest.approx(0.99 * MAX_CLOCK_S)
    # Each step end there is rounded to float64's spacing (<= 2**-21 s below 2**32 s);
    # a request's times are sums over its steps (at most one per output token) and a
    # few more events (way in, queue, first step, way out): the error of a latency is
    # at most (tokens + 10) spacings.
    spacing_s = math.ulp(0.99 * MAX_CLOCK_S)
    bound_s = (low.raw.records["num_output_tokens"] + 10) * spacing_s
    for name in ("ttft_s", "e2el_s"):
        gap = np.abs(low.requests[name].to_numpy() - near.requests[name].to_numpy())
        assert (gap <= bound_s).all(), name
    # The same requests completed, and their summaries agree to the printed 0.01 ms.
    assert low.summary["completed"] == near.summary["completed"] == NUM_REQUESTS
    for key in ("mean_ttft_ms", "mean_tpot_ms", "p99_e2el_ms", "mean_ttft_way_out_ms"):
        assert near.summary[key] == pytest.approx(low.summary[key], abs=0.005), key
