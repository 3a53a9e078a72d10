"""``servesim lab``: a queueing lab in the browser, one page over the simulator.

A face on top of the others (``docs/architecture.md``): it may import every layer
but reaches the simulator only through its public entry points (``sim.api``,
``sim.scenario``, ``sim.planning``, ``sim.metrics``), never ``sim.engine``,
``sim.serving``, ``sim.fast`` or ``sim.cost``; nothing imports it (the command
line registers ``sim.lab.command`` by name). ``controls``: the page's controls as
scenario keys; ``runs``: one run and the load-latency knee; ``figures``: plotly
figure JSON from ``sim.metrics.figure_data``; ``lessons``: the notebooks'
presets and their claims; ``server``: the aiohttp page server (on its port
through ``sim.openai.listen``, as ``servesim serve``); ``command``:
``servesim lab``. The page is offline: plotly's own ``plotly.min.js``, served
from the installed package (the ``[lab]`` extra), and ``page/``.
"""
