"""One fed replica's run, compiled: the Python path's plans, commits and logs,
to the bit, in a numba loop (``path``: when and how, and the loop's arrays;
``loop``: the loop, its pieces and its array layout; its prices come from
``sim.cost.tabulate``). Issue 16: the Python path costs ~40 µs of interpreter
time a plan, this one well under a microsecond.
"""
