"""Planning: capacity search, sweeps and pricing, with their command line.

``capacity``/``capacity_report`` (highest load within SLOs, replicas, cost),
``sweep``/``sweep_exec``/``sweep_report``/``sweep_plots`` (grids of scenario
variants), ``profile_sweep`` (GuideLLM's sweep profile),
``plan``/``plan_bound``/``plan_file``/``plan_report``/``plan_plots`` (the cheapest
deployment for a target rate, searched over GPUs, TP, batch limits and
prefill/decode splits) and ``pricing`` (GPU list prices); their command line is
``sim.cli.capacity``, ``sim.cli.sweep`` and ``sim.cli.plan``.

May import: ``sim.api``, ``sim.scenario``, ``sim.metrics``, ``sim.workload``,
``sim.cost``, ``sim.errors``. Runs go through ``sim.api``: planning never
imports ``sim.engine`` or ``sim.serving``.
"""
