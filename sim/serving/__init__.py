"""The SimPy executors: replicas, pools, routers, clusters, disaggregation.

``replica_config`` holds ``ReplicaConfig``, what a replica needs besides its
workload (its core's config, cost model, frontend); ``replica`` runs one engine core in
simulated time; ``pool`` and ``router`` spread requests over replicas;
``cluster`` and ``disagg`` build multi-replica and prefill/decode layouts;
``simulation`` wires a workload into all of it and returns the raw frames.

May import: ``sim.engine``, ``sim.cost``, ``sim.errors``, SimPy.
Must not import: ``sim.metrics``, ``sim.planning``, ``sim.validation``, the faces.
"""
