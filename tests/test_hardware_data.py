"""Hardware and model presets are data: ``gpus.toml``, ``links.toml``, ``models.toml``.

A GPU's every fact lives in its ``gpus.toml`` table, a reason its kernel
tables do not price it included (its name is what a device name is matched
to); link and model presets are their files' tables, read as written. Each
test reads the file itself (``tomllib``) and holds the presets to it, or
gives the loader a new entry and sees the code take it up with no change.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sim.config import anchored
from sim.cost.calibrated import HardwareInfo, load_artifact
from sim.cost.config import artifact_hardware, resolve_artifact
from sim.cost.kernels import config as kernels_config
from sim.hardware import specs
from sim.hardware.parallel import LINK_PRESETS, LINKS_FILE, LinkSpec
from sim.hardware.specs import (
    GPU_PRESETS,
    HF_CONFIGS,
    MODEL_PRESETS,
    MODELS_FILE,
    TINY_MODEL,
    GpuPreset,
    ModelSpec,
    hardware_preset,
    model_preset,
)

MODELS = tomllib.loads(MODELS_FILE.read_text())
LINKS = tomllib.loads(LINKS_FILE.read_text())


def test_every_model_table_is_a_preset_as_written() -> None:
    for name, fields in MODELS["specs"].items():
        assert MODEL_PRESETS[name] == ModelSpec(name=name, **fields)
        # Only the table's fields were given (head_dim is ModelSpec's own default).
        assert MODEL_PRESETS[name].model_fields_set == {"name", "head_dim", *fields}
    assert {name: dict(config) for name, config in HF_CONFIGS.items()} == MODELS["configs"]
    for alias, target in MODELS["aliases"].items():  # the target's shapes under its name
        assert MODEL_PRESETS[alias] == MODEL_PRESETS[target].model_copy(update={"name": alias})
    assert model_preset("tiny") is TINY_MODEL and TINY_MODEL.weight_dtype_bytes == 4.0
    # A config's context limit is its max_position_embeddings unless a longer release has it.
    config = MODELS["configs"]["qwen3-8b"]
    assert specs.MAX_CONTEXT_TOKENS["qwen3-8b"] == config["max_position_embeddings"]
    assert specs.MAX_CONTEXT_TOKENS["qwen3-30b-a3b"] == MODELS["longer_releases"]["qwen3-30b-a3b"]


def test_every_link_table_is_a_preset_as_written() -> None:
    assert list(LINK_PRESETS) == list(LINKS)
    for name, fields in LINKS.items():
        assert LINK_PRESETS[name] == LinkSpec(name=name, **fields)
    # The one measured link keeps its rate whole; the others NVLink's or PCIe's default.
    assert LINK_PRESETS["pcie5-rtxpro6000"].efficiency == 1.0
    assert LINK_PRESETS["nvlink4"].efficiency == 0.8


def _with_gpu(monkeypatch: pytest.MonkeyPatch, name: str, **fields: object) -> None:
    """``GPU_PRESETS`` with one more card, as a gpus.toml table would give it."""
    spec = hardware_preset("h100").model_copy(update={"name": name})
    presets = {**GPU_PRESETS, name: GpuPreset(spec=spec, **fields)}  # type: ignore[arg-type]
    monkeypatch.setattr("sim.cost.config.GPU_PRESETS", presets)
    monkeypatch.setattr(kernels_config, "GPU_PRESETS", presets)
    sources = {**specs.SOURCE_GPU_NAMES, name: frozenset({"h100_sxm"})}
    monkeypatch.setattr(kernels_config, "SOURCE_GPU_NAMES", sources)


def test_a_calibration_is_matched_to_its_gpu_by_the_name_in_gpus_toml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifact = load_artifact(resolve_artifact("cpu-tiny-fp32", None))
    hardware = HardwareInfo(
        device="cuda", device_name="NVIDIA X9000 80GB", device_count=1,
        cpu_model="x", num_threads=1,
    )  # fmt: skip
    timed = artifact.model_copy(update={"hardware": hardware})
    assert artifact_hardware(timed) is None  # no preset names the card
    _with_gpu(monkeypatch, "x9000")
    assert artifact_hardware(timed) == "x9000"
    # The shipped cards keep their names: an H100's timing is the h100 preset's.
    h100 = hardware.model_copy(update={"device_name": "NVIDIA H100 80GB HBM3"})
    assert artifact_hardware(artifact.model_copy(update={"hardware": h100})) == "h100"


def test_a_gpu_whose_tables_do_not_price_it_says_why_in_gpus_toml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _with_gpu(monkeypatch, "h100-slow", no_kernel_tables="measured on a faster part")
    slow = hardware_preset("h100").model_copy(update={"name": "h100-slow"})
    candidates, why = kernels_config.auto_candidates(model_preset("llama-3-8b"), slow)
    assert candidates == []
    assert why == "no kernel tables for h100-slow: measured on a faster part"


def test_a_file_a_scenario_names_may_start_at_the_home_folder(tmp_path: Path) -> None:
    home = Path("~").expanduser()
    assert anchored("~/a.json", tmp_path) == home / "a.json"
    assert anchored("a.json", tmp_path) == tmp_path / "a.json"
    # A calibration artifact's path as any other file's (sim.cost.config).
    assert resolve_artifact("~/runs/a.json", tmp_path) == home / "runs" / "a.json"
