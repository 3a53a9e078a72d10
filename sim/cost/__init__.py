"""Cost models: pure functions from a step's shape to seconds.

``base`` holds ``StepShape`` and the ``CostModel`` protocol (``step_s(shape)``,
the whole interface), and ``decode_run_s``, consecutive decode steps priced by
``step_s`` (a speculative proposer's passes; the fast path where no table holds
the cost); ``tabulate`` the public table of step prices over shapes
the speed paths read; ``config`` the
scenario's ``cost:`` block, what ``kind: auto`` picks, and the factory; the
models are ``linear``, ``roofline``, ``calibrated``, ``fitted`` and
``kernels/``; ``speculative`` prices a speculative decoding step from its
parts around any of them; ``provenance`` reads and stamps the artifact files they share;
``label`` words a model's label as measured or a guess, for every face.

Import each name from the module that defines it.

May import: ``sim.errors``, ``sim.hardware``.
"""
