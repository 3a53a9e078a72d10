"""The engine: requests, the KV pool and the scheduling policies. Pure logic.

What lives here is everything one serving engine decides, with no clock of
its own: ``request`` (the token-counter state of one request), ``scheduler``
(what one step computes, the queues, the bookkeeping after a step, and vLLM
v1's continuous batching, read top to bottom as vLLM's ``scheduler.py``),
``kv_cache`` (paged KV blocks: the plain pool, vLLM's prefix cache, CPU swap
space) and ``kv_blocks`` (block identities and the free-block queue),
``steplog``/``step_runs``/``columns``/``tokens`` (the step log, stored by
runs, and the token times derived from it),
``records`` (the per-request table),
``policies/`` (one module per other scheduling policy), ``speculative``,
``core_config`` (what a core is built from, for both executors) and
``lifecycle`` (an opt-in recorder of the first requests' prefill chunks and
decode runs, for ``servesim run --trace``).

May import: ``sim.cost`` (step shapes and their prices), ``sim.errors``.
Must not import: SimPy, ``sim.serving``, ``sim.metrics``, ``sim.planning``,
``sim.validation`` or the faces (``api``, ``cli``, ``scenario``). Both
executors (the SimPy replica in ``sim.serving`` and the real PyTorch engine
in ``calibration/``) drive this same code.
"""
