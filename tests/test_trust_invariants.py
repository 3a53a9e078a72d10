"""Issue 39 item 26: the invariants every run is checked against (``sim.metrics.invariants``).

Each test plants one violation into a real run's records or queue samples and
expects the ``InvariantError`` that names it; the untouched run passes. The
checks are wired into ``build_result``, which every simulation goes through
(``api.run``, ``api.replay``, sweeps and capacity searches call ``api.run``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim import api
from sim.cli import main as cli_main
from sim.engine.records import RequestTable, completed_mask
from sim.metrics.invariants import INVARIANTS, InvariantError, check_run
from sim.scenario import Scenario, scenario_from_dict
from sim.serving.raw_result import RawResult
from sim.workload.generate import generate_open_loop

CHAT = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"


def _scenario(**workload: Any) -> Scenario:
    doc: dict[str, Any] = {
        "name": "invariants",
        "seed": 3,
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        # A small pool: requests queue, preempt and fill it (the KV check has a bound to
        # hit); it still holds one request of the longest length (400 x 16 >= 2048 tokens).
        "engine": {"num_kv_blocks": 400, "max_model_len_tokens": 2048},
        "workload": {
            "kind": "synthetic",
            "num_requests": 300,
            "arrival": {"kind": "poisson", "rate_per_s": 30},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 50, "max_tokens": 1500},
            "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 400},
            **workload,
        },
    }
    return scenario_from_dict(doc, "<test>")


@pytest.fixture(scope="module")
def run() -> api.Result:
    return api.run(_scenario())


def _table(raw: RawResult, **changes: Any) -> RequestTable:
    """A copy of ``raw``'s records with some columns replaced."""
    records = raw.records
    assert isinstance(records, RequestTable)
    columns = {name: records[name].copy() for name in records.columns if name != "rejection_reason"}
    columns.update(changes)
    return RequestTable(columns, dict(records.rejections))


def _check(raw: RawResult, records: Any = None, series: Any = None, num_sent: Any = "same") -> None:
    check_run(
        raw.records if records is None else records,
        raw.series if series is None else series,
        raw.num_sent if num_sent == "same" else num_sent,
        400,
    )


def _expect(name: str, raw: RawResult, **kwargs: Any) -> InvariantError:
    with pytest.raises(InvariantError) as caught:
        _check(raw, **kwargs)
    assert caught.value.name == name and f"invariant {name} broken" in str(caught.value)
    assert "\n" not in str(caught.value)
    return caught.value


def test_the_untouched_run_keeps_every_invariant_and_is_a_busy_one(run: api.Result) -> None:
    raw = run.raw
    _check(raw)  # no error
    assert raw.num_sent == 300 == len(raw.records)
    # The run exercises what the checks read: a queue, a full-ish pool, preemptions.
    assert raw.series["num_waiting"].max() > 0
    assert raw.series["num_kv_blocks_used"].max() > 300
    assert INVARIANTS == ("accounting", "ttft_within_e2e", "tokens_out", "kv_pool", "littles_law")


def test_a_lost_request_breaks_accounting(run: api.Result) -> None:
    raw = run.raw
    error = _expect("accounting", raw, num_sent=301)
    assert "301 requests sent but 300 recorded" in str(error)


def test_a_request_recorded_twice_breaks_accounting(run: api.Result) -> None:
    raw = run.raw
    ids = raw.records["request_id"].copy()
    ids[5] = ids[4]
    assert "recorded twice" in str(_expect("accounting", raw, records=_table(raw, request_id=ids)))


def test_a_request_both_rejected_and_finished_breaks_accounting(run: api.Result) -> None:
    raw = run.raw
    records = _table(raw)
    done_id = int(raw.records["request_id"][np.flatnonzero(completed_mask(raw.records))[0]])
    records.rejections = {**records.rejections, done_id: "planted"}
    error = _expect("accounting", raw, records=records)
    assert f"request {done_id} both rejected and finished" in str(error)


def test_a_first_token_after_the_last_breaks_ttft_within_e2e(run: api.Result) -> None:
    raw = run.raw
    first = raw.records["first_token_s"].copy()
    finish = raw.records["finish_s"]
    at = int(np.flatnonzero(completed_mask(raw.records))[7])
    first[at] = finish[at] + 1e-3  # TTFT 1 ms beyond E2E
    error = _expect("ttft_within_e2e", raw, records=_table(raw, first_token_s=first))
    assert f"request {raw.records['request_id'][at]}:" in str(error)


