"""``servesim serve``'s face: vLLM's OpenAI-compatible HTTP server over an online engine.

A face, like ``sim.cli``: it may import ``sim.serving.stream`` (the engine
interface), ``sim.scenario`` and ``sim.errors``, and no torch. ``listen`` puts an
aiohttp application on a port, for this server and for ``servesim lab``'s page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:
    from aiohttp import web


async def listen(
    app: web.Application, host: str, port: int, **runner_options: Any
) -> web.AppRunner:
    """``app`` served on ``host:port`` (0: any free port) by a started runner; a port that
    cannot be had (taken, not allowed) is a ``ConfigError`` naming it."""
    # aiohttp: the http and lab extras; this package's tokenizer, which the reference
    # engine imports, needs none.
    from aiohttp import web

    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        raise ConfigError(f"--port {port}: cannot listen on {host} ({error.strerror})") from None
    except BaseException:
        await runner.cleanup()
        raise
    return runner
