"""The async runner: every (case, replay) through the system under test, scored and stored.

Bounded concurrency, retries with backoff (in :mod:`evalkit.retries`), a response cache,
the tool-fixture loop for agent cases, a progress bar with rate and ETA, and batched writes:
outputs and their scores are appended to DuckDB as they complete (every ``flush_rows`` rows or
``flush_interval_s`` seconds, one transaction per batch), so a killed run keeps what it finished
and ``--resume RUN_ID`` continues without repeating completed (case, replay) requests.

Examples:
    >>> summary = run_suite(suite, corpus, store, RunOptions(label="baseline"))  # doctest: +SKIP
    >>> summary.passed, summary.errored                                           # doctest: +SKIP
    (61, 0)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from evalkit.corpus.cases import Case, Corpus, render_messages
from evalkit.corpus.suite import Suite, build_manifest
from evalkit.errors import ConfigError, EvalkitError, ProviderError
from evalkit.fixtures import FixtureMiss, serve_tool_call
from evalkit.records import ChatRequest, Completion, Output, Provider, Score, ToolCall
from evalkit.retries import CallStats, RateLimiter, RetryPolicy, complete_with_retries
from evalkit.run.cache import CachedProvider, cache_key
from evalkit.run.providers import make_provider
from evalkit.scorers.judge_client import JudgeClient
from evalkit.scorers.registry import EXECUTABLE, JUDGE
from evalkit.store import (
    OUTPUT_SCHEMA,
    REOPEN_WAIT_S,
    SCORE_SCHEMA,
    Store,
    initial_scoring_id,
    new_run_id,
)


@dataclass(frozen=True)
class RunOptions:
    label: str = "run"
    replays: int | None = None  # None: the suite's ``replays``
    concurrency: int | None = None  # None: the suite's ``concurrency``
    use_cache: bool | None = None  # None: the suite's ``cache``
    progress: bool = True
    resume: str | None = None  # run id to continue
    selection: dict[str, Any] = field(default_factory=dict)
    flush_rows: int = 256
    flush_interval_s: float = 0.5
    seed: int = 0  # jitter RNG only


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    label: str
    config_hash: str
    cases: int
    outputs: int
    passed: int
    failed: int
    errored: int
    cache_hits: int
    requests: int
    retries: int
    resumed_skipped: int
    wall_s: float
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    mean_latency_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_suite(
    suite: Suite,
    corpus: Corpus,
    store: Store,
    options: RunOptions,
    provider: Provider | None = None,
) -> RunSummary:
    """Run ``corpus`` through the suite's system under test and store everything."""
    return asyncio.run(run_suite_async(suite, corpus, store, options, provider))


async def run_suite_async(
    suite: Suite,
    corpus: Corpus,
    store: Store,
    options: RunOptions,
    provider: Provider | None = None,
) -> RunSummary:
    config = suite.config
    if options.replays is not None or options.concurrency is not None:
        updates = {
            k: v
            for k, v in {"replays": options.replays, "concurrency": options.concurrency}.items()
            if v is not None
        }
        suite = Suite(
            config.model_copy(update=updates),
            suite.path,
            suite.root,
            suite.system_prompt,
            suite.tools,
        )
        config = suite.config
    use_cache = config.cache if options.use_cache is None else options.use_cache
    if options.resume:
        run_id = store.resolve_run(options.resume)
        manifest = store.manifest(run_id)
        fresh = build_manifest(
            suite, corpus, run_id=run_id, label=options.label, selection=options.selection
        )
        if fresh["config_hash"] != manifest["config_hash"]:
            raise EvalkitError(
                f"cannot resume {run_id}: the configuration changed since it started "
                f"(config_hash {manifest['config_hash'][:12]} → {fresh['config_hash'][:12]})"
            )
        done = store.completed(run_id)
        label = manifest["run"]["label"]
    else:
        run_id = new_run_id()
        label = options.label
        manifest = build_manifest(
            suite, corpus, run_id=run_id, label=label, selection=options.selection
        )
        store.create_run(manifest, corpus.cases)
        done = set()
    work = [
        (case, replay)
        for case in corpus.cases
        for replay in range(config.replays)
        if (case.id, replay) not in done
    ]
    own_provider = provider is None
    provider = provider or make_provider(config.system)
    judge = make_judge(suite, corpus, store, use_cache)
    execution = _Execution(suite, store, run_id, provider, use_cache, options, judge)
    started = time.perf_counter()
    try:
        await execution.run(work)
    finally:
        execution.writer.flush()
        if own_provider:
            await provider.aclose()
        if judge is not None:
            await judge.provider.aclose()
    wall_s = time.perf_counter() - started
    summary = _summarize(
        store, run_id, label, manifest["config_hash"], execution, len(done), wall_s
    )
    store.finish_run(run_id, "complete", summary.to_dict())
    return summary


