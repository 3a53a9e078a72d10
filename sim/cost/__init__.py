"""Cost models: pure functions from a step's shape to seconds.

- ``base``: ``StepShape``, the ``CostModel`` protocol, and the one loop that
  prices a skip-ahead run's decode steps (``run_ends_for``);
- ``linear``: a step linear in its counts (teaching, queueing checks);
- ``roofline``: the slower of FLOPs and bytes, one GPU or a tensor / pipeline
  parallel replica;
- ``calibrated``: a curve fitted to measurements of a real model, and its
  artifact;
- ``fitted``: a base model adjusted by numbers fitted to measured runs (and
  the engine-overhead fit), and its artifact;
- ``kernels/``: the sum of the vLLM operators a step runs, from kernel tables;
- ``config``: the scenario's ``cost:`` block, what ``kind: auto`` picks, and
  the factories building a cost model;
- ``provenance``: reading and stamping the artifact files they share.

Import each name from the module that defines it.

May import: ``sim.errors``, ``sim.hardware``.
"""
