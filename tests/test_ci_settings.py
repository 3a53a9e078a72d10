"""CI settings (issue 14 items 10 and 18): CI is exported, and the main job needs no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_SCRIPT = (ROOT / ".ci" / "run").read_text()


def test_ci_exports_ci_before_the_tests() -> None:
    # tests/conftest.py derandomizes hypothesis only when CI is set.
    lines = [line.strip() for line in CI_SCRIPT.splitlines()]
    assert "export CI=true" in lines
    assert lines.index("export CI=true") < lines.index("python -m pytest -q")


def test_ci_runs_the_main_job_before_installing_torch() -> None:
    main_job = CI_SCRIPT.index("servesim run scenarios/chat.yaml")
    assert main_job < CI_SCRIPT.index("pip install -q torch")
    assert main_job < CI_SCRIPT.index("'.[dev,calibrate,ray,http,gpu-data,lab]'")


def test_the_main_job_runs_without_torch(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any import of torch fails
        "from sim.cli import main\n"
        f"sys.exit(main(['run', {str(ROOT / 'scenarios' / 'chat.yaml')!r}, '--out', "
        f"{str(tmp_path / 'out')!r}, '-q', '--set', 'workload.num_requests=30']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "summary.json").is_file()