class _Execution:
    """State of one run: the provider, the cache, the writer and the counters."""

    def __init__(
        self,
        suite: Suite,
        store: Store,
        run_id: str,
        provider: Provider,
        use_cache: bool,
        options: RunOptions,
        judge: JudgeClient | None = None,
    ) -> None:
        config = suite.config
        self.suite = suite
        self.store = store
        self.run_id = run_id
        self.provider = provider
        self.use_cache = use_cache
        self.options = options
        self.scoring_id = initial_scoring_id(run_id)
        self.semaphore = asyncio.Semaphore(config.concurrency)
        self.retry = RetryPolicy(max_retries=config.system.max_retries)
        self.call_stats = CallStats()
        self.rng = random.Random(options.seed)
        limit = config.rate_limit
        self.limiter = RateLimiter(
            limit.requests_per_minute if limit else None, limit.tokens_per_minute if limit else None
        )
        self.writer = _BatchWriter(store, options.flush_rows, options.flush_interval_s, use_cache)
        self.cache: dict[str, str] = {}
        self.cache_hits = 0
        price = config.prices.get(config.system.model)
        self.price_in = price.input_per_mtok / 1e6 if price else 0.0
        self.price_out = price.output_per_mtok / 1e6 if price else 0.0
        self.sampling = config.system.sampling.model_dump()
        system = config.system
        self.identity = {
            "provider": system.provider,
            "base_url": system.base_url,
            "function": system.function,
        }
        self.judge = judge

    async def run(self, work: list[tuple[Case, int]]) -> None:
        first_requests = [(case, replay, self._first_request(case)) for case, replay in work]
        if self.use_cache and first_requests:
            self.cache = self.store.cache_get(
                self._cache_key(request, replay) for _, replay, request in first_requests
            )
        self.store.release()  # readers may open the file between batches from now on
        progress = _Progress(len(work), enabled=self.options.progress)
        with progress:
            flusher = asyncio.create_task(self.writer.run_periodic())
            try:
                await asyncio.gather(
                    *(
                        self._one(case, replay, request, progress)
                        for case, replay, request in first_requests
                    )
                )
            finally:
                flusher.cancel()
                # gather, not a suppressed await: a cancel of this run itself still propagates
                await asyncio.gather(flusher, return_exceptions=True)
                await self.writer.drain()  # the batch a worker thread may still be writing

    def _first_request(self, case: Case) -> ChatRequest:
        system = self.suite.config.system
        messages = render_messages(case, self.suite.system_prompt, system.user_template)
        offer = system.offer_tools == "always" or bool(case.fixtures.get("tools"))
        return ChatRequest(
            system.model, messages, self.sampling, self.suite.tools if offer else None
        )

    def _cache_key(self, request: ChatRequest, replay: int) -> str:
        return cache_key(self.identity, request, replay)

    async def _one(
        self, case: Case, replay: int, request: ChatRequest, progress: _Progress
    ) -> None:
        output, request_hash = await self._converse(case, replay, request)
        scores: list[Score] = []
        if output.ok and output.fail_reason is None:
            for scorer in case.scorers:
                try:
                    if scorer.tier == EXECUTABLE:  # sandboxed subprocesses: keep the loop free
                        scores.append(await asyncio.to_thread(scorer, output, case))
                    else:
                        scores.append(await scorer.ascore(output, case, self.judge))
                except Exception as exc:  # a scorer bug must not sink the run
                    reason = f"scorer crashed: {type(exc).__name__}: {exc}"[:300]
                    scores.append(Score(scorer.name, 0.0, False, reason, error=True))
        cost = output.prompt_tokens * self.price_in + output.completion_tokens * self.price_out
        self.writer.add(
            self.run_id, self.scoring_id, case, replay, output, scores, cost, request_hash
        )
        progress.advance(output.error is not None)

    async def _converse(self, case: Case, replay: int, request: ChatRequest) -> tuple[Output, str]:
        """One model turn, or a tool loop served from the case's fixtures until a final answer.

        Returns the output and the cache key of the first request (the request's identity).
        """
        max_steps = self.suite.config.system.max_steps
        messages = list(request.messages)
        trajectory: list[ToolCall] = []
        usage = {"latency_ms": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
        served_model: str | None = None
        cached_all = True
        first_key = ""

        def finish(text: str | None, steps: int, **outcome: str) -> tuple[Output, str]:
            output = Output(
                text=text, tool_calls=tuple(trajectory), steps=steps, model=served_model,
                cached=cached_all and "error" not in outcome, **usage, **outcome,  # type: ignore[arg-type]
            )  # fmt: skip
            return output, first_key

        for step in range(1, max_steps + 1):
            # a copy: the loop appends to ``messages``, a sent request must not change after
            step_request = ChatRequest(
                request.model, list(messages), request.sampling, request.tools
            )
            key = self._cache_key(step_request, replay)
            first_key = first_key or key
            try:
                completion, elapsed, cached = await self._complete(step_request, key, step == 1)
            except ProviderError as exc:
                return finish(None, step, error=exc.cause)
            usage["latency_ms"] += elapsed
            usage["prompt_tokens"] += completion.prompt_tokens
            usage["completion_tokens"] += completion.completion_tokens
            served_model = completion.model or served_model
            cached_all = cached_all and cached
            if not completion.tool_calls:
                return finish(completion.text, step)
            messages.append(_assistant_tool_message(completion))
            for call in completion.tool_calls:
                try:
                    served = serve_tool_call(
                        case.fixtures.get("tools") or {}, call.name, call.arguments
                    )
                except FixtureMiss as miss:
                    trajectory.append(ToolCall(call.name, miss.arguments, None, call.id))
                    return finish(completion.text, step, fail_reason=str(miss))
                trajectory.append(ToolCall(call.name, served.arguments, served.response, call.id))
                content = json.dumps(served.response)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return finish(None, max_steps, fail_reason=f"no final answer within max_steps={max_steps}")

    async def _complete(
        self, request: ChatRequest, key: str, first_step: bool
    ) -> tuple[Completion, float, bool]:
        if self.use_cache:
            hit = self.cache.get(key)
            if hit is None and not first_step:
                # later steps of a tool loop were not prefetched: look them up one by one
                hit = self.store.cache_get([key]).get(key)
            if hit is not None:
                self.cache_hits += 1
                return Completion.from_json(json.loads(hit)), 0.0, True
        async with self.semaphore:
            tokens = _estimate_tokens(request)
            attempts = 0

            async def attempt() -> Completion:
                nonlocal attempts
                attempts += 1
                if attempts > 1:  # retries count against the rate limit too
                    await self.limiter.acquire(tokens)
                return await self.provider.complete(request)

            await self.limiter.acquire(tokens)  # outside the latency clock
            started = time.perf_counter()
            completion = await complete_with_retries(attempt, self.retry, self.call_stats, self.rng)
            elapsed = (time.perf_counter() - started) * 1000
        if self.use_cache:
            self.writer.cache(key, json.dumps(completion.to_json()))
        return completion, elapsed, False


def make_judge(suite: Suite, corpus: Corpus, store: Store, use_cache: bool) -> JudgeClient | None:
    """The run's judge client (cached), or None when no case uses a judge scorer.

    Raises:
        ConfigError: a case uses a judge scorer but the suite config has no ``judge:``.
    """
    if not any(s.tier == JUDGE for case in corpus.cases for s in case.scorers):
        return None
    if suite.config.judge is None:
        raise ConfigError(
            f"{suite.path}: cases use the judge scorer but the suite has no judge: section "
            "(judge: {model: ..., base_url: ...})"
        )
    return judge_client(suite, store, use_cache)


def judge_client(suite: Suite, store: Store, use_cache: bool = True) -> JudgeClient:
    """The suite's judge (``judge:`` in evalkit.yaml) behind the response cache.

    Raises:
        ConfigError: the suite config has no ``judge:`` section.
    """
    config = suite.config.judge
    if config is None:
        raise ConfigError(f"{suite.path}: no judge: section (judge: {{model: ..., base_url: ...}})")
    identity = {"judge": config.model, "snapshot": config.snapshot, "base_url": config.base_url}
    provider = CachedProvider(make_provider(config), store, identity, enabled=use_cache)
    return JudgeClient(provider, config.model, max_retries=config.max_retries)


def _assistant_tool_message(completion: Completion) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": completion.text,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ],
    }


