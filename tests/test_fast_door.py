"""The speed paths sit above the reference, behind one door (issue 40, item 3).

- The face that builds a run (``sim.api.build.simulation_for``) chooses the
  executor once: the reference ``Simulation`` (an ``EngineCore`` per replica,
  an event per submission) or ``sim.fast.open_loop.FastSimulation``; the
  reference itself builds reference cores only (``tests/test_architecture.py``
  checks that nothing below the faces imports ``sim.fast``).
- ``sim/fast`` touches no ``_private`` attribute of the reference's objects
  (``sim.engine``, ``sim.serving``, ``sim.cost``): an AST walk over its modules.
- The compiled loop's prices come through ``sim.cost.tabulate`` (a public
  function of ``sim.cost``), not from a cost model's insides.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim import api
from sim.cost.linear import LinearCost
from sim.engine.core_config import CoreConfig
from sim.engine.policies import ContinuousConfig
from sim.engine.scheduler import EngineCore
from sim.fast.feed import FedReplica
from sim.scenario import scenario_from_dict
from sim.serving.replica import Replica
from sim.serving.replica_config import ReplicaConfig
from sim.serving.simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ("sim/engine", "sim/serving", "sim/cost")
FAST_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "sim" / "fast").rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reference_private_names() -> set[str]:
    """Every ``_private`` name the reference defines: functions, classes, methods,
    attributes it stores (``self._x = ...``) and module-level names."""
    names: set[str] = set()
    for package in REFERENCE:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = node.name
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    name = node.attr
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    name = node.id
                else:
                    continue
                if _private(name):
                    names.add(name)
    return names


def crossings(source: str, reference: set[str]) -> list[str]:
    """Where ``source`` (a module of ``sim/fast``) reaches a reference object's
    ``_private`` part: imports a private name from the reference, reads or writes
    ``x._name`` for a name the reference defines (but ``self._name`` of a class of
    its own that sets it), or overrides a reference class's private method."""
    tree = ast.parse(source)
    from_reference: set[str] = set()  # names this module imports from the reference
    found: list[str] = []
    packages = [["sim", package.split("/")[1]] for package in REFERENCE]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] in packages:
            for alias in node.names:
                from_reference.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append(f"line {node.lineno}: imports {alias.name}")
    owned: dict[ast.AST, set[str]] = {}  # own class -> the private names it sets or defines
    derived: list[ast.ClassDef] = []  # classes extending a reference class
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
        if bases & from_reference:
            derived.append(node)
            continue
        mine = {
            n.attr
            for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        }
        mine |= {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        for n in ast.walk(node):
            owned[n] = mine
    for node in derived:
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in reference:
                found.append(f"line {item.lineno}: overrides {node.name}.{item.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in reference:
            continue
        value = node.value
        on_self = isinstance(value, ast.Name) and value.id in ("self", "cls")
        if on_self and node.attr in owned.get(node, set()):
            continue  # its own class's own attribute
        found.append(f"line {node.lineno}: .{node.attr}")
    return found


def test_the_walk_finds_a_planted_crossing_and_passes_a_class_of_its_own() -> None:
    reference = {"_plan", "_weight_s", "_queue"}
    planted = (
        "from sim.engine.scheduler import EngineCore, _RECORD\n"
        "class Mine:\n"
        "    def __init__(self): self._queue = []\n"
        "    def size(self): return len(self._queue)\n"
        "class Faster(EngineCore):\n"
        "    def _plan(self): pass\n"
        "def price(cost): return cost._weight_s\n"
    )
    assert crossings(planted, reference) == [
        "line 1: imports _RECORD",
        "line 6: overrides Faster._plan",
        "line 7: ._weight_s",
    ]


@pytest.mark.parametrize("module", FAST_MODULES)
def test_the_speed_paths_touch_no_private_part_of_the_reference(module: str) -> None:
    assert crossings((ROOT / module).read_text(), reference_private_names()) == []


def plain_engine(skip_ahead: bool = True) -> ReplicaConfig:
    return ReplicaConfig(
        CoreConfig(
            make_policy=ContinuousConfig(max_num_seqs=8).build,
            num_kv_blocks=200,
            block_size_tokens=16,
            max_model_len_tokens=1024,
        ),
        LinearCost(step_overhead_s=1e-3, per_decode_seq_s=1e-4, per_prefill_token_s=1e-5),
        skip_ahead=skip_ahead,
    )


def test_the_reference_executor_steps_one_step_per_event_in_skip_ahead_mode_too() -> None:
    # Plain continuous batching in skip-ahead mode is what decode runs play; the
    # reference never hands its replica to them.
    simulation = Simulation(plain_engine())
    assert type(simulation.core) is EngineCore and type(simulation.replica) is Replica


def test_the_face_chooses_the_executor_once() -> None:
    fast = api.simulation_for(plain_engine())
    assert type(fast) is not Simulation and isinstance(fast, Simulation)
    assert type(fast.replica) is FedReplica  # decode runs as one event, requests from a feed
    for reference in (
        api.simulation_for(plain_engine(), fast=False),
        api.simulation_for(plain_engine(skip_ahead=False)),
    ):
        assert type(reference) is Simulation
        assert type(reference.replica) is Replica


def test_fast_false_gives_the_speed_paths_result_to_the_bit() -> None:
    lengths = {"kind": "lognormal", "median_tokens": 200, "sigma": 0.8, "max_tokens": 2000}
    doc = {
        "name": "door",
        "model": "llama-3-8b",
        "hardware": "h100",
        "cost": {"kind": "roofline"},
        "scheduler": {"kind": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 1024},
        "workload": {
            "kind": "synthetic",
            "num_requests": 120,
            "arrival": {"kind": "poisson", "rate_per_s": 40},
            "prompt_tokens": lengths,
            "output_tokens": {**lengths, "median_tokens": 60},
        },
        "cluster": {"num_replicas": 2, "router": "round_robin"},
    }
    scenario = scenario_from_dict(doc, "door")
    fast = api.run(scenario, workers=1).raw
    reference = api.run(scenario, fast=False).raw
    assert fast.accelerator is None and len(fast.requests) == 120
    for a, b in ((fast.requests, reference.requests), (fast.steps, reference.steps)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert np.isfinite(reference.requests["finish_s"]).all()


def test_the_compiled_path_reads_its_prices_through_tabulate_only() -> None:
    imported = {
        node.module
        for name in ("path.py", "loop.py")
        for node in ast.walk(ast.parse((ROOT / "sim/fast/compiled" / name).read_text()))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    # tabulate's tables, price (the one copy of the attention arithmetic, which
    # KernelCost runs as Python and the loop compiles) and engine_cpu's ``with_cpu_s``
    # likewise (EngineCpuCost's): no second implementation.
    allowed = {
        "sim.cost",
        "sim.cost.tabulate",
        "sim.cost.kernels",
        "sim.cost.kernels.price",
        "sim.cost.engine_cpu",
    }
    assert {m for m in imported if m.startswith("sim.cost")} == allowed
