"""What a run imports of ``sim.cost``, and ``kind: auto`` reads only the provenance of
the shipped kernel artifacts.

Properties: importing one cost module imports none of the others it does not need
(the engine's ``sim.cost.base``, a scenario, a roofline run: no kernel-table code);
the provenance read alone is the one the full artifact holds. Nothing here is timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sim.cost.kernels.artifact as artifact
from sim.cost.kernels.config import auto_candidates
from sim.errors import ConfigError
from sim.hardware.specs import hardware_preset, model_preset

ROOT = Path(__file__).resolve().parent.parent


def _imported_after(code: str) -> list[str]:
    """The ``sim.cost`` modules a fresh interpreter holds after ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sim.cost'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_the_engine_s_cost_import_pulls_in_no_cost_model() -> None:
    assert _imported_after("import sim.cost.base") == ["sim.cost", "sim.cost.base"]


def test_a_scenario_leaves_the_kernel_table_tools_unimported() -> None:
    imported = _imported_after("import sim.scenario")
    assert "sim.cost.kernels.config" in imported  # the cost: union validates kind: kernels
    # The tools, and the cost model with its tables' code until a scenario builds one.
    for module in ("llmservingsim", "slice", "cost", "grid", "tables", "ops"):
        assert f"sim.cost.kernels.{module}" not in imported


def test_a_run_on_the_roofline_leaves_the_kernel_cost_model_unimported() -> None:
    # kind: auto looks for tables (their provenance only) and finds none for an L4.
    imported = _imported_after(
        "import sim.api\n"
        "sim.api.run('scenarios/chat.yaml', ['hardware=l4'], progress=False).summary"
    )
    assert "sim.cost.kernels.config" in imported and "sim.cost.roofline" in imported
    assert "sim.cost.kernels.cost" not in imported


@pytest.mark.parametrize("path", artifact.shipped_kernel_artifacts(), ids=lambda p: p.name)
def test_the_provenance_alone_is_the_artifact_s_provenance(path: Path) -> None:
    assert artifact.load_provenance_cached(path) == artifact.load_cached(path).provenance


def test_a_missing_artifact_is_a_config_error_for_its_provenance_too() -> None:
    with pytest.raises(ConfigError, match="no such kernel artifact"):
        artifact.load_provenance_cached(Path("/nowhere/x.json.gz"))


def test_auto_candidates_build_no_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, mtime_ns: int) -> None:
        raise AssertionError(f"tables of {path.name} built")

    monkeypatch.setattr(artifact, "_load", refuse)
    llama = model_preset("llama-3-8b")

    def shipped(hardware: str) -> list[str]:
        """The shipped candidates (the installed database, with gpu-data, comes first)."""
        found, _ = auto_candidates(llama, hardware_preset(hardware))
        return [Path(str(c.artifact)).name for c in found if c.source == "path"]

    assert auto_candidates(llama, hardware_preset("l4"))[0] == []  # not even in the database
    assert shipped("h100") == ["h100_sxm-vllm-0.24.0-llama-3.1-8b.json.gz"]
    assert [name.split("-")[0] for name in shipped("rtx-pro-6000")] == [
        "rtx_pro_6000_server",
        "rtxpro6000",
    ]
