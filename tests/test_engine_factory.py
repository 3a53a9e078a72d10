"""One core factory for both executors (issue 12, item 10).

``sim.api.core_config_for`` builds the engine core of the simulator's replicas
(``engine_for``) and of the reference engine (``servesim measure``): same
policy and settings, same KV pool, same limits, or a one-line refusal naming
the scenario key to change. The work a prediction replays keeps the measured
run's priorities and shared prefixes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import calibration.measure as measure_module
from calibration.measure import REFERENCE_LAYOUT, measure
from sim.api import (
    core_config_for,
    engine_for,
    engine_settings,
    kv_blocks_for,
    reference_engine_problem,
)
from sim.cost.linear import LinearCost
from sim.engine.kv_cache import BlockPool, PrefixCachingPool
from sim.engine.scheduler import EngineCore
from sim.errors import ConfigError
from sim.scenario import Scenario, load_scenario, scenario_from_dict
from sim.serving.simulation import Simulation
from sim.validation.match import LAYOUT_SETTINGS, engine_mismatches
from sim.validation.predict import predict, requests_as_work, with_request_spec
from sim.workload.generate import generate_open_loop

ROOT = Path(__file__).resolve().parent.parent
VALIDATE = sorted((ROOT / "scenarios").glob("validate_*.yaml"))


def doc(scheduler: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """A small measurable scenario (tiny model, plain KV pool) with sections replaced."""
    base: dict[str, Any] = {
        "seed": 1,
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {"kind": "roofline"},
        "scheduler": scheduler or {"kind": "continuous", "max_num_seqs": 4},
        "engine": {"enable_prefix_caching": False, "block_size_tokens": 16},
        "frontend": {
            "way_in_s_per_request": 0.0,
            "tokenize_s_per_token": 0.0,
            "detokenize_s_per_token": 0.0,
            "output_step_s": 0.0,  # client times = engine times in hand traces
        },
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 20.0},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 8, "max_tokens": 24},
            "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 4},
        },
    }
    for name, value in sections.items():
        base[name] = {**base.get(name, {}), **value} if isinstance(value, dict) else value
    return base


SYNTHETIC = {
    # async scheduling left to its default (on), KV blocks sized from device memory
    "continuous-defaults": doc(),
    "continuous-sync-unchunked": doc(
        {"kind": "continuous", "chunked_prefill": False, "max_num_batched_tokens": 512},
        engine={"async_scheduling": False, "num_kv_blocks": 40, "max_model_len_tokens": 256},
    ),
    "priority": doc({"kind": "priority", "max_num_seqs": 2, "long_prefill_token_threshold": 8}),
    "static": doc(
        {"kind": "static", "max_batch_size": 3},
        engine={"num_kv_blocks": 30, "max_model_len_tokens": 480},  # 30 x 16
    ),
    "prefill-first": doc({"kind": "prefill_first"}),
}
CASES = [pytest.param(load_scenario(path), id=path.stem) for path in VALIDATE] + [
    pytest.param(scenario_from_dict(d), id=name) for name, d in SYNTHETIC.items()
]


def _simulated_core(scenario: Scenario) -> EngineCore:
    """The engine core the simulator's replica runs (cost model from the scenario)."""
    return Simulation(engine_for(scenario)).core


def assert_same_core(reference: EngineCore, simulated: EngineCore) -> None:
    assert type(reference.policy) is type(simulated.policy)
    assert vars(reference.policy) == vars(simulated.policy)  # every setting, async included
    assert type(reference.kv) is type(simulated.kv)
    assert reference.kv.num_blocks == simulated.kv.num_blocks
    assert reference.kv.block_size_tokens == simulated.kv.block_size_tokens
    assert reference.max_model_len_tokens == simulated.max_model_len_tokens


def test_the_validation_scenarios_are_all_covered() -> None:
    assert len(VALIDATE) >= 3


@pytest.mark.parametrize("scenario", CASES)
def test_the_reference_engine_and_the_simulator_build_the_same_core(scenario: Scenario) -> None:
    assert reference_engine_problem(scenario) is None
    config = core_config_for(scenario, reference_engine=True)
    reference = config.new_core()
    assert_same_core(reference, _simulated_core(scenario))
    assert type(reference.kv) is BlockPool
    assert reference.kv.num_blocks == kv_blocks_for(scenario)
    assert engine_settings(scenario, config) == engine_settings(scenario, engine_for(scenario).core)


