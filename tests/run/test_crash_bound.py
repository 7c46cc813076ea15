"""A crash loses little (evalkit.run.writer): at most ``flush_rows`` answers are ever pending,
a busy event loop delays no batch, and a SIGKILLed ``evalkit run`` keeps all but that bound of
what the server answered; ``--resume`` asks exactly the lost ones again.

Everything is counted (answers the server saw, rows the store holds), never timed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalkit.cli import main
from evalkit.demo.server import DemoServer
from evalkit.records import Output
from evalkit.run.writer import BatchWriter
from evalkit.store import open_store

# -- the writer on its own, against a store that counts ----------------------------------------


class _CountingStore:
    """What the writer uses of a store; ``free`` cleared: a reader holds the file."""

    def __init__(self) -> None:
        self.rows = 0
        self.free = threading.Event()
        self.free.set()

    def reopen(self, wait_s: float = 0.0) -> bool:
        return self.free.wait(wait_s)

    def cache_put(self, entries: dict[str, str]) -> None:
        return None

    def write_results(self, outputs: dict[str, list[Any]], scores: dict[str, list[Any]]) -> None:
        self.rows += len(outputs["run_id"])

    def release(self) -> None:
        return None


def _answer(i: int) -> tuple[Any, ...]:
    case = SimpleNamespace(id=f"c{i}", scorers=())
    return ("r", "r/s0", case, 0, Output(text="fine"), [], 0.0, f"k{i}")


def test_a_busy_event_loop_delays_no_batch() -> None:
    """Answers handed over, then the loop blocks (a scorer computing on it): the batch still
    lands, written by the writer's own thread on the interval."""
    store = _CountingStore()
    writer = BatchWriter(store, flush_rows=1000, interval_s=0.1)  # type: ignore[arg-type]

    async def scenario() -> int:
        flusher = asyncio.create_task(writer.run_periodic())
        await asyncio.sleep(0)  # the flusher starts
        for i in range(5):
            writer.add(*_answer(i))
        give_up = time.monotonic() + 10
        while store.rows < 5 and time.monotonic() < give_up:
            time.sleep(0.005)  # blocking: nothing else on this loop runs meanwhile
        seen = store.rows
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        await writer.drain()
        return seen

    assert asyncio.run(scenario()) == 5


def test_pending_answers_never_exceed_flush_rows_while_a_reader_holds_the_file() -> None:
    """With the file held, workers wait at ``flush_rows`` pending answers (no unbounded pile
    while "deferred"), and every answer is written once the reader lets go."""
    store = _CountingStore()
    store.free.clear()
    writer = BatchWriter(store, flush_rows=8, interval_s=0.05)  # type: ignore[arg-type]
    most = 0

    async def worker(i: int) -> None:
        nonlocal most
        await writer.put(*_answer(i))
        most = max(most, writer.pending)

    async def scenario() -> tuple[int, int]:
        flusher = asyncio.create_task(writer.run_periodic())
        workers = [asyncio.create_task(worker(i)) for i in range(40)]
        for _ in range(40):  # every worker that can hand its answer over has done so
            await asyncio.sleep(0.01)
        held = writer.pending, sum(w.done() for w in workers)
        store.free.set()  # the reader lets go
        await asyncio.gather(*workers)
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        await writer.drain()
        writer.flush()
        return held

    pending_while_held, done_while_held = asyncio.run(scenario())
    assert pending_while_held == done_while_held == 8 and store.rows == 40
    assert most <= 8


# -- a real `evalkit run`, killed with SIGKILL at seeded random points -------------------------

FLUSH_ROWS = 12
CONCURRENCY = 4
#: Answers the server saw that a kill may lose: the pending ones, and one per worker (the runner
#: keeps twice the concurrency in workers; each holds one (case, replay) in flight or scoring).
BOUND = FLUSH_ROWS + 2 * CONCURRENCY
N_CASES = 240

