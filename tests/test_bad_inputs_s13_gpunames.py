"""Session 13: a GPU is the preset its name says, by one rule (``sim.hardware.device_names``)
for a measured run's device and a calibration artifact's. An H100 SXM calls itself
``NVIDIA H100 80GB HBM3`` and was taken for ``h100-pcie``; an NVL or Max-Q card for the
preset of the plain part; an L40S calibration artifact was read as ``l4``'s."""

from __future__ import annotations

import pytest

from sim.cost.calibrated import HardwareInfo, load_artifact
from sim.cost.config import artifact_hardware, resolve_artifact
from sim.hardware.device_names import hardware_matches
from sim.hardware.specs import hardware_preset


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-pcie"),  # HBM3 and no PCIe: the SXM part
        ("NVIDIA H100 PCIe", "h100-sxm"),
        ("NVIDIA H100 NVL", "h100"),  # an NVL card is a part of its own
        ("NVIDIA H100 NVL", "h100-sxm"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA L40", "l40s"),
        ("NVIDIA L40S", "l4"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA A100-SXM4-40GB", "a100-80gb"),
    ],
)
def test_a_device_is_no_preset_of_another_part(device: str, preset: str) -> None:
    assert not hardware_matches(device, hardware_preset(preset))


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA B200", "b200"),
    ],
)
def test_a_device_is_the_preset_of_its_part(device: str, preset: str) -> None:
    assert hardware_matches(device, hardware_preset(preset))


@pytest.mark.parametrize(
    ("device_name", "preset"),
    [
        ("NVIDIA L40S", "l40s"),  # was l4: "L4" is inside "L40S"
        ("NVIDIA L4", "l4"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),  # was h100, the SXM's figures
        ("NVIDIA H200 NVL", None),  # was h200
        ("NVIDIA GH200 480GB", None),  # was h200
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),  # was a100-80gb
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ],
)
def test_an_artifact_is_the_preset_its_device_is(device_name: str, preset: str | None) -> None:
    artifact = load_artifact(resolve_artifact("cpu-tiny-fp32", None))
    hardware = HardwareInfo(
        device="cuda", device_name=device_name, device_count=1, cpu_model="x", num_threads=1
    )
    assert artifact_hardware(artifact.model_copy(update={"hardware": hardware})) == preset
