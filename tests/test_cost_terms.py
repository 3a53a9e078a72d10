"""A GPU is one table of data: ``sim/hardware/gpus.toml`` holds one
table per GPU, from which the hardware presets, the kernel-table names, the
aiconfigurator names and the prices all come.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cost.kernels.memory_ops import hardware_for_gpu
from sim.errors import ConfigError
from sim.hardware.specs import (
    AICONFIGURATOR_GPUS,
    GPUS_FILE,
    HARDWARE_PRESETS,
    SOURCE_GPU_NAMES,
    load_gpu_presets,
)
from sim.planning.pricing import GPU_PRICE_PER_HOUR

# -- a GPU is data --------------------------------------------------------------

NEW_GPU = """
[x9000]
peak_flops_per_s = 1200e12
memory_bandwidth_bytes_per_s = 5e12
memory_bytes = 128e9
nvidia_smi_memory_mib = 130000
link = "nvlink5"
aiconfigurator_gpu = "x9000_sxm"
kernel_table_gpus = ["X9000"]
price_per_hour_usd = 4.5
"""


def test_a_new_gpu_is_one_table_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(GPUS_FILE.read_text() + NEW_GPU)
    presets = load_gpu_presets(path)
    assert list(presets)[:-1] == list(HARDWARE_PRESETS)  # the shipped ones unchanged, in order
    gpu = presets["x9000"]
    spec = gpu.spec
    assert (spec.name, spec.peak_flops_per_s, spec.memory_bytes) == ("x9000", 1.2e15, 1.28e11)
    # CUDA's total: nvidia-smi's MiB less the 0.43 GiB the driver keeps.
    assert spec.cuda_memory_bytes == 130000 * 2**20 - 0.43 * 2**30
    assert spec.gpu_link == "nvlink5" and spec.compute_efficiency == 0.6
    assert gpu.table_gpus == {"x9000_sxm", "X9000"} and gpu.price_per_hour_usd == 4.5


def test_the_presets_names_and_prices_all_come_from_the_file() -> None:
    presets = load_gpu_presets()
    assert {name: gpu.spec for name, gpu in presets.items()} == dict(HARDWARE_PRESETS)
    assert dict(AICONFIGURATOR_GPUS) == {
        name: gpu.aiconfigurator_gpu for name, gpu in presets.items() if gpu.aiconfigurator_gpu
    }
    assert all(
        SOURCE_GPU_NAMES[name] == gpu.table_gpus for name, gpu in presets.items() if gpu.table_gpus
    )
    assert dict(GPU_PRICE_PER_HOUR) == {
        name: gpu.price_per_hour_usd for name, gpu in presets.items()
    }
    assert hardware_for_gpu("RTX4090") == HARDWARE_PRESETS["rtx-4090"]


def test_a_bad_table_is_one_line_naming_the_file_and_gpu(tmp_path: Path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(NEW_GPU.replace("5e12", "-5e12"))
    with pytest.raises(ConfigError) as error:
        load_gpu_presets(path)
    message = str(error.value)
    assert "\n" not in message
    assert "gpus.toml [x9000]" in message and "memory_bandwidth_bytes_per_s" in message
