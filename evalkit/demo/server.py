"""The demo simulator over OpenAI-compatible HTTP on 127.0.0.1, and a helper to run it.

``python -m evalkit.demo.server --port 0`` (or ``evalkit demo serve``) serves the
rule-based ``demo-support-1`` simulator from :mod:`evalkit.demo.model`. It is a simulator, not
a model: every response carries ``x-evalkit-simulator: true`` and ``/v1/models`` lists it as
``owned_by: evalkit-simulator``.

Routes:
    ``POST /v1/chat/completions``  the simulator (400 malformed body, 404 unknown model)
    ``GET /v1/models``             the served model
    ``GET /health``                liveness
    ``GET /stats``                 ``{"requests": total, "by_content": {sha256: count},
                                   "arrivals": [unix time of each chat request]}``
    ``POST /stats/reset``          zero the counters

Fault injection is seeded and, like noise, drawn from (seed, request sha256, occurrence), so it
does not depend on arrival order: ``--error-rate`` answers that fraction with 429
(``Retry-After: 0``) or 500, half each; ``--timeout-rate`` sleeps ``--timeout-s`` first.

Examples:
    >>> with start_demo_server(noise=False) as server:  # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=server.base_url, api_key="unused")
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.demo.model import complete
from evalkit.demo.protocol import (
    MODEL_ID,
    OWNER,
    InvalidRequestError,
    UnknownModelError,
    request_sha256,
    seeded_draw,
)

__all__ = ["DemoServer", "ServerOptions", "create_app", "main", "start_demo_server"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
READY_PREFIX = "evalkit demo simulator listening on "
_HEADERS = {"x-evalkit-simulator": "true"}


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """How the simulator server behaves: noise, latency and injected faults (all seeded)."""

    seed: int = 0
    noise: bool = True
    latency_ms: float = 0.0
    error_rate: float = 0.0
    timeout_rate: float = 0.0
    timeout_s: float = 30.0


@dataclass
class _Counters:
    requests: int = 0
    by_content: dict[str, int] = field(default_factory=dict)
    arrivals: list[float] = field(default_factory=list)  # when each chat request came in


def create_app(options: ServerOptions) -> Any:
    """The aiohttp application serving the simulator with ``options``."""
    from aiohttp import web

    counters = _Counters()

    def reply(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Any:
        return web.Response(
            text=json.dumps(payload),
            status=status,
            content_type="application/json",
            headers={**_HEADERS, **(headers or {})},
        )

    def error(status: int, message: str, kind: str, code: str | None = None) -> Any:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return reply(body, status, {"Retry-After": "0"} if status == 429 else None)

    async def chat(request: Any) -> Any:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return error(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object", "invalid_request_error")
        sha = request_sha256(body)
        occurrence = counters.by_content.get(sha, 0)  # counted before any await: atomic
        counters.by_content[sha] = occurrence + 1
        counters.requests += 1
        counters.arrivals.append(time.time())
        if options.latency_ms > 0:
            await asyncio.sleep(options.latency_ms / 1000)
        if seeded_draw(options.seed, "timeout", sha, occurrence) < options.timeout_rate:
            await asyncio.sleep(options.timeout_s)
        fault = seeded_draw(options.seed, "error", sha, occurrence)
        if fault < options.error_rate / 2:
            return error(429, "Rate limit reached (simulated)", "rate_limit_error", "rate_limited")
        if fault < options.error_rate:
            return error(500, "The simulator failed (simulated)", "server_error")
        try:
            response = complete(
                body,
                seed=options.seed,
                noise=options.noise,
                occurrence=occurrence,
                request_sha=sha,
            )
        except InvalidRequestError as exc:
            return error(400, str(exc), "invalid_request_error")
        except UnknownModelError as exc:
            return error(404, str(exc), "invalid_request_error", "model_not_found")
        return reply(response)

    async def models(request: Any) -> Any:
        entry = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": OWNER}
        return reply({"object": "list", "data": [entry]})

    async def health(request: Any) -> Any:
        return reply({"status": "ok", "simulator": True, "model": MODEL_ID})

    async def stats(request: Any) -> Any:
        return reply(
            {
                "requests": counters.requests,
                "by_content": dict(counters.by_content),
                "arrivals": list(counters.arrivals),
            }
        )

    async def reset_stats(request: Any) -> Any:
        counters.requests = 0
        counters.by_content.clear()
        counters.arrivals.clear()
        return reply({"requests": 0, "by_content": {}, "arrivals": []})

    app = web.Application(client_max_size=16 * 1024**2)
    app.add_routes(
        [
            web.post("/v1/chat/completions", chat),
            web.get("/v1/models", models),
            web.get("/health", health),
            web.get("/stats", stats),
            web.post("/stats/reset", reset_stats),
        ]
    )
    return app


async def _start_site(host: str, port: int, options: ServerOptions) -> tuple[Any, str]:
    """The simulator listening on ``host:port`` (0: a free port): its aiohttp runner and its
    ``/v1`` base URL."""
    from aiohttp import web

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(
        create_app(options), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.SockSite(runner, sock, backlog=4096).start()
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}/v1"


async def _serve(host: str, port: int, options: ServerOptions) -> None:
    runner, base_url = await _start_site(host, port, options)
    print(f"{READY_PREFIX}{base_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _exit_when_stdin_closes() -> None:
    """Die with the parent: a helper-started server exits when its stdin pipe closes."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):  # raw reads: no buffered-reader lock held at shutdown
            pass
    os._exit(0)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1]")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalkit demo serve",
        description="Serve demo-support-1, evalkit's rule-based support-triage SIMULATOR, over "
        "OpenAI-compatible HTTP on the loopback interface.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address only")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--seed", type=int, default=0, help="seeds noise and faults")
    parser.add_argument(
        "--noise",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="borderline tickets flip with probability 0.3 per request (default: on)",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed sleep per request")
    parser.add_argument("--error-rate", type=_fraction, default=0.0, help="429/500, half each")
    parser.add_argument("--timeout-rate", type=_fraction, default=0.0, help="slow requests")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="how slow (seconds)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    return parser


def _options(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        seed=args.seed,
        noise=args.noise,
        latency_ms=args.latency_ms,
        error_rate=args.error_rate,
        timeout_rate=args.timeout_rate,
        timeout_s=args.timeout_s,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulator server until SIGINT/SIGTERM; returns the process exit code."""
    args = _parser().parse_args(argv)
    if args.host not in LOOPBACK:
        print(
            f"evalkit: error: the simulator binds loopback only, not {args.host}", file=sys.stderr
        )
        return 2
    options = _options(args)
    if args.exit_on_stdin_eof:
        threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    try:
        asyncio.run(_serve(args.host, args.port, options))
    except OSError as exc:
        print(f"evalkit: error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------- subprocess handle

_LIVE: weakref.WeakSet[DemoServer] = weakref.WeakSet()

# ``python -m evalkit.demo.server`` from this checkout's package: the root package and
# ``evalkit.demo`` import nothing at load time, so only the simulator and aiohttp load (no
# polars, duckdb or jsonschema, which take seconds).
_LAUNCH = """
import os, runpy, sys
sys.path.insert(0, os.path.dirname(sys.argv.pop(1)))
runpy.run_module("evalkit.demo.server", run_name="__main__", alter_sys=True)
"""


class DemoServer:
    """A running simulator subprocess: ``base_url``, ``stats()``, ``reset_stats()``, ``stop()``."""

    def __init__(self, process: subprocess.Popen[str], base_url: str) -> None:
        self.process = process
        self.base_url = base_url  # ends in /v1, ready for openai.OpenAI(base_url=...)
        self.root_url = base_url.removesuffix("/v1")
        _LIVE.add(self)

    def __enter__(self) -> DemoServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"DemoServer({self.base_url!r}, pid={self.process.pid})"

    @property
    def running(self) -> bool:
        """Whether the subprocess is still alive."""
        return self.process.poll() is None

    def stats(self) -> dict[str, Any]:
        """``{"requests": total, "by_content": {sha256: count}, "arrivals": [unix time, ...]}``
        since start or reset."""
        return _http_json(f"{self.root_url}/stats")

    def reset_stats(self) -> None:
        """Zero the request counters (and the occurrence counts that seed noise)."""
        _http_json(f"{self.root_url}/stats/reset", method="POST")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the process: close its stdin, then terminate, then kill after ``timeout`` s.

        Idempotent; safe to call on a server that already exited.
        """
        process = self.process
        if process.stdin is not None:  # EOF on stdin makes the server exit at once
            with contextlib.suppress(OSError):
                process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(0.5)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if process.stdout is not None:  # only now: a reader thread may still be blocked on it
            with contextlib.suppress(OSError):
                process.stdout.close()
        _LIVE.discard(self)


def _http_json(url: str, method: str = "GET", timeout: float = 5.0) -> dict[str, Any]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def start_demo_server(
    *,
    seed: int = 0,
    noise: bool = True,
    latency_ms: float = 0,
    error_rate: float = 0.0,
    timeout_rate: float = 0.0,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 20.0,
    in_thread: bool = False,
) -> DemoServer:
    """Start the simulator in a subprocess on a free loopback port and wait until it answers.

    The subprocess exits when this process closes its stdin (even if this process is killed),
    and every server still running at interpreter exit is stopped. ``in_thread`` serves it on
    a thread of this process instead (its own event loop; no process started), for a caller
    that does not need it apart: it then shares this process's CPU and GIL with the caller.

    Raises:
        RuntimeError: the server did not report its port or answer ``/health`` in time.
    """
    flags = [
        "--port=0",
        f"--seed={seed}",
        "--noise" if noise else "--no-noise",
        f"--latency-ms={latency_ms}",
        f"--error-rate={error_rate}",
        f"--timeout-rate={timeout_rate}",
        *extra_args,
    ]
    if in_thread:
        return _ThreadServer.start(flags, startup_timeout)
    package_dir = str(Path(__file__).resolve().parents[1])
    command = [sys.executable, "-c", _LAUNCH, package_dir, "--exit-on-stdin-eof", *flags]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    server = DemoServer(process, "")
    try:
        line = _read_line(process, startup_timeout)
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(
                f"demo simulator did not start (exit code {process.poll()}, said {line!r})"
            )
        server.base_url = line[len(READY_PREFIX) :].strip()
        server.root_url = server.base_url.removesuffix("/v1")
        _wait_healthy(server, startup_timeout)
    except BaseException:
        server.stop()
        raise
    return server


class _ThreadServer(DemoServer):
    """The simulator on a thread of this process, with its own event loop: a `DemoServer`
    without a ``process``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        # not DemoServer's: there is no process to hold
        self.base_url = self.root_url = ""
        self._loop, self._thread, self._runner = loop, thread, None
        _LIVE.add(self)

    @classmethod
    def start(cls, flags: Sequence[str], timeout: float) -> _ThreadServer:
        args = _parser().parse_args(flags)
        if args.host not in LOOPBACK:
            raise RuntimeError(f"demo simulator did not start: {args.host} is not loopback")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="evalkit-demo", daemon=True)
        thread.start()
        server = cls(loop, thread)
        try:
            started = _start_site(args.host, args.port, _options(args))
            server._runner, url = asyncio.run_coroutine_threadsafe(started, loop).result(timeout)
            server.base_url, server.root_url = url, url.removesuffix("/v1")
        except BaseException as exc:
            server.stop()
            if isinstance(exc, TimeoutError):
                raise RuntimeError(f"demo simulator did not listen within {timeout:g} s") from None
            raise
        return server

    def __repr__(self) -> str:
        return f"DemoServer({self.base_url!r}, thread={self._thread.name})"

    @property
    def running(self) -> bool:
        """Whether its thread still serves."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the site, then stop and close the loop. Idempotent."""
        loop = self._loop
        if not loop.is_closed():
            if self._runner is not None:
                cleanup = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop)
                with contextlib.suppress(Exception):
                    cleanup.result(timeout)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                loop.close()
        _LIVE.discard(self)


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    lines: list[str] = []
    stdout = process.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not lines:
        raise RuntimeError(f"demo simulator did not report its port within {timeout:g} s")
    return lines[0]


def _wait_healthy(server: DemoServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _http_json(f"{server.root_url}/health", timeout=1.0)
            return
        except OSError as exc:
            if not server.running or time.monotonic() > deadline:
                raise RuntimeError(
                    f"demo simulator at {server.base_url} not healthy: {exc}"
                ) from None
            time.sleep(0.05)


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(timeout=2.0)


if __name__ == "__main__":
    sys.exit(main())
