"""Re-execute the teaching notebooks in place, so that the repository shows their figures.

    python scripts/execute_notebooks.py                    # every notebook in notebooks/
    python scripts/execute_notebooks.py notebooks/00_*.ipynb

Each notebook runs headless in a real kernel (nbclient), from its own folder,
against this checkout's ``sim`` (``PYTHONPATH``), at the sizes its text uses
(``SERVESIM_NOTEBOOK_REQUESTS`` unset); a failed claim (an ``assert`` in a
cell) stops it and nothing is written. What is stored is only what the code
determines, so that a re-run on the same versions diffs cleanly: the runs are
seeded (scenario seeds, ``np.random.default_rng(0)``), no execution timestamps
are recorded, the notebook's metadata is kept as it was (the kernel's version
is not written), and outputs that print a Python object's address are dropped.
Figures are PNGs at ``FIGURE_DPI`` (moderate: the notebooks stay small).

``tests/test_notebooks.py`` executes them the same way (``execute``, on a copy:
the files are not rewritten) and checks that the stored ones have their figures.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 600  # a guard against a hung kernel, not a speed test
FIGURE_DPI = 80  # inline PNGs: ~1000 px wide for the widest figures
# A repr with an object's address (``<matplotlib.lines.Line2D at 0x7f...>``): differs each run.
_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


@contextmanager
def notebook_environment(dpi: int | None = FIGURE_DPI) -> Iterator[None]:
    """The kernel's environment while notebooks run: this checkout's ``sim``, the
    inline backend, the text's sizes and, with ``dpi``, figures at that resolution
    (a matplotlibrc of its own); restored afterwards."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        os.environ["PYTHONPATH"] = str(ROOT)
        for name in ("MPLBACKEND", "SERVESIM_NOTEBOOK_REQUESTS", "MATPLOTLIBRC"):
            os.environ.pop(name, None)
        if dpi is not None:
            rc = Path(folder) / "matplotlibrc"
            rc.write_text(f"figure.dpi: {dpi}\nsavefig.dpi: figure\n")
            os.environ["MATPLOTLIBRC"] = str(rc)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def execute(path: Path, timeout_s: int = CELL_TIMEOUT_S) -> nbformat.NotebookNode:
    """``path`` executed in a fresh kernel, from its folder, as a new notebook (the file
    is not touched); raises ``CellExecutionError`` naming the cell whose claim failed.
    Run it inside ``notebook_environment``."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:  # start clean: no output of an earlier run survives
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        notebook,
        timeout=timeout_s,
        kernel_name="python3",
        record_timing=False,  # no timestamps in cell metadata
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return notebook


def stable_output(output: dict[str, Any]) -> bool:
    """Whether ``output`` is the same on every run (no object address in its text)."""
    text = output.get("data", {}).get("text/plain", "") or output.get("text", "")
    return not _ADDRESS.search("".join(text) if isinstance(text, list) else text)


def scrub(executed: nbformat.NotebookNode, original: nbformat.NotebookNode) -> None:
    """Keep in ``executed`` only what a re-run reproduces: the original notebook
    metadata and cell metadata, outputs without object addresses."""
    executed.metadata = copy.deepcopy(original.metadata)
    for cell, before in zip(executed.cells, original.cells, strict=True):
        cell.metadata = copy.deepcopy(before.metadata)
        if cell.cell_type == "code":
            cell.outputs = [output for output in cell.outputs if stable_output(output)]


def run(paths: Sequence[Path]) -> list[Path]:
    """Execute each of ``paths`` and write it back with its outputs; the paths written."""
    written = []
    with notebook_environment():
        for path in paths:
            print(f"executing {path.relative_to(ROOT)} ...", file=sys.stderr, flush=True)
            original = nbformat.read(path, as_version=4)
            executed = execute(path)
            scrub(executed, original)
            nbformat.validate(executed)
            nbformat.write(executed, path)
            size_kb = path.stat().st_size / 1e3
            print(f"  wrote {path.relative_to(ROOT)} ({size_kb:,.0f} kB)", file=sys.stderr)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"execute_notebooks: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    run(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
