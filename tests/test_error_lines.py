"""Every pydantic ``ValidationError`` a user can cause becomes one ``ConfigError`` line naming
the file (or option) and the field by the path the user wrote (``sim.errors.format_error``),
however the input reached validation: a plan's inline GPU, a ``--model`` mapping, a measured
run's recorded settings, a profile's workload, a cost artifact's block."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from endpoint_fakes import FakeServer

from sim.cli import main as cli_main
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_from_ref, model_preset
from sim.planning.plan import resolve_gpus
from sim.planning.plan_file import PlanConfig
from sim.planning.profile_sweep import driven
from sim.scenario import load_scenario
from sim.validation.fit_runs import scenario_for_run
from sim.validation.runs import ImportedRun

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "validate_tiny_cpu.yaml"
COUNT = ["workload.num_requests=6", "workload.duration_s=null"]  # a profile needs a count
SETS = [arg for item in COUNT for arg in ("--set", item)]


def one_line(error: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_plans_inline_gpu_names_every_bad_field_under_its_index() -> None:
    config = PlanConfig(gpus=["h100", {"preset": "h100", "memory_bytes": -1, "bogus": 1}])
    with pytest.raises(ConfigError) as error:
        resolve_gpus(config)
    message = one_line(error)
    # Both problems of the second entry, each by its path in the plan file.
    assert message.startswith("plan: gpus[1].")
    assert "gpus[1].memory_bytes: " in message and "gpus[1].bogus: " in message


def test_a_model_mapping_on_the_command_line_names_the_option_and_each_field() -> None:
    spec = model_preset("tiny").model_dump()
    spec["num_layers"] = 0
    del spec["hidden_size"]
    with pytest.raises(ConfigError) as error:
        model_from_ref(spec, None, "--model")
    message = one_line(error)
    assert message.startswith("--model.")
    assert "--model.num_layers: " in message and "--model.hidden_size: Field required" in message


def test_a_runs_recorded_settings_are_named_as_the_scenario_spells_them() -> None:
    # The scheduler is a tagged union (kind: continuous); its tag is no key the user wrote.
    run = ImportedRun(pd.DataFrame(), {"engine": {"max_num_seqs": 0}})
    with pytest.raises(ConfigError) as error:
        scenario_for_run(
            run, "r", model_preset("tiny"), hardware_preset("cpu-2core"), {"kind": "roofline"}
        )
    message = one_line(error)
    assert message.startswith("--from-run r: recorded settings: scheduler.max_num_seqs: ")


def test_the_path_prefix_and_the_three_problem_limit() -> None:
    with pytest.raises(ConfigError) as error:
        resolve_gpus(PlanConfig(gpus=[{"name": "x", "bogus": 1}]))
    # Four problems (peak_flops_per_s, memory_bandwidth_bytes_per_s and memory_bytes
    # missing; bogus extra): three named, one counted.
    message = one_line(error)
    assert message.startswith("plan: gpus[0].peak_flops_per_s: Field required; gpus[0].")
    assert message.count("; ") == 2 and message.endswith(" (and 1 more)")


def test_a_profiles_workload_names_the_field_under_workload() -> None:
    # concurrent with 0 streams: a closed loop of 0 users; the union tag closed_loop is
    # pydantic's, not the user's.
    scenario = load_scenario(SCENARIO, COUNT)
    with pytest.raises(ConfigError) as error:
        driven(scenario, {"profile": "concurrent", "streams": 0}, "sweep, concurrent")
    assert one_line(error).startswith("sweep, concurrent: workload.num_users: ")


def test_an_endpoints_profile_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeServer() as server:
        line = ["measure", str(SCENARIO), "-q", *SETS, "--endpoint", server.url]
        code = cli_main([*line, "--out", str(tmp_path), "--profile", "poisson", "--rate", "-1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--profile poisson: workload.arrival.rate_per_s: Input should be greater than 0" in err