def _estimate_tokens(request: ChatRequest) -> int:
    chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    return chars // 4 + int(request.sampling.get("max_tokens") or 0)


class _BatchWriter:
    """Collects rows column-wise and appends them to the store in batches."""

    POLL_S = 0.05  # how often the flusher looks for a due batch

    def __init__(self, store: Store, flush_rows: int, interval_s: float, use_cache: bool) -> None:
        self.store = store
        self.flush_rows = flush_rows
        self.interval_s = interval_s
        self.outputs: dict[str, list[Any]] = {name: [] for name in OUTPUT_SCHEMA}
        self.scores: dict[str, list[Any]] = {name: [] for name in SCORE_SCHEMA}
        self.cache_entries: dict[str, str] = {}
        self.pending = 0
        self.written = 0
        self.passed = self.failed = self.errored = 0
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
        if output.error is not None or any(s.error for s in scores):
            self.errored += 1
        elif output.fail_reason is None and all(s.passed for s in scores):
            self.passed += 1
        else:
            self.failed += 1
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
        self.outputs = {name: [] for name in OUTPUT_SCHEMA}
        self.scores = {name: [] for name in SCORE_SCHEMA}
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
        self.store.write_results(
            pl.DataFrame(outputs, schema=OUTPUT_SCHEMA), pl.DataFrame(scores, schema=SCORE_SCHEMA)
        )
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


