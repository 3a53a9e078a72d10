"""One reader per measured-run format (``servesim import-run``, ``validate --measured``).

Each module reads one tool's output into an ``ImportedRun`` (``sim.validation.runs``);
docs/validation.md, "Importing measured runs", tells what each source records and
what is reconstructed. ``sim.validation.importers`` detects the format by content.
"""
