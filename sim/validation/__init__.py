"""Validation: predict measured runs and report the errors.

``predict`` replays a measured run's exact requests through the simulator
and compares latency distributions; ``report`` renders the comparison
(markdown, CDF plots).

May import: ``sim.api``, ``sim.scenario``, ``sim.metrics``, ``sim.workload``,
``sim.cost``, ``sim.errors``. Runs go through ``sim.api``: validation never
imports ``sim.engine`` or ``sim.serving``.
"""
