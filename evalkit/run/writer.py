"""Batched writes: outputs, scores and cache entries appended to the store as they complete.

Rows are collected column-wise on the event loop and written by the writer's own thread, one
transaction per batch. The thread keeps the schedule, so neither a busy event loop nor a thread
pool full of sandboxed scorers delays a batch; between batches the file is released so readers
(a notebook) can open it, from the first batch or one interval after the requests start
(:meth:`BatchWriter.hold_open`), whichever is first.

What a kill can lose. An answer is *pending* from the moment the runner hands it over
(:meth:`BatchWriter.put`) until the transaction holding it commits (the batch being written is
pending too). From the first answer on:

* **count**: at most ``flush_rows`` answers are pending at any moment. A worker with one more
  waits (without blocking the event loop, and asking nothing new) until a batch commits;
* **time**: a batch is written as soon as ``flush_rows`` answers are pending, and otherwise once
  ``flush_interval_s`` has passed since its oldest answer came in: the first batch lands no
  later than the interval after the first answer, and every answer no later than the interval
  after it came, plus the time of the writes (the one in progress, then its own).

A reader holding the file delays batches (the writer tries again every ``POLL_S`` seconds) but
not the count: with ``flush_rows`` pending the workers wait, and when the file stays held for
``REOPEN_WAIT_S`` the run stops with a :class:`~evalkit.errors.StoreError` (resume it once the
reader lets go). So a kill, even SIGKILL, loses at most ``flush_rows`` answers (with the file
free, none older than ``flush_interval_s`` plus a write) and the (case, replay) still in flight
(at most one per worker: twice the concurrency); ``--resume`` asks exactly those again.
A batch the file system refuses (a full disk) is lost within the same bound: the store
raises a one-line :class:`~evalkit.errors.StoreError` naming its path and the cause, the
runner cancels its workers and closes its clients, and what was committed stays.

What it wrote it also counts (:class:`WrittenCounts`: verdicts, tokens, cost, latency, error
causes, as the summary's query would read them back), so a fresh run's summary needs no query.

Examples:
    >>> writer = BatchWriter(store, flush_rows=2048, interval_s=0.5)      # doctest: +SKIP
    >>> await writer.put(run_id, scoring_id, case, 0, output, scores, 0.0, key)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evalkit.corpus.cases import Case
from evalkit.records import Output, Score
from evalkit.redact import redact_secrets
from evalkit.store import OUTPUT_COLUMNS, REOPEN_WAIT_S, SCORE_COLUMNS, Store
from evalkit.store.history_tally import ReplayTally, replay_verdict

_Batch = tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, str]]


@dataclass(kw_only=True)
class OutputFigures:
    """The figures of a run's outputs that add up as outputs come in, counted as
    :func:`evalkit.run.summary.summarize` reads them back from the store: by a writer an
    answer at a time (:class:`WrittenCounts`) or by a driver's merge a batch at a time
    (:class:`~evalkit.run.merge_tally.MergeTally`)."""

    outputs: int = 0
    errored: int = 0
    passed: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_cached_usd: float = 0.0
    latency_ms: float = 0.0  # summed
    # cause -> outputs, with the store's wording and the store's redaction of key-shaped text
    error_causes: Counter[str] = field(default_factory=Counter)


@dataclass(kw_only=True)
class WrittenCounts(OutputFigures):
    """What the answers handed to one writer add up to, counted as they come in: the figures
    :func:`evalkit.run.summary.summarize` reads back from the store for the same rows (an
    output is *errored* when the system or one of its scorers errored, *passed* when neither
    did, it has no ``fail_reason`` and every scorer passed; the mean latency is
    ``latency_ms / outputs``)."""

    # Outputs of replay 0: the run's distinct cases, since a fresh run asks every case's
    # replay 0 (a count, not a set of the ids, which would grow with the corpus)
    first_replays: int = 0
    # each case's replays as the history counts decide them (a fresh run's finish records
    # those counts from here, not from a query; a large run's tally stops)
    replays: ReplayTally = field(default_factory=ReplayTally)

    def count(
        self, case_id: str, replay: int, output: Output, scores: list[Score], cost: float
    ) -> None:
        """One answer and its scores."""
        if self.replays.cases is not None:  # a stopped tally (a large run) decides nothing more
            verdicts = ((s.passed, s.error) for s in scores)
            self.replays.add(case_id, replay_verdict(output.error, output.fail_reason, verdicts))
        self.outputs += 1
        self.first_replays += replay == 0
        scorer_errored = False
        for score in scores:
            if score.error:
                scorer_errored = True
                reason = redact_secrets(score.reason) if score.reason else ""
                self.error_causes[f"scorer {score.scorer}: {reason}"] += 1
        if output.error is not None:
            self.error_causes[redact_secrets(output.error)] += 1
        if output.error is not None or scorer_errored:
            self.errored += 1
        elif output.fail_reason is None and all(score.passed for score in scores):
            self.passed += 1
        self.cached += output.cached
        self.prompt_tokens += output.prompt_tokens
        self.completion_tokens += output.completion_tokens
        self.cost_usd += cost
        if output.cached:
            self.cost_cached_usd += cost
        self.latency_ms += output.latency_ms


class BatchWriter:
    """Collects rows column-wise and appends them to the store in batches, from its thread."""

    POLL_S = 0.05  # how often a waiting worker, or a writer a reader keeps out, tries again

    def __init__(self, store: Store, flush_rows: int, interval_s: float) -> None:
        self.store = store
        self.flush_rows = max(1, flush_rows)
        self.interval_s = interval_s
        self.outputs, self.scores = _columns()
        self.cache_entries: dict[str, str] = {}
        self.pending = 0  # answers handed over and not yet committed (a batch in a write too)
        self.written = 0  # answers committed
        self.deferred = False  # a reader held the file at the last try
        self.counts = WrittenCounts()  # every answer added, whether committed yet or not
        self._oldest: float | None = None  # when the oldest row not yet in a batch came in
        # Guards the buffers: ``add`` runs on the event loop, ``_take`` in the writer's thread.
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None  # why a write failed: the run stops
        self._release_at: float | None = None  # see hold_open

    def hold_open(self) -> None:
        """Keep the store's file open (readers out) until the first batch is written or
        ``interval_s`` has passed, whichever comes first; then, as after every batch, it is
        released for readers. A run whose answers are all in sooner never closes and reopens
        the file before its finish (a short run's fixed cost); a reader waits at most the
        interval for it, as it waits for a batch being written."""
        with self._cond:
            self._release_at = time.monotonic() + self.interval_s
            self._cond.notify()

    async def put(
        self,
        run_id: str,
        scoring_id: str,
        case: Case,
        replay: int,
        output: Output,
        scores: list[Score],
        cost: float,
        request_hash: str,
    ) -> None:
        """:meth:`add`, once fewer than ``flush_rows`` answers are pending (the count bound)."""
        # Only this loop adds and only commits lower ``pending``: no await between the last
        # check and the add, so no two workers take the last place.
        while self.pending >= self.flush_rows and self._failure is None:
            await asyncio.sleep(self.POLL_S)
        self.add(run_id, scoring_id, case, replay, output, scores, cost, request_hash)

    def add(
        self,
        run_id: str,
        scoring_id: str,
        case: Case,
        replay: int,
        output: Output,
        scores: list[Score],
        cost: float,
        request_hash: str,
    ) -> None:
        """Append one answer and its scores to the pending batch (never waits; see ``put``)."""
        if self._failure is not None:  # a batch could not be written: stop the run, loudly
            raise self._failure
        tool_calls = json.dumps(
            [
                {"name": c.name, "arguments": c.arguments, "response": c.response}
                for c in output.tool_calls
            ]
        )
        with self._cond:
            row = self.outputs
            row["run_id"].append(run_id)
            row["case_id"].append(case.id)
            row["replay"].append(replay)
            row["text"].append(output.text)
            row["tool_calls"].append(tool_calls)
            row["steps"].append(output.steps)
            row["error"].append(output.error)
            row["fail_reason"].append(output.fail_reason)
            row["latency_ms"].append(output.latency_ms)
            row["prompt_tokens"].append(output.prompt_tokens)
            row["completion_tokens"].append(output.completion_tokens)
            row["cost_usd"].append(cost)
            row["cached"].append(output.cached)
            row["request_hash"].append(request_hash)
            row["model"].append(output.model)
            row["created_at"].append(dt.datetime.now(dt.UTC))
            for index, score in enumerate(scores):
                col = self.scores
                col["run_id"].append(run_id)
                col["scoring_id"].append(scoring_id)
                col["case_id"].append(case.id)
                col["replay"].append(replay)
                col["scorer"].append(score.scorer)
                col["scorer_index"].append(index)
                col["tier"].append(case.scorers[index].tier)
                col["score"].append(score.score)
                col["passed"].append(score.passed)
                col["error"].append(score.error)
                col["reason"].append(score.reason)
                details = json.dumps(score.details, default=str) if score.details else None
                col["details"].append(details)
            self.pending += 1
            self._arrived()
        self.counts.count(case.id, replay, output, scores, cost)

    def cache(self, key: str, response: str) -> None:
        with self._cond:
            self.cache_entries[key] = response
            self._arrived()

    def _arrived(self) -> None:
        """Wake the thread when a batch starts (its deadline) or fills (under ``_cond``)."""
        if self._oldest is None:
            self._oldest = time.monotonic()
            self._cond.notify()
        elif self.pending >= self.flush_rows:
            self._cond.notify()

    # -- the writer's thread ----------------------------------------------------------------

    async def run_periodic(self) -> None:
        """Run the writer's thread until cancelled; raise why a write failed.

        Cancelling it lets the batch being written finish (the join waits for one write).
        """
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="evalkit-writer", daemon=True)
        self._thread.start()
        try:
            while self._failure is None:
                await asyncio.sleep(self.POLL_S)
            raise self._failure
        finally:
            self._halt()

    async def drain(self) -> None:
        """Stop the thread after the batch it may be writing; raise why a write failed."""
        self._halt()
        if self._failure is not None:
            raise self._failure

    def _halt(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _serve(self) -> None:
        try:
            while self._next_batch():
                pass
        except BaseException as exc:  # surfaces in put/add/drain: the run stops with it
            self._failure = exc

    def _next_batch(self) -> bool:
        """Wait until a batch is due, then write it; False once asked to stop."""
        with self._cond:
            while not self._stopping and not self._due() and not self._hold_over():
                self._cond.wait(self._wait_s())
            if self._stopping:
                return False
            due = self._due()
        if not due:  # the hold is over before any batch: readers may open the file now
            self._release()
            return True
        opened = self.store.reopen(0.0)
        if not opened and self.pending >= self.flush_rows:
            # Workers are waiting: wait for the reader as the final flush does (a store raises
            # the StoreError that names the run and how to resume it when the reader stays).
            opened = self.store.reopen(REOPEN_WAIT_S)
        self.deferred = not opened
        if not opened:  # a reader holds the file: keep the rows, try again soon
            with self._cond:
                self._cond.wait(self.POLL_S)
            return True
        with self._cond:
            batch, rows = self._take()
        self._write(*batch)
        with self._cond:
            self.pending -= rows
            self.written += rows
        return True

    def _due(self) -> bool:
        if self._oldest is None:
            return False
        return self.pending >= self.flush_rows or time.monotonic() >= self._oldest + self.interval_s

    def _hold_over(self) -> bool:
        return self._release_at is not None and time.monotonic() >= self._release_at

    def _wait_s(self) -> float | None:
        deadlines = [t for t in (self._release_at,) if t is not None]
        if self._oldest is not None:
            deadlines.append(self._oldest + self.interval_s)
        if not deadlines:
            return None  # nothing pending, nothing held: ``_arrived`` wakes the thread
        return max(0.0, min(deadlines) - time.monotonic())

    def _release(self) -> None:
        """Let readers open the file (the hold, if any, is over)."""
        self._release_at = None
        self.store.release()

    # -- writes -----------------------------------------------------------------------------

    def flush(self, *, keep_open: bool = False) -> None:
        """Stop the thread, then append what is pending in one transaction, waiting up to
        ``REOPEN_WAIT_S`` for readers to let go of the file (the end of a run).

        ``keep_open``: leave the file open after the write, for the caller's next statement
        (the run's finish) instead of closing and reopening it in between.
        """
        self._halt()
        if not self.pending and not self.cache_entries:
            return
        self.store.reopen(REOPEN_WAIT_S)
        with self._cond:
            batch, rows = self._take()
        self._write(*batch, release=not keep_open)
        self.pending -= rows
        self.written += rows

    def _take(self) -> tuple[_Batch, int]:
        """Hand the rows in the buffers over to a write (under ``_cond``: ``add`` never sees
        half), with how many answers they hold."""
        batch = self.outputs, self.scores, self.cache_entries
        self.outputs, self.scores = _columns()
        self.cache_entries = {}
        self._oldest = None
        return batch, len(batch[0]["run_id"])

    def _write(
        self,
        outputs: dict[str, list[Any]],
        scores: dict[str, list[Any]],
        entries: dict[str, str],
        *,
        release: bool = True,
    ) -> None:
        """Append one batch to the opened store, then release the file for readers."""
        # Cache entries first: if we die between the two, a resume re-uses the answer rather
        # than asking again; outputs and scores of a batch land together or not at all.
        self.store.cache_put(entries)
        self.store.write_results(outputs, scores)
        if release:
            self._release()


def _columns() -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    return {name: [] for name in OUTPUT_COLUMNS}, {name: [] for name in SCORE_COLUMNS}
