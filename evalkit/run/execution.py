"""Asking the system under test for every (case, replay) of a recorded run: bounded
concurrency, the rate limiter and retries, the response cache (prefetched for the first
requests, looked up step by step in a tool loop), the tool-fixture loop for agent cases,
scoring, and batched writes through :class:`~evalkit.run.writer.BatchWriter`.

:func:`~evalkit.run.runner.run_suite` records the run and hands its work here; engines that
schedule chunks call :func:`execute_work` with a sink of their own.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from evalkit.corpus.cases import Case
from evalkit.corpus.messages import render_messages
from evalkit.corpus.suite import Suite
from evalkit.errors import ProviderError
from evalkit.fixtures import FixtureMiss
from evalkit.records import ChatRequest, Completion, Output, Provider, Score, ToolCall
from evalkit.retries import CallStats, RateLimiter, RetryPolicy, complete_with_retries
from evalkit.run.cache import cache_key, system_cache_identity
from evalkit.run.live_tools import LiveToolError, answer_tool_call, live_tools_for
from evalkit.run.options import RunOptions
from evalkit.run.progress import Progress
from evalkit.run.summary import SessionCounts
from evalkit.run.timeline import mark
from evalkit.run.writer import BatchWriter
from evalkit.run_manifest import RunManifest
from evalkit.scorers.registry import EXECUTABLE
from evalkit.store import Store, initial_scoring_id

if TYPE_CHECKING:  # a judged run's (evalkit.run.judging imports it to build one)
    from evalkit.scorers.judge_client import JudgeClient


class Execution:
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
        manifest: RunManifest,
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
        # answered: held all at once, they grew with the corpus and were much of a large run's
        # memory. The cache prefetch builds them one at a time too, keeping only the keys.
        if self.use_cache and work:
            self.cache = self.store.cache_get(
                self._cache_key(self._first_request(case), replay) for case, replay in work
            )
        # readers may open the file between batches from the first batch, or the writer's
        # interval, on (a run done sooner keeps it open to its finish)
        self.writer.hold_open()
        progress = Progress(len(work), enabled=self.options.progress)
        with progress:
            flusher = asyncio.create_task(self.writer.run_periodic())
            try:
                pending = iter(work)

                async def worker() -> None:
                    for case, replay in pending:
                        await self._one(case, replay, self._first_request(case), progress)

                # A pool, not a task per case: memory and scheduling stay flat in the corpus size
                # (each waiting task holds its own frame); twice the concurrency, so scoring and
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
            # cache lookup (canonical JSON of the grown messages and the tools, hashed: a
            # sizeable part of an agent step's own CPU), so a run without the cache skips it
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
    suite: Suite, manifest: RunManifest, work: list[tuple[Case, int]], options: RunOptions
) -> list[str]:
    """The response-cache keys of the first request of each (case, replay) in ``work``: what
    a run prefetches, for an engine whose workers cannot read the store."""
    run_id = manifest.run.run_id
    execution = Execution(suite, None, run_id, None, True, options, None, manifest)  # type: ignore[arg-type]
    return [execution._cache_key(execution._first_request(case), replay) for case, replay in work]


async def execute_work(
    suite: Suite,
    sink: Any,
    run_id: str,
    manifest: RunManifest,
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
    execution = Execution(suite, sink, run_id, provider, use_cache, options, judge, manifest)
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
