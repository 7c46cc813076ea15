"""Running chunks of a run into Parquet parts: one ``--shard K/N`` of a CI matrix, or the body
of a Ray task. Nothing here opens DuckDB.

A shard records the run's manifest and its share of the cases under the parts root, then
runs its chunks one after another through the runner's own loop
(:func:`evalkit.run.execution.execute_work`), each into a :class:`PartSink` that writes the
chunk's parts when the chunk is done. Work already in committed parts is skipped, so re-running
a killed shard with the same ``--run-id`` repeats at most the chunk it was in; ``evalkit
merge`` then puts everything into the store.

A shard trusts its earlier parts no more than the merge does: a chunk attempt or cases part
the merge would refuse (truncated, another schema, rows of another run or case) is set aside
under a hidden name, with one line saying so, and its chunk runs again, so the merge after it
finds only parts it takes.

With a shared store in the suite (``store: {shared: URI}``) and the cache on, a chunk asks
the team's response cache for what its own snapshot lacks, as a local run does
(:class:`evalkit.run.shared_cache.SharedCacheStore` over the chunk's sink): a second CI job,
shard or Ray task asks nothing the team already asked under the same full key. The entries it is
served go into the chunk's cache part, so the merge keeps them in the local store too.

A shard builds only its share of the corpus: given :class:`~evalkit.corpus.case_facts.CorpusFacts`
(the corpus read through its case index, :func:`~evalkit.corpus.case_facts.scan_corpus`) it orders
the units from the facts' id digests as columns (:mod:`evalkit.run.share_plan`: only its own
units made) and runs its share a chunk at a time
(:mod:`evalkit.run.share_chunks`): a chunk's cases built, written as a cases part of their own
(a piece of the share: the run is recorded chunk by chunk, before the chunk's requests), then
run; it never holds more than a chunk's cases. Its manifest records, beside
the corpus hash, the hash of each of the N shares (``corpus.shares``), so the merge takes a
shard's pieces exactly when together they are its share (:mod:`evalkit.store.case_pieces`),
and checks the run's cases against the corpus hash once every share is in
(:func:`evalkit.run.merging.merge_run`).

Examples:
    >>> root = PartsRoot("data/parts")
    >>> summary = run_shard(suite, corpus, RunOptions(label="nightly"),   # doctest: +SKIP
    ...                     shard=parse_shard("2/4"), run_id="nightly-42", root=root)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.corpus.case_facts import CorpusFacts
from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import Suite
from evalkit.corpus.yaml_input import paused_gc
from evalkit.errors import EvalkitError
from evalkit.records import Provider
from evalkit.run.judging import make_judge
from evalkit.run.providers import make_provider
from evalkit.run.runner import RunOptions, execute_work
from evalkit.run.shards import (
    DEFAULT_CHUNK_SIZE,
    Chunk,
    Shard,
    ShardRate,
    Unit,
    case_digest,
    make_chunks,
    remaining,
    shard_units,
)
from evalkit.run.share_chunks import OwnParts, ShareCases, piece_name
from evalkit.run.share_plan import SharePlan, plan_shares
from evalkit.run.shared_cache import (
    EntryBuffer,
    SharedCacheStore,
    endpoint_probe,
    report_publish,
)
from evalkit.run.summary import SessionCounts
from evalkit.run_manifest import RunManifest
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA
from evalkit.store.case_pieces import piece_problem, piece_shard
from evalkit.store.part_checks import RunKeys, corpus_problem
from evalkit.store.parts import PartInfo, PartRefused, PartsRoot
from evalkit.store.schema import corpus_digest

if TYPE_CHECKING:
    from evalkit.store.shared import SharedStore


class PartSink:
    """What the runner writes to instead of a store: rows kept in memory until the chunk is
    done, then written as its parts (:meth:`commit`). ``cache`` is a read-only snapshot of
    the response cache (the driver's prefetch from the store; empty for a CI shard)."""

    def __init__(self, cache: dict[str, str] | None = None) -> None:
        self._cache = dict(cache or {})
        self._new_cache: dict[str, str] = {}
        self._outputs: list[pl.DataFrame] = []
        self._scores: list[pl.DataFrame] = []

    # the part of Store the runner uses ---------------------------------------------------

    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        found = {}
        for key in keys:
            hit = self._new_cache.get(key) or self._cache.get(key)
            if hit is not None:
                found[key] = hit
        return found

    def cache_put(self, entries: dict[str, str]) -> None:
        self._new_cache.update(entries)

    def write_results(self, outputs: dict[str, list[Any]], scores: dict[str, list[Any]]) -> None:
        # The runner's batches are column lists (the store's insert takes them as they are);
        # a chunk's parts are Parquet, so here they become frames.
        self._outputs.append(pl.DataFrame(outputs, schema=OUTPUT_SCHEMA))
        self._scores.append(pl.DataFrame(scores, schema=SCORE_SCHEMA))

    def reopen(self, wait_s: float = 0.0) -> bool:
        return True

    def release(self) -> None:
        return None

    # ---------------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return sum(frame.height for frame in self._outputs)

    def commit(self, root: PartsRoot, run_id: str, chunk_id: str) -> int:
        """Write the chunk's parts (cache, scores, then outputs); returns the attempt."""
        outputs = pl.concat([pl.DataFrame(schema=OUTPUT_SCHEMA), *self._outputs])
        scores = pl.concat([pl.DataFrame(schema=SCORE_SCHEMA), *self._scores])
        part = root.write_chunk(run_id, chunk_id, outputs, scores, self._new_cache)
        return part.attempt


@dataclass(frozen=True, kw_only=True)
class ChunkResult:
    chunk_id: str
    attempt: int
    outputs: int
    requests: int
    retries: int
    cache_hits: int
    node: str = ""  # the Ray node that ran it (empty outside Ray)
    shared_hits: int = 0  # cache entries the team's shared store answered


@dataclass(frozen=True, kw_only=True)
class ShardSummary:
    """What one shard did: its units, what was already done, and this session's counters."""

    run_id: str
    shard: str
    units: int
    skipped: int  # done before this session (committed parts of earlier attempts)
    chunks: int  # chunks run now
    outputs: int  # outputs written now
    requests: int
    wall_s: float
    rate_note: str = ""  # how the endpoint's rate limit was shared between the shards
    shared_hits: int = 0  # cache entries the team's shared store answered
    cases: int = 0  # the cases of this shard's share (built, and in its cases part)
    corpus_cases: int = 0  # the run's cases in all
    built: int = 0  # cases built from their files by this process (the whole corpus when loaded)
    indexed: int = 0  # cases read only to make the case index's entries (none kept)


def run_manifest(
    suite: Suite, corpus: Corpus | CorpusFacts, options: RunOptions, run_id: str
) -> RunManifest:
    """The run's manifest, as every shard of it computes it (same ``config_hash``)."""
    suite = _with_overrides(suite, options)
    manifest = build_manifest(
        suite, corpus, run_id=run_id, label=options.label, selection=options.selection
    )
    manifest = manifest.with_run(
        cache=suite.config.cache if options.use_cache is None else bool(options.use_cache)
    )
    return replace(manifest, warnings=(*manifest.warnings, *options.warnings))


def record_run(
    root: PartsRoot,
    manifest: RunManifest,
    writer: str,
    cases: Sequence[Case],
    *,
    with_cases: bool = True,
) -> None:
    """Write the manifest and (``with_cases``) the run's cases under the parts root (for the
    merge)."""
    run_id = manifest.run.run_id
    root.write_manifest(run_id, writer, manifest)
    if with_cases:
        root.write_cases(run_id, writer, cases)


async def run_chunk(
    suite: Suite,
    cases: dict[str, Case],
    manifest: RunManifest,
    chunk: Chunk,
    root: PartsRoot,
    options: RunOptions,
    *,
    provider: Provider | None = None,
    cache: dict[str, str] | None = None,
    limiter: Any = None,
    shared: SharedStore | None = None,
    outbox: SharedCacheStore | None = None,
) -> ChunkResult:
    """Run one chunk through the runner's loop and write its parts; with ``shared``, cache
    lookups the chunk's snapshot cannot answer ask the team's shared store, and with
    ``outbox`` what the chunk asked the model is kept there for its caller to publish. A chunk
    never publishes on its own: every commit is a file each later lookup of the shared cache
    reads, so a shard publishes once for all its chunks and a Ray run once, from its driver,
    after its last merge (:func:`evalkit.run.shared_cache.publish_run_cache`)."""
    suite = _with_overrides(suite, options)
    run_id = manifest.run.run_id
    use_cache = manifest.run.cache
    work = [(cases[unit.case_id], unit.replay) for unit in chunk.units]
    sink = PartSink(cache if use_cache else None)
    # the runner and the judge see the sink, or the sink asking the team's cache after it
    team = None
    if shared is not None and use_cache:
        team = SharedCacheStore(  # duck-typed: a sink
            sink,
            shared,
            probe=endpoint_probe(suite),
            manifest=manifest,
        )
    store: Any = team or sink
    own = provider is None
    provider = provider or make_provider(suite.config.system)
    distinct = {case.id: case for case, _ in work}
    chunk_corpus = Corpus(suite.root, tuple(distinct.values()), {})
    judge = make_judge(suite, chunk_corpus, store, use_cache)
    try:
        counts = await execute_work(
            suite, store, run_id, manifest, work, replace(options, progress=False), provider,
            use_cache=use_cache, judge=judge, limiter=limiter,
        )  # fmt: skip
    finally:
        if own:
            await provider.aclose()
        if judge is not None:
            await judge.provider.aclose()
    attempt = sink.commit(root, run_id, chunk.chunk_id)
    if team is not None and outbox is not None:  # a shard publishes once, at its end
        outbox.cache_put(team.asked_entries())
    return ChunkResult(
        chunk_id=chunk.chunk_id,
        attempt=attempt,
        outputs=sink.rows,
        requests=counts.requests,
        retries=counts.retries,
        cache_hits=counts.cache_hits,
        shared_hits=team.shared_hits if team is not None else 0,
    )


def team_cache(suite: Suite, use_cache: bool) -> SharedStore | None:
    """The team's shared store whose response cache a chunk asks (opened once per shard or
    worker), or None: no ``store.shared`` in the suite, or the cache off (as
    :func:`evalkit.run.shared_cache.with_shared_cache` decides for a local run)."""
    uri = suite.config.store.get("shared")
    if not uri or not use_cache:
        return None
    from evalkit.run.shared_cache import open_team_store

    # unreachable: None, warned, and the chunk's cache goes on locally
    return open_team_store(uri, source=f"{suite.path}: store.shared")


def run_shard(
    suite: Suite,
    corpus: Corpus | CorpusFacts,
    options: RunOptions,
    *,
    shard: Shard,
    run_id: str,
    root: PartsRoot,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    report: Callable[[str], None] | None = None,
    split_rate: bool = True,
) -> ShardSummary:
    """Run shard ``K/N`` of run ``run_id`` into parts under ``root`` (no store is opened);
    ``report`` gets one line per earlier part set aside (default: printed to stderr). The
    shard paces itself to its share of ``rate_limit`` (:class:`ShardRate`; ``split_rate``
    False: the whole limit).

    ``corpus`` is the run's selected corpus: loaded cases, or facts (then only the share's
    cases are built, :meth:`CorpusFacts.load`).

    Raises:
        EvalkitError: parts of ``run_id`` from another configuration, corpus or shard count are
            already there, or a manifest there is not one.
        IndexMismatch: facts whose index entry proved stale while building the share (the
            entry is made again): read the corpus again and call again.
    """
    started = time.perf_counter()
    manifest, plan = _planned(suite, corpus, options, run_id, shard)
    mine = plan.units
    replays = manifest.replays
    for other in root.manifests(run_id):
        theirs = other.corpus.shares or {}
        if theirs.get("count") != shard.count:
            raise EvalkitError(
                f"{root}: run {run_id} already has parts of a run cut into "
                f"{theirs.get('count', 'no')} shards, this one into {shard.count}: every shard of "
                "one run uses the same N in --shard K/N (or use a new --run-id)"
            )
        if other.config_hash != manifest.config_hash:
            raise EvalkitError(
                f"{root}: run {run_id} already has parts of another configuration (config_hash "
                f"{other.config_hash[:12]}, this shard {manifest.config_hash[:12]}): "
                "use the same --config/--set/--prompt and selection in every shard, or a new "
                "--run-id"
            )
        if (other.corpus, other.replays) != (manifest.corpus, manifest.replays):
            raise EvalkitError(
                f"{root}: run {run_id} already has parts of another corpus or replays (corpus "
                f"hash {str(other.corpus.hash)[:12]}, {other.replays} replays; this shard "
                f"{str(manifest.corpus.hash)[:12]}, {manifest.replays}): the cases changed "
                "since; use a new --run-id"
            )
    # earlier parts checked first (a bad one set aside), then the run recorded: a shard run
    # again writes no second cases piece when its first one stands
    keys = RunKeys(run_id, _case_ids(corpus).get_column("case_id"), replays)
    done = committed_keys(root, manifest, keys, report or _to_stderr, mine, shard)
    del keys  # a million ids at 1M cases: the shard needs its own units alone
    writer = f"shard-{shard.index}-of-{shard.count}"
    recorded = {part.chunk_id for part in root.parts(run_id, "cases")}
    if isinstance(corpus.cases, FactRows):  # the share's rows gathered (no 250k ids looked up)
        share = ShareCases(corpus, set(), rows=plan.rows)
    else:
        share = ShareCases(corpus, {unit.case_id for unit in mine})
    record_run(root, manifest, writer, (), with_cases=False)
    chunks = make_chunks(mine, chunk_size)
    todo = {chunk.chunk_id: chunk for chunk in remaining(chunks, done)}
    skipped = len(mine) - sum(len(c.units) for c in todo.values())
    paced, rate = _shard_share(suite, shard, split_rate)  # the manifest keeps the whole limit
    shared = team_cache(suite, manifest.run.cache) if todo else None
    outbox = (
        None
        if shared is None
        else SharedCacheStore(
            EntryBuffer(),
            shared,
            probe=endpoint_probe(suite),
            manifest=manifest,
        )
    )
    results = []
    for whole in chunks:  # its cases built, recorded (a piece), then its requests: chunk-wise
        piece = piece_name(writer, whole.chunk_id)
        if whole.chunk_id not in todo and (writer in recorded or piece in recorded):
            continue
        cases = share.build(dict.fromkeys(unit.case_id for unit in whole.units))
        if writer not in recorded and piece not in recorded:
            root.write_cases(run_id, piece, cases)
        if (chunk := todo.get(whole.chunk_id)) is None:
            continue  # done earlier: only its cases piece was missing
        by_id = {case.id: case for case in cases}
        results.append(
            asyncio.run(
                run_chunk(paced, by_id, manifest, chunk, root, options, shared=shared,
                          outbox=outbox)
            )
        )  # fmt: skip
        del cases, by_id
        if outbox is not None and outbox.asked >= _batch_rows():
            _publish(outbox, run_id)
    if outbox is not None:
        _publish(outbox, run_id)
    return ShardSummary(
        run_id=run_id,
        shard=str(shard),
        units=len(mine),
        skipped=skipped,
        chunks=len(results),
        outputs=sum(r.outputs for r in results),
        requests=sum(r.requests for r in results),
        wall_s=round(time.perf_counter() - started, 3),
        rate_note=rate.note,
        shared_hits=sum(r.shared_hits for r in results),
        cases=share.size,
        corpus_cases=len(corpus.cases),
        built=corpus.counts.cases_built if isinstance(corpus, CorpusFacts) else len(corpus.cases),
        indexed=corpus.counts.cases_indexed if isinstance(corpus, CorpusFacts) else 0,
    )


@paused_gc()  # a quarter of a million units made, none freed: a collection would walk them
def _planned(
    suite: Suite, corpus: Corpus | CorpusFacts, options: RunOptions, run_id: str, shard: Shard
) -> tuple[RunManifest, SharePlan]:
    """The run's manifest (with its shares) and this shard's plan: its units, ordered, and
    its cases' rows (:func:`~evalkit.run.share_plan.plan_shares`: from the ids, hashes and
    digests as columns, only the shard's own units made)."""
    manifest = run_manifest(suite, corpus, options, run_id)
    plan = plan_shares(_case_ids(corpus), manifest.replays, shard)
    return manifest.with_corpus(shares=plan.shares), plan


def _case_ids(corpus: Corpus | CorpusFacts) -> pl.DataFrame:
    """Each case's id, hash and id digest (the units' order), once each, in corpus order: from
    the columns of facts read from the corpus summary (nothing made), else from the cases."""
    if isinstance(corpus.cases, FactRows):  # its ids are distinct (the summary's check)
        return corpus.cases.frame.select(pl.col("id").alias("case_id"), "hash", "digest")
    ids = {c.id: c.hash for c in corpus.cases}
    return pl.DataFrame(
        {"case_id": list(ids), "hash": list(ids.values()),
         "digest": [case_digest(i) for i in ids]},
        schema={"case_id": pl.String, "hash": pl.String, "digest": pl.String},
    )  # fmt: skip


def _publish(outbox: SharedCacheStore, run_id: str) -> None:
    """Publish what the outbox holds (warned, never raised, on failure) and empty it."""
    report_publish(outbox.publish(run_id))
    outbox.local.clear()
    outbox.forget_asked()


def _batch_rows() -> int:
    from evalkit.store.shared.store import CACHE_BATCH_ROWS  # only with a shared store

    return CACHE_BATCH_ROWS


def share_cases(corpus: Corpus | CorpusFacts, ids: set[str]) -> tuple[Case, ...]:
    """The cases of ``ids``: built from their files for facts (nothing else is), picked from
    loaded cases, in corpus order either way (a Ray plan's, built whole)."""
    if isinstance(corpus, CorpusFacts):
        return corpus.load(ids).cases
    return tuple(case for case in corpus.cases if case.id in ids)


def corpus_shares(cases: Sequence[Any], units: Sequence[Unit], count: int) -> dict[str, Any]:
    """The manifest's ``corpus.shares``: for each of ``count`` shards, the hash and size of the
    cases its units name (a case whose replays straddle two shards is in both), computed from
    the ids and case hashes alone, so every shard records the same.

    Examples:
        >>> from types import SimpleNamespace as Fact
        >>> from evalkit.run.shards import order_units
        >>> cases = [Fact(id=i, hash="h" + i) for i in "abcd"]
        >>> shares = corpus_shares(cases, order_units("abcd", 1), 2)
        >>> shares["count"], shares["n_cases"]
        (2, [2, 2])
    """
    if isinstance(cases, FactRows):  # columns: the pairs alone, no facts made
        hashes = dict(cases.frame.select("id", "hash").iter_rows())
    else:
        hashes = {case.id: case.hash for case in cases}
    digests, sizes = [], []
    for k in range(1, count + 1):
        ids = dict.fromkeys(unit.case_id for unit in shard_units(units, Shard(k, count)))
        digests.append(corpus_digest((case_id, hashes[case_id]) for case_id in ids))
        sizes.append(len(ids))
    return {"count": count, "hashes": digests, "n_cases": sizes}


def _shard_share(suite: Suite, shard: Shard, split: bool) -> tuple[Suite, ShardRate]:
    """The suite as this shard paces it: its share of the endpoint's rate limit."""
    limit = suite.config.rate_limit
    if limit is None:
        return suite, ShardRate.of(None, None, shard)
    rate = ShardRate.of(limit.requests_per_minute, limit.tokens_per_minute, shard, split)
    share = limit.model_copy(
        update={
            "requests_per_minute": rate.requests_per_minute,
            "tokens_per_minute": rate.tokens_per_minute,
        }
    )
    config = suite.config.model_copy(update={"rate_limit": share})
    return Suite(config, suite.path, suite.root, suite.system_prompt, suite.tools), rate


def committed_keys(
    root: PartsRoot,
    manifest: RunManifest,
    keys: RunKeys,
    report: Callable[[str], None],
    mine: Sequence[Unit] | None = None,
    shard: Shard | None = None,
) -> set[tuple[str, int]]:
    """(case_id, replay) of every committed chunk attempt of the run that the merge would
    take. Any other (and any cases part that is not the run's corpus) is set aside, each part
    reported in one line, so its chunk counts as not done and runs again.

    ``mine``: shard ``shard``'s own units (ordered): only parts that may hold some of them are
    read (chunks whose key range meets theirs, pieces of no other shard), not every other
    shard's (the merge checks those).
    """
    run_id = keys.run_id
    own = OwnParts(mine, shard)
    for part in root.parts(run_id, "cases"):
        if not own.cases(part.chunk_id):
            continue
        problem = None
        try:
            cases = root.read_frame(part)
            problem = keys.refusal("cases", cases) or (
                piece_problem(cases)
                if piece_shard(part.chunk_id)
                else corpus_problem(cases, manifest.corpus)
            )
        except PartRefused as refused:
            problem = refused.reason
        if problem:
            _set_aside(root, [part], problem, report)
    side = {
        table: {(p.chunk_id, p.attempt): p for p in root.parts(run_id, table)}
        for table in ("scores", "cache")
    }
    done: set[tuple[str, int]] = set()
    for part in root.parts(run_id, "outputs"):
        if not own.chunk(part.chunk_id):
            continue
        attempt = (part.chunk_id, part.attempt)
        scores, cache = side["scores"].get(attempt), side["cache"].get(attempt)
        try:
            answered = root.check_attempt(part, scores, cache, keys)
        except PartRefused as refused:
            whole = [p for p in (part, scores, cache) if p is not None]
            _set_aside(root, whole, f"{refused.part.table} part: {refused.reason}", report)
            continue
        done.update(answered.select("case_id", "replay").iter_rows())
    return done


def _set_aside(
    root: PartsRoot, parts: Sequence[PartInfo], reason: str, report: Callable[[str], None]
) -> None:
    for part in parts:
        aside = root.set_aside(part)
        report(
            f"{root.shown(part.path)}: set aside as {aside.rsplit('/', 1)[-1]} ({reason}); "
            "what it held counts as not done"
        )


def _to_stderr(line: str) -> None:
    print(f"evalkit: {line}", file=sys.stderr, flush=True)


def session_counts(results: Sequence[ChunkResult], wall_s: float, skipped: int) -> SessionCounts:
    return SessionCounts(
        requests=sum(r.requests for r in results),
        retries=sum(r.retries for r in results),
        cache_hits=sum(r.cache_hits for r in results),
        resumed_skipped=skipped,
        wall_s=wall_s,
    )


def _with_overrides(suite: Suite, options: RunOptions) -> Suite:
    updates = {
        k: v
        for k, v in {"replays": options.replays, "concurrency": options.concurrency}.items()
        if v is not None
    }
    if not updates:
        return suite
    config = suite.config.model_copy(update=updates)
    return Suite(config, suite.path, suite.root, suite.system_prompt, suite.tools)
