"""Defaults the kernel-table configuration and cost model share, in a module of
their own: validating a scenario (``KernelsCostConfig``) then imports no table
or cost model code (issue 16: ~10 ms before every run's summary)."""

from __future__ import annotations

# vLLM V1's CPU work per step (scheduler, input prep, launches / graph replay,
# sampler bookkeeping): a few ms on a busy server CPU. A guess until calibrated.
DEFAULT_STEP_OVERHEAD_S = 2e-3
