"""Metrics and reports: latencies as ``vllm bench serve`` defines them, SLOs, figures.

``stats`` (the summary; ``itl`` and ``quantiles`` its inter-token gaps and
weighted statistics), ``slo_targets``, ``report`` and ``table_files`` (output
files), ``plots`` / ``figure_data`` / ``figure_draw`` (the PNG figures),
``lifecycle`` (each request's phases as spans), ``trace`` (``trace.json``),
``analytic`` (textbook queueing formulas), ``out_path``, ``invariants`` (what
every run must keep, checked once its result is assembled).

May import: ``sim.serving``, ``sim.engine``, ``sim.cost``, ``sim.errors``.
Must not import: ``sim.planning``, ``sim.validation``, the faces.
"""
