"""The request walk of ``docs/architecture.md`` is the path a request really takes.

The page's "The path of one request" lists, as a numbered list of
``file:function`` entries, the functions one request's life passes through
on the plain path. Here a small plain run (``scenarios/chat.yaml``, a few
requests, the reference ``Simulation`` with ``engine.skip_ahead: false``: no
speed path at all) is driven as ``sim.api.run`` drives it, under a
``sys.setprofile`` hook that records every function entered in ``sim/``.
The page may name only functions that were entered, in the order the first
request meets them, and at most 12 of them in at most 8 files (issue 40,
item 6: a walk that cannot lie).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

import sim
from sim.api.build import engine_for
from sim.api.result import build_result
from sim.engine.request import Request
from sim.scenario import load_scenario
from sim.serving.simulation import Simulation
from sim.workload.generate import ClosedLoopWorkload, generate_open_loop

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
SIM = Path(sim.__file__).resolve().parent
MAX_ENTRIES = 12
MAX_FILES = 8

# A function entered: its file (relative to the checkout, as the page writes
# it) and its qualified name (``EngineCore.add``).
Entry = tuple[str, str]

_ENTRY = re.compile(r"^(\d+)\. `(sim/[\w/]+\.py):([\w.]+)`")


def walk_of(page: str) -> list[Entry]:
    """The numbered ``file:function`` list of the page's "The path of one request"."""
    section = page.split("\n## The path of one request\n", 1)[1].split("\n## ", 1)[0]
    numbered = [m for line in section.splitlines() if (m := _ENTRY.match(line))]
    numbers = [int(m.group(1)) for m in numbered]
    assert numbers == list(range(1, len(numbers) + 1)), f"numbered 1, 2, ...: got {numbers}"
    return [(m.group(2), m.group(3)) for m in numbered]


@dataclass(repr=False)
class Trace:
    """Every function of ``sim/`` a run entered, in order (calls for other
    requests than the first, in functions that take a request, left out)."""

    entered: list[Entry] = field(default_factory=list)
    # Functions with a ``request`` parameter that were entered.
    takes_request: set[Entry] = field(default_factory=set)
    # Where in ``entered`` the first request was first handed to a function.
    arrival: int | None = None
    first_request_id: int | None = None

    def hook(self, frame: FrameType, event: str, _: Any) -> None:
        """A ``sys.setprofile`` hook. Its 'call' is also a generator's resumption:
        ``Replica.run`` is entered each time the replica's SimPy process wakes,
        which is what a walk means by it."""
        code = frame.f_code
        if event != "call":
            return
        path = _sim_path(code.co_filename)
        if path is None:
            return
        entry = (path, code.co_qualname)
        request = None
        if "request" in code.co_varnames[: code.co_argcount]:
            request = frame.f_locals.get("request")
        if isinstance(request, Request):
            self.takes_request.add(entry)
            if self.first_request_id is None:
                self.first_request_id = request.request_id
                self.arrival = len(self.entered)
            elif request.request_id != self.first_request_id:
                return
        self.entered.append(entry)


@functools.cache
def _sim_path(filename: str) -> str | None:
    """``sim/...py`` as the page writes it, or None for a file outside ``sim/``
    (resolved, so that a symlinked checkout is still recognised)."""
    path = Path(filename).resolve()
    return path.relative_to(SIM.parent).as_posix() if path.is_relative_to(SIM) else None


def plain_run_trace(num_requests: int = 3) -> Trace:
    """The trace of a plain run, from the workload's draw to the run's summary."""
    base = ROOT / "scenarios"
    scenario = load_scenario(
        base / "chat.yaml",
        [f"workload.num_requests={num_requests}", "engine.skip_ahead=false"],
    )
    assert not isinstance(scenario.workload, ClosedLoopWorkload)  # chat.yaml: an open loop
    engine = engine_for(scenario, base)
    rng = np.random.default_rng(scenario.seed)
    trace = Trace()
    previous = sys.getprofile()
    sys.setprofile(trace.hook)
    try:
        work = generate_open_loop(scenario.workload, rng, base)
        raw = Simulation(engine).run(work)
        build_result(scenario, engine, raw)
    finally:
        sys.setprofile(previous)
    return trace


