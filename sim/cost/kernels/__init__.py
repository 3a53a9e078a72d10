"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Operator latencies come from measured tables (an artifact, see ``artifact``)
built from aiconfigurator-core's database (``aiconfigurator``, ``slice``:
``servesim export-kernels``) or an LLMServingSim profile (``llmservingsim``:
``servesim import-profile``). ``cost.KernelCost`` prices steps;
``config.KernelsCostConfig`` is the ``cost:`` block. Import each name from
the module that defines it: a scenario that only validates
``KernelsCostConfig`` then imports no table code.
"""
