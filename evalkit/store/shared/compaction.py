"""Compaction of the shared response cache: every data file of the table rewritten as one, so a
lookup reads one file however many runs have published; and the upkeep of every shared table
after a push (:func:`maintain_table`): compacted past ``COMPACT_AT_FILES`` data files, its older
snapshots expired once it holds more than ``KEEP_SNAPSHOTS`` (retention: the current snapshot,
plus at most ``KEEP_SNAPSHOTS - 1`` newer-than-the-last-expiry ones; expired snapshots' files
stay in the warehouse, as below, so a reader planning on one never finds a file gone).

Every publish is one Iceberg commit and at least one data file, and a lookup of random sha256
keys reads the key column of every file (no file's bounds leave a key out): the files grow
with the team's commits and every lookup with them. Compaction reads the table on its current
snapshot, keeps each key's first-published row (:func:`first_published`, the rule a lookup
applies), and commits one overwrite (pyiceberg's ``Table.overwrite``: a delete of every data
file of that snapshot and the append of the rows read, in one transaction). The commit names
the snapshot it read; a publish that committed meanwhile makes the catalog refuse it, and the
compaction reads the new snapshot and tries again (our tables never let pyiceberg rebase a
commit: ``commit.retry.num-retries = 0``, :mod:`evalkit.store.shared.tables`), so a row
published during a compaction is never lost and never doubled. A publish that loses to the
compaction re-reads the keys on the compacted snapshot, as after any commit
(:func:`~evalkit.store.shared.tables.append_new`).

A compaction killed midway either never committed (the table is as it was; the data file it
wrote is an orphan no snapshot names) or did (the table is compacted): Iceberg's commit is one
compare-and-swap of the catalog's pointer, so there is no third state.

Old snapshots: once compacted, every snapshot but the current one is expired
(pyiceberg's ``expire_snapshots``), which keeps the table's metadata small (each commit
rewrites it whole, one entry per snapshot). pyiceberg 0.12 removes them from the metadata only:
their data and manifest files stay in the warehouse (it has no orphan-file removal), so no
reader that planned a scan on an older snapshot ever finds a file gone; a warehouse's disk use
grows by one copy of the cache per compaction until someone deletes the files no snapshot
names.

Examples:
    >>> import pyarrow as pa
    >>> rows = pa.table({"cache_key": ["b", "a", "b"], "response": ["late", "x", "early"],
    ...                  "created_at": [2, 1, 1]})
    >>> first_published(rows).to_pylist()
    [{'cache_key': 'a', 'response': 'x', 'created_at': 1}, {'cache_key': 'b', 'response': 'early', 'created_at': 1}]
"""  # noqa: E501

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalkit.errors import StoreError
from evalkit.store.shared.tables import (
    MAX_ATTEMPTS,
    SharedTable,
    backoff,
    is_busy,
    with_columns,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

#: A publish that leaves the response cache with more data files than this compacts it. A
#: lookup reads every file, so its cost grows with their number, and a compacted cache reads
#: as fast as a fresh one; spread over the publishes between two compactions, a compaction
#: costs a small part of a publish's own commit (`python bench/bench_shared_store.py --only
#: compact` prints both). A lower bound compacts more often for little gain, and each
#: compaction leaves one more copy of the cache in the warehouse (old files are not deleted:
#: module docstring).
COMPACT_AT_FILES = 64
#: The table property pyiceberg reads for its own commit retries: a compaction refuses to run
#: on a table that lets pyiceberg rebase a commit (a rebased overwrite would delete the files
#: a concurrent publish added without having read their rows).
_RETRIES = "commit.retry.num-retries"


@dataclass(frozen=True)
class Compacted:
    """What one compaction did: data files and rows before and after (a key held twice is
    one row after), commits that lost to a concurrent publish and were tried again, old
    snapshots expired (their files stay in the warehouse), and how long it took. ``files_before
    == files_after`` with nothing dropped: there was nothing to compact."""

    files_before: int
    files_after: int
    rows_before: int
    rows_after: int
    conflicts: int
    expired_snapshots: int
    wall_s: float

    @property
    def compacted(self) -> bool:
        return self.files_after < self.files_before or self.rows_after < self.rows_before

    def render(self, where: str) -> str:
        """One line for a log or the CLI."""
        if not self.compacted:
            return (
                f"the shared response cache of {where} is {_files(self.files_before)} "
                f"({self.rows_before} entries) already: nothing to compact"
            )
        dropped = self.rows_before - self.rows_after
        retried = f", {self.conflicts} retried after a concurrent publish" if self.conflicts else ""
        return (
            f"compacted the shared response cache of {where}: {_files(self.files_before)} into "
            f"{self.files_after} ({self.rows_after} entries, {dropped} duplicate rows dropped"
            f"{retried}; {self.expired_snapshots} old snapshots expired, their files left in "
            f"the warehouse) in {self.wall_s:.2f} s"
        )


def _files(n: int) -> str:
    return f"{n} data file{'s' if n != 1 else ''}"


def data_files(table: Table) -> int:
    """How many data files ``table``'s current snapshot reads (from its summary: no manifest
    is read)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    total = snapshot.summary.get("total-data-files") if snapshot.summary is not None else None
    if total is None:  # a snapshot written without totals: count its files
        return sum(1 for _ in table.scan().plan_files())
    return int(total)


def first_published(rows: pa.Table) -> pa.Table:
    """``rows`` of the response cache with each key once, sorted by key: its first-published
    row (earliest ``created_at``, then the smallest response), the one a lookup answers."""
    import polars as pl

    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    kept = frame.sort("cache_key", "created_at", "response", nulls_last=True).unique(
        "cache_key", keep="first", maintain_order=True
    )
    return kept.to_arrow().cast(rows.schema)


def compact_table(
    table: Table,
    spec: SharedTable,
    *,
    above: int = 1,
    attempts: int = MAX_ATTEMPTS,
    keep_rows: Callable[[pa.Table], pa.Table] | None = None,
) -> Compacted:
    """Rewrite ``table`` (the response cache) as one data file when it has more than ``above``
    data files or holds a key twice, then expire its older snapshots; on a concurrent commit,
    read the new snapshot and try again (where it is no longer above ``above`` files, stop),
    ``attempts`` times in all. ``keep_rows``: which rows the rewrite keeps (default: the
    cache's :func:`first_published`; a run table keeps every row).

    Raises:
        StoreError: the commit kept conflicting for ``attempts`` tries.
    """
    from pyiceberg.exceptions import CommitFailedException

    started = time.perf_counter()
    _forbid_rebase(table)
    conflicts = 0
    first_files = data_files(table)
    for attempt in range(attempts):
        files = data_files(table)
        if files == 0:
            return Compacted(0, 0, 0, 0, conflicts, 0, time.perf_counter() - started)
        if 1 < files <= above:  # under the bound (another compaction came first): no read
            return Compacted(files, files, 0, 0, conflicts, 0, time.perf_counter() - started)
        # read on the snapshot the overwrite names: both use this table object's metadata
        rows = with_columns(table.scan().to_arrow(), spec)
        kept = (keep_rows or first_published)(rows)
        if files <= above and kept.num_rows == rows.num_rows:
            # compacted already; a compaction killed before it expired leaves snapshots
            expired = expire_older_snapshots(table) if len(table.metadata.snapshots) > 1 else 0
            return Compacted(
                first_files, files, rows.num_rows, rows.num_rows, conflicts, expired,
                time.perf_counter() - started,
            )  # fmt: skip
        try:
            table.overwrite(kept, snapshot_properties={"evalkit.operation": "compact"})
        except CommitFailedException:
            conflicts += 1
            backoff(attempt)
            table = table.refresh()
            continue
        except Exception as exc:
            if not is_busy(exc):
                raise
            conflicts += 1
            backoff(attempt)
            table = table.refresh()
            continue
        expired = expire_older_snapshots(table)
        return Compacted(
            files, data_files(table), rows.num_rows, kept.num_rows, conflicts, expired,
            time.perf_counter() - started,
        )  # fmt: skip
    raise StoreError(
        f"shared table {spec.name}: {attempts} compactions in a row conflicted with "
        "publishes; compact again"
    )


def expire_older_snapshots(table: Table, attempts: int = 5) -> int:
    """Expire every snapshot of ``table`` but its current one (metadata only: pyiceberg leaves
    their files in the warehouse); how many. Best effort: a commit that keeps meeting other
    writers' leaves them for the next compaction."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(attempts):
        table = table.refresh()
        current = table.current_snapshot()
        if current is None:
            return 0
        old = [s for s in table.metadata.snapshots if s != current]
        if not old:
            return 0
        # by timestamp, not by_ids: pyiceberg 0.12's by_id deep-copies the table's metadata
        # for each id, which made expiring most of a compaction's time; older_than reads it
        # once. Up to the current snapshot's millisecond: the current one is protected.
        cutoff = dt.datetime.fromtimestamp((current.timestamp_ms + 1) / 1000, dt.UTC)
        try:
            table.maintenance.expire_snapshots().older_than(cutoff).commit()
            return sum(1 for s in old if s.timestamp_ms <= current.timestamp_ms)
        except (CommitFailedException, ValueError):  # ValueError: another expired one first
            backoff(attempt)
        except Exception as exc:
            if not is_busy(exc):
                raise
            backoff(attempt)
    return 0


def _forbid_rebase(table: Table) -> None:
    """Set ``commit.retry.num-retries = 0`` on a table made without it (by hand, or by an
    evalkit before the shared store set it)."""
    if table.properties.get(_RETRIES) == "0":
        return
    with table.transaction() as transaction:
        transaction.set_properties({_RETRIES: "0"})


#: Snapshots a shared table may hold after a push before its older ones are expired (each
#: commit rewrites the table's metadata whole, one entry per snapshot, and every reader loads
#: it): a table keeps at most this many, the current one always (a module setting).
KEEP_SNAPSHOTS = 8
#: Rows past which a run table is not rewritten whole after a push: a compaction reads the
#: table into memory, and a run pushed in batches is already in data files of a batch each
#: (its snapshots are still expired). A module setting, read at each push.
COMPACT_MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class Maintained:
    """What :func:`maintain_table` did to one table after a push: snapshots expired, its
    compaction (None: under the bound), or why it failed (the push itself stands)."""

    table: str
    expired_snapshots: int
    compacted: Compacted | None = None
    failure: str | None = None


def maintain_table(
    table: Table,
    spec: SharedTable,
    *,
    keep: int | None = None,
    compact_above: int | None = None,
    attempts: int = 2,
) -> Maintained:
    """After a push: compact ``table`` once past ``compact_above`` (default:
    ``COMPACT_AT_FILES``, read now) data files (every row
    kept: a run table holds each row once; the response cache its first-published rows),
    and once it holds more than ``keep`` snapshots (default: ``KEEP_SNAPSHOTS``, read now)
    expire all but the current one. Best effort: what fails (a writer that keeps winning the
    commit) is said in ``failure`` and left to the next push.

    Examples:
        >>> Maintained("outputs", 7).compacted is None
        True
    """
    keep = KEEP_SNAPSHOTS if keep is None else keep
    compact_above = COMPACT_AT_FILES if compact_above is None else compact_above
    try:
        table = table.refresh()
        compacted = None
        if data_files(table) > compact_above and _compactable(table, spec):
            rows = None if spec.name == "response_cache" else _every_row
            compacted = compact_table(
                table, spec, above=compact_above, attempts=attempts, keep_rows=rows
            )
            table = table.refresh()
        expired = compacted.expired_snapshots if compacted is not None else 0
        if len(table.metadata.snapshots) > keep:
            expired += expire_older_snapshots(table)
        return Maintained(spec.name, expired, compacted)
    except Exception as exc:  # the push committed: maintenance never undoes or fails it
        return Maintained(spec.name, 0, None, f"{type(exc).__name__}: {exc}"[:300])


def _compactable(table: Table, spec: SharedTable) -> bool:
    """Whether a compaction may read ``table`` whole: the response cache always (it is
    compacted by key), a run table while it holds at most :data:`COMPACT_MAX_ROWS` rows."""
    if spec.name == "response_cache":
        return True
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    rows = summary.additional_properties.get("total-records") if summary is not None else None
    return rows is None or int(rows) <= COMPACT_MAX_ROWS


def _every_row(rows: pa.Table) -> pa.Table:
    return rows
