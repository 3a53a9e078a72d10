"""One reader per measured-run format (``servesim import-run``, ``validate --measured``).

Each module reads one tool's output into an ``ImportedRun``
(``sim.validation.runs``) and says in its docstring what the source records
and what is reconstructed; ``sim.validation.importers`` detects the format
of a file or folder by its content and picks the reader.
"""
