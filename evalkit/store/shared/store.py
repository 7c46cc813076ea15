"""The team's shared store: runs pushed from a local DuckDB store into Iceberg tables, and pulled
back (a run, or a suite's promoted baseline) into another local store, both idempotent.

A push commits one table at a time (Iceberg has no multi-table commit) in an order that makes
a half-finished push harmless: a run's cases, outputs, scorings, scores, flakes and response
cache entries first, its ``runs`` row after them, then the gate overrides and the gate
decisions naming the run (as base or candidate) and the human labels of its outputs, then the
pinned exams of its promotions (each exam's files, then its row sealing them), its promotions
last. A run is *published*
once its ``runs`` row is there, so a reader never sees a run whose rows are still coming, a
promotion never names a run that is not all there nor comes before its exam, and a push
killed midway is finished by pushing again (each table skips the rows it already holds:
:func:`append_new`).

A pull first verifies the run as one unit against the seal its push recorded
(:mod:`evalkit.store.shared.verify`), and refuses it in one line naming the run and the table
when rows were added or changed since; then it copies the run's rows, its overrides, the gate
decisions taken on it and the human labels of its outputs, and
with a baseline its suite's promotion history and the pinned exams of its trusted promotions
(verified against their seals: :func:`~evalkit.store.shared.verify.verify_exams`), into the
local store in one DuckDB
transaction, skipping the rows the local store already holds (of a label relabelled since,
the newest value wins, as a local re-import does).

Examples:
    >>> shared = open_shared_store("sqlite:///ci/catalog.db")        # doctest: +SKIP
    >>> shared.push_run(local, "nightly").added                         # doctest: +SKIP
    {'cases': 61, 'outputs': 61, ..., 'runs': 1, 'baselines': 1}
    >>> shared.pull(other_local, "support-bot").run_id                # doctest: +SKIP
    '20261203T061502-3f9a1c'
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from evalkit.errors import StoreError
from evalkit.provenance import current_writer
from evalkit.store.batches import BATCH_ROWS
from evalkit.store.shared.compaction import (
    COMPACT_AT_FILES,
    Compacted,
    compact_table,
    data_files,
    first_published,
    maintain_table,
)
from evalkit.store.shared.local_rows import local_batches, local_rows, seal_local
from evalkit.store.shared.pulling import STREAMED, copy_run, stage_run
from evalkit.store.shared.seals import SealBuilder
from evalkit.store.shared.staging import RunStage
from evalkit.store.shared.tables import (
    TABLES,
    append_batches,
    append_new,
    arrow_frame,
    load_table,
    open_catalog,
    scan,
    with_columns,
)
from evalkit.store.shared.trust_rows import (
    exams_of,
    publishable,
    trusted_promotions,
    untrusted_push,
)
from evalkit.store.shared.uri import StoreURI, parse_store_uri
from evalkit.store.shared.verify import SEAL_GROUP, sealed, verify_promotions

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import polars as pl
    import pyarrow as pa
    from pyiceberg.table import Table

    from evalkit.store.db import Store

P = ParamSpec("P")
R = TypeVar("R")

#: A run's tables in the order a push commits them: the ``runs`` row publishes the run, so it
#: comes after every table of the run's rows, and the promotions after it; a ``scorings`` row,
#: sealing its scores, after them. A promotion's pinned exam comes before the promotion: its
#: files, then the ``exams`` row sealing them.
PUSH_ORDER = (
    "cases",
    "outputs",
    "scores",
    "scoring_cases",
    "scorings",
    "flakes",
    "response_cache",
    "runs",
    "overrides",
    "gates",
    "human_labels",
    "exam_files",
    "exams",
    "baselines",
)
#: Entries per commit when a run publishes its new response-cache entries. A commit's fixed
#: cost (a data file, a manifest, the table's metadata, the catalog row) is far above an
#: entry's, and each commit adds a data file every later lookup reads (`python
#: bench/bench_shared_store.py --only publish` prints both): one commit carries an ordinary run
#: whole, and this bounds a big run's batch in memory.
CACHE_BATCH_ROWS = 20_000
#: Tries of the compaction a publish makes past COMPACT_AT_FILES: one that keeps losing to
#: other publishes gives up (said in the publish's line) rather than hold the run's end for
#: all of MAX_ATTEMPTS' backoff, since each of those publishes will try it again.
AUTO_ATTEMPTS = 3
#: What a pull copies (the response cache is read through instead: :meth:`cache_get`).
PULL_TABLES = tuple(t for t in PUSH_ORDER if t != "response_cache")


@dataclass(frozen=True)
class Pushed:
    """What a push added: rows per table (0 where the shared store had them all already) and
    how many commits lost to a concurrent writer and were retried."""

    run_id: str
    added: dict[str, int]
    conflicts: int
    #: Data files each of a run's large tables went in as (one per batch appended).
    batches: dict[str, int] = field(default_factory=dict)
    #: The most rows the push held at once, of a run's large tables: one batch's.
    largest_batch: int = 0
    #: Rows of the run's large tables the push read from the local store and sealed: those
    #: of the run and scorings the shared store did not publish yet (0: it had them all).
    sealed_rows: int = 0

    @property
    def rows(self) -> int:
        return sum(self.added.values())


@dataclass(frozen=True, kw_only=True)
class CachePublished:
    """What :meth:`SharedStore.cache_put` did: entries appended, entries the shared cache
    held already, commits made (one per batch that added a row) and commits that lost to a
    concurrent writer and were retried; the compaction it made when it left the cache past
    :data:`COMPACT_AT_FILES` data files (None: none), or why that failed (the entries are
    published all the same)."""

    added: int
    present: int
    commits: int
    conflicts: int
    compacted: Compacted | None = None
    compact_failure: str | None = None


@dataclass(frozen=True)
class Pulled:
    """What a pull copied into the local store: rows per table (0: it had them)."""

    run_id: str
    added: dict[str, int]
    baseline_of: str | None  # the suite whose promoted baseline this is, if pulled as one
    #: Rows of the run's large tables staged and checked (0: the local store had the run as
    #: an earlier pull verified it, with the seals the shared store still holds).
    staged_rows: int = 0

    @property
    def rows(self) -> int:
        return sum(self.added.values())


class SharedStoreUnreachable(StoreError):
    """The shared store, opened, failed to answer: its warehouse or catalog is unreachable
    (``cause``: the storage's error, one line, no credential)."""

    def __init__(self, shown: str, cause: str) -> None:
        super().__init__(f"{shown}: the shared store is unreachable ({cause})")
        self.cause = cause


def _unreachable_is_one_line(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` of a :class:`SharedStore`, whose failures to reach the warehouse or the
    catalog once it was opened (an S3 endpoint gone, a disk unmounted, PostgreSQL down) raise
    a one-line :class:`StoreError` naming the store, as one that cannot be opened does."""

    @functools.wraps(method)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            if not _is_unreachable(exc):
                raise
            from evalkit.redact import redact_known, strip_userinfo

            store = args[0]
            assert isinstance(store, SharedStore)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            cause = redact_known(strip_userinfo(text))[:300]
            raise SharedStoreUnreachable(store.uri.shown, cause) from None

    return wrapped


def _is_unreachable(exc: BaseException) -> bool:
    """An error of the storage or the catalog's connection, not of evalkit's own code."""
    if isinstance(exc, OSError):  # pyarrow's S3 and local files, sockets
        return True
    return type(exc).__name__ in {"OperationalError", "InterfaceError"}  # SQLAlchemy's


def open_shared_store(uri: str | StoreURI, *, source: str = "shared store") -> SharedStore:
    """The shared store at ``uri`` (``sqlite:///PATH?warehouse=...``), catalog opened."""
    parsed = uri if isinstance(uri, StoreURI) else parse_store_uri(uri, source=source)
    return SharedStore(parsed)


class SharedStore:
    """Runs, promotions and the response cache in Iceberg tables behind one SQL catalog."""

    def __init__(self, uri: StoreURI) -> None:
        self.uri = uri
        self._catalog = open_catalog(uri)
        self._tables: dict[str, Table] = {}
        #: Why this process stopped asking the store for cache entries (set by
        #: :class:`evalkit.run.shared_cache.SharedCacheStore` when a lookup failed), or None; push,
        #: pull and promotions do not read it: they raise on any failure.
        self.lost: str | None = None
        #: The most rows the last pull held at once of a run's large tables (one batch's).
        self.largest_batch = 0
        #: Rows of a run's large tables the last pull staged and checked (0: none, the run
        #: being in the local store with the seals the shared store holds).
        self.staged_rows = 0

    def _table(self, name: str, *, create: bool = False) -> Table | None:
        table = self._tables.get(name)
        if table is None:
            table = load_table(self._catalog, TABLES[name], create=create)
            if table is None:
                return None
            self._tables[name] = table
        else:
            table = self._tables[name] = table.refresh()
        return table

    def _read(self, name: str, column: str, values: Iterable[str]) -> pa.Table:
        table = self._table(name)
        wanted = {v for v in values if v is not None}
        if table is None or not wanted:
            return TABLES[name].arrow.empty_table()
        return with_columns(scan(table, column, wanted), TABLES[name])

    # -- push -------------------------------------------------------------------------------

    @_unreachable_is_one_line
    def push_run(
        self, local: Store, ref: str, *, cache: bool = True, batch_rows: int = BATCH_ROWS
    ) -> Pushed:
        """Publish run ``ref`` of ``local`` (its rows, flakes of its configuration, its
        response cache entries unless not ``cache``, its promotions with their pinned exams);
        rows already shared are skipped. (``evalkit push`` publishes the cache entries through
        :func:`evalkit.run.shared_cache.publish_stored_cache`, which keys them by what the
        endpoint serves and records their publisher.)

        Raises:
            StoreError: the run is not complete (a running or failed run may still grow, and
                a published run's rows are published once).
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        run_id = local.resolve_run(ref)
        status = local.run_status(run_id)
        if status != "complete":
            raise StoreError(
                f"run {run_id} is {status}: only a complete run is pushed (finish it with "
                f"`evalkit run --resume {run_id}`)"
            )
        added: dict[str, int] = {}
        batches: dict[str, int] = {}
        largest = conflicts = 0
        context = current_writer()
        # the promotions this push may publish, and so the exams pinned with them (trust_rows)
        promotions = publishable("baselines", local_rows(local, "baselines", run_id), context)
        exams = exams_of(local_rows(local, "exams", run_id), promotions)
        small: dict[str, pa.Table] = {}
        for name in PUSH_ORDER:
            if name in STREAMED or (name == "response_cache" and not cache):
                continue
            rows = publishable(name, local_rows(local, name, run_id), context)  # trust_rows
            if name in ("exams", "exam_files"):
                wanted = pa.array(exams["exam_id"].to_pylist(), pa.string())
                rows = rows.filter(pc.is_in(rows["exam_id"], value_set=wanted))
            small[name] = rows
        scoring_ids = set(small["scorings"].column("scoring_id").to_pylist())
        groups = {
            "cases": {run_id}, "outputs": {run_id}, "scores": scoring_ids,
            "scoring_cases": scoring_ids,
        }  # fmt: skip
        # A seal goes into the runs or scorings row that publishes its rows; one the shared
        # store holds already is never appended again (append_new), so only the groups whose
        # sealing row is new are read and sealed: a push of a run the store has reads none.
        unsealed = self._unpublished(run_id, scoring_ids)
        small["runs"] = small["runs"].filter(pc.is_in(small["runs"]["run_id"], unsealed))
        small["scorings"] = small["scorings"].filter(
            pc.is_in(small["scorings"]["scoring_id"], unsealed)
        )
        seals, counts = seal_local(local, run_id, STREAMED, unsealed, batch_rows)
        with SealBuilder(SEAL_GROUP["exam_files"]) as files:
            files.add(small["exam_files"])
            seals["exam_files"] = files.seals()
        for name in PUSH_ORDER:
            if name == "response_cache" and not cache:
                continue
            table = self._table(name, create=True)
            assert table is not None
            if name in STREAMED:
                result = append_batches(
                    table, TABLES[name],
                    lambda name=name: local_batches(local, name, run_id, batch_rows),  # type: ignore[misc]
                    groups[name], counts[name],
                )  # fmt: skip
                batches[name] = result.batches
                largest = max(largest, result.largest_batch)
            else:
                result = append_new(table, TABLES[name], sealed(name, small[name], seals))
            added[name] = result.added
            conflicts += result.conflicts
            maintain_table(table, TABLES[name])  # compaction.py: compact, expire old snapshots
        sealed_rows = sum(counts.values())
        return Pushed(run_id, added, conflicts, batches, largest, sealed_rows=sealed_rows)

    def _unpublished(self, run_id: str, scoring_ids: set[str]) -> pa.Array:
        """Of the run and its scorings, the ids whose sealing row (``runs``, ``scorings``) the
        shared store lacks: those a push seals."""
        import pyarrow as pa

        held = self.run_ids([run_id])
        held |= set(self._read("scorings", "scoring_id", scoring_ids)["scoring_id"].to_pylist())
        return pa.array(sorted(({run_id} | scoring_ids) - held), pa.string())

    @_unreachable_is_one_line
    def promote(
        self, suite: str, run_id: str, who: str, reason: str, *, tier: str | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Make the published run ``run_id`` the baseline of ``suite`` (``tier``): one
        appended row with who, why, when, the pinned policy and who wrote it from where;
        earlier ones stay (history).

        Raises:
            StoreError: the run is not published, no name or reason is given, or this is a
                pull-request job (it publishes runs, never promotions).
        """
        import json

        import pyarrow as pa

        if not who.strip() or not reason.strip():
            raise StoreError("promoting a baseline needs a name (--who) and a reason (--reason)")
        writer = current_writer(who)
        if (why := untrusted_push(writer)) is not None:
            raise StoreError(f"{self.uri.shown}: refusing to promote: {why}")
        if run_id not in self.run_ids([run_id]):
            raise StoreError(f"{self.uri.shown}: run {run_id} is not pushed; push it first")
        with RunStage() as stage:  # a promotion names a verified run: raises when it is not
            stage_run(self, run_id, stage)
        row = {
            "suite": suite,
            "run_id": run_id,
            "who": who.strip(),
            "reason": reason.strip(),
            "promoted_at": dt.datetime.now(dt.UTC),
            "tier": tier,
            "policy": json.dumps(dict(policy), sort_keys=True) if policy is not None else None,
            "written_by": writer.to_json(),
        }
        table = self._table("baselines", create=True)
        assert table is not None
        append_new(
            table, TABLES["baselines"], pa.Table.from_pylist([row], TABLES["baselines"].arrow)
        )

    # -- reads ------------------------------------------------------------------------------

    @_unreachable_is_one_line
    def runs(self) -> pl.DataFrame:
        """Every published run (``runs`` rows), oldest first."""

        table = self._table("runs")
        if table is None or table.current_snapshot() is None:
            return arrow_frame(TABLES["runs"].arrow.empty_table())
        return arrow_frame(table.scan().to_arrow()).sort("created_at")

    @_unreachable_is_one_line
    def run_ids(self, candidates: Iterable[str]) -> set[str]:
        """Which of ``candidates`` are published runs."""
        return set(self._read("runs", "run_id", candidates).column("run_id").to_pylist())

    @_unreachable_is_one_line
    def resolve_run(self, ref: str) -> str:
        """A published run id from an id, a label (its newest complete run) or an id prefix.

        Raises:
            StoreError: no published run matches, or a prefix matches several.
        """
        if self.run_ids([ref]):
            return ref
        runs = self.runs()
        labelled = runs.filter(runs["label"] == ref.removesuffix("@latest"))
        if labelled.height:
            complete = labelled.filter(labelled["status"] == "complete")
            return str((complete if complete.height else labelled)["run_id"][-1])
        prefixed = runs.filter(runs["run_id"].str.starts_with(ref))
        if prefixed.height == 1:
            return str(prefixed["run_id"][0])
        if prefixed.height > 1:
            raise StoreError(f"{self.uri.shown}: run {ref!r} is ambiguous: {prefixed.height} runs")
        raise StoreError(f"{self.uri.shown}: no published run or suite baseline {ref!r}")

    @_unreachable_is_one_line
    def baselines(self, suite: str) -> pl.DataFrame:
        """Every promotion of ``suite``, newest first (``suite, tier, run_id, who, reason,
        promoted_at, policy``)."""

        rows = arrow_frame(self._read("baselines", "suite", [suite]))
        return rows.sort("promoted_at", descending=True)

    def current_baseline(self, suite: str, tier: str | None = None) -> str | None:
        """The run of the newest *trusted* promotion of ``suite`` (``tier``; None: the full
        suite): `trust_rows.trusted_promotions`, from where this process runs."""
        rows = self.baselines(suite)
        rows = rows.filter(rows["tier"].is_null() if tier is None else rows["tier"] == tier)
        rows = trusted_promotions(rows)
        return str(rows["run_id"][0]) if rows.height else None

    @_unreachable_is_one_line
    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        """The shared response cache's entries for ``keys`` (those it has).

        A key holds one row when every writer went through :meth:`cache_put` or a push; one
        held twice (a table an older evalkit wrote, with pyiceberg's own retry, or rows
        appended by hand) answers its first-published row (earliest ``created_at``, then
        the smallest response), whatever order the scan reads the data files in.
        """
        import pyarrow.compute as pc

        rows = self._read("response_cache", "cache_key", keys)
        if rows.num_rows > pc.count_distinct(rows.column("cache_key")).as_py():
            rows = first_published(rows)
        return dict(
            zip(rows.column("cache_key").to_pylist(), rows.column("response").to_pylist(),
                strict=True)
        )  # fmt: skip

    @_unreachable_is_one_line
    def cache_get_published(self, keys: Iterable[str]) -> dict[str, tuple[str, str | None]]:
        """As :meth:`cache_get`, each response with its publisher record (JSON; None: an
        entry that records none)."""
        import pyarrow.compute as pc

        rows = self._read("response_cache", "cache_key", keys)
        if rows.num_rows > pc.count_distinct(rows.column("cache_key")).as_py():
            rows = first_published(rows)
        return {
            key: (response, publisher)
            for key, response, publisher in zip(
                rows.column("cache_key").to_pylist(), rows.column("response").to_pylist(),
                rows.column("publisher").to_pylist(), strict=True,
            )
        }  # fmt: skip

    @_unreachable_is_one_line
    def cache_put(
        self,
        entries: Mapping[str, str],
        *,
        batch_rows: int = CACHE_BATCH_ROWS,
        publisher: str | None = None,
    ) -> CachePublished:
        """Append the response-cache entries whose key the shared cache lacks, in commits of
        at most ``batch_rows`` (a run's new answers, published as it ends). Idempotent: a key
        there already, or committed meanwhile by another job, is skipped
        (:func:`append_new`). Responses are scrubbed of registered keys, as the local
        store's are. ``publisher`` (JSON) is recorded with each entry: who published it and
        what its endpoint said it was (:mod:`evalkit.run.cache_provenance`).

        Raises:
            StoreError: the commits kept conflicting; anything the catalog or the warehouse
                raises (unreachable) propagates.
        """
        import pyarrow as pa

        from evalkit.store.scrub import scrub_json

        spec = TABLES["response_cache"]
        keys = list(entries)
        added = present = commits = conflicts = 0
        if not keys:
            return CachePublished(added=0, present=0, commits=0, conflicts=0)
        table = self._table("response_cache", create=True)
        assert table is not None
        now = dt.datetime.now(dt.UTC)
        for start in range(0, len(keys), batch_rows):
            batch = keys[start : start + batch_rows]
            rows = pa.table(
                {
                    "cache_key": batch,
                    "response": [scrub_json(entries[k]) for k in batch],
                    "created_at": [now] * len(batch),
                    "publisher": [publisher] * len(batch),
                },
                schema=spec.arrow,
            )
            result = append_new(table, spec, rows)
            added, present = added + result.added, present + result.present
            commits += result.added > 0
            conflicts += result.conflicts
        compacted, failure = self._compact_if_due(table)
        return CachePublished(
            added=added,
            present=present,
            commits=commits,
            conflicts=conflicts,
            compacted=compacted,
            compact_failure=failure,
        )

    def _compact_if_due(self, table: Table) -> tuple[Compacted | None, str | None]:
        """Compact the cache when it holds more than :data:`COMPACT_AT_FILES` data files (read
        from the snapshot this publish committed or read). Never raises: the entries are in."""
        if data_files(table) <= COMPACT_AT_FILES:
            return None, None
        try:
            done = compact_table(
                table, TABLES["response_cache"], above=COMPACT_AT_FILES, attempts=AUTO_ATTEMPTS
            )
        except Exception as exc:
            from evalkit.redact import redact_known, strip_userinfo

            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return None, f"compacting it failed ({redact_known(strip_userinfo(text))[:300]})"
        return (done if done.compacted else None), None

    @_unreachable_is_one_line
    def compact_cache(self) -> Compacted:
        """Rewrite the shared response cache as one data file (each key's first-published
        row), expiring its older snapshots: ``evalkit cache compact``. A cache of one file and
        no key twice is left as it is.

        Raises:
            StoreError: the commit kept conflicting with publishes.
        """
        if self._table("response_cache") is None:
            return Compacted(
                files_before=0,
                files_after=0,
                rows_before=0,
                rows_after=0,
                conflicts=0,
                expired_snapshots=0,
                wall_s=0.0,
            )
        table = self._table("response_cache", create=True)  # with the columns added since
        assert table is not None
        return compact_table(table, TABLES["response_cache"], above=1)

    # -- pull -------------------------------------------------------------------------------

    @_unreachable_is_one_line
    def pull(self, local: Store, ref: str, *, tier: str | None = None) -> Pulled:
        """Copy a published run into ``local``: ``ref`` is a run id, label or prefix, or a
        suite name (its promoted baseline, with the suite's promotion history).

        Raises:
            StoreError: ``ref`` names no published run and no suite with a baseline.
        """
        suite = None
        baseline = self.current_baseline(ref, tier)
        if baseline is not None:
            suite, run_id = ref, baseline
            promotions = self.baselines(suite)  # each must name a published run
            verify_promotions(promotions, self.run_ids(promotions["run_id"].to_list()))
        else:
            run_id = self.resolve_run(ref)
        added = copy_run(self, local, run_id, suite, PULL_TABLES)
        return Pulled(run_id, added, suite, staged_rows=self.staged_rows)
