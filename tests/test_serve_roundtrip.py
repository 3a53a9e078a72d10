"""The endpoint client against ``servesim serve``'s own routes (a scripted engine, no model).

``tests/test_serve_e2e.py`` runs the real engine end to end; here the
routes of ``sim.openai.server`` serve a ``ScriptedBackend`` (each request
answered with ``max_tokens`` one-token events at once) in a thread, and
``run_endpoint`` measures it: what the client sends (prompts of exactly the
target count through ``/tokenize``, ``ignore_eos``, ``max_tokens``, the chat
or completions body) and what it records are checked against each other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("aiohttp")

from aiohttp import web
from endpoint_fakes import ThreadedApp
from scripted_backend import ScriptedBackend
from test_endpoint_run import SCENARIO

from sim.errors import ConfigError
from sim.openai.server import make_app
from sim.openai.tokenizer import ByteTokenizer
from sim.scenario import load_scenario
from sim.validation.endpoint import EndpointOptions, EndpointRun, endpoint_run, run_endpoint
from sim.workload.generate import RequestArrays


class Served(ThreadedApp):
    """``make_app(engine)`` on a free localhost port, in its own thread and event loop."""

    def __init__(self, engine: ScriptedBackend) -> None:
        super().__init__()
        self.engine = engine

    def make_app(self) -> web.Application:
        return make_app(self.engine, "tiny")

    def url(self, path: str = "") -> str:
        return self.base_url + path


def work(prompts: list[int], outputs: list[int]) -> RequestArrays:
    return RequestArrays(
        np.zeros(len(prompts)),
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
    )


def measure(
    engine: ScriptedBackend, requests: RequestArrays, path: str = "", **kw: Any
) -> EndpointRun:
    with Served(engine) as served:
        opts = EndpointOptions(url=served.url(path), progress=False, **kw)
        state = run_endpoint(requests, opts, seed=3)
    return endpoint_run(load_scenario(SCENARIO), requests, state, opts)


def measured_submissions(engine: ScriptedBackend) -> list[tuple[list[int], int, bool]]:
    """What the engine was asked for, less the 1-token test request ("hello")."""
    hello = ByteTokenizer().encode("hello")
    return [s for s in engine.submitted if s[0] != hello]


def test_completions_get_prompts_of_exactly_the_target_length() -> None:
    engine = ScriptedBackend(max_model_len_tokens=256)
    targets, outputs = [5, 9, 17, 40], [3, 1, 2, 4]
    run = measure(engine, work(targets, outputs))
    req = run.requests.sort_values("request_id")
    assert run.summary["prompt_tokens"] == "exact (server /tokenize)"
    assert req["num_prompt_tokens"].tolist() == targets and req["prompt_tokens_exact"].all()
    assert req["num_chunks"].tolist() == outputs  # one chunk per output
    assert req["num_generated_tokens"].tolist() == outputs  # usage agrees
    asked = measured_submissions(engine)
    assert sorted(len(ids) for ids, _, _ in asked) == sorted(targets)
    assert sorted(n for _, n, _ in asked) == sorted(outputs)
    assert all(ignore_eos for _, _, ignore_eos in asked)  # the server takes ignore_eos
    assert run.summary["ignore_eos"] is True and run.summary["num_failed"] == 0


def test_chat_prompts_are_exact_and_the_role_chunk_is_no_token() -> None:
    engine = ScriptedBackend(max_model_len_tokens=256)
    run = measure(engine, work([6, 12], [2, 3]), "/v1/chat/completions")
    assert run.summary["api"] == "chat"
    assert run.summary["endpoint"].endswith("/v1/chat/completions")
    req = run.requests.sort_values("request_id")
    assert req["num_prompt_tokens"].tolist() == [6, 12]
    assert req["num_chunks"].tolist() == [2, 3]  # the role chunk is not counted
    assert (req["first_token_s"] >= req["arrival_s"]).all()


def test_no_ignore_eos_is_not_sent() -> None:
    engine = ScriptedBackend(max_model_len_tokens=256)
    measure(engine, work([4], [2]), ignore_eos=False)
    assert [ignore for _, _, ignore in engine.submitted] == [False, False]  # probe, request


def test_a_request_over_the_servers_length_is_a_kept_failure() -> None:
    engine = ScriptedBackend(max_model_len_tokens=24)
    run = measure(engine, work([5, 22], [4, 4]))  # 22 + 4 > 24: refused with a 400
    req = run.requests.sort_values("request_id")
    assert run.summary["completed"] == 1 and run.summary["num_failed"] == 1
    failed = req.iloc[1]
    assert failed.http_status == 400 and failed.error.startswith("HTTP 400: ")
    assert "maximum context length is 24 tokens" in failed.error
    assert np.isnan(failed.finish_s) and failed.num_chunks == 0
    assert len(measured_submissions(engine)) == 1  # the refused one never reached the engine


def test_the_served_model_is_found_and_another_one_is_refused() -> None:
    engine = ScriptedBackend(max_model_len_tokens=64)
    run = measure(engine, work([4], [1]))
    assert run.summary["model"] == "tiny"
    with pytest.raises(ConfigError, match=r"a 1-token test request failed \(HTTP 404: .*`other`"):
        measure(ScriptedBackend(max_model_len_tokens=64), work([4], [1]), model="other")


def test_measure_over_chat_then_validate_accepts_the_run_and_refuses_another_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cli import main as cli_main

    sets = ["--set", "workload.duration_s=2"]
    out = tmp_path / "measured"
    with Served(ScriptedBackend(max_model_len_tokens=1024)) as served:
        url = served.url("/v1/chat/completions")
        argv = ["measure", str(SCENARIO), "--endpoint", url, "--out", str(out), "-q", *sets]
        assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"measured tiny at {url} (prompt tokens: exact (server /tokenize))" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["api"] == "chat" and summary["num_failed"] == 0 and not summary["partial"]
    # The run is the scenario's (exact prompts, every output): validate takes it ...
    check = ["validate", str(SCENARIO), "--measured", str(out), *sets]
    # A run over HTTP cannot see the server's device: refused until vouched for.
    assert cli_main([*check, "--out", str(tmp_path / "u")]) == 2
    assert "the run names no device (--assume-device" in capsys.readouterr().err
    check += ["--assume-device", "cpu"]
    assert cli_main([*check, "--out", str(tmp_path / "v")]) == 0
    assert (tmp_path / "v" / "report.md").is_file()
    capsys.readouterr()
    # ... and refuses it for another seed's requests, in one line.
    other = [*check, "--set", "seed=99", "--out", str(tmp_path / "w")]
    assert cli_main(other) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a run of scenario validate_tiny_cpu" in err
