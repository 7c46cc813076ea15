"""The async runner: every (case, replay) through the system under test, scored and stored.

Bounded concurrency, retries with backoff (in :mod:`evalkit.retries`), a response cache keyed
on the system's identity (code fingerprint, version, index) as well as the request, the
tool-fixture loop for agent cases, a progress bar (:mod:`evalkit.run.progress`) and batched
writes (:mod:`evalkit.run.writer`): a killed run keeps what it finished and ``--resume RUN_ID``
continues without repeating completed (case, replay) requests. The summary
(:mod:`evalkit.run.summary`) of a fresh run is what the writer counted as it wrote; a resumed
run's is read back from the store, so it counts all of it.

Examples:
    >>> summary = run_suite(suite, corpus, store, RunOptions(label="baseline"))  # doctest: +SKIP
    >>> summary.passed, summary.errored                                           # doctest: +SKIP
    (61, 0)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.messages import render_messages
from evalkit.corpus.suite import Suite
from evalkit.errors import EvalkitError, ProviderError, StoreError
from evalkit.fixtures import FixtureMiss
from evalkit.records import ChatRequest, Completion, Output, Provider, Score, ToolCall
from evalkit.retries import CallStats, RateLimiter, RetryPolicy, complete_with_retries
from evalkit.run.cache import cache_key, system_cache_identity
from evalkit.run.caveats import config_warnings, result_warnings
from evalkit.run.judging import make_judge, require_judge
from evalkit.run.live_tools import LiveToolError, answer_tool_call, live_tools_for
from evalkit.run.preflight import check_endpoints
from evalkit.run.progress import Progress
from evalkit.run.providers import make_provider
from evalkit.run.replicas import replica_counts
from evalkit.run.summary import (
    RunSummary,
    SessionCounts,
    summarize,
    summarize_written,
    with_case_counts,
)
from evalkit.run.timeline import mark
from evalkit.run.writer import BatchWriter
from evalkit.scorers.judge_client import JudgeClient
from evalkit.scorers.registry import EXECUTABLE
from evalkit.store import Store, initial_scoring_id, new_run_id

__all__ = [
    "RunOptions",
    "RunStart",
    "RunSummary",
    "execute_work",
    "first_request_keys",
    "run_suite",
]


@dataclass(frozen=True)
class RunStart:
    """Handed to ``RunOptions.on_start`` once the run is recorded, before any model call."""

    run_id: str
    label: str
    resumed: bool
    expected_outputs: int  # selected cases × replays
    stored: int  # outputs already stored (a resume)
    to_do: int
    use_cache: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class RunOptions:
    label: str = "run"
    replays: int | None = None  # None: the suite's ``replays``
    concurrency: int | None = None  # None: the suite's ``concurrency``
    use_cache: bool | None = None  # None: the suite's ``cache`` (a resume: the run's own)
    progress: bool = True
    resume: str | None = None  # run id to continue
    retry_errors: bool = False  # with ``resume``: ask stored errors again
    selection: dict[str, Any] = field(default_factory=dict)
    # A batch is written flush_interval_s after its first answer, or sooner at flush_rows
    # answers, and no more than flush_rows are ever pending (workers wait): a crash loses at
    # most that many, none older than the interval (see evalkit.run.writer). Each batch
    # reopens the file (readers may hold it between batches), so at thousands of outputs a
    # second 256-row batches cost ~4% of a run's wall (measured: 10k cases at c=256, 4.0 s
    # against 3.9 s).
    flush_rows: int = 2048
    flush_interval_s: float = 0.5
    seed: int = 0  # jitter RNG only
    on_start: Callable[[RunStart], None] | None = None  # e.g. print the run id
    warnings: tuple[str, ...] = ()  # the caller's own (gate policy), kept with the run's
    # Recorded in a new run's manifest beside its own fields, never replacing one (and never
    # hashed: config_hash reads only the comparable fields), e.g. ``{"rebaseline": {...}}``.
    extra_manifest: dict[str, Any] = field(default_factory=dict)


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
    """:func:`run_suite` inside a running event loop.

    A run that stops on an exception is marked ``failed`` (``interrupted`` on Ctrl-C or a
    cancel) with what it stored kept, and can be continued with ``--resume``.
    """
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
    if provider is None and config.system.provider == "openai":
        # Before anything is recorded: a dead endpoint stops the run now, not after every
        # case's retries (evalkit.run.preflight). An injected provider is the caller's.
        fleet: list[str | None] = [r.url for r in config.system.replicas]
        fleet = fleet or [config.system.effective_endpoint().url]
        check_endpoints([url for url in fleet if url])
    require_judge(suite, corpus)  # before a run is recorded: it would fail holding its label
    retried = 0
    if options.resume:
        run_id = store.resolve_run(options.resume)
        manifest = store.manifest(run_id)
        corpus = _resumed_cases(store, run_id, corpus)
        fresh = build_manifest(
            suite, corpus, run_id=run_id, label=options.label, selection=options.selection
        )
        if fresh["config_hash"] != manifest["config_hash"]:
            raise EvalkitError(
                f"cannot resume {run_id}: the configuration changed since it started "
                f"(config_hash {manifest['config_hash'][:12]} → {fresh['config_hash'][:12]})"
            )
        # A --no-cache run stays uncached when resumed; a cached one may be resumed uncached.
        use_cache = bool(manifest["run"].get("cache", True)) and options.use_cache is not False
        if options.retry_errors:
            retried = store.drop_errored_outputs(run_id)
        done = store.completed(run_id)
        label = manifest["run"]["label"]
        before = [*fresh["warnings"], *config_warnings(suite, corpus), *options.warnings]
    else:
        if options.retry_errors:
            raise EvalkitError("--retry-errors continues a stored run: use it with --resume")
        use_cache = config.cache if options.use_cache is None else options.use_cache
        run_id = new_run_id()
        label = options.label
        manifest = build_manifest(
            suite, corpus, run_id=run_id, label=label, selection=options.selection
        )
        manifest["run"]["cache"] = use_cache
        manifest.update({k: v for k, v in options.extra_manifest.items() if k not in manifest})
        before = [*manifest["warnings"], *config_warnings(suite, corpus), *options.warnings]
        manifest["warnings"] = before
        store.create_run(manifest, corpus.cases)
        done = set()
    if use_cache and _unreadable_python_tree(manifest):
        use_cache = False  # its cache key cannot cover what it reads (corpus.repo_tree)
        before.append(
            "a python system whose repository could not be read, run in CI: no cached answers "
            "are served (its identity does not cover the files it can read)"
        )
    expected = len(corpus.cases) * config.replays
    work = PendingWork(corpus.cases, config.replays, frozenset(done))
    if options.on_start is not None:
        options.on_start(
            RunStart(
                run_id, label, bool(options.resume), expected, len(done), len(work), use_cache,
                tuple(before),
            )
        )  # fmt: skip
    own_provider = provider is None
    started = time.perf_counter()
    execution: _Execution | None = None
    try:
        provider = provider or make_provider(config.system)
        judge = make_judge(suite, corpus, store, use_cache)
        execution = _Execution(suite, store, run_id, provider, use_cache, options, judge, manifest)
        try:
            await execution.run(work)
        finally:
            try:
                execution.writer.flush(keep_open=True)  # the run's finish writes next
            finally:  # the clients are closed on every route (a full disk included)
                mark("last_batch")
                try:
                    if own_provider:
                        await provider.aclose()
                finally:
                    if judge is not None:
                        await judge.provider.aclose()
    except BaseException as exc:
        _mark_stopped(store, run_id, exc)
        if isinstance(exc, StoreError):
            raise StoreError(
                f"{exc} — run {run_id} keeps every output stored so far; once the store can "
                f"be written again, continue it with: evalkit run --resume {run_id}"
            ) from None
        raise
    session = SessionCounts(
        requests=execution.call_stats.attempts,
        retries=execution.call_stats.retries,
        cache_hits=execution.cache_hits,
        resumed_skipped=len(done),
        retried_errors=retried,
        wall_s=time.perf_counter() - started,
        replicas=replica_counts(provider),  # a ReplicaRouter's per-replica requests and errors
    )
    config_hash = manifest["config_hash"]
    if options.resume:  # earlier sessions' outputs are in the store, not in this writer
        summary = summarize(
            store, run_id, label, config_hash, expected_outputs=expected, session=session
        )
    else:  # every output of the run went through this writer: its counts are the run's
        summary = summarize_written(
            execution.writer.counts,
            run_id,
            label,
            config_hash,
            expected_outputs=expected,
            session=session,
        )
    warnings = [*before, *result_warnings(summary.outputs, summary.cached_outputs, expected)]
    summary = replace(summary, warnings=tuple(warnings), replays=config.replays)
    status = "complete" if summary.complete else "incomplete"
    store.finish_run(run_id, status, summary.to_dict(), warnings=warnings)
    summary = with_case_counts(store, summary)  # a complete run's, as its finish recorded them
    mark("summary")
    return summary


class PendingWork(Collection[tuple[Case, int]]):
    """The (case, replay) pairs a run still asks, in corpus order, made one at a time as the
    workers take them: a list of them held ~70 B a pair (7 MiB at 100k cases)."""

    def __init__(
        self, cases: Sequence[Case], replays: int, done: frozenset[tuple[str, int]]
    ) -> None:
        self._cases = cases
        self._replays = replays
        self._done = done
        self._size = sum(1 for _ in self) if done else len(cases) * replays

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[tuple[Case, int]]:
        done = self._done
        for case in self._cases:
            for replay in range(self._replays):
                if (case.id, replay) not in done:
                    yield case, replay

    def __contains__(self, pair: object) -> bool:
        return any(pair == mine for mine in self)


def _resumed_cases(store: Store, run_id: str, corpus: Corpus) -> Corpus:
    """The run's own cases from ``corpus``; refused when one of them is no longer there."""
    stored = [
        row["case_id"]
        for row in store.records(
            "SELECT case_id FROM cases WHERE run_id = ? ORDER BY case_id", [run_id]
        )
    ]
    present = {case.id for case in corpus.cases}
    missing = [case_id for case_id in stored if case_id not in present]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise EvalkitError(
            f"cannot resume {run_id}: {len(missing)} of its cases are not in the corpus "
            f"({shown}); resume with the selection the run started with"
        )
    return corpus.select(ids=stored)


