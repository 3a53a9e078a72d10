"""``api.run``'s overrides as a mapping (dotted keys or nested sections) beside ``--set``'s
strings: the same scenario, the same validation, one error line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim import api
from sim.errors import ConfigError
from sim.scenario import load_scenario, overridden
from sim.scenario.overrides import dotted_items, set_keys

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "scenarios" / "chat.yaml"
STRINGS = [
    "workload.num_requests=40",
    "engine.block_size_tokens=32",
    "engine.max_model_len_tokens=4096",
    "scheduler.max_num_seqs=64",
]


@pytest.mark.parametrize(
    "mapping",
    [
        {
            "workload.num_requests": 40,
            "engine.block_size_tokens": 32,
            "engine.max_model_len_tokens": 4096,
            "scheduler.max_num_seqs": 64,
        },
        {
            "workload": {"num_requests": 40},
            "engine": {"block_size_tokens": 32, "max_model_len_tokens": 4096},
            "scheduler": {"max_num_seqs": 64},
        },
        {
            "workload.num_requests": 40,
            "engine": {"block_size_tokens": 32, "max_model_len_tokens": 4096},
            "scheduler.max_num_seqs": 64,
        },
    ],
)
def test_a_mapping_is_the_same_scenario_as_the_strings(mapping: dict[str, Any]) -> None:
    expected = load_scenario(CHAT, STRINGS)
    assert load_scenario(CHAT, mapping) == expected
    assert expected != load_scenario(CHAT)  # the overrides changed something


def test_a_nested_section_is_merged_not_replaced() -> None:
    base = load_scenario(CHAT)
    changed = load_scenario(CHAT, {"engine": {"block_size_tokens": 32}})
    assert changed.engine.block_size_tokens == 32
    # The file's other engine keys are kept.
    assert changed.engine.model_copy(update={"block_size_tokens": 16}) == base.engine.model_copy(
        update={"block_size_tokens": 16}
    )


def test_values_are_taken_as_given_not_parsed_as_yaml() -> None:
    # --set parses "yes" as YAML (a boolean); a mapping's value is the string itself.
    assert load_scenario(CHAT, {"description": "yes"}).description == "yes"


def test_a_scenario_object_takes_the_overrides_too() -> None:
    scenario = load_scenario(CHAT)
    mapping = {"workload.num_requests": 40, "engine": {"block_size_tokens": 32}}
    strings = ["workload.num_requests=40", "engine.block_size_tokens=32"]
    expected = load_scenario(CHAT, strings)
    assert overridden(scenario, mapping, "chat", CHAT.parent) == expected
    assert overridden(scenario, strings, "chat", CHAT.parent) == expected
    assert overridden(scenario, {}, "chat", CHAT.parent) is scenario
    none: Any = None  # an untyped caller's "no overrides"
    assert (
        load_scenario(CHAT, none) == load_scenario(CHAT, []) == load_scenario(CHAT, {}) == scenario
    )


def test_run_takes_a_mapping_for_a_path_and_an_object() -> None:
    mapping = {"workload": {"num_requests": 30}, "cost.kind": "roofline"}
    by_path = api.run(CHAT, mapping, workers=1)
    by_object = api.run(load_scenario(CHAT), mapping, workers=1)
    by_strings = api.run(CHAT, ["workload.num_requests=30", "cost.kind=roofline"], workers=1)
    assert len(by_path.raw.records) == 30
    assert by_path.summary == by_strings.summary
    assert by_object.summary == by_strings.summary


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # A value pydantic refuses: the field's path, as for the file.
        ({"engine": {"block_size_tokens": 0}}, r"chat\.yaml: engine\.block_size_tokens: "),
        ({"engine.no_such_key": 1}, r"chat\.yaml: engine\.no_such_key: Extra inputs"),
        # A key through something that is not a section.
        ({"seed.value": 1}, r"chat\.yaml: overrides: seed\.value: 'seed' is not a section"),
        ({"engine..block_size_tokens": 1}, r"chat\.yaml: overrides: bad override key"),
        ({3: 1}, r"overrides: key 3 is not a dotted key"),
        ({"engine": {"": 1}}, r"overrides: key engine\.'' is not a dotted key"),
        ("engine.block_size_tokens=32", r"chat\.yaml: overrides: expected a list of 'key=value'"),
        (["engine.block_size_tokens"], r"--set 'engine\.block_size_tokens': expected dotted"),
        ([("engine.block_size_tokens", 32)], r"chat\.yaml: overrides: expected 'key=value' str"),
    ],
)
def test_bad_overrides_are_one_line_naming_the_key(overrides: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_scenario(CHAT, overrides)
    assert "\n" not in str(caught.value)


def test_dotted_items_flatten_in_order() -> None:
    assert dotted_items({"a": {"b": 1, "c": {"d": [2]}}, "e.f": None, "g": {}}) == [
        ("a.b", 1),
        ("a.c.d", [2]),
        ("e.f", None),
    ]


LEAVES = ["workload.num_requests", "workload.arrival.rate_per_s"]


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (["workload.num_requests = 5", "engine.x=32"], ["workload.num_requests", "engine.x"]),
        # A --set whose value is a mapping sets its leaves (so what refuses a run length
        # sees workload.num_requests), as a mapping of overrides does ...
        (["workload={num_requests: 5, arrival: {rate_per_s: 2}}"], LEAVES),
        ({"workload": {"num_requests": 5, "arrival.rate_per_s": 2}}, LEAVES),
        # ... one that flattens to nothing (it empties its section) is its own key.
        (["workload={}", "workload.arrival={rate_per_s: {}}"], ["workload", "workload.arrival"]),
        # A key YAML reads as no str is validation's to name, not this reader's.
        (["workload={1: 2}", "workload=[1]", "workload={a: 1"], ["workload"] * 3),
    ],
)
def test_set_keys_reads_a_mapping_value_as_its_leaves(overrides: Any, keys: list[str]) -> None:
    assert set_keys(overrides) == keys
