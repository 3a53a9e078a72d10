"""Session 13's audit of overrides: a setting given twice, spelled two ways, dropped one.

- ``--set 'workload={num_requests: 5}' --set workload.num_requests=6`` was not seen as
  one key given twice (the check compared the keys' text): 6 won, 5 was dropped.
- ``--set workload.num_requests=5 --set 'workload={kind: synthetic, ...}'``: the later
  mapping replaced the section whole, dropping the 5.
- ``api.run(path, {"workload.num_requests": 20, "workload": {"num_requests": 30}})``
  ran 30 requests: both flatten to one key, the last won.

Each is refused in one line naming both spellings; the same value twice is one setting.
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim import api
from sim.errors import ConfigError
from sim.planning.capacity import MIN_STEADY_REQUESTS, run_length_overrides
from sim.scenario import apply_overrides, layered, load_scenario
from tests.benchmark_module import load_benchmark
from tests.cli_errors import run_error

CHAT = Path(__file__).resolve().parent.parent / "scenarios" / "chat.yaml"
WHOLE = "workload={kind: synthetic, arrival: {kind: poisson, rate_per_s: 2}}"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["workload={num_requests: 5}", "workload.num_requests=6"],
            "--set workload.num_requests: given twice, 'workload={num_requests: 5}' and "
            "'workload.num_requests=6'; give one",
        ),
        (
            ["workload.num_requests=5", WHOLE],
            f"--set workload.num_requests: given twice, 'workload.num_requests=5' and "
            f"'{WHOLE}' (which replaces workload whole); give one",
        ),
        (
            ["workload.arrival.rate_per_s=3", "workload.arrival=null"],
            "--set workload.arrival.rate_per_s: given twice, 'workload.arrival.rate_per_s=3' "
            "and 'workload.arrival=null' (which replaces workload.arrival whole); give one",
        ),
        (
            ["workload.arrival=null", "workload.arrival.rate_per_s=3"],
            "--set workload.arrival: given twice, 'workload.arrival=null' and "
            "'workload.arrival.rate_per_s=3'; give one",
        ),
    ],
)
def test_a_set_given_twice_spelled_two_ways_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sets: list[str], message: str
) -> None:
    argv = [f"--set={item}" for item in sets]
    assert run_error(capsys, tmp_path, str(CHAT), *argv) == message


@pytest.mark.parametrize(
    "overrides",
    [
        {"workload.num_requests": 20, "workload": {"num_requests": 30}},
        {"workload": {"num_requests": 20, "arrival": {"rate_per_s": 2}, "num_requests ": 30}},
    ],
)
def test_a_mapping_giving_a_key_twice_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"workload\.num_requests: given twice") as caught:
        api.run(CHAT, overrides, workers=1)
    message = str(caught.value)
    assert message.startswith(f"{CHAT}: overrides: workload.num_requests: given twice, ")
    assert "20" in message and "30" in message and "\n" not in message
    with pytest.raises(ConfigError, match="given twice"):  # a scenario object, too
        api.run(load_scenario(CHAT), overrides, workers=1)


def test_a_mapping_names_each_spelling_as_given() -> None:
    overrides = {"workload": {"num_requests": 20}, "workload.num_requests": 30}
    with pytest.raises(ConfigError) as caught:
        load_scenario(CHAT, overrides)
    assert str(caught.value) == (
        f"{CHAT}: overrides: workload.num_requests: given twice, "
        "{'workload': {'num_requests': 20}} and {'workload.num_requests': 30}; give one"
    )


GAMMA = "workload.arrival={kind: gamma, burstiness: 2"


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [
        # The same value twice, however spelled, is one setting.
        ([f"{GAMMA}, rate_per_s: 5}}", "workload.arrival.rate_per_s=5"], "arrival.rate_per_s", 5),
        (["workload.arrival.rate_per_s=5", f"{GAMMA}, rate_per_s: 5}}"], "arrival.rate_per_s", 5),
        ({"workload.num_requests": 20, "workload": {"num_requests": 20}}, "num_requests", 20),
        # A key set under a section a --set replaced earlier is merged into it, not dropped.
        ([f"{GAMMA}}}", "workload.arrival.rate_per_s=7"], "arrival.rate_per_s", 7),
        # Two keys under one section, neither dropping the other.
        (
            {"workload": {"num_requests": 9}, "workload.arrival": {"rate_per_s": 2}},
            "num_requests",
            9,
        ),
    ],
)
def test_one_setting_spelled_twice_or_merged_is_taken(
    overrides: Any, field: str, value: float
) -> None:
    workload = load_scenario(CHAT, overrides).workload
    assert attrgetter(field)(workload) == value


def test_the_served_benchmark_lets_a_users_set_replace_its_defaults_whole() -> None:
    # benchmarks/simulated_server.py's defaults set output_tokens key by key; a user's
    # --set of the section whole replaces them, not a setting given twice.
    bench = load_benchmark("simulated_server")
    whole = "workload.output_tokens={kind: normal, mean_tokens: 8, std_tokens: 1, max_tokens: 16}"
    sets = bench.layered_sets(bench.DEFAULT_SETS, [whole, "workload.arrival.rate_per_s=20"])
    workload = load_scenario(Path(bench.ROOT) / bench.SCENARIO, sets).workload
    assert (workload.output_tokens.kind, workload.arrival.rate_per_s) == ("normal", 20)
    assert workload.num_requests == 200  # a default the user did not replace
    # A user's own key given twice is the face's to refuse, not the layering's to drop.
    assert bench.layered_sets([], ["a=1", "a=2"]) == ["a=1", "a=2"]


def test_capacity_raises_a_count_given_in_a_whole_workload() -> None:
    # capacity's raised run length is a layer over the --set, not the key given twice.
    whole = (
        "workload={kind: synthetic, num_requests: 100, arrival: {kind: poisson, rate_per_s: 3},"
        " prompt_tokens: {kind: fixed, tokens: 4}, output_tokens: {kind: fixed, tokens: 2}}"
    )
    run_length = run_length_overrides(str(CHAT), [whole], None)
    workload = load_scenario(CHAT, run_length.sets).workload
    assert run_length.raised is not None and "raised from 100" in run_length.raised
    assert (workload.num_requests, workload.arrival.rate_per_s) == (MIN_STEADY_REQUESTS, 3)
    assert workload.prompt_tokens.kind == "fixed"  # the rest of the whole section kept


@pytest.mark.parametrize(
    ("sets", "later", "expected"),
    [
        (["a.b=1", "a.c=2", "d=3"], ["a={c: 4}"], ["d=3", "a={c: 4}"]),
        (["a={b: 1, c: {d: 2}}", "e=5"], ["a.c.d=3"], ["a={b: 1, c: {d: 3}}", "e=5", "a.c.d=3"]),
        (["a={b: 1}"], ["a.c=2"], ["a={b: 1}", "a.c=2"]),  # merged, nothing replaced
    ],
)
def test_a_layer_leaves_out_or_agrees_with_what_it_replaces(
    sets: list[str], later: list[str], expected: list[str]
) -> None:
    assert layered(sets, later) == expected
    doc: dict[str, Any] = {}
    apply_overrides(doc, expected, "x")  # none of it given twice


# --- values a mapping of overrides holds (api.run's, from a notebook) -------------------------


def test_a_numpy_scalar_is_its_python_number() -> None:
    # np.float64(5.0) was not 5.0 to the given-twice check (another type): refused.
    rate = "workload.arrival.rate_per_s"
    overrides = {rate: np.float64(5.0), "workload": {"arrival": {"rate_per_s": 5.0}}}
    assert load_scenario(CHAT, overrides) == load_scenario(CHAT, {rate: 5.0})
    numbers = {"workload.num_requests": np.int64(7), "seed": np.int32(3)}
    assert load_scenario(CHAT, numbers) == load_scenario(
        CHAT, {"workload.num_requests": 7, "seed": 3}
    )
    with pytest.raises(ConfigError, match="num_requests: Input should be a valid integer"):
        load_scenario(CHAT, {"workload.num_requests": np.bool_(True)})  # was 1 request


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (np.array([1, 2]), "ndarray"),
        ({5}, "set"),
        (Path("5"), "PosixPath"),
        ([5, np.arange(2)], "ndarray"),
    ],
)
def test_a_value_yaml_cannot_hold_is_refused_in_one_line(value: Any, kind: str) -> None:
    # An array given twice crashed the comparison (==, truth value ambiguous); one
    # given once reached validation, which named no key's value.
    for overrides in (
        {"workload.num_requests": value, "workload": {"num_requests": value}},
        {"workload.num_requests": value},
    ):
        with pytest.raises(ConfigError) as caught:
            api.run(CHAT, overrides, workers=1)
        message = str(caught.value)
        assert message.startswith(f"{CHAT}: overrides: workload.num_requests")
        assert f"type {kind} is not a YAML value" in message and "\n" not in message
