"""A run's store file is held open from its first request until its first batch or one writer
interval, whichever comes first (``BatchWriter.hold_open``): a run done sooner never closes and
reopens the file before its finish, and a longer one lets readers in as before. Counted with
the store's own count of reopenings, never timed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from evalkit.records import Output
from evalkit.run.writer import BatchWriter
from evalkit.store import open_store


def _answer(i: int) -> tuple[Any, ...]:
    case = SimpleNamespace(id=f"c{i}", scorers=())
    return ("r", "r/s0", case, 0, Output(text="fine"), [], 0.0, f"k{i}")


def _stored(db: Path) -> int:
    with open_store(db, read_only=True, wait_s=10) as reader:  # a notebook reading
        return int(reader.query("SELECT count(*) FROM outputs").item())


async def _until(check: Any) -> None:
    give_up = time.monotonic() + 20
    while not check() and time.monotonic() < give_up:
        await asyncio.sleep(0.01)


def test_a_run_done_within_the_hold_never_reopens_its_file(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        writer = BatchWriter(store, flush_rows=1000, interval_s=600)

        async def scenario() -> None:
            writer.hold_open()
            flusher = asyncio.create_task(writer.run_periodic())
            for i in range(5):
                await writer.put(*_answer(i))
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await writer.drain()

        asyncio.run(scenario())
        writer.flush(keep_open=True)  # the run's last batch, then its finish
        assert store._conn is not None and store._opened == 0  # held, never closed
    assert _stored(db) == 5


def test_a_hold_with_nothing_due_lets_readers_in_after_the_interval(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        writer = BatchWriter(store, flush_rows=1000, interval_s=0.05)

        async def scenario() -> int:
            writer.hold_open()
            flusher = asyncio.create_task(writer.run_periodic())
            await _until(lambda: store._conn is None)  # released with no batch due
            stored_meanwhile = await asyncio.to_thread(_stored, db)  # a reader gets in
            await writer.put(*_answer(0))
            await _until(lambda: writer.written == 1)
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await writer.drain()
            return stored_meanwhile

        assert asyncio.run(scenario()) == 0
        assert store._conn is None and store._opened == 1  # reopened for the batch, released
    assert _stored(db) == 1


def test_the_first_batch_ends_the_hold(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        writer = BatchWriter(store, flush_rows=1, interval_s=600)

        async def scenario() -> None:
            writer.hold_open()
            flusher = asyncio.create_task(writer.run_periodic())
            await writer.put(*_answer(0))  # one answer fills a batch: written at once
            await _until(lambda: writer.written == 1 and store._conn is None)
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await writer.drain()

        asyncio.run(scenario())
        assert store._conn is None and store._opened == 0  # written while held, then released
    assert _stored(db) == 1
