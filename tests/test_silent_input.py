"""Input that used to pass silently: most requests rejected, max_model_len beyond the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.cli import main
from sim.engine.records import RequestTable
from sim.errors import ConfigError
from sim.hardware.specs import MAX_CONTEXT_TOKENS, context_problem
from sim.metrics.report import rejection_warning
from sim.scenario import load_scenario

CHAT = str(Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml")


def frame(reasons: list[str | None]) -> RequestTable:
    rejections = {i: reason for i, reason in enumerate(reasons) if reason is not None}
    return RequestTable({"request_id": np.arange(len(reasons))}, rejections)


def test_most_rejected_gives_the_count_and_the_first_reason() -> None:
    message = rejection_warning(frame([None, "too long A", "too long B", "too long C"]))
    assert message == (
        "3 of 4 requests (75%) were rejected as never servable; the first: too long A"
    )
    assert rejection_warning(frame(["x", "y"])) is not None  # all of them
    assert rejection_warning(frame(["x", None])) is not None  # half is "most" enough


def test_a_few_or_no_rejections_say_nothing() -> None:
    assert rejection_warning(frame([None, None, "x"])) is None
    assert rejection_warning(frame([None, ""])) is None
    assert rejection_warning(frame([])) is None


def test_the_cli_warns_in_one_line_when_prompts_exceed_max_model_len(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Most (not all) prompts too long: a run with a warning.
    sets = ["engine.max_model_len_tokens=400", "workload.num_requests=20"]
    argv = ["run", CHAT, "--out", str(tmp_path / "o"), "-q"]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1
    assert "of 20 requests" in warning[0] and "were rejected" in warning[0]
    assert "exceeds max_model_len 400" in warning[0]


def test_a_run_rejecting_every_request_is_an_error_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = ["engine.max_model_len_tokens=64", "workload.num_requests=20"]
    argv = ["run", CHAT, "--out", str(tmp_path / "o"), "-q"]
    argv += [x for s in sets for x in ("--set", s)]
    assert main(argv) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert error.startswith("servesim: error: every request (20) was rejected as never servable")
    assert "exceeds max_model_len 64" in error and "--allow-all-rejected" in error
    assert not (tmp_path / "o" / "summary.json").exists()
    assert main([*argv, "--allow-all-rejected"]) == 0
    assert "20 of 20 requests (100%) were rejected" in capsys.readouterr().err
    assert (tmp_path / "o" / "summary.json").exists()


def test_a_normal_run_warns_about_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", CHAT, "--out", str(tmp_path / "o"), "-q", "--set", "workload.num_requests=20"]
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err


# --- item 8: max_model_len beyond the model's context ------------------------------------------


def test_context_lengths_come_from_the_presets_configs() -> None:
    assert MAX_CONTEXT_TOKENS["llama-3.1-8b"] == 131072
    assert MAX_CONTEXT_TOKENS["llama-3-8b"] == 131072  # Llama-3.1 shares its shapes
    assert MAX_CONTEXT_TOKENS["qwen3-32b"] == 40960
    assert context_problem("qwen3-32b", 40960) is None
    problem = context_problem("qwen3-32b", 40961)
    assert problem is not None and "qwen3-32b's context length of 40960" in problem
    assert context_problem("my-inline-model", 10**9) is None  # unknown: not checked


def test_a_scenario_beyond_its_models_context_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        load_scenario(CHAT, ["engine.max_model_len_tokens=200000"])
    message = str(error.value)
    assert "\n" not in message and message.startswith(CHAT)
    assert "exceeds llama-3-8b's context length of 131072 tokens" in message
    load_scenario(CHAT, ["engine.max_model_len_tokens=131072"])  # the limit itself is fine
