"""The async runner: every (case, replay) through the system under test, scored and stored.

Bounded concurrency, retries with backoff (in :mod:`evalkit.retries`), a response cache keyed
on the system's identity (code fingerprint, version, index) as well as the request, the
tool-fixture loop for agent cases, a progress bar (:mod:`evalkit.run.progress`) and batched
writes (:mod:`evalkit.run.writer`): a killed run keeps what it finished and ``--resume RUN_ID``
continues without repeating completed (case, replay) requests. The summary
(:mod:`evalkit.run.summary`) of a fresh run is what the writer counted as it wrote; a resumed
run's is read back from the store, so it counts all of it.

This module records the run (manifest, cases, resume) and finishes it; asking the model for
each (case, replay) is :mod:`evalkit.run.execution`'s, and the options are
:mod:`evalkit.run.options`'.

Examples:
    >>> summary = run_suite(suite, corpus, store, RunOptions(label="baseline"))  # doctest: +SKIP
    >>> summary.passed, summary.errored                                           # doctest: +SKIP
    (61, 0)
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import Suite
from evalkit.errors import EvalkitError, StoreError
from evalkit.records import Provider
from evalkit.run.caveats import config_warnings, result_warnings
from evalkit.run.execution import Execution, execute_work, first_request_keys
from evalkit.run.judging import make_judge, require_judge
from evalkit.run.options import RunOptions, RunStart
from evalkit.run.preflight import check_endpoints
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
from evalkit.run_manifest import RunManifest
from evalkit.store import Store, new_run_id
from evalkit.store.history_tally import TalliedHistory, pinned_rules, tag_rows

__all__ = [
    "RunOptions",
    "RunStart",
    "RunSummary",
    "execute_work",
    "first_request_keys",
    "run_suite",
]


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
        if fresh.config_hash != manifest.config_hash:
            raise EvalkitError(
                f"cannot resume {run_id}: the configuration changed since it started "
                f"(config_hash {manifest.config_hash[:12]} → {fresh.config_hash[:12]})"
            )
        # A --no-cache run stays uncached when resumed; a cached one may be resumed uncached.
        use_cache = manifest.run.cache and options.use_cache is not False
        if options.retry_errors:
            retried = store.drop_errored_outputs(run_id)
        done = store.completed(run_id)
        label = manifest.run.label
        before = [*fresh.warnings, *config_warnings(suite, corpus), *options.warnings]
    else:
        if options.retry_errors:
            raise EvalkitError("--retry-errors continues a stored run: use it with --resume")
        use_cache = config.cache if options.use_cache is None else options.use_cache
        run_id = new_run_id()
        label = options.label
        manifest = build_manifest(
            suite, corpus, run_id=run_id, label=label, selection=options.selection
        )
        manifest = manifest.with_run(cache=use_cache).with_entries(options.extra_manifest)
        before = [*manifest.warnings, *config_warnings(suite, corpus), *options.warnings]
        manifest = replace(manifest, warnings=tuple(before))
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
                run_id=run_id,
                label=label,
                resumed=bool(options.resume),
                expected_outputs=expected,
                stored=len(done),
                to_do=len(work),
                use_cache=use_cache,
                warnings=tuple(before),
            )
        )
    own_provider = provider is None
    started = time.perf_counter()
    execution: Execution | None = None
    try:
        provider = provider or make_provider(config.system)
        judge = make_judge(suite, corpus, store, use_cache)
        execution = Execution(suite, store, run_id, provider, use_cache, options, judge, manifest)
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
    config_hash = manifest.config_hash
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
    recorded = store.finish_run(
        run_id,
        status,
        summary.to_dict(),
        # the manifest is written again only when its warnings changed since it was recorded
        warnings=None if tuple(warnings) == manifest.warnings else warnings,
        # a fresh run's history counts as its writer tallied them (a resume's are counted)
        tallied=None if options.resume else _tallied(execution, corpus, manifest),
    )
    # a complete run's case counts as its finish recorded them (no query reads them back);
    # else counted from the stored rows
    summary = (
        replace(summary, case_counts=recorded)
        if recorded is not None
        else with_case_counts(store, summary)
    )
    mark("summary")
    return summary


class PendingWork(Collection[tuple[Case, int]]):
    """The (case, replay) pairs a run still asks, in corpus order, made one at a time as the
    workers take them: a list of them would grow with the corpus times its replays."""

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


def _tallied(execution: Execution, corpus: Corpus, manifest: RunManifest) -> TalliedHistory | None:
    """The history counts of a fresh run from what its writer tallied (None: it stopped
    tallying, a large run), under the pass rules its manifest pinned."""
    tally = execution.writer.counts.replays.cases
    if tally is None:
        return None
    rules = pinned_rules(manifest.gate_policy)
    rows = tag_rows(((case.id, case.tags) for case in corpus.cases), tally, rules)
    return TalliedHistory(execution.scoring_id, rules, tuple(rows))


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


def _unreadable_python_tree(manifest: RunManifest) -> bool:
    """A python system whose repository tree could not be read, run in a CI job (the gate
    flow): answers cached under an identity that misses what it reads are not served."""
    from evalkit.provenance import ci_context

    repo = (manifest.system or {}).get("repo")
    unreadable = isinstance(repo, dict) and not repo.get("digest")
    return unreadable and bool(ci_context(os.environ))