def test_a_first_token_before_the_arrival_breaks_ttft_within_e2e(run: api.Result) -> None:
    raw = run.raw
    first = raw.records["first_token_s"].copy()
    at = int(np.flatnonzero(completed_mask(raw.records))[0])
    first[at] = raw.records["arrival_s"][at] - 1e-6  # TTFT < 0
    _expect("ttft_within_e2e", raw, records=_table(raw, first_token_s=first))


def test_a_token_short_breaks_tokens_out(run: api.Result) -> None:
    raw = run.raw
    generated = raw.records["num_generated_tokens"].copy()
    at = int(np.flatnonzero(completed_mask(raw.records))[3])
    generated[at] -= 1
    error = _expect("tokens_out", raw, records=_table(raw, num_generated_tokens=generated))
    assert f"generated {generated[at]} tokens of the {generated[at] + 1}" in str(error)


def test_a_sample_above_the_pool_breaks_kv_pool(run: api.Result) -> None:
    raw = run.raw
    series = dict(raw.series)
    used = series["num_kv_blocks_used"].copy()
    used[len(used) // 2] = 401  # the pool holds 400
    series["num_kv_blocks_used"] = used
    error = _expect("kv_pool", raw, series=series)
    assert "401 KV blocks in use" in str(error) and "of a pool of 400" in str(error)


def test_queue_samples_that_disagree_with_the_records_break_littles_law(run: api.Result) -> None:
    raw = run.raw
    series = dict(raw.series)
    # The samples count 3 more requests in the engine than the records put there,
    # all along: the time-average number in it rises by 3, far beyond the sampling
    # error (a fraction of a request here, as the untouched run shows).
    series["num_running"] = series["num_running"] + 3
    error = _expect("littles_law", raw, series=series)
    assert "time-average number in the engine" in str(error)


def test_records_that_keep_requests_longer_than_the_queue_break_littles_law(
    run: api.Result,
) -> None:
    raw = run.raw
    # Every completed request leaves the engine 1 s later on paper than in the queue
    # samples: 300 request-seconds the samples never saw.
    finish = raw.records["engine_finish_s"] + 1.0
    _expect("littles_law", raw, records=_table(raw, engine_finish_s=finish))


def test_every_run_is_checked_where_its_result_is_assembled(
    run: api.Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A violation planted inside the simulation surfaces from ``api.run`` itself."""
    from sim.serving import simulation

    original = simulation.Simulation.run

    def planted(self: simulation.Simulation, work: Any, progress: bool = False) -> RawResult:
        raw = original(self, work, progress)
        generated = raw.records["num_generated_tokens"]
        generated[np.flatnonzero(completed_mask(raw.records))[0]] += 1
        return raw

    monkeypatch.setattr(simulation.Simulation, "run", planted)
    with pytest.raises(InvariantError, match="invariant tokens_out broken"):
        api.run(_scenario(num_requests=40))
    # api.replay (validation's predictions) assembles its result there too.
    arrays = generate_open_loop(run.scenario.workload, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(InvariantError, match="invariant tokens_out broken"):
        api.replay(run.scenario, arrays)


def test_the_error_survives_a_worker_process() -> None:
    """Sweeps and capacity searches run in worker processes: the error comes back
    pickled, with its name and message."""
    import pickle

    error = pickle.loads(pickle.dumps(InvariantError("kv_pool", "replica 0 had 9 blocks")))
    assert isinstance(error, InvariantError) and error.name == "kv_pool"
    assert str(error).startswith("invariant kv_pool broken: replica 0 had 9 blocks")


def test_the_cli_prints_a_broken_invariant_on_one_line_and_writes_no_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A planted violation reaches the command line as a simulator bug: status 1 (not a
    # user error's 2), one line naming the invariant, no traceback, no run folder left.
    def broken(*_: object) -> None:
        raise InvariantError("littles_law", "planted")

    monkeypatch.setattr("sim.api.result.check_run", broken)
    out = tmp_path / "run"
    argv = ["run", str(CHAT), "--set", "workload.num_requests=20", "--out", str(out)]
    status = cli_main([*argv, "-q", "--figure-process", "no"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.count("\n") == 1 and "invariant littles_law broken" in err
    assert "Traceback" not in err
    assert not out.exists()
