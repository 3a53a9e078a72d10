"""Kernel-table cost model: a step is the sum of the vLLM operators it runs.

Tables come from an ``artifact`` (``aiconfigurator``'s database, a ``slice`` of
it, or an ``llmservingsim`` profile); ``cost`` prices a step (``KernelCost``) and
``config`` builds it. Import each name from the module that defines it: a
scenario that only validates ``KernelsCostConfig`` then imports no table code.
"""
