"""``servesim lab`` on a port it cannot have says so in one line, as ``servesim serve`` does.

Both HTTP faces listen through one function (``sim.openai.listen``): a port that is
taken is a ``ConfigError`` naming it (the CLI prints it as one line, status 2),
not an ``OSError`` with a traceback.
"""

from __future__ import annotations

import asyncio

import pytest

from sim.errors import ConfigError

web = pytest.importorskip("aiohttp.web")
pytest.importorskip("plotly")


def test_the_lab_on_a_taken_port_names_the_port() -> None:
    from sim.lab.server import make_app, serve

    async def go() -> None:
        holder = web.AppRunner(web.Application())
        await holder.setup()
        await web.TCPSite(holder, "127.0.0.1", 0).start()
        port = holder.addresses[0][1]  # taken by the holder until the end
        try:
            await serve(make_app(), "127.0.0.1", port)
        finally:
            await holder.cleanup()

    with pytest.raises(ConfigError, match=r"^--port \d+: cannot listen on 127\.0\.0\.1 \("):
        asyncio.run(go())
