"""The engine: requests, the KV pool and the scheduling policies. Pure logic, no clock.

May import: ``sim.cost`` (step shapes and their prices), ``sim.errors``.
Must not import: SimPy, ``sim.serving``, ``sim.metrics``, ``sim.planning``,
``sim.validation`` or the faces (``api``, ``cli``, ``scenario``).
"""