# `evalkit run` itself, with a smaller batch so the count bound shows in a small run.
_RUN = f"""
import sys
from evalkit.run import execution, writer

class _Small(writer.BatchWriter):
    def __init__(self, store, flush_rows, interval_s):
        super().__init__(store, {FLUSH_ROWS}, interval_s)

execution.BatchWriter = _Small
import pytest

from evalkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _suite(tmp_path: Path, server: DemoServer) -> Path:
    """Single-turn cases with one request each (no judge, no tools, no faults): every answer
    the server counts is one (case, replay)."""
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: q-{i:03d}\n  input: {{messages: [{{role: user, content: 'question {i}'}}]}}\n"
            "  expect: [{contains: a}]\n"
            for i in range(N_CASES)
        )
    )
    (root / "evalkit.yaml").write_text(
        "suite: crash\nsystem: {provider: openai, model: demo-support-1, "
        f"base_url: '{server.base_url}', api_key_env: EVALKIT_DEMO_KEY}}\n"
        f"concurrency: {CONCURRENCY}\n"
    )
    return root / "evalkit.yaml"


def _served(server: DemoServer) -> int:
    """Distinct (case, replay) the server has answered (or was answering)."""
    return len(server.stats()["by_content"])


def _stored(db: Path) -> tuple[str, int]:
    with open_store(db, read_only=True) as store:
        run_id = store.runs()["run_id"][0]
        return run_id, len(store.completed(run_id))


def _wait_served(server: DemoServer, target: int, process: subprocess.Popen[bytes]) -> None:
    give_up = time.monotonic() + 120
    while _served(server) < target:
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < give_up, "the run made no progress"
        time.sleep(0.01)


def _hold_until_stalled(server: DemoServer, db: Path, process: subprocess.Popen[bytes]) -> None:
    """A notebook opens the store and keeps it: the run may go on asking only until
    ``flush_rows`` answers are pending; wait until it stops asking (or shows it does not)."""
    with open_store(db, read_only=True) as reader:
        run_id = reader.runs()["run_id"][0]
        committed = len(reader.completed(run_id))
        last, still = _served(server), 0
        while still < 100 and last <= committed + BOUND:  # ~1 s without a new answer
            assert process.poll() is None
            time.sleep(0.01)
            now = _served(server)
            last, still = now, (still + 1 if now == last else 0)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)


def test_a_killed_run_loses_at_most_the_bound_and_resume_asks_only_that(
    demo_server_factory: Callable[..., DemoServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 50 ms: a kill lands a poll (10 ms) after the target, or later where the test waits for a
    # core (a loaded machine); at 4 requests in flight that overshoot stays a few cases, so three
    # legs end well inside the 240 cases (at 20 ms, under load, the third leg's target passed
    # the end of the corpus and the run finished before the kill)
    server = demo_server_factory(noise=False, latency_ms=50)
    config = _suite(tmp_path, server)
    db = tmp_path / "crash.duckdb"
    base = [sys.executable, "-c", _RUN, "run", "--config", str(config), "--db", str(db)]
    base += ["--no-cache", "--no-progress"]
    rng = random.Random(23)
    legs = ["kill", "hold", "kill"]  # "hold": a reader keeps the file meanwhile
    lost_at_kills: list[int] = []
    resume: list[str] = []
    for leg in legs:
        at_start = _served(server)
        target = at_start + rng.randint(10, 40)
        assert target < N_CASES - BOUND, f"too few cases left for a kill mid-run: {at_start}"
        process = subprocess.Popen(
            [*base, *resume], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            _wait_served(server, target, process)
            if leg == "hold":
                _hold_until_stalled(server, db, process)
            else:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
            if process.stderr is not None:
                process.stderr.close()
        assert process.returncode == -signal.SIGKILL
        run_id, stored = _stored(db)
        served = _served(server)
        assert stored < N_CASES, "the kill must land mid-run"
        assert stored >= served - BOUND, (leg, served, stored)
        lost_at_kills.append(served - stored)
        resume = ["--resume", run_id]
    # the last resume runs to the end, killed by nothing: the CLI's entry point in this process
    assert main([*base[3:], *resume]) == 0, capsys.readouterr().err[-2000:]
    stats = server.stats()
    asked_again = stats["requests"] - len(stats["by_content"])
    # every lost answer is asked once more, and nothing that was stored
    assert asked_again == sum(lost_at_kills)
    assert max(lost_at_kills) <= BOUND
    with open_store(db, read_only=True) as store:
        keys = store.query(
            "SELECT count(*), count(DISTINCT (case_id, replay)) FROM outputs WHERE run_id = ?",
            [run_id],
        ).row(0)
        assert keys == (N_CASES, N_CASES) and store.run_status(run_id) == "complete"