def test_async_scheduling_reaches_the_reference_engines_policy() -> None:
    on = core_config_for(scenario_from_dict(doc()), reference_engine=True).new_core()
    off_doc = doc(engine={"async_scheduling": False})
    off = core_config_for(scenario_from_dict(off_doc), reference_engine=True).new_core()
    assert getattr(on.policy, "async_scheduling", None) is True
    assert getattr(off.policy, "async_scheduling", None) is False


def test_servesim_measure_serves_with_that_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure hands its wall-clock engine a core equal to the simulator's."""
    built: list[EngineCore] = []

    class Stop(Exception):
        pass

    def capture(core: EngineCore, *args: object, **kwargs: object) -> None:
        built.append(core)
        raise Stop

    monkeypatch.setattr(measure_module, "WallClockEngine", capture)
    scenario = scenario_from_dict(SYNTHETIC["priority"])
    with pytest.raises(Stop):
        measure(scenario, progress=False, probe=False)
    (core,) = built
    assert_same_core(core, _simulated_core(scenario))
    assert getattr(core.policy, "async_scheduling", None) is True


@pytest.mark.parametrize(
    ("sections", "key", "fix"),
    [
        (
            {"engine": {"enable_prefix_caching": True}},
            "engine.enable_prefix_caching",
            "set engine.enable_prefix_caching: false",
        ),
        (
            {"scheduler": {"kind": "continuous", "preemption": "swap"}},
            "scheduler.preemption",
            "set scheduler.preemption: recompute",
        ),
        (
            {"speculative": {"num_draft_tokens": 2, "acceptance_rate": 0.5, "draft_model": "tiny"}},
            "speculative",
            "remove the speculative section",
        ),
    ],
)
def test_what_the_reference_engine_cannot_run_is_refused_in_one_line(
    sections: dict[str, Any], key: str, fix: str
) -> None:
    scenario = scenario_from_dict(doc(**sections))
    engine_for(scenario)  # the simulator runs it
    with pytest.raises(ConfigError) as error:
        core_config_for(scenario, reference_engine=True)
    message = str(error.value)
    assert message.startswith(f"{key}:") and "\n" not in message
    assert fix in message
    assert message == reference_engine_problem(scenario)


def test_prefix_caching_is_the_simulators_default_pool() -> None:
    scenario = scenario_from_dict(doc(engine={"enable_prefix_caching": True}))
    assert type(Simulation(engine_for(scenario)).core.kv) is PrefixCachingPool
    assert type(core_config_for(scenario).new_core().kv) is PrefixCachingPool


# -- the measured request set, replayed ------------------------------------------------
def table(**columns: list[Any]) -> pd.DataFrame:
    """A measured per-request table: ids 0..n-1 plus ``columns``."""
    n = len(next(iter(columns.values())))
    return pd.DataFrame({"request_id": np.arange(n), **columns})


def test_a_replay_schedules_by_the_measured_priorities() -> None:
    """One slot; request 0 holds it while 1 (priority 1) and 2 (priority 0) arrive.

    Steps cost 10 ms: request 0 prefills at [0, 10) ms and decodes until 40 ms.
    vLLM's priority scheduler then admits 2 before 1, whose priority is worse;
    without the priority column both are priority 0 and 1 goes first (arrival).
    """
    scenario = scenario_from_dict(
        doc({"kind": "priority", "max_num_seqs": 1}, engine={"async_scheduling": False})
    )
    measured = table(
        arrival_s=[0.0, 0.001, 0.002],
        num_prompt_tokens=[8, 8, 8],
        num_output_tokens=[4, 2, 2],
        priority=[0, 1, 0],
    )
    cost = LinearCost(step_overhead_s=0.01)
    first = predict(scenario, measured, cost).requests.set_index("request_id")["first_token_s"]
    assert first[0] == pytest.approx(0.01)
    assert first[2] == pytest.approx(0.05)  # admitted at 40 ms, one prefill step
    assert first[1] == pytest.approx(0.07)  # after 2's prefill and decode step
    fifo = predict(scenario, measured.drop(columns="priority"), cost).requests
    first = fifo.set_index("request_id")["first_token_s"]
    assert first[1] == pytest.approx(0.05) and first[2] == pytest.approx(0.07)


