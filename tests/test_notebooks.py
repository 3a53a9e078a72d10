"""The teaching notebooks run headless (nbclient, a real kernel) and check their own claims.

Each notebook's cells assert what its text says, so executing it is the test.
They run as ``scripts/execute_notebooks.py`` runs them (its ``execute``: this
checkout's ``PYTHONPATH``, from their own folder, the kernel's inline (headless)
figures, no network), on a copy: the stored files, which keep their outputs so
that the repository shows the figures, are not rewritten. Each takes well under
a minute on two cores.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # a guard against a hung kernel, not a speed test
# A cell that makes a figure: each one captions it (scenario, model, GPU, cost model).
_DRAWS = ("plt.subplots(", "plt.figure(")


def _script() -> ModuleType:
    """``scripts/execute_notebooks.py``, the one way the notebooks are executed."""
    spec = importlib.util.spec_from_file_location(
        "execute_notebooks", ROOT / "scripts" / "execute_notebooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


execute_notebooks = _script()


def first_markdown(path: Path) -> str:
    cells = nbformat.read(path, as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "markdown")


def question_of(path: Path) -> str:
    """The notebook's one question: the bold ``**Question: ...**`` line of its first cell."""
    found = re.search(r"\*\*Question: (.+?)\*\*", first_markdown(path))
    assert found, f"{path.name}: no **Question: ...** line in the first cell"
    return found.group(1)


def draws(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and any(call in cell.source for call in _DRAWS)


def images(cell: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_and_its_claims_hold(path: Path) -> None:
    stored = path.read_bytes()
    # This checkout's sim, the inline backend, the sizes the text uses (no dpi: the default).
    with execute_notebooks.notebook_environment(dpi=None):
        # Raises CellExecutionError naming the cell if an assert fails.
        notebook = execute_notebooks.execute(path, CELL_TIMEOUT_S)
    assert path.read_bytes() == stored  # executed a copy
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
    drawn = [images(cell) for cell in notebook.cells if draws(cell)]
    assert drawn and all(drawn), f"{path.name}: a cell that makes a figure showed none"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_with_its_figures(path: Path) -> None:
    """Stored executed (scripts/execute_notebooks.py), so that the repository shows each
    figure: every code cell ran, in order, without error, and every cell that makes a
    figure captions it and holds its image; nothing a re-run would change is stored."""
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    how = "run python scripts/execute_notebooks.py"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{path.name} is stored unexecuted or out of order: {how}"
    )
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    for cell in filter(draws, code):
        assert "caption_figure(" in cell.source, f"{path.name}: a figure without its caption"
        assert images(cell), f"{path.name} is stored without a figure's image: {how}"
    assert all(execute_notebooks.stable_output(o) for o in outputs)  # no object addresses
    assert all("execution" not in c.metadata for c in code)  # no timestamps


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_checks_its_text(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code
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
