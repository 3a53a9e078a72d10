"""Every request's way in is ``way_in_s_per_request + tokenize_s_per_token x prompt``,
whatever the prompts of the requests around it (issue 39's mutation check,
``benchmarks/mutants.py``: ``way-in-arrival-order``, ``way-in-one-no-tokenize``).

With prompts of very different lengths arriving close together, a long prompt's
tokenization ends after a later short prompt's: the short one reaches the engine
first. Open loop (all arrivals known, submitted in the order their way in ends)
and closed loop (each request sent when its user is ready) alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim import api
from sim.scenario import scenario_from_dict

WAY_IN_S, TOKENIZE_S = 2e-3, 1e-5  # per request; per prompt token (5,000 tokens: 50 ms)
PROMPTS = {"kind": "uniform", "min_tokens": 10, "max_tokens": 5000}


def _run(workload: dict[str, Any]) -> api.Result:
    document = {
        "cost": {"kind": "linear", "step_overhead_s": 1e-3, "per_decode_seq_s": 1e-4},
        "scheduler": {"kind": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 8192},
        "engine": {"async_scheduling": False},
        "frontend": {"way_in_s_per_request": WAY_IN_S, "tokenize_s_per_token": TOKENIZE_S},
        "workload": workload,
    }
    return api.run(scenario_from_dict(document, "test_mut_way_in"))


def _check_way_in(result: api.Result) -> None:
    rows = result.requests
    expected_s = WAY_IN_S + TOKENIZE_S * rows["num_prompt_tokens"].to_numpy()
    np.testing.assert_allclose(rows["ready_s"] - rows["arrival_s"], expected_s, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rows["way_in_s"], expected_s, rtol=0, atol=1e-12)


def test_open_loop_requests_reach_the_engine_when_their_own_way_in_ends() -> None:
    # Arrivals every 2 ms, ways in of 2-52 ms: the order inverts again and again.
    result = _run(
        {
            "kind": "synthetic",
            "num_requests": 200,
            "arrival": {"kind": "constant", "rate_per_s": 500},
            "prompt_tokens": PROMPTS,
            "output_tokens": {"kind": "fixed", "tokens": 2},
        }
    )
    rows = result.requests
    ready = rows.sort_values("arrival_s")["ready_s"].to_numpy()
    assert (np.diff(ready) < 0).any()  # the premise: some later arrival is ready sooner
    _check_way_in(result)


def test_a_closed_loop_request_is_tokenized_on_its_way_in() -> None:
    result = _run(
        {
            "kind": "closed_loop",
            "num_users": 4,
            "num_requests": 40,
            "think_time_s": {"kind": "exponential", "mean_s": 0.01},
            "prompt_tokens": PROMPTS,
            "output_tokens": {"kind": "fixed", "tokens": 2},
        }
    )
    _check_way_in(result)
