"""The faces' public names: ``sim.api`` and ``sim.scenario`` hold what their modules
define (docs, notebooks and tests import ``sim.api.X``). How long a module may be
is the concept's business (``tests/test_code_rules.py``), not a line limit."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.api as api
import sim.api.build as api_engine
import sim.api.result as api_result
import sim.scenario as scenario
import sim.scenario.overrides as scenario_overrides

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", api.__all__)
def test_every_public_api_name_is_in_sim_api(name: str) -> None:
    assert getattr(api, name) is not None


@pytest.mark.parametrize("name", scenario.__all__)
def test_every_public_scenario_name_is_in_sim_scenario(name: str) -> None:
    assert getattr(scenario, name) is not None


@pytest.mark.parametrize(
    ("face", "home", "names"),
    [
        (
            api,
            api_engine,
            (
                "cluster_for",
                "core_config_for",
                "cost_model_for",
                "engine_for",
                "kv_blocks_for",
                "model_for",
                "policy_factory",
                "reference_engine_problem",
            ),
        ),
        (api, api_result, ("DEFAULT_TRACE_REQUESTS", "Result", "build_result", "engine_settings")),
        (api, scenario_overrides, ("Overrides",)),
        (scenario, scenario_overrides, ("Overrides", "apply_overrides", "set_dotted")),
    ],
)
def test_the_faces_re_export_the_very_objects(
    face: object, home: object, names: tuple[str, ...]
) -> None:
    # The same objects, not copies: a monkeypatch or isinstance check sees one thing.
    for name in names:
        assert getattr(face, name) is getattr(home, name), name


def test_the_api_lists_what_it_re_exports() -> None:
    public = {
        name for name in dir(api) if not name.startswith("_") and callable(getattr(api, name))
    }
    assert {"run", "replay", "engine_for", "Result", "core_config_for"} <= set(api.__all__)
    assert set(api.__all__) <= public | {"DEFAULT_TRACE_REQUESTS", "Overrides"}
    assert len(set(api.__all__)) == len(api.__all__) and api.__all__ == sorted(api.__all__)


def test_star_import_gives_the_public_names_and_nothing_borrowed() -> None:
    namespace: dict[str, object] = {}
    exec("from sim.api import *", namespace)
    names = set(namespace) - {"__builtins__"}
    assert names == set(api.__all__)
    assert not {"np", "Path", "Any", "dataclasses", "Scenario", "ConfigError"} & names
    for name in names:
        assert not name.startswith("_"), name
        value = namespace[name]
        if callable(value):  # a class or function of servesim's, not one borrowed
            assert value.__module__.startswith("sim.api"), (name, value.__module__)
        else:  # a constant or a type alias of sim.api
            assert getattr(api, name) is value


def test_a_bad_override_still_names_the_file_and_key(tmp_path: Path) -> None:
    from sim.errors import ConfigError

    path = tmp_path / "s.yaml"
    path.write_text(
        "workload: {kind: synthetic, num_requests: 1,"
        " arrival: {kind: poisson, rate_per_s: 1},"
        " prompt_tokens: {kind: fixed, tokens: 4}, output_tokens: {kind: fixed, tokens: 2}}\n"
    )
    with pytest.raises(
        ConfigError, match=r"s\.yaml: --set: engine\.block_size_tokens: 'engine' is not"
    ):
        scenario.load_scenario(path, ["engine=3", "engine.block_size_tokens=2"])
    with pytest.raises(ConfigError, match=r"s\.yaml: engine\.block_size_tokens: "):
        scenario.load_scenario(path, ["engine.block_size_tokens=0"])
