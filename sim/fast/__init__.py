"""Speed paths: accelerators that run a stretch of work exactly as the reference would.

The reference modules (``sim.engine``, ``sim.serving``, ``sim.cost``,
``sim.hardware``) never import these. ``open_loop.FastSimulation`` is the fast
executor: the reference ``Simulation`` with each replica driven by
``feed.FedReplica``, a ``decode_runs.RunningReplica`` (plain decode steps of the
same batch as one timeout, their ends from ``run_ends``) with its own loop when
fed (an open loop's requests taken when it plans), and an open loop's whole run
offered to ``run_fast`` (the compiled loop, worker processes, feeds). The face that builds a run
(``sim.api.build.simulation_for``) chooses it or the reference, once. An
accelerator gives the reference's results to the bit (tested) or declines.
"""
