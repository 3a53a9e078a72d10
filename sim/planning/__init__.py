"""Planning: capacity search, sweeps and pricing, with their command line.

Its modules are listed in docs/architecture.md; the command line is ``sim.cli.capacity``,
``sim.cli.sweep`` and ``sim.cli.plan``. May import: ``sim.api``, ``sim.scenario``,
``sim.metrics``, ``sim.workload``, ``sim.cost``, ``sim.errors``. Runs go through
``sim.api``: planning never imports ``sim.engine`` or ``sim.serving``.
"""
