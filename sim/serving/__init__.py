"""The SimPy executors: replicas, pools, routers, clusters, disaggregation.

May import: ``sim.engine``, ``sim.cost``, ``sim.errors``, SimPy.
Must not import: ``sim.metrics``, ``sim.planning``, ``sim.validation``, the faces.
"""
