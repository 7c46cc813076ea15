"""The loopback server the judge, agent and rivals benchmarks share: a script run as its own
process (``python -c SCRIPT latency_ms``) that prints its port, serves until its stdin closes,
and is read through ``GET /stats`` and cleared by ``POST /reset``.

A bench's script defines the handlers ``chat``, ``stats`` and ``reset`` and ends with
:data:`SERVE` (one aiohttp app on a free 127.0.0.1 port); :class:`LoopbackServer` starts and
stops it.

A server that must cost as little as possible per request (so a bench measures the client,
not the server) starts with :data:`RAW_HEAD`, defines ``route(method, path, body)`` returning
``(delay_s, response)`` (``response`` from ``ok_response(json_bytes)``, built once and reused)
and ends with :data:`RAW_SERVE`: a bare ``asyncio.Protocol`` HTTP/1.1 keep-alive responder (no
web framework, no task per request: the answer is written by a timer ``delay_s`` later).
:data:`PROBE` measures either kind from inside: its own CPU (rusage) and its event loop's lag.

:class:`RayLoopbackCluster` is the distributed guide's two-node Ray cluster on 127.0.0.2
(``docs/guides/distributed.md``), with a temp dir of its own: its processes' CPU and peak RSS
are read before it is stopped, by the process ids of those naming that directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
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


#: ``probe = LoopProbe()``: the wall time and the process's CPU (its rusage) since
#: ``probe.reset()``, and the lag of its event loop (how late a 10 ms timer fires: the time the
#: loop was busy or the process waited for a core). ``reset`` starts the ticker on first use,
#: from inside the loop.
PROBE = """
import asyncio, resource, time

class LoopProbe:
    TICK = 0.01

    def __init__(self):
        self.task = None
        self.started, self.cpu0 = time.perf_counter(), self.cpu()
        self.lag, self.worst, self.ticks = 0.0, 0.0, 0

    @staticmethod
    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def reset(self):
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.tick())
        self.started, self.cpu0 = time.perf_counter(), self.cpu()
        self.lag, self.worst, self.ticks = 0.0, 0.0, 0

    async def tick(self):
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.TICK)
            late = loop.time() - before - self.TICK
            self.lag, self.worst = self.lag + late, max(self.worst, late)
            self.ticks += 1

    def figures(self):
        return {"wall_s": time.perf_counter() - self.started, "cpu_s": self.cpu() - self.cpu0,
                "lag_mean_ms": 1000 * self.lag / max(self.ticks, 1),
                "lag_max_ms": 1000 * self.worst}
"""

#: The start of a raw server script: imports and ``ok_response(body)``, a whole HTTP/1.1 200
#: response (status line, headers, ``body``) as bytes.
RAW_HEAD = """
import asyncio, json, sys, threading

def ok_response(body):
    head = (b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
            b"Content-Length: %d\\r\\n\\r\\n" % len(body))
    return head + body

NOT_FOUND = b"HTTP/1.1 404 Not Found\\r\\nContent-Length: 0\\r\\n\\r\\n"
"""

#: The end of a raw server script: HTTP/1.1 over ``asyncio.Protocol`` on a free loopback port.
#: Requests carry a ``Content-Length`` body (or none); chunked bodies are refused (501, closed);
#: ``Connection: close`` closes after the answer. Clients of the benches never pipeline, so
#: answers are written in the order their timers fire.
RAW_SERVE = """
REFUSED = (b"HTTP/1.1 501 Not Implemented\\r\\nContent-Length: 0\\r\\n"
           b"Connection: close\\r\\n\\r\\n")

class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while True:
            end = self.buffer.find(b"\\r\\n\\r\\n")
            if end < 0:
                return
            lines = self.buffer[:end].split(b"\\r\\n")
            method, path = lines[0].split(b" ")[:2]
            length, close = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    self.transport.write(REFUSED)
                    self.transport.close()
                    return
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            delay, response = route(method, path, body)
            if delay > 0:
                loop.call_later(delay, self.answer, response, close)
            else:
                self.answer(response, close)

    def answer(self, response, close):
        if not self.transport.is_closing():
            self.transport.write(response)
            if close:
                self.transport.close()

