"""The loopback server the judge, agent and rivals benchmarks share: a script run as its own
process (``python -c SCRIPT latency_ms``) that prints its port, serves until its stdin closes,
and is read through ``GET /stats`` and cleared by ``POST /reset``.

A bench's script defines the handlers ``chat``, ``stats`` and ``reset`` and ends with
:data:`SERVE` (one aiohttp app on a free 127.0.0.1 port); :class:`LoopbackServer` starts and
stops it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from typing import Any

#: The end of every bench server script: the app on a free loopback port, its port printed,
#: served until stdin closes (so the server never outlives the bench that started it).
SERVE = """
async def main():
    app = web.Application(client_max_size=16 << 20)
    app.add_routes([web.post("/v1/chat/completions", chat), web.get("/stats", stats),
                    web.post("/reset", reset)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)),
                     daemon=True).start()
    await done.wait()
    await runner.cleanup()

asyncio.run(main())
"""


class LoopbackServer:
    """A bench server script in its own process (stopped on exit of the ``with`` block)."""

    def __init__(self, script: str, latency_ms: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, str(latency_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        port = self.process.stdout.readline().strip()
        if not port:
            self.stop()
            raise RuntimeError("the bench server did not start")
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = self.root + "/v1"

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.communicate(timeout=10)  # closes stdin: the server exits

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.root + "/stats", timeout=10) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        request = urllib.request.Request(self.root + "/reset", method="POST", data=b"")
        urllib.request.urlopen(request, timeout=10).close()
