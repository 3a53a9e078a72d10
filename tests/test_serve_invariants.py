"""``servesim serve --simulate`` keeps the run invariants as it serves (issue 39's leftover).

Every offline run is checked once it ends (``sim.metrics.invariants.check_run``);
the live engine (``sim.serving.realtime.SimulatedEngine``) runs the same checks
through the hook the command passes in (``LiveChecks``): each step's new
records and queue samples before its tokens go out, and the whole stretch,
Little's law included, each time the core is empty. A violation planted into
the engine's core (one token too many, a first token after the last, a request
recorded twice, more KV blocks than the pool, queue samples that miscount)
stops the engine with the ``InvariantError`` naming it. Behind the HTTP server,
built as ``servesim serve --simulate`` builds it: the request that shows it gets
a 500 with that line, ``/health`` answers 503 (vLLM's answer once its engine
core is dead), ``/metrics`` counts it in ``servesim:invariant_violations_total``,
the log says it once. Unplanted runs (aborts and refusals among them) keep
every invariant: no error, counters at 0, ``/health`` 200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from aiohttp.test_utils import TestClient, TestServer
from benchmark_module import load_benchmark
from prometheus_client.parser import text_string_to_metric_families

from sim.api import engine_for
from sim.cli.serve import _engine, app_for
from sim.engine.request import Request
from sim.engine.scheduler import EngineCore
from sim.errors import InvariantError
from sim.metrics.invariants import INVARIANTS, LiveChecks
from sim.scenario import load_scenario
from sim.serving.realtime import SimulatedEngine
from sim.serving.routed import RoutedEngines
from sim.serving.stream import Emitted, OnlineBackend, Submission

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LLAMA70B = SCENARIOS / "llama70b_tp.yaml"  # 4 H100s, roofline: steps of ~15 ms
WAIT_S = 30.0  # a bound for the engine thread, never reached when it works
COUNTER = "servesim:invariant_violations"


# --- planted bugs: each breaks one invariant inside the engine's core ------------------------

Plant = Callable[[EngineCore, pytest.MonkeyPatch], None]


def one_token_too_many(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """tokens_out: a finishing request generates one token more than it asked for
    (and the engine emits it)."""
    finish = core.finish

    def planted(request: Request, time_s: float) -> None:
        request.num_generated_tokens += 1
        finish(request, time_s)

    monkeypatch.setattr(core, "finish", planted)


def first_token_after_the_last(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """ttft_within_e2e: a finishing request's first token 1 ms after its last."""
    finish = core.finish

    def planted(request: Request, time_s: float) -> None:
        request.first_token_s = time_s + 1e-3
        finish(request, time_s)

    monkeypatch.setattr(core, "finish", planted)


