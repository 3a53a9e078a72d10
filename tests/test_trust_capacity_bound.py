"""A capacity never exceeds the configuration's own upper bound (issue 39, items 1 and 26).

The program computes an optimistic capacity from the cost model alone
(``sim.planning.plan_bound``: no request is cheaper than the engine's cheapest
tokens). A search answering above it contradicts the program's own figures,
so it is refused with an error naming the bound, never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import one_line_error

from sim.cli import capacity as capacity_cli
from sim.errors import ConfigError
from sim.metrics.slo_targets import parse_targets
from sim.planning.capacity import Searcher, search, upper_bound_rate_per_s
from sim.planning.capacity_report import capacity_rate_per_s
from sim.scenario import scenario_from_dict


def open_loop_doc(num_requests: int = 300, rate_per_s: float = 4.0) -> dict[str, Any]:
    """Fixed lengths on an H100 roofline, Poisson arrivals."""
    return {
        "name": "bounded",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": num_requests,
            "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
            "prompt_tokens": {"kind": "fixed", "tokens": 500},
            "output_tokens": {"kind": "fixed", "tokens": 100},
        },
    }


def test_a_capacity_above_a_planted_bound_is_an_error_naming_it() -> None:
    targets = parse_targets(["ttft_mean_ms=1000"])
    scenario = scenario_from_dict(open_loop_doc(), "bounded")
    # 4 req/s of 600-token requests is light for an H100 (it passes), so any answer is
    # at least 4 req/s: far above a planted bound of 0.5.
    searcher = Searcher(scenario, targets, 1, 1, bound_rate_per_s=0.5)
    with pytest.raises(ConfigError, match=r"upper bound of 0\.5 req/s") as caught:
        search(searcher, 0.2, 6)
    assert "\n" not in str(caught.value)
    # Without a bound the same search answers (the planted bound alone refused it).
    free = search(Searcher(scenario, targets, 1, 1), 0.2, 6)
    assert free.estimate is not None and free.estimate > 0.5


def test_the_cli_refuses_an_answer_above_the_bound_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bounded.yaml"
    path.write_text(yaml.safe_dump(open_loop_doc()))
    # Where the command looks it up (imported there at its top).
    monkeypatch.setattr(capacity_cli, "upper_bound_rate_per_s", lambda *_: 0.5)
    argv = ["capacity", str(path), "--slo", "ttft_mean_ms=1000", "--seeds", "1"]
    argv += ["--num-requests", "300", "--max-sims", "6", "-q", "--out", str(tmp_path / "o")]
    message = one_line_error(capsys, argv)
    assert message.startswith("capacity: the answer ") and "upper bound of 0.5 req/s" in message
    assert not (tmp_path / "o" / "capacity.json").exists()  # nothing printed or written


def test_a_real_configurations_capacity_is_within_its_own_bound() -> None:
    """The bound the CLI computes holds for a search that runs to a real answer."""
    targets = parse_targets(["ttft_p99_ms=300"])
    scenario = scenario_from_dict(open_loop_doc(1000), "bounded")
    bound = upper_bound_rate_per_s(scenario, targets, 2)
    assert bound is not None and bound > 0
    result = search(Searcher(scenario, targets, 2, 1, bound_rate_per_s=bound), 0.1, 24)
    rate = capacity_rate_per_s(result, result.at_estimate)
    assert result.upper is not None and rate is not None and 0 < rate <= bound


def test_no_bound_where_the_bound_does_not_hold() -> None:
    """Shared prefixes in a prefix cache make prompts cheaper than the bound prices
    them: no bound (a cache alone, on by default as in vLLM, shares nothing)."""
    doc = open_loop_doc()
    doc["workload"]["prefix_groups"] = {"num_groups": 2, "shared_prefix_tokens": 400}
    targets = parse_targets(["ttft_mean_ms=1000"])
    assert upper_bound_rate_per_s(scenario_from_dict(doc, "x"), targets, 1) is None
