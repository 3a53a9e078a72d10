"""Public workload traces: one reader per format, and the ``kind: trace`` workload.

``burstgpt``, ``mooncake`` and ``sharegpt`` read those public formats (the
Azure traces and generic CSVs are read by ``sim.workload.trace``);
``workload`` is the ``kind: trace`` configuration that names a format, turns
a file into requests and applies the window every replay shares.
"""
