"""``servesim lab`` drives a synthetic workload's arrival rate: a starting scenario
whose load its clients set (``workload.max_concurrency``) is refused in one line,
as ``servesim plan`` refuses it. Under a cap no served check applies, so every rate
of the knee passed and the lab read its capacity as the grid's top rate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

import sim

ROOT = Path(__file__).resolve().parent.parent
TREE = Path(sim.__file__).resolve().parent.parent  # the tree under test


def test_the_lab_refuses_a_capped_workload(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "scenarios" / "chat.yaml").read_text())
    doc["workload"]["max_concurrency"] = 4
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    # On a fixed tree this returns at once; a lab that started serving would run
    # until the timeout (then the test fails).
    done = subprocess.run(
        [sys.executable, "-m", "sim.cli", "lab", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "workload.max_concurrency 4" in lines[0]
