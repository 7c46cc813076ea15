"""`run_sync`: a coroutine run to its end from synchronous code, inside a running event loop
(a Jupyter cell) or not (a script); an interrupt cancels it before it is re-raised."""

from __future__ import annotations

import _thread
import asyncio
import threading

import pytest

from evalkit.project.loop import run_sync


async def _where() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


def test_without_a_loop_it_runs_here() -> None:
    assert run_sync(_where()) == threading.current_thread().name


def test_inside_a_running_loop_it_runs_on_a_worker_with_its_own_loop() -> None:
    async def cell() -> tuple[str, bool]:
        outer = asyncio.get_running_loop()

        async def inner() -> bool:
            return asyncio.get_running_loop() is not outer

        # what a Jupyter cell does: a synchronous call while the kernel's loop runs
        return run_sync(_where()), run_sync(inner())

    name, own_loop = asyncio.run(cell())
    assert name == "evalkit-run" and own_loop


def test_an_exception_reaches_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("bad config")

    async def cell() -> None:
        run_sync(fails())

    with pytest.raises(ValueError, match="bad config"):
        asyncio.run(cell())


def test_an_interrupt_cancels_the_coroutine_then_is_raised() -> None:
    seen: list[str] = []

    async def long_run() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")  # where the runner marks the run interrupted
            raise

    async def cell() -> None:
        threading.Timer(0.3, _thread.interrupt_main).start()  # Ctrl-C / the kernel's interrupt
        run_sync(long_run())

    # a loop as a kernel runs it, SIGINT left to Python (asyncio.run would take it over and
    # only cancel its own task once the cell returned)
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(cell())
    finally:
        loop.close()
    assert seen == ["cancelled"]
