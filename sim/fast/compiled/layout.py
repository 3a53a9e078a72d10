"""The compiled loop's array layout: statuses, and what each index of its arrays holds.

``sim.fast.compiled.loop`` keeps all its state in numpy arrays (numba compiles
functions of arrays and numbers), named here by index.
"""

from __future__ import annotations

DONE = 0  # every request finished
FLUSH = 1  # an output buffer is nearly full: empty them and call again
UNSUPPORTED = 2  # something only the Python path plays (see the module)

# Settings (``settings`` array, int64), by index.
MAX_NUM_SEQS, MAX_BATCHED_TOKENS, TOKEN_CAP, CHUNKED, BLOCK_SIZE = 0, 1, 2, 3, 4
NUM_BLOCKS, CACHES_PREFIXES, MAX_RUN_STEPS, ASYNC = 5, 6, 7, 8
NUM_SETTINGS = 9
# Roofline constants (``cost`` array, float64), by index (sim.cost.roofline).
OVERHEAD_S, S_PER_DENSE_TOKEN, S_PER_PAIR, WEIGHT_S, S_PER_KV_TOKEN = 0, 1, 2, 3, 4
NUM_COSTS = 5
# Scalar state (``state`` array, int64), by index.
NUM_TAKEN, WAIT_HEAD, NUM_RUNNING, NUM_STEPS, NUM_FREE, STARTED, NUM_DONE = 0, 1, 2, 3, 4, 5, 6
NUM_ENDS, NUM_SEGMENTS, NUM_PLANS, NUM_HELD, VISIBLE = 7, 8, 9, 10, 11
STATE_SIZE = 12
# Clock state (``clock`` array, float64): the end of the last step (the next plan's
# time; SimPy's own clock decides nothing the replica does here), and (async
# scheduling, when ``state[VISIBLE]``) what the next plan can see up to.
LAST_END, VISIBLE_UNTIL = 0, 1
NUM_CLOCKS = 2
