"""Workloads: when requests arrive and how long their prompts and outputs are.

``arrivals`` (Poisson, gamma, constant), ``lengths`` (length samplers),
``trace`` (CSV and Azure trace files), ``traces`` (the replay window and the
BurstGPT, Mooncake and ShareGPT formats), ``json_lines`` (the JSON lines
reader every trace and run importer shares) and ``generate`` (the ``workload:``
configuration and the request arrays it produces, open or closed loop).

May import: ``sim.errors``. Must not import ``sim.engine`` or ``sim.serving``:
a workload is a table of numbers, whoever serves it.
"""