def test_a_replay_shares_the_measured_prefix_groups() -> None:
    """Two prompts of 40 tokens sharing 32 (group 7), the second after the first ends:
    the second finds the 2 full 16-token blocks of the shared prefix cached."""
    engine = {"enable_prefix_caching": True, "num_kv_blocks": 64, "max_model_len_tokens": 1024}
    scenario = scenario_from_dict(doc(engine=engine))
    measured = table(
        arrival_s=[0.0, 1.0],
        num_prompt_tokens=[40, 40],
        num_output_tokens=[2, 2],
        prefix_group=[7, 7],
        num_shared_prefix_tokens=[32, 32],
    )
    cost = LinearCost(step_overhead_s=0.01)
    cached = predict(scenario, measured, cost).requests["num_cached_tokens"].tolist()
    assert cached == [0, 32]
    plain = measured.drop(columns=["prefix_group", "num_shared_prefix_tokens"])
    assert predict(scenario, plain, cost).requests["num_cached_tokens"].tolist() == [0, 0]
    with pytest.raises(ValueError, match="prefix_group and num_shared_prefix_tokens"):
        requests_as_work(measured.drop(columns="prefix_group"))


def test_request_spec_columns_round_trip_through_a_table() -> None:
    scenario = scenario_from_dict(
        doc(
            workload={
                "num_requests": 12,
                "prefix_groups": {"num_groups": 3, "shared_prefix_tokens": 16},
                "priority": {"weights": [1.0, 1.0]},
            }
        )
    )
    work = generate_open_loop(scenario.workload, np.random.default_rng(0))  # type: ignore[arg-type]
    assert work.priority is not None and work.prefix_group is not None
    records = table(  # as a run records them, out of id order
        arrival_s=work.arrival_s.tolist(),
        num_prompt_tokens=work.num_prompt_tokens.tolist(),
        num_output_tokens=work.num_output_tokens.tolist(),
        priority=work.priority.tolist(),
    ).iloc[::-1]
    back = requests_as_work(with_request_spec(records, work))
    for name in (
        "arrival_s",
        "num_prompt_tokens",
        "prefix_group",
        "num_shared_prefix_tokens",
        "priority",
    ):
        assert np.array_equal(getattr(back, name), getattr(work, name)), name
    plain = generate_open_loop(
        scenario_from_dict(doc()).workload,  # type: ignore[arg-type]
        np.random.default_rng(0),
    )
    assert with_request_spec(records, plain) is records


def test_a_measured_run_records_its_requests_priorities_and_prefixes() -> None:
    scenario = scenario_from_dict(
        doc(
            {"kind": "priority", "max_num_seqs": 2},
            workload={
                "num_requests": 5,
                "prefix_groups": {"num_groups": 2, "shared_prefix_tokens": 8},
                "priority": {"weights": [1.0, 1.0], "values": [3, 5]},
            },
        )
    )
    work = generate_open_loop(scenario.workload, np.random.default_rng(scenario.seed))  # type: ignore[arg-type]
    measured = measure(scenario, progress=False, probe=False)
    requests = measured.requests.sort_values("request_id")
    assert requests["priority"].tolist() == work.priority.tolist()  # type: ignore[union-attr]
    assert requests["prefix_group"].tolist() == work.prefix_group.tolist()  # type: ignore[union-attr]
    assert set(requests["priority"]) <= {3, 5}
    # The settings that ran, and the reference engine's layout: one process, TP 1.
    assert measured.summary["engine_settings"] == {
        **engine_settings(scenario, core_config_for(scenario)),
        **REFERENCE_LAYOUT,
    }
    assert dict.fromkeys(LAYOUT_SETTINGS, 1) == REFERENCE_LAYOUT


# -- validate checks the measured run's settings ---------------------------------------
def test_validate_refuses_a_run_measured_with_other_settings() -> None:
    scenario = scenario_from_dict(doc())
    settings = engine_settings(scenario, core_config_for(scenario))
    assert engine_mismatches(scenario, settings) == []
    assert engine_mismatches(scenario, {}) == []  # measured before settings were recorded
    other = {**settings, "max_num_seqs": 99, "async_scheduling": False}
    assert engine_mismatches(scenario, other) == [
        "max_num_seqs 99 measured, 4 in the scenario",
        "async_scheduling False measured, True in the scenario",
    ]
