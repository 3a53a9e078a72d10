"""Scenario values that used to be taken on trust (issue 39): an engine-CPU artifact
fitted to another model or GPU, a name that is a path, a swap link near 0 B/s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_errors import one_line_error, run_error

from sim.cost.engine_cpu import EngineCpuConfig
from sim.cost.fitted import FitSummary, FittedRunInfo, save_fitted_artifact
from sim.cost.fitted_cpu import EngineCpuArtifact, EngineCpuProvenance
from sim.errors import ConfigError
from sim.scenario import scenario_from_dict

CPU = EngineCpuConfig(
    per_step_s=3e-3,
    scheduler_per_seq_s=2e-4,
    sampling_per_seq_s=0.0,
    per_token_s=1e-6,
    non_overlapped_s=5e-4,
)


def scenario(**top: Any) -> dict[str, Any]:
    """A small scenario: tiny on the CPU preset, roofline, a few fixed-length requests."""
    return {
        "name": "edges",
        "model": "tiny",
        "hardware": "cpu-2core",
        "cost": {"kind": "roofline"},
        "workload": {
            "kind": "synthetic",
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 4},
        },
        **top,
    }


def cpu_artifact(folder: Path, model: str, hardware: str) -> Path:
    """An engine-CPU artifact whose provenance says it was fitted to ``model`` on ``hardware``."""
    artifact = EngineCpuArtifact(
        provenance=EngineCpuProvenance(
            tool_version="test",
            created_utc="2026-12-06T00:00:00Z",
            command="servesim calibrate",
            model=model,
            hardware=hardware,
            vllm_version="0.19.0",
            async_scheduling=True,
            runs=[FittedRunInfo(source="run", format="test", num_requests=1, sha256="0" * 64)],
        ),
        base_cost={"kind": "roofline"},
        base_cost_label="roofline",
        cpu=CPU,
        fit=FitSummary(
            free_parameters=["per_step_s"],
            objective="o",
            objective_value=0.0,
            base_objective_value=1.0,
            num_evaluations=1,
            optimiser="nm",
        ),
    )
    return save_fitted_artifact(artifact, folder / f"cpu-{model}-{hardware}.json")


def test_an_engine_cpu_artifact_of_the_scenarios_model_and_gpu_is_applied(tmp_path: Path) -> None:
    path = cpu_artifact(tmp_path, "tiny", "cpu-2core")
    s = scenario_from_dict(scenario(engine={"cpu_artifact": path.name}), "s.yaml", tmp_path)
    assert s.engine.cpu == CPU


@pytest.mark.parametrize(
    ("model", "hardware", "named"),
    [("llama-3-8b", "cpu-2core", "llama-3-8b"), ("tiny", "h100", "on h100")],
)
def test_an_engine_cpu_artifact_of_another_model_or_gpu_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, hardware: str, named: str
) -> None:
    path = cpu_artifact(tmp_path, model, hardware)
    with pytest.raises(ConfigError) as error:
        scenario_from_dict(scenario(engine={"cpu_artifact": path.name}), "s.yaml", tmp_path)
    message = str(error.value)
    assert "\n" not in message and message.startswith("s.yaml: engine.cpu_artifact")
    # Names what it was fitted on and what the scenario runs.
    assert named in message and "the scenario runs tiny on cpu-2core" in message
    # The same through the command line: one line, exit 2.
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario(engine={"cpu_artifact": path.name})))
    assert "engine.cpu_artifact" in run_error(capsys, tmp_path, str(tmp_path / "s.yaml"))


@pytest.mark.parametrize("name", ["../../etc/x", "/tmp/x", "a/b", "..", ".", "", "a\\b", "a\nb"])
def test_a_scenario_name_is_a_name_not_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    with pytest.raises(ConfigError) as error:
        scenario_from_dict(scenario(name=name), "s.yaml", tmp_path)
    assert str(error.value).startswith("s.yaml: name: ")
    # Run without --out (the default runs/<name>): refused before anything is written.
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario(name=name)))
    (tmp_path / "work" / "runs").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    message = one_line_error(capsys, ["run", str(tmp_path / "s.yaml"), "-q"])
    assert message.startswith(f"{tmp_path / 's.yaml'}: name: ") and "not a name" in message
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "s.yaml",
        "work",
        "work/runs",
    ]


@pytest.mark.parametrize("name", ["chat", "prefix-caching", "cpu-fit-2.5", "x..y", "Llama 3 (8B)"])
def test_plain_names_stay_fine(tmp_path: Path, name: str) -> None:
    assert scenario_from_dict(scenario(name=name), "s.yaml", tmp_path).name == name


@pytest.mark.parametrize("bandwidth", [1e-300, 1.0, 999_999.0])
def test_a_swap_link_slower_than_any_host_link_is_refused(tmp_path: Path, bandwidth: float) -> None:
    # 1e-300 B/s made one block's swap last ~1e305 s: the clock overflowed and the
    # run failed with StopIteration (or printed 1e307-second latencies).
    doc = scenario(
        scheduler={"kind": "continuous", "preemption": "swap"},
        engine={"swap_bandwidth_bytes_per_s": bandwidth},
    )
    with pytest.raises(ConfigError, match=r"^s\.yaml: engine\.swap_bandwidth_bytes_per_s: "):
        scenario_from_dict(doc, "s.yaml", tmp_path)


def test_a_slow_but_real_swap_link_is_fine(tmp_path: Path) -> None:
    doc = scenario(engine={"swap_bandwidth_bytes_per_s": 1e6})  # 1 MB/s, the floor
    assert scenario_from_dict(doc, "s.yaml", tmp_path).engine.swap_bandwidth_bytes_per_s == 1e6