class _Progress:
    """A rich progress bar (rate and ETA) when interactive; silent otherwise.

    Completions are counted in plain ints and handed to rich at most every ``UPDATE_S`` seconds
    (it redraws 4 times a second anyway): a rich update per completion cost about 2% of a
    CPU-bound run.
    """

    UPDATE_S = 0.2

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._progress = None
        self._task = None
        self.total = total
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]evalkit run"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                TextColumn("errors {task.fields[errors]}"),
                refresh_per_second=4,
                transient=False,
            )
            self._task = self._progress.add_task("run", total=total, rate="", errors=0)
        self._done = 0
        self._errors = 0
        self._started = time.perf_counter()
        self._next_update = self._started

    def __enter__(self) -> _Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._push(time.perf_counter())
            self._progress.stop()

    def advance(self, errored: bool) -> None:
        self._done += 1
        self._errors += errored
        if self._progress is not None:
            now = time.perf_counter()
            if now >= self._next_update or self._done == self.total:
                self._next_update = now + self.UPDATE_S
                self._push(now)

    def _push(self, now: float) -> None:
        if self._progress is not None and self._task is not None:
            rate = self._done / max(now - self._started, 1e-9)
            self._progress.update(
                self._task, completed=self._done, rate=f"{rate:.1f}/s", errors=self._errors
            )


def _summarize(
    store: Store,
    run_id: str,
    label: str,
    config_hash: str,
    execution: _Execution,
    skipped: int,
    wall_s: float,
) -> RunSummary:
    totals = store.query(
        "SELECT count(*) AS n, count(DISTINCT case_id) AS cases, "
        "coalesce(sum(prompt_tokens), 0) AS pin, coalesce(sum(completion_tokens), 0) AS pout, "
        "coalesce(sum(cost_usd), 0) AS cost, "
        "coalesce(avg(latency_ms) FILTER (WHERE NOT cached), 0) AS lat "
        "FROM outputs WHERE run_id = ?",
        [run_id],
    ).row(0, named=True)
    writer = execution.writer
    return RunSummary(
        run_id=run_id,
        label=label,
        config_hash=config_hash,
        cases=int(totals["cases"]),
        outputs=int(totals["n"]),
        passed=writer.passed,
        failed=writer.failed,
        errored=writer.errored,
        cache_hits=execution.cache_hits,
        requests=execution.call_stats.attempts,
        retries=execution.call_stats.retries,
        resumed_skipped=skipped,
        wall_s=round(wall_s, 3),
        prompt_tokens=int(totals["pin"]),
        completion_tokens=int(totals["pout"]),
        cost_usd=float(totals["cost"]),
        mean_latency_ms=round(float(totals["lat"] or 0.0), 2),
    )
