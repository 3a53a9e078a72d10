"""Validation: predict measured runs and report the errors.

``predict`` replays a measured run's exact requests through the simulator
and compares latency distributions (``intake``: counted from the engine's
intake where the run's arrivals are vLLM's ``queued_ts``); ``report`` renders the comparison
(markdown, CDF plots); ``importers`` reads runs measured by other tools
(``formats/``: vllm bench serve, GuideLLM, vLLM OTLP spans, servesim folders).
``endpoint`` measures a live OpenAI-compatible server over HTTP (aiohttp, no
torch) into a ``servesim measure`` folder. Black-box calibration (``servesim
calibrate --from-run``): ``fit_runs`` reads and checks measured runs and
writes the artifact, ``fit`` fits a ``FittedCost``'s parameters by replaying
them (``optimize``: Nelder-Mead) and cross-validates, ``identify`` picks the
free parameters the runs inform (``sim.cli.fit`` parses and prints).

May import: ``sim.api``, ``sim.scenario``, ``sim.metrics``, ``sim.workload``,
``sim.cost``, ``sim.errors``. Runs go through ``sim.api``: validation never
imports ``sim.engine`` or ``sim.serving``.
"""
