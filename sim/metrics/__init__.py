"""Metrics and reports: latencies as ``vllm bench serve`` defines them, SLOs, plots.

``stats`` (per-request TTFT/TPOT/ITL/E2EL, percentiles, goodput, the summary;
``itl`` and ``quantiles`` hold its inter-token gaps and weighted statistics),
``slo_targets`` (SLO expressions), ``report`` (the summary table and output
files), ``plots`` and ``analytic`` (textbook queueing formulas to check
against), ``lifecycle`` (each request's phases as spans), ``waterfall`` (the
first requests as bars, ``waterfall.png``) and ``trace`` (Perfetto / Chrome
trace-event JSON, ``trace.json``).

May import: ``sim.serving``, ``sim.engine``, ``sim.cost``, ``sim.errors``.
Must not import: ``sim.planning``, ``sim.validation``, the faces.
"""
