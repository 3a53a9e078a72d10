"""The teaching notebooks run headless (nbclient, a real kernel) and check their own claims.

Each notebook's cells assert what its text says, so executing it is the test.
They run in this checkout (``PYTHONPATH``), from their own folder, with the
kernel's inline (headless) figures and no network; each takes well under a minute on two cores.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # a guard against a hung kernel, not a speed test


def first_markdown(path: Path) -> str:
    cells = nbformat.read(path, as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "markdown")


def question_of(path: Path) -> str:
    """The notebook's one question: the bold ``**Question: ...**`` line of its first cell."""
    found = re.search(r"\*\*Question: (.+?)\*\*", first_markdown(path))
    assert found, f"{path.name}: no **Question: ...** line in the first cell"
    return found.group(1)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_and_its_claims_hold(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's sim, not an installed one
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend: headless PNGs
    monkeypatch.delenv("SERVESIM_NOTEBOOK_REQUESTS", raising=False)  # the sizes the text uses
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError naming the cell if an assert fails
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors
    figures = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert figures, f"{path.name} drew no figure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean_and_checks_its_text(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    asserts = sum(len(re.findall(r"^\s*assert ", c.source, flags=re.M)) for c in code)
    assert asserts >= 3, f"{path.name}: cells should assert what the text claims"
    assert len(question_of(path)) > 20
    assert "http" not in "".join(c.source for c in code)  # nothing fetched at run time


def test_the_numbered_notebooks_are_all_there() -> None:
    numbers = sorted(int(p.name[:2]) for p in NOTEBOOKS)
    assert numbers == list(range(8))


def test_readme_lists_every_notebook_with_its_question() -> None:
    readme = (ROOT / "README.md").read_text()
    learn = readme.split("## Learn", 1)[1].split("\n## ", 1)[0]
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in learn, f"README's Learn section misses {path.name}"
        line = next(line for line in learn.splitlines() if path.name in line)
        assert question_of(path).lower() in line.lower(), f"README: {path.name}'s question"
