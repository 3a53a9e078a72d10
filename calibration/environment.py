"""Describe the machine and software a calibration runs on, for the artifact."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import numpy as np
import torch

import sim
from sim.cost.calibrated import HardwareInfo, SoftwareInfo


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _run(args: list[str]) -> str | None:
    """Stdout of a short command, or None if it is missing or fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def hardware_info(device: torch.device) -> HardwareInfo:
    """Device name and count, driver/CUDA versions on GPU, CPU model and threads."""
    cpu = cpu_model()
    threads = torch.get_num_threads()
    if device.type == "cuda":
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        return HardwareInfo(
            device="cuda",
            device_name=torch.cuda.get_device_name(device),
            device_count=torch.cuda.device_count(),
            cpu_model=cpu,
            num_threads=threads,
            driver_version=driver.splitlines()[0] if driver else None,
            cuda_version=torch.version.cuda,
        )
    return HardwareInfo(
        device="cpu", device_name=cpu, device_count=1, cpu_model=cpu, num_threads=threads
    )


def software_info() -> SoftwareInfo:
    """Versions of Python, torch, numpy and servesim."""
    return SoftwareInfo(
        python=platform.python_version(),
        numpy=np.__version__,
        servesim=sim.__version__,
        torch=torch.__version__,
    )
