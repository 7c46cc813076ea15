"""Batched writes: outputs, scores and cache entries appended to the store as they complete.

Rows are collected column-wise and written every ``flush_rows`` rows or ``flush_interval_s``
seconds, one transaction per batch, from a worker thread so the event loop keeps serving
responses. Between batches the file is released so readers (a notebook) can open it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

from evalkit.corpus.cases import Case
from evalkit.records import Output, Score
from evalkit.store import OUTPUT_COLUMNS, REOPEN_WAIT_S, SCORE_COLUMNS, Store


class BatchWriter:
    """Collects rows column-wise and appends them to the store in batches."""

    POLL_S = 0.05  # how often the flusher looks for a due batch

    def __init__(self, store: Store, flush_rows: int, interval_s: float) -> None:
        self.store = store
        self.flush_rows = flush_rows
        self.interval_s = interval_s
        self.outputs: dict[str, list[Any]] = {name: [] for name in OUTPUT_COLUMNS}
        self.scores: dict[str, list[Any]] = {name: [] for name in SCORE_COLUMNS}
        self.cache_entries: dict[str, str] = {}
        self.pending = 0
        self.written = 0
        self.deferred = False  # a reader held the file at the last try: wait for the next tick
        self._due = False  # flush_rows rows are pending: the flusher writes them at its next poll
        self._writing: asyncio.Future[None] | None = None  # a batch being written in a thread
        self._failure: BaseException | None = None  # why the last threaded write failed

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
        if self._failure is not None:  # a batch could not be written: stop the run, loudly
            raise self._failure
        row = self.outputs
        row["run_id"].append(run_id)
        row["case_id"].append(case.id)
        row["replay"].append(replay)
        row["text"].append(output.text)
        row["tool_calls"].append(
            json.dumps(
                [
                    {"name": c.name, "arguments": c.arguments, "response": c.response}
                    for c in output.tool_calls
                ]
            )
        )
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
            col["details"].append(json.dumps(score.details, default=str) if score.details else None)
        self.pending += 1
        if self.pending >= self.flush_rows and not self.deferred:
            self._due = True

    def cache(self, key: str, response: str) -> None:
        self.cache_entries[key] = response

    def flush(self, *, wait: bool = True) -> None:
        """Append the pending rows in one transaction, then release the file for readers.

        Mid-run (``wait=False``) a file a reader holds open is not waited for: the rows stay
        pending and the next tick tries again. The final flush waits up to ``REOPEN_WAIT_S``.
        """
        if not self.pending and not self.cache_entries:
            return
        if not self.store.reopen(REOPEN_WAIT_S if wait else 0.0):
            self.deferred = True
            return
        self._write(*self._take())

    def _take(self) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, str]]:
        """Hand the pending rows over to a write (on the event loop: `add` never sees half)."""
        batch = self.outputs, self.scores, self.cache_entries
        self.outputs = {name: [] for name in OUTPUT_COLUMNS}
        self.scores = {name: [] for name in SCORE_COLUMNS}
        self.cache_entries = {}
        self.written += self.pending
        self.pending = 0
        return batch

    def _write(
        self, outputs: dict[str, list[Any]], scores: dict[str, list[Any]], entries: dict[str, str]
    ) -> None:
        """Append one batch to the opened store, then release the file for readers."""
        # Cache entries first: if we die between the two, a resume re-uses the answer rather
        # than asking again; outputs and scores of a batch land together or not at all.
        self.store.cache_put(entries)
        self.store.write_results(outputs, scores)
        self.store.release()

    async def run_periodic(self) -> None:
        """Flush every ``interval_s`` seconds, and as soon as ``flush_rows`` rows are pending.

        Batches are opened, appended and released in a worker thread (DuckDB lets go of the GIL),
        so the event loop keeps serving responses meanwhile: done on the loop, the ~50 ms it
        takes to open and close the file stalled every request in flight, once per batch.
        """
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + self.interval_s
        while True:
            # A short poll, not asyncio.wait_for on an Event: on Python 3.11 wait_for can
            # swallow the cancellation that ends the run, and the run then never returns.
            await asyncio.sleep(min(self.POLL_S, self.interval_s))
            now = loop.time()
            if not self._due and now < next_tick:
                continue
            self._due, self.deferred, next_tick = False, False, now + self.interval_s
            if not self.pending and not self.cache_entries:
                continue
            try:
                if not await asyncio.to_thread(self.store.reopen, 0.0):
                    self.deferred = True  # a reader holds the file: keep rows for the next tick
                    continue
                batch = self._take()
                self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, *batch))
                await asyncio.shield(self._writing)  # cancelling the flusher lets it finish
            except Exception as exc:
                self._failure = exc
                raise

    async def drain(self) -> None:
        """Wait for the batch a worker thread may be writing; raise why a write failed."""
        if self._writing is not None:
            (outcome,) = await asyncio.gather(self._writing, return_exceptions=True)
            if isinstance(outcome, Exception) and self._failure is None:
                self._failure = outcome  # it failed after the flusher was cancelled
        if self._failure is not None:
            raise self._failure
