"""The shared store's Iceberg tables and the one way rows get into them: an append that commits
only rows whose key the table does not hold yet, retried on a concurrent commit.

Each evalkit table becomes one Iceberg table of the same name and columns (read from the
DuckDB DDL in :mod:`evalkit.store.schema`, so the two never drift) in the catalog namespace
``evalkit``. Iceberg commits one table at a time, optimistically: a commit names the snapshot
it was built on and the catalog refuses it (``CommitFailedException``) when another writer
committed since. pyiceberg would then rebase the append onto the new snapshot by itself; our
tables switch that off (``commit.retry.num-retries = 0``) because a rebased append would skip
the duplicate check: :func:`append_new` re-reads the keys on the fresh snapshot and appends
only what is still missing, so two jobs pushing the same rows at once add them once.

Measured (two processes, 50 appends of 10 rows each to one table, SQLite catalog on a local
directory): with pyiceberg's own retries all 1,000 rows land; with them off the 100 commits
raised ``CommitFailedException`` 54 times between them, and all 1,000 rows landed after the
retry here.

Examples:
    >>> TABLES["outputs"].key, TABLES["baselines"].key
    (('run_id',), ('suite', 'tier', 'run_id', 'promoted_at'))
    >>> str(TABLES["cases"].arrow.field("tags").type)
    'list<item: string>'
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import StoreError
from evalkit.store.schema import known_tables

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

    from evalkit.store.shared.uri import StoreURI

NAMESPACE = "evalkit"
#: How many times a conflicting commit is tried again before the push gives up (with jittered
#: backoff doubling up to a ceiling): enough for a CI matrix's jobs pushing at once to get
#: through one by one, while a store that never accepts the commit still fails in bounded time.
MAX_ATTEMPTS = 40
#: Up to this many key values, a duplicate check filters its scan by them (an Iceberg ``In``);
#: above, it reads the key columns whole (:func:`existing_keys`).
IN_FILTER_MAX = 256
#: The dedupe key of each shared table: a push adds a row only when no row with its key is
#: there. A run's rows are keyed by the run (each table's rows of a run land in one commit, so
#: a table holds all of them or none); a rescoring's by its scoring id.
_KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "cases": ("run_id",),
    "outputs": ("run_id",),
    "scorings": ("scoring_id",),
    "scores": ("scoring_id",),
    "scoring_cases": ("scoring_id",),
    "baselines": ("suite", "tier", "run_id", "promoted_at"),
    "flakes": ("config_hash", "measured_at"),
    "response_cache": ("cache_key",),
    # one row per override made (a pair can be overridden more than once, each kept)
    "overrides": ("cand_run_id", "base_run_id", "who", "created_at"),
    # one row per label imported: a relabelled output is a newer row of the same
    # (case_id, output_hash, rater, scorer), and a pull keeps the newest (local_rows)
    "human_labels": ("case_id", "output_hash", "rater", "scorer", "imported_at"),
    # a promotion's pinned exam: its row, and its files (which land in one commit)
    "exams": ("exam_id",),
    "exam_files": ("exam_id",),
    # one row per gate decision taken against a run (evalkit.store.gate_log): the looks
    # at a baseline's exam that `evalkit history` counts, from whichever job took them
    "gates": ("gate_id",),
}
_UNIQUE = frozenset(
    {
        "runs",
        "scorings",
        "baselines",
        "response_cache",
        "overrides",
        "human_labels",
        "exams",
        "gates",
    }
)
#: Columns only the shared tables have: the seal a push records with the rows that publish a
#: run or a scoring (:mod:`evalkit.store.shared.verify`), which a pull checks and drops, and
#: the publisher of a response-cache entry. An ``exams`` row seals its exam's files.
SHARED_ONLY: dict[str, dict[str, str]] = {
    "runs": {"published": "VARCHAR"},
    "scorings": {"published": "VARCHAR"},
    "exams": {"published": "VARCHAR"},
    # who published a cache entry and what its endpoint said it was (JSON:
    # evalkit.run.cache_provenance.Publisher); a consumer takes only entries it can trust
    "response_cache": {"publisher": "VARCHAR"},
}


@dataclass(frozen=True)
class SharedTable:
    """One shared table: its name, its columns (DuckDB type names) and its dedupe key, which
    names one row (``unique``) or a group of rows that land together (a run's outputs)."""

    name: str
    columns: dict[str, str]
    key: tuple[str, ...]
    unique: bool

    @property
    def arrow(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([(c, _arrow_type(t)) for c, t in self.columns.items()])


def arrow_frame(table: pa.Table) -> pl.DataFrame:
    """``table`` as a Polars frame (``pl.from_arrow`` is typed frame-or-series; a table is a
    frame)."""
    import polars as pl

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _arrow_type(duckdb_type: str) -> pa.DataType:
    import pyarrow as pa

    types = {
        "VARCHAR": pa.string(),
        "INTEGER": pa.int32(),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "BOOLEAN": pa.bool_(),
        "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
        "VARCHAR[]": pa.list_(pa.string()),
        "BLOB": pa.binary(),
    }
    return types[duckdb_type]


def _tables() -> dict[str, SharedTable]:
    known = known_tables()
    return {
        name: SharedTable(
            name,
            {**known[name][0], **known[name][1], **SHARED_ONLY.get(name, {})},
            key,
            name in _UNIQUE,
        )
        for name, key in _KEYS.items()
    }


TABLES = _tables()


@dataclass(frozen=True, kw_only=True)
class Appended:
    """What one :func:`append_new` did: rows added, rows already there, commits it lost."""

    table: str
    added: int
    present: int
    conflicts: int
    batches: int = 0  # data files appended batch by batch (append_batches; 0: one whole table)
    largest_batch: int = 0  # the most rows appended at once


def open_catalog(uri: StoreURI) -> SqlCatalog:
    """The SQL catalog of ``uri``, with the ``evalkit`` namespace made if missing."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError:
        raise StoreError(
            f"{uri.shown}: a shared store needs pyiceberg: pip install 'evalkit-gate[shared]'"
        ) from None

    if uri.catalog.startswith("sqlite:///"):  # SQLite makes the file, not its directory
        try:
            Path(uri.catalog.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{uri.shown}: cannot make the catalog's directory: {exc}") from None
    catalog = _retried(
        lambda: SqlCatalog(NAMESPACE, uri=uri.catalog, warehouse=uri.warehouse, **uri.settings),
        f"{uri.shown}: cannot open the catalog",
    )
    _retried(
        lambda: catalog.create_namespace_if_not_exists(NAMESPACE),
        f"{uri.shown}: cannot create namespace",
    )
    return catalog


def load_table(catalog: SqlCatalog, table: SharedTable, *, create: bool) -> Table | None:
    """The Iceberg table for ``table``; made when ``create`` (None when missing and not),
    with columns evalkit added since it was made added to it."""
    from pyiceberg.exceptions import NoSuchTableError

    identifier = f"{NAMESPACE}.{table.name}"
    try:
        found = catalog.load_table(identifier)
    except NoSuchTableError:
        if not create:
            return None
        found = _retried(
            lambda: catalog.create_table_if_not_exists(
                identifier, schema=table.arrow, properties={"commit.retry.num-retries": "0"}
            ),
            f"cannot create shared table {table.name}",
        )
    missing = set(table.columns) - {f.name for f in found.schema().fields}
    if missing and create:
        with found.update_schema() as update:
            update.union_by_name(table.arrow)
        found = found.refresh()
    return found


def _conflicted(exc: Exception) -> bool:
    """Whether a failed commit lost to another writer (and is worth trying again)."""
    from pyiceberg.exceptions import CommitFailedException

    return isinstance(exc, CommitFailedException) or is_busy(exc)


def _kept_conflicting(spec: SharedTable) -> StoreError:
    return StoreError(
        f"shared table {spec.name}: {MAX_ATTEMPTS} commits in a row conflicted with other "
        "writers; push again"
    )


def append_new(table: Table, spec: SharedTable, rows: pa.Table) -> Appended:
    """Append the rows of ``rows`` whose key ``table`` lacks, in one commit; on a concurrent
    commit, re-read the keys and try again. Returns what was added.

    Raises:
        StoreError: the commit kept conflicting for :data:`MAX_ATTEMPTS` tries.
    """
    rows = rows.select(list(spec.columns)).cast(spec.arrow)
    wanted = _keys(rows, spec.key)
    conflicts = 0
    for attempt in range(MAX_ATTEMPTS):
        present = existing_keys(table, spec, wanted)
        fresh = [i for i, k in enumerate(wanted) if k not in present]
        if spec.unique:
            fresh = _first_of_each(fresh, wanted)
        if not fresh:
            return Appended(table=spec.name, added=0, present=len(wanted), conflicts=conflicts)
        try:
            table.append(rows.take(fresh))
            return Appended(
                table=spec.name,
                added=len(fresh),
                present=len(wanted) - len(fresh),
                conflicts=conflicts,
            )
        except Exception as exc:
            if not _conflicted(exc):
                raise
            conflicts += 1
            backoff(attempt)
            table = table.refresh()
    raise _kept_conflicting(spec)


def append_batches(
    table: Table,
    spec: SharedTable,
    batches: Callable[[], Iterable[pa.RecordBatch]],
    keys: set[str],
    rows: int,
) -> Appended:
    """Append the rows of ``batches()`` (``rows`` of them, grouped by the values ``keys`` of
    the key's first column: a run's outputs, a scoring's scores) whose group ``table`` lacks,
    batch by batch but in one commit: one snapshot holding them all, or none. On a concurrent
    commit the groups are read again and the batches made again (``batches`` is called once
    per try). Memory holds one batch at a time, however many rows the groups have.

    Raises:
        StoreError: the commit kept conflicting for :data:`MAX_ATTEMPTS` tries.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    column = spec.key[0]
    conflicts = 0
    for attempt in range(MAX_ATTEMPTS):
        present = {k[0] for k in existing_keys(table, spec, [(k,) for k in keys])}
        fresh = pa.array(sorted(keys - present), spec.arrow.field(column).type)
        if not len(fresh):
            return Appended(table=spec.name, added=0, present=rows, conflicts=conflicts)
        added = count = largest = 0
        try:
            with table.transaction() as tx:
                for batch in batches():
                    kept = batch.filter(pc.is_in(batch.column(column), value_set=fresh))
                    if not kept.num_rows:
                        continue
                    tx.append(pa.Table.from_batches([kept]).select(list(spec.columns)))
                    added, count = added + kept.num_rows, count + 1
                    largest = max(largest, kept.num_rows)
            return Appended(
                table=spec.name,
                added=added,
                present=rows - added,
                conflicts=conflicts,
                batches=count,
                largest_batch=largest,
            )
        except Exception as exc:
            if not _conflicted(exc):
                raise
            conflicts += 1
        backoff(attempt)
        table = table.refresh()
    raise _kept_conflicting(spec)


def planned_files(table: Table, column: str, values: set[str]) -> list[list[Any]]:
    """The files a scan of ``table``'s rows whose ``column`` is one of ``values`` reads, read
    from its manifests alone: each data file's path and rows and its delete files' paths,
    sorted. Data files are never rewritten in place: while this list is the same, so are the
    rows the scan returns."""
    if not values or table.current_snapshot() is None:
        return []
    found = table.scan(row_filter=_in_filter(column, values))
    return sorted(_file_entry(task) for task in found.plan_files())


def _file_entry(task: Any) -> list[Any]:
    deletes = sorted(str(d.file_path) for d in task.delete_files)
    return [str(task.file.file_path), int(task.file.record_count), deletes]


def scan_batches(
    table: Table, column: str, values: set[str], planned: list[list[Any]] | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` whose ``column`` is one of ``values`` (a few: a run's id, its
    scorings'), as record batches read one data file at a time; ``planned`` (a list) gets
    the files read, as :func:`planned_files` lists them.

    File by file here: pyiceberg's own batch reader hands every planned file to its thread
    pool at once and keeps each file's batches until they are read, so a consumer slower
    than the pool (a pull staging a run) would hold most of the run.
    """
    from pyiceberg.io.pyarrow import ArrowScan

    if not values or table.current_snapshot() is None:
        return
    found = table.scan(row_filter=_in_filter(column, values))
    reader = ArrowScan(
        found.table_metadata, found.io, found.projection(), found.row_filter,
        found.case_sensitive, found.limit,
    )  # fmt: skip
    tasks = list(found.plan_files())
    if planned is not None:
        planned.extend(sorted(_file_entry(task) for task in tasks))
    for task in tasks:
        yield from reader.to_record_batches([task])


def _in_filter(column: str, values: set[Any]) -> BooleanExpression:
    """The scan filter ``column IN values``."""
    from pyiceberg.expressions import In

    # In(term, literals) as pyiceberg documents it; its pydantic fields type it keyword-only.
    return In(column, values)  # type: ignore[call-arg, arg-type]


def existing_keys(table: Table, spec: SharedTable, keys: list[tuple[Any, ...]]) -> set[tuple]:
    """Which of ``keys`` ``table`` holds (read on its current snapshot).

    A few keys (a run's id) filter the scan, which skips the data files whose bounds leave
    them out; many (a run's cache keys) read the key columns whole and match them in Arrow:
    pyiceberg binds an ``In`` filter literal by literal (most of a large publish's time, when
    it filtered by all of them), and random sha256 keys skip no file anyway.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not keys or table.current_snapshot() is None:
        return set()
    first = {k[0] for k in keys if k[0] is not None}
    if not first:
        return set()
    if len(first) <= IN_FILTER_MAX:
        found = table.scan(row_filter=_in_filter(spec.key[0], first), selected_fields=spec.key)
        return set(_keys(found.to_arrow(), spec.key))
    whole = table.scan(selected_fields=spec.key).to_arrow()
    wanted = pa.array(sorted(first), whole.schema.field(spec.key[0]).type)
    found = whole.filter(pc.is_in(whole.column(spec.key[0]), value_set=wanted))
    return set(_keys(found, spec.key))


def scan(table: Table, column: str, values: set[str]) -> pa.Table:
    """The rows of ``table`` whose ``column`` is one of ``values`` (many values: the whole
    table read and matched in Arrow, as :func:`existing_keys` does)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not values or table.current_snapshot() is None:
        return table.schema().as_arrow().empty_table()
    if len(values) <= IN_FILTER_MAX:
        return table.scan(row_filter=_in_filter(column, values)).to_arrow()
    whole = table.scan().to_arrow()
    wanted = pa.array(sorted(values), whole.schema.field(column).type)
    return whole.filter(pc.is_in(whole.column(column), value_set=wanted))


def with_columns(rows: pa.Table, spec: SharedTable) -> pa.Table:
    """``rows`` as ``spec``'s columns and types: a column the shared table lacks (made by an
    older evalkit, never pushed to since) read as nulls."""
    import pyarrow as pa

    for column in spec.columns:
        if column not in rows.column_names:
            rows = rows.append_column(
                column, pa.nulls(rows.num_rows, spec.arrow.field(column).type)
            )
    return rows.select(list(spec.columns)).cast(spec.arrow)


def _keys(rows: pa.Table, key: tuple[str, ...]) -> list[tuple[Any, ...]]:
    columns = [rows.column(name).to_pylist() for name in key]
    return list(zip(*columns, strict=True)) if columns else []


def _first_of_each(indices: list[int], keys: list[tuple[Any, ...]]) -> list[int]:
    """``indices`` with each key once: a local cache holding one key twice adds it once."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for i in indices:
        if keys[i] not in seen:
            seen.add(keys[i])
            kept.append(i)
    return kept


def is_busy(exc: Exception) -> bool:
    """SQLite answers a writer that waited too long for another's lock with "database is
    locked": a conflict to retry, not a failure."""
    return "database is locked" in str(exc)


def backoff(attempt: int) -> None:
    wait = min(0.02 * 2**attempt, 1.0)
    time.sleep(wait * random.uniform(0.5, 1.0))


def _retried(call: Callable[[], Any], what: str) -> Any:
    """``call``, tried again while another process holds the SQLite catalog or makes the same
    namespace or table at the same moment.

    pyiceberg's SQL catalog checks that a namespace is missing, then inserts it: a process that
    inserts between the two makes the other's insert break the catalog's unique key (an
    ``IntegrityError`` from SQLite and PostgreSQL alike), which the next try reads as present.
    """
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
    from sqlalchemy.exc import IntegrityError

    for attempt in range(MAX_ATTEMPTS):
        try:
            return call()
        except (NamespaceAlreadyExistsError, TableAlreadyExistsError, IntegrityError):
            backoff(attempt)
        except Exception as exc:
            if not is_busy(exc) and "already exists" not in str(exc):
                raise StoreError(f"{what}: {str(exc).splitlines()[0]}") from None
            backoff(attempt)
    raise StoreError(f"{what}: the catalog stayed busy")
