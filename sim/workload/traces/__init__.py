"""Public workload traces, one reader per format, and the window every replay applies.

``window`` selects and rescales a trace's requests (offset, duration, time
scale, target rate, request cap); ``burstgpt``, ``mooncake`` and
``sharegpt`` read those public formats (the Azure traces and generic CSVs
are read by ``sim.workload.trace``); ``workload`` is the ``kind: trace``
configuration that names a format and turns a file into requests.
"""