async def main():
    global loop
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    done = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)),
                     daemon=True).start()
    await done.wait()
    server.close()

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


#: A loopback address other than 127.0.0.1: Ray rewrites 127.0.0.1 to the machine's network
#: address and refuses a second node on it; Linux routes all of 127.0.0.0/8 to ``lo``.
RAY_LOOPBACK = "127.0.0.2"


class RayLoopbackCluster:
    """The guide's ``ray start`` lines (a head and a second node of one CPU each, no dashboard)
    on :data:`RAY_LOOPBACK` with a free port and a temp dir of its own; ``address`` is what
    ``evalkit run --engine ray --address`` takes. Ray's socket paths must stay short: the temp
    dir is under /tmp. ``~/.ray/auth_token`` (left by another Ray) is removed first, as a
    stale token refuses the new cluster's clients."""

    def __init__(self, nodes: int = 2) -> None:
        (Path.home() / ".ray" / "auth_token").unlink(missing_ok=True)
        self.temp_dir = tempfile.mkdtemp(prefix="ek-ray-", dir="/tmp")
        with socket.socket() as sock:
            sock.bind((RAY_LOOPBACK, 0))
            port = sock.getsockname()[1]
        self.address = f"{RAY_LOOPBACK}:{port}"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        ray = str(Path(sys.executable).with_name("ray"))
        node = [f"--node-ip-address={RAY_LOOPBACK}", "--num-cpus=1"]
        head = [ray, "start", "--head", f"--port={port}", "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}", *node]  # fmt: skip
        started = time.perf_counter()
        try:
            for command in [head] + [[ray, "start", f"--address={self.address}", *node]] * (
                nodes - 1
            ):
                done = subprocess.run(
                    command, cwd=self.temp_dir, env=env, capture_output=True, text=True,
                    timeout=300,
                )  # fmt: skip
                if done.returncode:
                    raise RuntimeError(f"ray start failed: {done.stderr[-800:]}")
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started

    def __enter__(self) -> RayLoopbackCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> set[int]:
        """Every process whose command line names this cluster's temp dir, and their
        descendants."""
        import psutil

        found: set[int] = set()
        for proc in psutil.process_iter(["cmdline"]):
            if proc.pid != os.getpid() and self.temp_dir in " ".join(proc.info["cmdline"] or ()):
                found.add(proc.pid)
                with contextlib.suppress(psutil.Error):
                    found |= {child.pid for child in proc.children(recursive=True)}
        return found

    def usage(self) -> dict[str, float]:
        """The cluster's processes now: CPU seconds (their own and their reaped children's)
        summed, the largest peak RSS (``VmHWM``) in MiB, how many."""
        import psutil

        cpu, peak, count = 0.0, 0.0, 0
        for pid in self.pids():
            with contextlib.suppress(psutil.Error, OSError, ValueError):
                times = psutil.Process(pid).cpu_times()
                status = Path(f"/proc/{pid}/status").read_text()
                # an exited process not yet reaped (a zombie) has no memory lines
                hwm = next((ln for ln in status.splitlines() if ln.startswith("VmHWM:")), None)
                if hwm is None:
                    continue
                cpu += times.user + times.system + times.children_user + times.children_system
                peak = max(peak, int(hwm.split()[1]) / 1024)
                count += 1
        return {"cpu_s": cpu, "peak_mib": peak, "processes": count}

    def stop(self) -> None:
        """SIGTERM to the cluster's processes (by id), then SIGKILL to what is left; its temp
        dir removed. Never ``ray stop``: that stops every Ray process of the user."""
        for sig, grace_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 15.0)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace_s
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
