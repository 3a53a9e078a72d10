"""Speed paths: accelerators that run a stretch of work exactly as the reference would.

The reference modules (``sim.engine``, ``sim.serving``) never import these but
at two doors: ``sim.serving.simulation`` offers an open loop's whole run to
``open_loop.run`` (the compiled loop, worker processes, feeds), and
``sim.serving.replica`` runs plain decode steps in runs (``decode_runs``).
An accelerator either takes the work on, giving byte-identical results (tests
compare both paths bit for bit), or declines (``None``) and the reference runs.
"""
