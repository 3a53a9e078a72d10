"""The notebooks run: their code cells are executed in order, with small sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_cells_run(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matplotlib.use("Agg")
    monkeypatch.setenv("SERVESIM_NOTEBOOK_REQUESTS", "200")
    monkeypatch.chdir(path.parent)  # notebooks use paths relative to their folder
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, f"{path.name} has no code cell"
    namespace: dict[str, object] = {"__name__": "__notebook__"}
    for index, cell in enumerate(code):
        source = "".join(cell["source"])
        exec(compile(source, f"{path.name}[cell {index}]", "exec"), namespace)
    assert os.environ["SERVESIM_NOTEBOOK_REQUESTS"] == "200"


def test_there_is_a_notebook() -> None:
    assert NOTEBOOKS