def _mark_stopped(store: Store, run_id: str, exc: BaseException) -> None:
    """Record why a run stopped, if the store can be reached without waiting."""
    interrupted = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
    status = "interrupted" if interrupted else "failed"
    reason = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:300]
    try:
        if store.reopen(0.0):
            store.finish_run(run_id, status, {"stopped": reason})
    except Exception:  # the original error matters more than this bookkeeping
        pass


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
        judge: JudgeClient | None,
        manifest: dict[str, Any],
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
        self.retry = RetryPolicy(
            max_retries=config.system.max_retries,
            max_retry_after_s=config.system.max_retry_after_s,
        )
        self.call_stats = CallStats()
        self.rng = random.Random(options.seed)
        limit = config.rate_limit
        self.limiter = RateLimiter(
            limit.requests_per_minute if limit else None, limit.tokens_per_minute if limit else None
        )
        self.writer = BatchWriter(store, options.flush_rows, options.flush_interval_s)
        self.cache: dict[str, str] = {}
        self.cache_hits = 0
        price = config.prices.get(config.system.model)
        self.price_in = price.input_per_mtok / 1e6 if price else 0.0
        self.price_out = price.output_per_mtok / 1e6 if price else 0.0
        self.sampling = config.system.sampling.model_dump()
        self.identity = system_cache_identity(suite, manifest)
        self.judge = judge
        self.live = live_tools_for(suite)  # kind: live: the named tools answer, not fixtures
        self.sent = self.answered = False  # the timeline marks the first request and answer

    async def run(self, work: Collection[tuple[Case, int]]) -> None:
        # Each first request is built when a worker takes its (case, replay), and dropped once
        # answered: held all at once they were ~0.85 KiB a case (85 MiB at 100k cases). The
        # cache prefetch builds them one at a time too, keeping only the keys.
        if self.use_cache and work:
            self.cache = self.store.cache_get(
                self._cache_key(self._first_request(case), replay) for case, replay in work
            )
        self.store.release()  # readers may open the file between batches from now on
        progress = Progress(len(work), enabled=self.options.progress)
        with progress:
            flusher = asyncio.create_task(self.writer.run_periodic())
            try:
                pending = iter(work)

                async def worker() -> None:
                    for case, replay in pending:
                        await self._one(case, replay, self._first_request(case), progress)

                # A pool, not a task per case: memory and scheduling stay flat in the corpus size
                # (100k waiting tasks held ~2 KiB each); twice the concurrency, so scoring and
                # cache hits never leave a request slot idle. The semaphore bounds the requests.
                workers = min(len(work), 2 * self.suite.config.concurrency)
                await _all_or_first_failure([worker() for _ in range(workers)])
                mark("answers")  # every (case, replay) answered, scored and handed over
            finally:
                flusher.cancel()
                # gather, not a suppressed await: a cancel of this run itself still propagates
                await asyncio.gather(flusher, return_exceptions=True)
                await self.writer.drain()  # the batch a worker thread may still be writing

    def _first_request(self, case: Case) -> ChatRequest:
        system = self.suite.config.system
        messages = render_messages(case, self.suite.system_prompt, system.user_template)
        offer = (
            system.offer_tools == "always"
            or bool(case.fixtures.get("tools"))
            or self.live is not None
        )
        return ChatRequest(
            system.model,
            messages,
            self.sampling,
            self.suite.tools if offer else None,
            tuple(case.fixtures.get("documents") or ()),
        )

    def _cache_key(self, request: ChatRequest, replay: int) -> str:
        return cache_key(self.identity, request, replay)

    async def _one(self, case: Case, replay: int, request: ChatRequest, progress: Progress) -> None:
        output, request_hash, cost = await self._converse(case, replay, request)
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
        await self.writer.put(  # waits while flush_rows answers are pending: the count bound
            self.run_id, self.scoring_id, case, replay, output, scores, cost, request_hash
        )
        progress.advance(output.error is not None)

    async def _converse(
        self, case: Case, replay: int, request: ChatRequest
    ) -> tuple[Output, str, float]:
        """One model turn, or a tool loop served from the case's fixtures (``kind: live``: the
        live tools, :mod:`evalkit.run.live_tools`) until a final answer.

        Returns the output, the cache key of the first request (the request's identity) and
        the cost of its turns (a cached turn costs what it cost when it was produced).
        """
        max_steps = self.suite.config.system.max_steps
        messages = list(request.messages)
        trajectory: list[ToolCall] = []
        usage = {"latency_ms": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
        served_model: str | None = None
        cached_all = True
        first_key = ""
        cost = 0.0

        def finish(text: str | None, steps: int, **outcome: str) -> tuple[Output, str, float]:
            output = Output(
                text=text, tool_calls=tuple(trajectory), steps=steps, model=served_model,
                cached=cached_all and "error" not in outcome, **usage, **outcome,  # type: ignore[arg-type]
            )  # fmt: skip
            return output, first_key, cost

        for step in range(1, max_steps + 1):
            # a copy: the loop appends to ``messages``, a sent request must not change after
            step_request = ChatRequest(
                request.model, list(messages), request.sampling, request.tools, request.documents
            )
            # the first request's key is the output's request_hash; a later step's is only a
            # cache lookup (canonical JSON of the grown messages and the tools, hashed: 30 us
            # of an agent step's 0.45 ms of CPU), so a run without the cache skips it
            key = self._cache_key(step_request, replay) if self.use_cache or step == 1 else ""
            first_key = first_key or key
            try:
                completion, latency_ms, turn_cost, cached = await self._complete(
                    step_request, key, step == 1
                )
            except ProviderError as exc:
                return finish(None, step, error=exc.cause)
            usage["latency_ms"] += latency_ms
            usage["prompt_tokens"] += completion.prompt_tokens
            usage["completion_tokens"] += completion.completion_tokens
            cost += turn_cost
            served_model = completion.model or served_model
            cached_all = cached_all and cached
            if not completion.tool_calls:
                return finish(completion.text, step)
            messages.append(_assistant_tool_message(completion))
            for call in completion.tool_calls:
                try:
                    served = await answer_tool_call(
                        self.live, case.fixtures.get("tools") or {}, call.name, call.arguments
                    )
                except FixtureMiss as miss:
                    trajectory.append(ToolCall(call.name, miss.arguments, None, call.id))
                    return finish(completion.text, step, fail_reason=str(miss))
                except LiveToolError as failed:  # the live service failed: an error, no verdict
                    trajectory.append(ToolCall(call.name, failed.arguments, None, call.id))
                    return finish(None, step, error=str(failed))
                trajectory.append(ToolCall(call.name, served.arguments, served.response, call.id))
                content = json.dumps(served.response)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return finish(None, max_steps, fail_reason=f"no final answer within max_steps={max_steps}")

    async def _complete(
        self, request: ChatRequest, key: str, first_step: bool
    ) -> tuple[Completion, float, float, bool]:
        """One model turn: ``(completion, latency_ms, cost_usd, cached)``. A cached turn keeps
        the latency and cost it had when it was produced."""
        if self.use_cache:
            hit = self.cache.get(key)
            if hit is None and not first_step:
                # later steps of a tool loop were not prefetched: look them up one by one
                hit = self.store.cache_get([key]).get(key)
            if hit is not None:
                self.cache_hits += 1
                entry = json.loads(hit)
                completion = Completion.from_json(entry)
                return completion, entry["latency_ms"], entry["cost_usd"], True
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
            if not self.sent:
                self.sent = True
                mark("first_request")
            started = time.perf_counter()
            completion = await complete_with_retries(attempt, self.retry, self.call_stats, self.rng)
            elapsed = (time.perf_counter() - started) * 1000
            if not self.answered:
                self.answered = True
                mark("first_answer")
        cost = (
            completion.prompt_tokens * self.price_in + completion.completion_tokens * self.price_out
        )
        if self.use_cache:
            entry = {**completion.to_json(), "latency_ms": elapsed, "cost_usd": cost}
            self.writer.cache(key, json.dumps(entry))
        return completion, elapsed, cost, False


async def _all_or_first_failure(coroutines: list[Any]) -> None:
    """Run ``coroutines`` as tasks until all end; when one fails (the store refused a batch),
    cancel the others, so none goes on asking the model for answers that cannot be stored,
    and raise its error."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if not tasks:  # nothing left to ask (a resume whose work is all stored)
        return
    try:
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # this run cancelled: its workers with it
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in tasks:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error


def first_request_keys(
    suite: Suite, manifest: dict[str, Any], work: list[tuple[Case, int]], options: RunOptions
) -> list[str]:
    """The response-cache keys of the first request of each (case, replay) in ``work``: what
    a run prefetches, for an engine whose workers cannot read the store."""
    run_id = manifest["run"]["run_id"]
    execution = _Execution(suite, None, run_id, None, True, options, None, manifest)  # type: ignore[arg-type]
    return [execution._cache_key(execution._first_request(case), replay) for case, replay in work]


async def execute_work(
    suite: Suite,
    sink: Any,
    run_id: str,
    manifest: dict[str, Any],
    work: list[tuple[Case, int]],
    options: RunOptions,
    provider: Provider,
    *,
    use_cache: bool,
    judge: JudgeClient | None = None,
    limiter: Any = None,
) -> SessionCounts:
    """The runner's loop over ``work`` of a run that is already recorded, for engines that
    schedule chunks (:mod:`evalkit.run.engines`): results go to ``sink``, a :class:`Store` or
    anything with its ``cache_get``/``cache_put``/``write_results``/``reopen``/``release``
    (a Parquet part sink); ``limiter`` replaces the suite's rate limiter (a shared budget)."""
    started = time.perf_counter()
    execution = _Execution(suite, sink, run_id, provider, use_cache, options, judge, manifest)
    if limiter is not None:
        execution.limiter = limiter
    try:
        await execution.run(work)
    finally:
        execution.writer.flush()
    return SessionCounts(
        requests=execution.call_stats.attempts,
        retries=execution.call_stats.retries,
        cache_hits=execution.cache_hits,
        wall_s=time.perf_counter() - started,
    )


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


def _unreadable_python_tree(manifest: dict) -> bool:
    """A python system whose repository tree could not be read, run in a CI job (the gate
    flow): answers cached under an identity that misses what it reads are not served."""
    from evalkit.provenance import ci_context

    repo = (manifest.get("system") or {}).get("repo")
    unreadable = isinstance(repo, dict) and not repo.get("digest")
    return unreadable and bool(ci_context(os.environ))
