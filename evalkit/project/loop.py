"""Run a coroutine to its end from synchronous code, inside a running event loop or not.

A Jupyter kernel runs every cell inside its own event loop, where ``asyncio.run`` refuses to
start. `run_sync` then runs the coroutine on a worker thread with a fresh loop of its own and
waits for it; the thread starts in a copy of the cell's context, so what the kernel keeps
there (which cell an output belongs to) follows the coroutine and its progress bar lands in
the cell that called it. Interrupting the kernel cancels the coroutine (a run then stops as
``interrupted``, what it stored kept) before the interrupt is re-raised. Without a running
loop (a script) it is ``asyncio.run``.

Examples:
    >>> async def answer() -> int:
    ...     return 42
    >>> run_sync(answer())
    42
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """``coro``'s result (or its exception), whether or not this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    return _on_worker_thread(coro)


def _on_worker_thread(coro: Coroutine[Any, Any, _T]) -> _T:
    outcome: dict[str, Any] = {}
    started, finished = threading.Event(), threading.Event()
    loop_box: dict[str, Any] = {}

    async def main() -> _T:
        loop_box["loop"] = asyncio.get_running_loop()
        loop_box["task"] = asyncio.current_task()
        started.set()
        return await coro

    def work() -> None:
        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome["error"] = exc
        finally:
            started.set()
            finished.set()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(work,), name="evalkit-run", daemon=True)
    # Waits on an Event, not on Thread.join: a join that an interrupt broke into may return at
    # once the next time (CPython marks the thread stopped), before the cancelled run is stored.
    try:
        thread.start()  # inside: an interrupt while the thread starts cancels it too
        while not finished.wait(0.1):  # short waits: an interrupt reaches this thread between
            pass
    except KeyboardInterrupt:
        started.wait()
        loop, task = loop_box.get("loop"), loop_box.get("task")
        if loop is not None and task is not None and not finished.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: it finished
                loop.call_soon_threadsafe(task.cancel)
        finished.wait()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