def not_entered(walk: Sequence[Entry], trace: Trace) -> list[Entry]:
    """The walk's functions the run never entered."""
    seen = set(trace.entered)
    return [entry for entry in walk if entry not in seen]


def first_out_of_order(walk: Sequence[Entry], trace: Trace) -> Entry | None:
    """The first of the walk's functions entered out of the walk's order, or None.

    Not the order of first entries, which would be false for any honest walk:
    the replica's SimPy process starts before the open loop submits anything
    and plans an empty step at time 0, so ``Replica.run`` and
    ``EngineCore.schedule`` are first entered before any request exists. The
    order is the first request's instead. Its arrival is the first call that
    is handed it; the walk's entries before the first function that takes a
    request are the way to that arrival, each placed at its last entry before
    it (the open loop's resumption that submits it); the entries from there on
    are what happens to it, each placed at its first entry after the arrival
    (functions that take a request counted for the first request only). The
    places must increase along the walk.
    """
    arrival = trace.arrival
    assert arrival is not None, "no request reached a function of sim/"
    entered = trace.entered
    split = next((i for i, e in enumerate(walk) if e in trace.takes_request), len(walk))
    places: list[int | None] = []
    for i, entry in enumerate(walk):
        if i < split:
            before = [k for k in range(arrival) if entered[k] == entry]
            places.append(before[-1] if before else None)
        else:
            places.append(
                next((k for k in range(arrival, len(entered)) if entered[k] == entry), None)
            )
    last = -1
    for entry, place in zip(walk, places, strict=True):
        if place is None or place <= last:
            return entry
        last = place
    return None


@pytest.fixture(scope="module")
def trace() -> Trace:
    return plain_run_trace()


@pytest.fixture(scope="module")
def walk() -> list[Entry]:
    return walk_of(PAGE.read_text())


def test_the_walk_is_short(walk: list[Entry]) -> None:
    # At least a handful, so that an emptied list does not pass the other tests.
    assert 6 <= len(walk) <= MAX_ENTRIES, walk
    files = {path for path, _ in walk}
    assert len(files) <= MAX_FILES, sorted(files)


def test_every_function_the_walk_names_is_entered(walk: list[Entry], trace: Trace) -> None:
    assert not_entered(walk, trace) == []


def test_the_walk_is_in_the_order_of_the_first_requests_life(
    walk: list[Entry], trace: Trace
) -> None:
    assert first_out_of_order(walk, trace) is None


def test_the_plain_path_enters_no_speed_path(trace: Trace) -> None:
    # What the page calls the plain path is the reference: nothing of sim/fast.
    assert sorted({path for path, _ in trace.entered if path.startswith("sim/fast/")}) == []


def test_the_walk_starts_at_the_arrivals_and_ends_at_the_metrics(walk: list[Entry]) -> None:
    assert walk[0][0].startswith("sim/workload/")
    assert walk[-1][0].startswith("sim/metrics/")


def test_the_checks_catch_a_walk_that_lies(walk: list[Entry], trace: Trace) -> None:
    # A function that does not exist, and one that exists but is off the plain
    # path (the skip-ahead's run commit), are both reported as not entered.
    invented = ("sim/cost/run_ends.py", "run_ends")
    off_path = ("sim/fast/decode_runs.py", "commit_run")
    lying = [*walk[:3], invented, off_path, *walk[3:]]
    assert not_entered(lying, trace) == [invented, off_path]
    # Any two neighbours swapped: the order check bites all along the walk,
    # not only where first entries would already be in order.
    for k in range(len(walk) - 1):
        swapped = list(walk)
        swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
        assert first_out_of_order(swapped, trace) is not None, walk[k : k + 2]
    # And the finishing of the first request cannot come before its arrival.
    finish = ("sim/engine/scheduler.py", "EngineCore.finish")
    assert first_out_of_order([finish, ("sim/engine/scheduler.py", "EngineCore.add")], trace)


def test_every_file_the_page_names_exists() -> None:
    # Any path under sim/, calibration/, tests/ or benchmarks/ the page cites
    # must be a file of the checkout (issue 40 found sim/cost/run_ends.py cited).
    page = PAGE.read_text()
    cited = set(re.findall(r"`((?:sim|calibration|tests|benchmarks)/[\w/]+\.py)", page))
    assert cited, "the page cites no file: the pattern is wrong"
    assert sorted(path for path in cited if not (ROOT / path).is_file()) == []
