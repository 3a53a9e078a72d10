"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Tables come from an ``artifact`` (from ``aiconfigurator``'s database, a
``slice`` of it, or an ``llmservingsim`` profile); ``grid`` interpolates them,
``tables`` builds one model layout's operator functions, ``ops`` gives the
operators' shapes, ``expert_parallel`` an MoE layer over an expert-parallel
group, ``cost`` prices a step (``KernelCost``) and ``config`` builds it.

Import each name from the module that defines it: a scenario that only
validates ``KernelsCostConfig`` then imports no table code.
"""
