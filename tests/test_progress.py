"""A run's progress bar: shown once the run has taken a while, and it ends full."""

from __future__ import annotations

import pytest

from sim import api
from sim.scenario import scenario_from_dict
from sim.serving import progress as progress_module

SCENARIO = scenario_from_dict(
    {
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 9000,  # more than one 4096-event chunk
            "arrival": {"kind": "poisson", "rate_per_s": 8},
            "prompt_tokens": {"kind": "fixed", "tokens": 64},
            "output_tokens": {"kind": "fixed", "tokens": 8},
        },
    },
    "test_progress",
)


def test_a_run_past_the_delay_shows_a_bar_that_ends_full(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress_module, "BAR_DELAY_S", 0.0)
    api.run(SCENARIO, progress=True)
    err = capsys.readouterr().err
    assert "9000/9000" in err and "req" in err


@pytest.mark.parametrize(("delay_s", "progress"), [(1e9, True), (0.0, False)])
def test_no_bar_before_the_delay_or_when_not_asked(
    delay_s: float,
    progress: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(progress_module, "BAR_DELAY_S", delay_s)
    result = api.run(SCENARIO, progress=progress)
    assert capsys.readouterr().err == ""
    assert len(result.requests) == 9000
