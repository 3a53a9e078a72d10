"""Planning: capacity search, sweeps and pricing, with their command line.

``capacity``/``capacity_search``/``capacity_report`` (highest load within
SLOs, replicas, cost), ``sweep``/``sweep_plan``/``sweep_exec``/``sweep_table``/
``sweep_report``/``sweep_plots`` (grids of scenario variants), ``pricing``
(GPU list prices) and ``cli`` (``servesim capacity`` and ``servesim sweep``).

May import: ``sim.api``, ``sim.scenario``, ``sim.metrics``, ``sim.workload``,
``sim.cost``, ``sim.errors``. Runs go through ``sim.api``: planning never
imports ``sim.engine`` or ``sim.serving``.
"""