def recorded_twice(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """accounting: every finished request written to the records twice."""
    done = core._done

    def planted(request: Request) -> None:
        done(request)
        done(request)

    monkeypatch.setattr(core, "_done", planted)


def more_blocks_than_the_pool(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """kv_pool: each queue sample reports one KV block more than the pool holds."""
    counts = core._series_counts
    pool = core.kv.num_blocks

    def planted(row: tuple[int, int, int]) -> None:
        counts((row[0], row[1], pool + 1))

    monkeypatch.setattr(core, "_series_counts", planted)


def three_phantom_requests(core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
    """littles_law: each queue sample counts 3 requests running that are not; the
    time-average number in the engine then exceeds the records' by 3 all along,
    beyond the sampling error (at most one request per entry and exit in a gap)."""
    counts = core._series_counts

    def planted(row: tuple[int, int, int]) -> None:
        counts((row[0], row[1] + 3, row[2]))

    monkeypatch.setattr(core, "_series_counts", planted)


PLANTS: dict[str, Plant] = {
    "tokens_out": one_token_too_many,
    "ttft_within_e2e": first_token_after_the_last,
    "accounting": recorded_twice,
    "kv_pool": more_blocks_than_the_pool,
    "littles_law": three_phantom_requests,
}


def test_every_invariant_has_a_planted_violation() -> None:
    assert sorted(PLANTS) == sorted(INVARIANTS)


# --- the engine on a clock of the test's own ---------------------------------------------------


@dataclass
class Clock:
    """A clock the test sets (seconds)."""

    now_s: float = 0.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Record:
    """What one request's sink got."""

    events: list[Emitted] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)

    def __call__(self, event: Emitted) -> None:
        self.events.append(event)
        if event.finish_reason is not None:
            self.finished.set()

    @property
    def reasons(self) -> list[str | None]:
        return [e.finish_reason for e in self.events]


def checked_engine(*sets: str, scenario: Path = LLAMA70B) -> tuple[SimulatedEngine, Clock]:
    clock = Clock()
    config = engine_for(load_scenario(scenario, list(sets)))
    return SimulatedEngine(config, clock, check=LiveChecks()), clock


def prompt(index: int, num_tokens: int) -> list[int]:
    """Token ids no other request's prompt starts with."""
    return [3 + index // 256, 3 + index % 256] + [65] * (num_tokens - 2)


@pytest.mark.parametrize(
    ("scenario", "sets"),
    [
        (LLAMA70B, ()),  # async scheduling
        (LLAMA70B, ("engine.async_scheduling=false",)),
        # recompute preemptions: 300 blocks of 16 hold 4800 tokens, the longest request
        (LLAMA70B, ("engine.num_kv_blocks=300", "engine.max_model_len_tokens=4800")),
        (LLAMA70B, ("engine.enable_prefix_caching=true",)),
        (SCENARIOS / "speculative.yaml", ()),  # several tokens a step
        (SCENARIOS / "static_vs_continuous.yaml", ()),  # a policy that waits with requests
    ],
    ids=["async", "sync", "preempting", "prefix", "speculative", "static"],
)
def test_a_live_run_with_aborts_and_refusals_keeps_every_invariant(
    scenario: Path, sets: tuple[str, ...]
) -> None:
    """120 requests at 12/s (queues, full batches, idle gaps), every 7th aborted 50 ms
    after it was sent (waiting, running or on its way in), one too long to ever be
    served: no check fires, and every request ends once."""
    engine, clock = checked_engine(*sets, scenario=scenario)
    rng = np.random.default_rng(7)
    arrivals_s = np.cumsum(rng.exponential(1 / 12.0, 120)).tolist()
    events: list[tuple[float, int, str]] = [(t, i, "submit") for i, t in enumerate(arrivals_s)]
    events += [(arrivals_s[i] + 0.05, i, "abort") for i in range(0, 120, 7)]
    records = [Record() for _ in arrivals_s]
    ids: dict[int, int] = {}
    limit = engine.max_model_len_tokens
    for time_s, i, action in sorted(events):
        engine.run_until(time_s)
        clock.now_s = time_s
        if action == "abort":
            engine.abort(ids[i])
            continue
        num_prompt = limit if i == 60 else int(rng.integers(16, 900))  # 60: refused
        common = [65] * 64 if "prefix" in str(sets) else []  # shared first blocks
        tokens = common + prompt(i, num_prompt)[: num_prompt - len(common)]
        ids[i] = engine.submit(Submission(tokens, int(rng.integers(1, 120)), True, records[i]))
    assert engine.run_until(float("inf")) == float("inf")
    assert engine.error is None
    assert records[60].reasons == ["abort"]
    for i, record in enumerate(records):
        ended = [r for r in record.reasons if r is not None]
        assert len(ended) <= 1, i  # aborted ones may end silently (no event follows)
        assert ended or i % 7 == 0, i
    assert engine.core.kv.num_free_blocks == engine.core.kv.num_blocks


@pytest.mark.parametrize("invariant", list(PLANTS))
def test_a_planted_violation_stops_the_engine_naming_it(
    invariant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, clock = checked_engine("engine.async_scheduling=false")
    PLANTS[invariant](engine.core, monkeypatch)
    shown, other = Record(), Record()
    engine.submit(Submission(prompt(0, 100), 5, True, shown))
    clock.now_s = 0.001
    engine.submit(Submission(prompt(1, 100), 40, True, other))
    with pytest.raises(InvariantError) as caught:
        engine.run_until(float("inf"))
    assert caught.value.name == invariant
    assert f"invariant {invariant} broken" in str(caught.value)
    assert "\n" not in str(caught.value)
    if invariant == "littles_law":
        # Whole lifetimes only: checked once the engine is empty, here (synchronous
        # scheduling) at the commit of the last request's last step, before it goes out.
        assert shown.reasons[-1] == "length" and "length" not in other.reasons
    else:
        # Found in the step that shows it, before that step's tokens go out: the
        # request that breaks it never gets its last token.
        assert "length" not in shown.reasons


def test_an_unchecked_engine_lets_the_same_plant_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the hook, the engine answers the planted extra token silently: what
    the live checks are for (a client gets 6 letters for max_tokens 5)."""
    config = engine_for(load_scenario(LLAMA70B, []))
    engine = SimulatedEngine(config, Clock())
    one_token_too_many(engine.core, monkeypatch)
    record = Record()
    engine.submit(Submission(prompt(0, 100), 5, True, record))
    engine.run_until(float("inf"))
    assert record.reasons[-1] == "length"
    assert sum(len(e.token_ids) for e in record.events) == 6


def test_the_checks_change_nothing_the_engine_does() -> None:
    """They only read: the same workload takes the same steps, of the same predicted
    length, with and without them (``benchmarks/live_invariants.py``'s drive)."""
    bench = load_benchmark("live_invariants")
    config = engine_for(load_scenario(LLAMA70B, []))
    work = bench.workload(60, 12.0, seed=1)
    _, num_steps, busy_s = bench.drive(config, work, None)
    _, num_checked_steps, checked_busy_s = bench.drive(config, work, LiveChecks())
    assert num_steps > 60 and (num_checked_steps, checked_busy_s) == (num_steps, busy_s)


def test_the_checks_follow_the_engine_when_it_drops_its_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server drops its logs when idle (``_LOG_STEPS``): the checks start over on the
    new ones, and still see a violation planted after the drop."""
    from sim.serving import realtime

    monkeypatch.setattr(realtime, "_LOG_STEPS", 5)
    engine, clock = checked_engine()
    first = Record()
    engine.submit(Submission(prompt(0, 50), 20, True, first))
    engine.run_until(float("inf"))
    logs = engine.core.records
    clock.now_s = 5.0
    second = Record()
    engine.submit(Submission(prompt(1, 50), 20, True, second))
    engine.run_until(float("inf"))  # the first stretch dropped: no false alarm
    assert engine.core.records is not logs and second.reasons[-1] == "length"
    one_token_too_many(engine.core, monkeypatch)
    clock.now_s = 10.0
    engine.submit(Submission(prompt(2, 50), 20, True, Record()))
    with pytest.raises(InvariantError, match="invariant tokens_out broken"):
        engine.run_until(float("inf"))


# --- behind the HTTP server, built as servesim serve --simulate builds it --------------------


def face(scenario: Path = LLAMA70B) -> tuple[OnlineBackend, Any]:
    """The engine and app ``servesim serve --simulate SCENARIO`` builds (not started)."""
    args = argparse.Namespace(
        simulate=True, scenario=str(scenario), set=None, device="cpu", dtype=None, threads=1
    )
    loaded = load_scenario(scenario)
    engine = _engine(args, loaded)
    return engine, app_for(engine, loaded, simulate=True)


def cores(engine: OnlineBackend) -> list[EngineCore]:
    if isinstance(engine, RoutedEngines):
        return [e.core for e in engine.engines]
    assert isinstance(engine, SimulatedEngine)
    return [engine.core]


def violations(page: str) -> dict[str, float]:
    """``servesim:invariant_violations_total`` by invariant."""
    for family in text_string_to_metric_families(page):
        if family.name == COUNTER:
            return {s.labels["invariant"]: s.value for s in family.samples}
    return {}


@dataclass
class Answers:
    statuses: list[int] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    stream: str = ""
    health: list[int] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)


def serve(
    engine: OnlineBackend,
    app: Any,
    num_requests: int,
    stream: bool = False,
    wait_dead: bool = False,
) -> Answers:
    """``num_requests`` whole answers (or one stream), then /health and /metrics; with
    ``wait_dead``, first until the engine has stopped; then one more request and both
    again (the engine stays dead: every later request is a 500, counted once)."""
    answers = Answers()

    async def go() -> None:
        async with TestClient(TestServer(app)) as client:

            async def complete(body: dict[str, Any]) -> None:
                response = await client.post("/v1/completions", json=body)
                answers.statuses.append(response.status)
                if response.status != 200:
                    answers.messages.append((await response.json())["error"]["message"])
                else:
                    await response.read()

            async def look() -> None:
                answers.health.append((await client.get("/health")).status)
                answers.pages.append(await (await client.get("/metrics")).text())

            if stream:
                body = {"prompt": "hello", "max_tokens": 5, "stream": True}
                answers.stream = await (await client.post("/v1/completions", json=body)).text()
            else:
                bodies = [{"prompt": f"hello {i}", "max_tokens": 5} for i in range(num_requests)]
                await asyncio.gather(*(complete(b) for b in bodies))
            if wait_dead:
                for _ in range(int(WAIT_S / 0.01)):
                    if engine.error is not None:
                        break
                    await asyncio.sleep(0.01)
            await look()
            if engine.error is not None:
                await complete({"prompt": "again", "max_tokens": 5})
                await look()

    engine.start()
    try:
        asyncio.run(go())
    finally:
        engine.stop()
    return answers


def engine_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("invariant", ["tokens_out", "ttft_within_e2e", "accounting", "kv_pool"])
def test_the_request_that_shows_a_violation_gets_a_500_naming_it(
    invariant: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine, app = face()
    PLANTS[invariant](cores(engine)[0], monkeypatch)
    with caplog.at_level(logging.ERROR, logger="servesim.serve"):
        answers = serve(engine, app, 1)
    assert answers.statuses == [500, 500]  # the request that shows it, then any other
    for message in answers.messages:
        assert f"invariant {invariant} broken" in message and "\n" not in message
    assert answers.health == [503, 503]
    for page in answers.pages:  # counted once, however often scraped
        assert violations(page) == {name: float(name == invariant) for name in INVARIANTS}
    logged = engine_errors(caplog)
    assert len(logged) == 1 and f"invariant {invariant} broken" in logged[0].getMessage()
    assert not logged[0].exc_info  # one line, no traceback


def test_a_streamed_request_ends_with_the_violation_as_its_error_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, app = face()
    one_token_too_many(cores(engine)[0], monkeypatch)
    answers = serve(engine, app, 1, stream=True)
    chunks = [c[len("data: ") :] for c in answers.stream.split("\n\n") if c.startswith("data: ")]
    assert chunks[-1] == "[DONE]"
    error = json.loads(chunks[-2])["error"]
    assert error["code"] == 500 and "invariant tokens_out broken" in error["message"]
    # Its first 4 tokens came a step each; the step that broke the invariant (the 5th
    # token, and the planted 6th) never went out.
    text = "".join(c["text"] for chunk in chunks[:-2] for c in json.loads(chunk)["choices"])
    assert text == "abcd"


def test_a_littles_law_violation_fails_health_once_the_engine_is_empty(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine, app = face()
    three_phantom_requests(cores(engine)[0], monkeypatch)
    with caplog.at_level(logging.ERROR, logger="servesim.serve"):
        answers = serve(engine, app, 1, wait_dead=True)
    # Whole lifetimes: checked once the engine is empty, here (async scheduling, the
    # scenario's) at the empty plan after the request's last step: it is answered whole,
    # the engine stops, the next request gets the 500.
    assert answers.statuses == [200, 500]
    assert "invariant littles_law broken" in answers.messages[0]
    assert answers.health == [503, 503]
    assert violations(answers.pages[-1])["littles_law"] == 1
    assert len(engine_errors(caplog)) == 1


def test_every_replica_of_a_routed_cluster_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    engine, app = face(SCENARIOS / "replicas.yaml")
    assert len(cores(engine)) == 4
    for core in cores(engine):
        more_blocks_than_the_pool(core, monkeypatch)
    answers = serve(engine, app, 1)
    assert answers.statuses[0] == 500 and "invariant kv_pool broken" in answers.messages[0]
    assert answers.health[0] == 503 and violations(answers.pages[0])["kv_pool"] == 1


@pytest.mark.parametrize("scenario", [LLAMA70B, SCENARIOS / "replicas.yaml"])
def test_a_normal_run_keeps_the_counters_at_0_and_health_at_200(
    scenario: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, app = face(scenario)
    with caplog.at_level(logging.ERROR, logger="servesim.serve"):
        answers = serve(engine, app, 8)
        streamed = serve(*face(scenario), 0, stream=True)
    assert answers.statuses == [200] * 8 and answers.health == [200]
    assert violations(answers.pages[0]) == dict.fromkeys(INVARIANTS, 0.0)
    assert streamed.stream.rstrip().endswith("data: [DONE]") and '"code"' not in streamed.stream
    assert engine.error is None and engine_errors(caplog) == []
