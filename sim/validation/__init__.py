"""Validation: predict measured runs and report the errors.

docs/architecture.md lists the modules and what each is for.

May import: ``sim.api``, ``sim.scenario``, ``sim.metrics``, ``sim.workload``,
``sim.cost``, ``sim.errors``. Runs go through ``sim.api``: validation never
imports ``sim.engine`` or ``sim.serving``.
"""
