"""Workloads: when requests arrive and how long their prompts and outputs are.

May import: ``sim.errors``. Must not import ``sim.engine`` or ``sim.serving``:
a workload is a table of numbers, whoever serves it.
"""
