"""Scenario files: validation at the edge, one-line errors, ``--set`` overrides.

Every bad input must raise ``ConfigError`` whose message is one line naming the
file and the field (or the line, for YAML syntax and trace rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import api
from sim.engine.policies import ContinuousConfig, StaticConfig
from sim.errors import ConfigError
from sim.scenario import Scenario, apply_overrides, load_scenario, scenario_from_dict

SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "model": "tiny",
    "hardware": "cpu-2core",
    "cost": {
        "kind": "linear",
        "step_overhead_s": 1e-3,
        "per_prefill_token_s": 1e-5,
        "per_decode_seq_s": 1e-4,
    },
    "scheduler": {"kind": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 512},
    "engine": {"num_kv_blocks": 256, "max_model_len_tokens": 1024},
    "workload": {
        "kind": "synthetic",
        "num_requests": 20,
        "arrival": {"kind": "poisson", "rate_per_s": 50},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 100},
        "output_tokens": {"kind": "fixed", "tokens": 8},
    },
}


def write(tmp_path: Path, doc: Any, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def with_(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with one field set (``None`` deletes it)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))
    node = out
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return out


def load_error(path: Path, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_scenario(path, overrides)
    message = str(info.value)
    assert "\n" not in message, "errors must be one line"
    assert str(path) in message or path.name in message, f"file not named: {message}"
    return message


# -- valid files ------------------------------------------------------------------


def test_example_scenario_loads() -> None:
    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "chat.yaml")
    assert scenario.name == "chat"
    assert isinstance(scenario.scheduler, ContinuousConfig)
    assert scenario.workload.kind == "synthetic"


def test_small_scenario_round_trips(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, SMALL))
    assert scenario.seed == 3
    assert scenario.scheduler.max_num_seqs == 8  # type: ignore[union-attr]
    assert scenario.engine.num_kv_blocks == 256
    assert scenario_from_dict(SMALL) == scenario


def test_defaults_fill_missing_sections() -> None:
    scenario = scenario_from_dict({"workload": SMALL["workload"]})
    assert scenario.seed == 0
    assert scenario.engine.block_size_tokens == 16
    assert isinstance(scenario.scheduler, ContinuousConfig)


def test_scenario_is_frozen() -> None:
    scenario = scenario_from_dict(SMALL)
    with pytest.raises(Exception, match="frozen"):
        scenario.seed = 4


# -- YAML and structure errors ------------------------------------------------------


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nworkload:\n  kind: synthetic\n   num_requests: 3\n")
    message = load_error(path)
    assert "line 4" in message


def test_unclosed_bracket_names_a_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nseed: [1, 2\nworkload: {}\n")
    assert "line " in load_error(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "mapping" in load_error(write(tmp_path, "- 1\n- 2\n"))


def test_empty_file_reports_the_missing_workload(tmp_path: Path) -> None:
    assert "workload" in load_error(write(tmp_path, ""))


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    assert "cannot read" in load_error(tmp_path / "absent.yaml")


# -- field errors -------------------------------------------------------------------


def test_unknown_top_level_field(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, with_(SMALL, "bogus", 1)))
    assert "bogus" in message


def test_unknown_nested_field_names_its_section(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, with_(SMALL, "scheduler.max_seqs", 3)))
    assert "scheduler" in message and "max_seqs" in message


def test_wrong_typed_field(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, with_(SMALL, "scheduler.max_num_seqs", "lots")))
    assert "max_num_seqs" in message and "integer" in message


def test_negative_arrival_rate(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, with_(SMALL, "workload.arrival.rate_per_s", -1)))
    assert "rate_per_s" in message and "greater than 0" in message


@pytest.mark.parametrize(
    ("dotted", "value"),
    [("scheduler.max_seqs", 3), ("workload.arrival.rate_per_s", -1)],
)
def test_field_path_is_the_one_written_in_the_file(tmp_path: Path, dotted: str, value: Any) -> None:
    message = load_error(write(tmp_path, with_(SMALL, dotted, value)))
    assert f"{dotted}:" in message


def test_unknown_kind_of_a_tagged_union(tmp_path: Path) -> None:
    # ("priority" was the example here until it became a policy.)
    message = load_error(write(tmp_path, with_(SMALL, "scheduler.kind", "lottery")))
    assert "scheduler" in message and "lottery" in message


def test_workload_needs_exactly_one_extent(tmp_path: Path) -> None:
    doc = with_(SMALL, "workload.duration_s", 10.0)
    assert "num_requests" in load_error(write(tmp_path, doc))


def test_unknown_presets_list_known_names(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, with_(SMALL, "hardware", "h900")))
    assert "hardware" in message and "'h900'" in message and "h100" in message
    message = load_error(write(tmp_path, with_(SMALL, "model", "llama-9")))
    assert "model" in message and "'llama-9'" in message and "llama-3-8b" in message


def test_unchunked_budget_must_hold_max_model_len(tmp_path: Path) -> None:
    doc = with_(SMALL, "scheduler.chunked_prefill", False)  # budget 512 < 1024
    message = load_error(write(tmp_path, doc))
    assert "max_num_batched_tokens" in message and "max_model_len_tokens" in message
    ok = with_(doc, "scheduler.max_num_batched_tokens", 1024)
    assert load_scenario(write(tmp_path, ok, "ok.yaml")).scheduler.chunked_prefill is False  # type: ignore[union-attr]


def test_budget_below_max_num_seqs_is_refused_as_vllm_does(tmp_path: Path) -> None:
    """vLLM refuses to start with a step budget smaller than max_num_seqs (issue 30:
    a budget of 8 tokens was simulated, reporting a p99 TTFT of 2,104 s)."""
    doc = with_(SMALL, "scheduler.max_num_batched_tokens", 7)  # max_num_seqs 8
    message = load_error(write(tmp_path, doc))
    assert "max_num_batched_tokens (7) must be >= scheduler.max_num_seqs (8)" in message
    ok = with_(SMALL, "scheduler.max_num_batched_tokens", 8)
    assert load_scenario(write(tmp_path, ok, "ok.yaml")).scheduler.max_num_batched_tokens == 8  # type: ignore[union-attr]


def test_linear_cost_that_would_stall_time_is_rejected(tmp_path: Path) -> None:
    doc = with_(SMALL, "cost", {"kind": "linear", "per_prefill_token_s": 1e-5})
    assert "decode" in load_error(write(tmp_path, doc))


def test_model_that_does_not_fit_fails_when_run(tmp_path: Path) -> None:
    doc = with_(with_(SMALL, "model", "llama-3-70b"), "hardware", "l4")
    path = write(tmp_path, with_(doc, "engine.num_kv_blocks", None))
    with pytest.raises(ConfigError) as info:
        api.run(path)
    message = str(info.value)
    assert "\n" not in message
    assert path.name in message and "llama-3-70b" in message and "l4" in message


def test_trace_with_a_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0.0,10,5\n0.5,abc,5\n1.0,3,3\n")
    doc = with_(SMALL, "workload", {"kind": "trace", "format": "csv", "path": "trace.csv"})
    path = write(tmp_path, doc)
    load_scenario(path)  # the file is read when the workload is generated
    with pytest.raises(ConfigError) as info:
        api.run(path)
    message = str(info.value)
    assert "\n" not in message
    assert "trace.csv" in message and "line 3" in message and "prompt_tokens" in message


def test_trace_path_is_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text(
        "timestamp,prompt_tokens,output_tokens\n0.0,10,5\n0.5,20,2\n"
    )
    doc = with_(SMALL, "workload", {"kind": "trace", "format": "csv", "path": "data/t.csv"})
    result = api.run(write(tmp_path, doc))
    assert result.requests["num_prompt_tokens"].tolist() == [10, 20]
    assert result.requests["arrival_s"].tolist() == [0.0, 0.5]


# -- --set overrides ----------------------------------------------------------------


def test_overrides_are_parsed_as_yaml_and_validated(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL)
    scenario = load_scenario(
        path,
        [
            "seed=11",
            "workload.num_requests=7",
            "scheduler.chunked_prefill=false",
            "scheduler.max_num_batched_tokens=2048",
            "workload.arrival.rate_per_s=2.5",
            "name=renamed",
        ],
    )
    assert scenario.seed == 11
    assert scenario.workload.num_requests == 7  # type: ignore[union-attr]
    assert scenario.scheduler.chunked_prefill is False  # type: ignore[union-attr]
    assert scenario.workload.arrival.rate_per_s == 2.5  # type: ignore[union-attr]
    assert scenario.name == "renamed"


def test_override_can_switch_a_tagged_union(tmp_path: Path) -> None:
    path = write(tmp_path, with_(SMALL, "scheduler", {"kind": "static"}))
    scenario = load_scenario(path, ["scheduler.max_batch_size=4", "scheduler.max_wait_s=0.1"])
    assert scenario.scheduler == StaticConfig(max_batch_size=4, max_wait_s=0.1)


def test_override_of_an_unknown_key_is_a_field_error(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL)
    assert "nope" in load_error(path, ("workload.nope=3",))
    assert "nothere" in load_error(path, ("nothere.x.y=3",))


def test_override_into_a_scalar_is_an_error(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, SMALL), ("seed.x=3",))
    assert "seed" in message and "--set" in message


def test_override_with_a_bad_value_is_a_field_error(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, SMALL), ("workload.num_requests=abc",))
    assert "num_requests" in message


@pytest.mark.parametrize("item", ["workload", "=3", " =3"])
def test_malformed_override(tmp_path: Path, item: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(write(tmp_path, SMALL), [item])
    message = str(info.value)
    assert "\n" not in message and "--set" in message and "key=value" in message


def test_apply_overrides_creates_missing_sections() -> None:
    doc: dict[str, Any] = {}
    apply_overrides(doc, ["engine.num_kv_blocks=12", "slo.ttft_ms=200"], "x.yaml")
    assert doc == {"engine": {"num_kv_blocks": 12}, "slo": {"ttft_ms": 200}}


# -- the scenario drives the run --------------------------------------------------


def run_small(**overrides: Any) -> api.Result:
    doc = SMALL
    for dotted, value in overrides.items():
        doc = with_(doc, dotted.replace("__", "."), value)
    return api.run(scenario_from_dict(doc))


def test_seed_selects_the_workload() -> None:
    a, b, c = run_small(), run_small(), run_small(seed=4)
    assert a.requests["arrival_s"].tolist() == b.requests["arrival_s"].tolist()
    assert a.summary == b.summary
    assert a.requests["arrival_s"].tolist() != c.requests["arrival_s"].tolist()


def test_scenario_fields_reach_the_engine() -> None:
    result = run_small(
        engine__num_kv_blocks=3,
        engine__max_model_len_tokens=48,  # vLLM refuses a pool smaller than one request
        workload__output_tokens={"kind": "fixed", "tokens": 200},
    )
    # 3 blocks of 16 tokens hold 48 = max_model_len: every request (prompt >= 10,
    # output 200) is longer, and rejected.
    assert result.summary["num_rejected"] == 20
    assert result.summary["num_kv_blocks"] == 3
    assert result.summary["policy"] == "continuous"
    assert isinstance(result.scenario, Scenario)
