"""Metrics and reports: latencies as ``vllm bench serve`` defines them, SLOs, figures.

Its modules, one line each: docs/architecture.md. May import: ``sim.serving``,
``sim.engine``, ``sim.cost``, ``sim.errors``. Must not import: ``sim.planning``,
``sim.validation``, the faces.
"""
