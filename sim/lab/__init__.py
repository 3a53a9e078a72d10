"""``servesim lab``: a queueing lab in the browser, one page over the simulator.

A face on top of the others: it reaches the simulator only through its public entry
points (``sim.api``, ``sim.scenario``, ``sim.planning``, ``sim.metrics``), never
``sim.engine``, ``sim.serving``, ``sim.fast`` or ``sim.cost``; nothing imports it
(the command line registers ``sim.lab.command`` by name). The page is offline:
``page/`` and the installed plotly's own ``plotly.min.js`` (the ``[lab]`` extra).
"""
