"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

- ``artifact``: the tables' file format, its loader and the shipped artifacts;
- ``aiconfigurator``: tables from aiconfigurator-core's database;
- ``slice``: ``servesim export-kernels``, a model's cut of that database;
- ``llmservingsim``: ``servesim import-profile``, an LLMServingSim profile;
- ``grid``: interpolation over a table, with stated extrapolation;
- ``tables``: operator latency functions built from an artifact's tables;
- ``ops``: the operators one decoder layer runs, their shapes per GPU, and
  a per-layer profile's dense part;
- ``expert_parallel``: one MoE layer split over an expert-parallel group;
- ``cost``: ``KernelCost``, pricing a step;
- ``config``: the ``cost: {kind: kernels}`` block, the factory, and
  ``kind: auto``'s kernel-table step.

Import each name from the module that defines it: a scenario that only
validates ``KernelsCostConfig`` then imports no table code.
"""
