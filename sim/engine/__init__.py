"""The engine: requests, the KV pool and the scheduling policies. Pure logic.

What lives here is everything one serving engine decides, with no clock of
its own: ``request`` (one request's token counters), ``scheduler`` (vLLM v1's
``scheduler.py``, read top to bottom), ``kv_cache`` and ``kv_blocks`` (paged
KV blocks, vLLM's prefix cache, CPU swap space), ``step_runs``, ``columns``
and ``tokens`` (the step log, stored by runs, and the token times derived
from it), ``records`` (the per-request table), ``policies/`` (one module per
other policy), ``speculative``, ``core_config`` (what a core is built from,
for both executors) and ``lifecycle`` (the ``--trace`` recorder).

May import: ``sim.cost`` (step shapes and their prices), ``sim.errors``.
Must not import: SimPy, ``sim.serving``, ``sim.metrics``, ``sim.planning``,
``sim.validation`` or the faces (``api``, ``cli``, ``scenario``). Both
executors (the SimPy replica in ``sim.serving`` and the real PyTorch engine
in ``calibration/``) drive this same code.
"""
