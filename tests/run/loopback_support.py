"""A loopback aiohttp endpoint on an event loop in a thread of its own, for tests whose
``evalkit`` runs in a child process (or in ``asyncio.run`` of the test itself)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from aiohttp import web


@contextlib.contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:PORT/v1``, and
    stops the server and its thread afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> web.AppRunner:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    try:
        runner = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
        try:
            host, port = runner.addresses[0][:2]
            yield f"http://{host}:{port}/v1"
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()
