"""``Result``'s repr: three lines naming what ran and how it went, not the whole scenario."""

from __future__ import annotations

import re
from pathlib import Path

from sim import api

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scenarios" / "chat.yaml"


def test_the_repr_names_what_ran_and_its_key_figures() -> None:
    # max_model_len 1200 turns the longest prompts away: some rejected, most completed.
    result = api.run(CHAT, ["workload.num_requests=60", "engine.max_model_len_tokens=1200"])
    summary = result.summary
    text = repr(result)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].startswith("Result 'chat': ")
    assert "Scenario(" not in text and "ModelSpec(" not in text
    assert f"{summary['model']} on 1x {summary['hardware']}" in lines[0]
    counts = f"60 requests ({summary['completed']} completed, {summary['num_rejected']} rejected)"
    assert counts in lines[0]
    assert 0 < summary["num_rejected"] < 60
    assert lines[1] == f"  cost model: {summary['cost_model']}"
    # p50 / p99 of each latency, as the summary has them (to the 4 digits shown).
    for name in ("ttft", "tpot", "itl", "e2el"):
        found = re.search(rf"{name.upper()} ([^ ,]+) / ([^ ,]+)", lines[2])
        assert found is not None, name
        shown = [float(found[1]), float(found[2])]
        expected = [summary[f"median_{name}_ms"], summary[f"p99_{name}_ms"]]
        for value, want in zip(shown, expected, strict=True):
            assert abs(value - want) <= max(5e-4 * want, 0.5 if want >= 1000 else 0.0)
    assert "requests" not in vars(result)  # no frame built to print it
    assert str(result) == text


def test_a_run_without_completions_shows_n_a_and_counts_replicas() -> None:
    rejected = api.run(CHAT, ["workload.num_requests=10", "engine.max_model_len_tokens=16"])
    assert "(0 completed, 10 rejected) in n/a s" in repr(rejected)
    assert "TTFT n/a / n/a" in repr(rejected)
    replicas = api.run(ROOT / "scenarios" / "replicas.yaml", ["workload.num_requests=20"])
    assert " on 4 replicas of 1x " in repr(replicas).splitlines()[0]
