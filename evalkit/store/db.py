"""The DuckDB store: schema, batched writes, and read helpers that return Polars frames.

It is one class over one connection and one writer lock: opening, the lifecycle and a run's
writes stay here; the methods of the other tables are mixed in from their own modules: reading
runs (:mod:`~evalkit.store.reads`), rows copied in (:mod:`~evalkit.store.row_import`), flake
lists (:mod:`~evalkit.store.flakes`), the response cache (:mod:`~evalkit.store.cache_records`),
the judges' tables (:mod:`~evalkit.store.judgments`), the people's decisions
(:mod:`~evalkit.store.decisions`), pinned exams (:mod:`~evalkit.store.exams`) and the gate log
(:mod:`~evalkit.store.gate_log`). Transactions are :mod:`~evalkit.store.transaction`'s; secret
scrubbing is :mod:`~evalkit.store.scrub`'s.

Only this module writes SQL. Writes are batched (one insert per table per flush, inside one
transaction), so a crash loses at most the batch in flight and never leaves half a batch behind.
A run's batches are plain column lists, inserted as one ``UNNEST`` of list parameters per table,
so ``evalkit run`` never imports Polars (a large import for a short run); frames (rescoring,
merging, imports) go in through their Arrow C stream, and reads return Polars frames except
:meth:`Store.records`, which returns plain rows for the run path.

One writer, many readers: a writing store holds an exclusive lock on ``<db>.lock`` for its whole
life, so a second writer gets a clear :class:`StoreError` (or waits ``wait_s`` for it), naming
the holder's PID and command. DuckDB itself lets a file be open either by one read-write process
or by many read-only ones, so the runner closes the DuckDB file between batches
(:meth:`Store.release`), and a read-only store holds the file only *during* each call: it opens
it (retrying for a few seconds while a batch is appended) and lets go when the call returns. A
notebook's idle store therefore never blocks a run, and every read sees what was written since.

A file that is not an evalkit store is left exactly as it is: before anything is written,
open_store checks that a DuckDB file with tables has evalkit's ``runs`` table and that every
table of evalkit's name has evalkit's columns (an older store may lack the columns added
since), and refuses any other file by name; an OS error on the store (a read-only file system,
a directory in the way) is one line naming the path, like every :class:`StoreError`.

Examples:
    >>> store = open_store("data/evalkit.duckdb")          # doctest: +SKIP
    >>> store.runs().select("run_id", "label").head(2)      # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import duckdb

from evalkit.errors import StoreError
from evalkit.redact import redact_known
from evalkit.run_manifest import RunManifest, as_manifest
from evalkit.store.arrow_stream import ArrowStream, rechunked
from evalkit.store.batches import BatchIO
from evalkit.store.cache_records import CacheRecords
from evalkit.store.decisions import DecisionRecords
from evalkit.store.exams import ExamRecords
from evalkit.store.flakes import FlakeRecords
from evalkit.store.gate_log import GateLog
from evalkit.store.history_sql import CaseCounts
from evalkit.store.judgments import JudgmentRecords
from evalkit.store.lock import WriterLock, connect_duckdb, evalkit_store, os_reason
from evalkit.store.reads import RunReads
from evalkit.store.row_import import RowImports
from evalkit.store.schema import (
    CASE_COLUMNS,
    DDL,
    HISTORY_DDL,
    OUTPUT_COLUMNS,
    SCORE_COLUMNS,
    Columns,
    StoredCase,
    case_columns,
    initial_scoring_id,
)
from evalkit.store.scrub import scrub_outputs, scrub_scores
from evalkit.store.transaction import Transaction, serialized

if TYPE_CHECKING:
    import polars as pl

    from evalkit.store.history_tally import TalliedHistory

DEFAULT_DB = Path("data/evalkit.duckdb")
#: A read-only open retries this long at least: a running writer holds the file only while it
#: appends a batch (a fraction of a second).
READ_RETRY_S = 5.0
#: How long a writer that released the file waits for readers to let go before it gives up.
REOPEN_WAIT_S = 60.0
#: Cases per insert when a run is recorded (one transaction still): bounds the memory.
CASE_ROWS_PER_INSERT = 2048


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id() -> str:
    """A sortable, unique run id such as ``20261130T041502-3f9a1c``."""
    return f"{_now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class RunRef:
    run_id: str
    label: str
    config_hash: str
    status: str


def open_store(
    path: str | Path = DEFAULT_DB,
    *,
    write: bool | None = None,
    wait_s: float = 0.0,
    read_only: bool | None = None,
) -> Store:
    """Open the evalkit store at ``path``: ``evalkit.open_store`` and ``evalkit.store.open_store``
    are this one function.

    Read-only by default: the file must exist, and it is open only while each call reads, so
    a notebook holding this store never blocks ``evalkit run`` or ``gate``, and each call sees
    runs written since. ``write=True`` creates the file if needed and takes the store's writer
    lock (one writer at a time, readers still read): close it when done, best with ``with``.
    ``read_only`` is the older spelling: ``read_only=False`` is ``write=True``.

    Args:
        write: open for writing (creating the file and its schema).
        wait_s: how long to wait for another process's write lock before failing.

    Raises:
        StoreError: no store at ``path`` (reading); the file is locked by another writer; it
            is not a DuckDB database, or one of another schema (left untouched); or the OS
            refuses (read-only file system, ...).

    Examples:
        >>> import evalkit, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with evalkit.open_store(f"{folder}/evalkit.duckdb", write=True) as store:
        ...     store.runs().height
        0
        >>> evalkit.open_store(f"{folder}/evalkit.duckdb").runs().height
        0
    """
    if write is not None and read_only is not None and write == read_only:
        raise ValueError(f"open_store: write={write} contradicts read_only={read_only}")
    writing = write if write is not None else read_only is False
    db_path = Path(path)
    if not writing:
        if not db_path.exists():
            raise StoreError(
                f"{db_path}: no evalkit store here (run `evalkit run` first, or open it "
                "with write=True to create one)"
            )
        con = connect_duckdb(db_path, True, max(wait_s, READ_RETRY_S))
        evalkit_store(con, db_path, read_only=True)
        store = Store(db_path, con, True)
        store._read_wait_s = max(wait_s, READ_RETRY_S)
        store.release()  # held only during each call from here on
        return store
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"{db_path}: cannot create the store's directory {db_path.parent}: "
            f"{os_reason(exc)}; use a --db in a directory you can write"
        ) from None
    lock = WriterLock.acquire(db_path, wait_s)
    try:
        existed = db_path.exists()  # under the writer lock: no evalkit writer makes it now
        con = connect_duckdb(db_path, False, max(wait_s, READ_RETRY_S))
        # a file DuckDB just created has no tables to check, and needs every one made
        current = evalkit_store(con, db_path, read_only=False) if existed else False
    except BaseException:
        lock.release(discard=True)  # a file refused: leave its directory as it was
        raise
    try:
        return Store(db_path, con, False, lock, schema_current=current)
    except BaseException:
        lock.release()
        raise


#: The name ``evalkit.open_store`` had while it differed from the store's own: the same function.
open_for_analysis = open_store


_P = ParamSpec("_P")
_R = TypeVar("_R")


#: Every connection's settings: UTC timestamps, and strings handed to Polars (`Store._frame`) as
#: Arrow string views, Polars' own string layout, which it takes as they are; plain Arrow
#: strings it converts, holding both layouts (twice a million strings' memory).
_SESSION = (
    "SET TimeZone = 'UTC'; SET arrow_output_version = '1.4'; SET produce_arrow_string_view = true"
)


class Store(
    RunReads,
    RowImports,
    FlakeRecords,
    DecisionRecords,
    JudgmentRecords,
    CacheRecords,
    ExamRecords,
    GateLog,
    BatchIO,
):
    """A DuckDB-backed results store. Use :func:`open_store` to get one."""

    def __init__(
        self,
        path: Path,
        con: duckdb.DuckDBPyConnection,
        read_only: bool,
        writer_lock: WriterLock | None = None,
        *,
        schema_current: bool = False,
    ) -> None:
        self.path = path
        self._conn: duckdb.DuckDBPyConnection | None = con
        self.read_only = read_only
        self._writer_lock = writer_lock
        self._lock = threading.RLock()  # see serialized
        self._read_wait_s = READ_RETRY_S  # a read-only store's retry on each reopen
        self._calls = 0  # public calls in progress (a read-only store lets go at zero)
        self._opened = 0  # times the file was opened (tests count it)
        con.execute(_SESSION)
        self._history_tables = not read_only  # made below, or there already (current)
        if not read_only and not schema_current:  # current: every table and column is there
            # One transaction, not a commit per statement: each commit writes and syncs the
            # WAL, so creating a new store's tables one by one cost several times as much. The
            # history tables too, so a run's finish (record_history) creates none.
            with self._transaction():
                con.execute(DDL + HISTORY_DDL)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The connection, reopened (waiting up to ``REOPEN_WAIT_S`` for readers) if released."""
        if self._conn is None:
            self.reopen(self._read_wait_s if self.read_only else REOPEN_WAIT_S)
        assert self._conn is not None
        return self._conn

    @serialized
    def release(self) -> None:
        """Close the DuckDB file but keep the writer lock: readers may open it until the next
        use of this store reopens it. Cheap to call when already released.

        A writer lets go without a checkpoint: what it committed is in the WAL, which readers
        and the next reopen replay (DuckDB still checkpoints once the WAL passes its
        ``checkpoint_threshold``), and :meth:`close` checkpoints, so a closed store is one
        file. A checkpoint at every release (before a run's first request, after each batch)
        wrote the new blocks and synced the file each time.
        """
        if self._conn is not None:
            con, self._conn = self._conn, None
            if not self.read_only:
                with contextlib.suppress(duckdb.Error):
                    con.execute("PRAGMA disable_checkpoint_on_shutdown")
            con.close()

    @serialized
    def reopen(self, wait_s: float = 0.0) -> bool:
        """Reopen a released store; False when readers still hold the file after ``wait_s``
        (``wait_s`` 0: one try, for a caller that can try again later)."""
        if self._conn is not None:
            return True
        try:
            con = connect_duckdb(self.path, self.read_only, wait_s)
        except StoreError:
            if wait_s > 0:
                raise
            return False
        con.execute(_SESSION)
        self._conn = con
        self._opened += 1
        return True

    @serialized
    def close(self) -> None:
        """Close the store (a writer checkpoints its WAL into the file) and let go of the lock."""
        if self._conn is None and not self.read_only and self._wal().exists():
            self.reopen(0.0)  # released with a WAL: fold it in (unless a reader holds the file)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._writer_lock is not None:
            self._writer_lock.release()

    def _wal(self) -> Path:
        return self.path.with_name(self.path.name + ".wal")

    def __enter__(self) -> Store:
        if self.read_only:  # a block of reads shares one opening of the file
            self._lock.acquire()
            self._calls += 1
        return self

    def __exit__(self, *exc: object) -> None:
        if self.read_only:
            self._calls -= 1
            self._lock.release()
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def create_run(
        self, manifest: RunManifest | Mapping[str, Any], cases: Sequence[StoredCase]
    ) -> str:
        """Record a run's manifest (stored in its JSON form, with its version; a JSON object is
        read as :meth:`RunManifest.from_stored` reads one) and the cases it will execute;
        returns the run id."""
        manifest = as_manifest(manifest)
        run_id = manifest.run.run_id
        with self._transaction():
            self._con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, 'running', ?, NULL)",
                [
                    run_id,
                    manifest.run.label,
                    _now(),
                    manifest.config_hash,
                    redact_known(json.dumps(manifest.to_dict())),
                ],
            )
            # In slices: the column lists of a whole large corpus at once, and DuckDB's copy
            # of them, were the peak of a whole run's memory.
            for start in range(0, len(cases), CASE_ROWS_PER_INSERT):
                chunk = cases[start : start + CASE_ROWS_PER_INSERT]
                self._insert("cases", case_columns(run_id, chunk), CASE_COLUMNS)
            self._con.execute(  # its scorer sources are the manifest's: none recorded here
                "INSERT INTO scorings (scoring_id, run_id, created_at, note) "
                "VALUES (?, ?, ?, 'run')",
                [initial_scoring_id(run_id), run_id, _now()],
            )
        return run_id

    @serialized
    def write_results(
        self, outputs: Columns | pl.DataFrame, scores: Columns | pl.DataFrame
    ) -> None:
        """Append a batch of outputs and their scores atomically (both or neither).

        Each is either columns (``{"run_id": [...], ...}``, every column of
        :data:`~evalkit.store.schema.OUTPUT_COLUMNS` / ``SCORE_COLUMNS``, as the runner
        collects them) or a Polars frame with those columns.
        """
        outputs, scores = scrub_outputs(outputs), scrub_scores(scores)
        with self._transaction():
            for table, rows, columns in (
                ("outputs", outputs, OUTPUT_COLUMNS),
                ("scores", scores, SCORE_COLUMNS),
            ):
                if isinstance(rows, dict):
                    self._insert(table, rows, columns)
                elif not rows.is_empty():
                    self._append(table, rows.select(list(columns)))

    def write_scoring(
        self,
        run_id: str,
        note: str,
        scores: pl.DataFrame,
        case_hashes: dict[str, str],
        *,
        scorer_files: Mapping[str, str] | None = None,
        harness: str | None = None,
    ) -> str:
        """Store a new scoring of a run's outputs, atomically; older scorings stay.

        ``scorer_files`` are the scorer sources it scored with (the manifest's ``scorer_files``
        form: corpus file and custom scorer module hashes) and ``harness`` the evalkit version;
        ``None`` records them as unknown (NULL).
        """
        import polars as pl

        scores = scrub_scores(scores)
        with self._transaction():
            count = self._con.execute(
                "SELECT count(*) FROM scorings WHERE run_id = ?", [run_id]
            ).fetchall()[0][0]
            scoring_id = f"{run_id}/s{count}"
            sources = (  # {} is a record too: no scorer sources
                json.dumps(dict(sorted(scorer_files.items()))) if scorer_files is not None else None
            )
            self._con.execute(
                "INSERT INTO scorings (scoring_id, run_id, created_at, note, scorer_files, "
                "harness) VALUES (?, ?, ?, ?, ?, ?)",
                [scoring_id, run_id, _now(), note, sources, harness],
            )
            frame = scores.select(list(SCORE_COLUMNS)).with_columns(
                pl.lit(scoring_id).alias("scoring_id")
            )
            self._append("scores", frame)
            hashes: Columns = {
                "scoring_id": [scoring_id] * len(case_hashes),
                "case_id": list(case_hashes),
                "case_hash": list(case_hashes.values()),
            }
            self._insert("scoring_cases", hashes, dict.fromkeys(hashes, "VARCHAR"))
        if self.run_status(run_id) == "complete":  # the newest scoring is what history reads
            self.record_history(run_id)
        return scoring_id

    def finish_run(
        self,
        run_id: str,
        status: str,
        summary: dict[str, Any],
        *,
        warnings: Sequence[str] | None = None,
        tallied: TalliedHistory | None = None,
    ) -> CaseCounts | None:
        """Record a run's status and summary; with ``warnings``, also replace its manifest's
        (:meth:`set_warnings`) in the same statement. A complete run's history counts are
        recorded in the same transaction (one commit); when they cannot be (derived data),
        the finish is recorded alone. ``tallied``: those counts as the run's writer tallied
        them (:mod:`evalkit.store.history_tally`), used when they are of the run's latest
        scoring; else counted from the stored rows.

        Returns:
            The run's :class:`~evalkit.store.history_sql.CaseCounts` as its history
            recorded them (what ``case_counts`` would read back), or None when none were
            recorded (a run not complete, or one whose counts could not be recorded).
        """
        if status == "complete":
            try:
                with self._transaction():
                    self._record_finish(run_id, status, summary, warnings)
                    recorded = self._record_history(run_id, tallied)
            except (duckdb.Error, StoreError):
                pass  # rolled back whole: record the finish without the history counts
            else:
                return recorded
        self._record_finish(run_id, status, summary, warnings)
        return None

    def _record_finish(
        self,
        run_id: str,
        status: str,
        summary: dict[str, Any],
        warnings: Sequence[str] | None,
    ) -> None:
        if warnings is None:
            self._con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE run_id = ?",
                [status, _now(), json.dumps(summary), run_id],
            )
            return
        manifest = replace(self.manifest(run_id), warnings=tuple(warnings))
        self._con.execute(
            "UPDATE runs SET status = ?, finished_at = ?, summary = ?, manifest = ? "
            "WHERE run_id = ?",
            [status, _now(), json.dumps(summary), json.dumps(manifest.to_dict()), run_id],
        )

    def record_history(self, run_id: str) -> None:
        """A complete run's (or new scoring's) history counts, for `evalkit history`: derived
        data, so a failure to record them loses nothing (history counts the run instead)."""
        # one transaction (one commit, not five): a failure records nothing, and a run not
        # recorded is counted from its rows instead
        with contextlib.suppress(duckdb.Error, StoreError), self._transaction():
            self._record_history(run_id)

    def _record_history(
        self, run_id: str, tallied: TalliedHistory | None = None
    ) -> CaseCounts | None:
        from evalkit.store.history_sql import record_history

        scoring_id = self.latest_scoring(run_id)
        if tallied is not None and tallied.scoring_id != scoring_id:
            tallied = None  # rescored since: those rows are not of its latest scoring
        return record_history(
            self._con, run_id, scoring_id, tallied=tallied, tables=self._history_tables
        )

    def set_warnings(self, run_id: str, warnings: Sequence[str]) -> None:
        """Replace the ``warnings`` of a run's manifest (the config hash does not cover them)."""
        manifest = replace(self.manifest(run_id), warnings=tuple(warnings))
        self._con.execute(
            "UPDATE runs SET manifest = ? WHERE run_id = ?",
            [json.dumps(manifest.to_dict()), run_id],
        )

    def drop_errored_outputs(self, run_id: str) -> int:
        """Delete a run's errored outputs (and any scores of them), atomically, so a resume
        asks those requests again (``--retry-errors``); returns how many were dropped."""
        with self._transaction():
            keys = "SELECT case_id, replay FROM outputs WHERE run_id = ? AND error IS NOT NULL"
            ((count,),) = self._con.execute(f"SELECT count(*) FROM ({keys})", [run_id]).fetchall()
            self._con.execute(
                f"DELETE FROM scores WHERE run_id = ? AND (case_id, replay) IN ({keys})",
                [run_id, run_id],
            )
            self._con.execute(
                "DELETE FROM outputs WHERE run_id = ? AND error IS NOT NULL", [run_id]
            )
        return int(count)

    # -- internals --------------------------------------------------------------------------

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        import polars as pl

        # Polars reads the relation's Arrow C stream; ``.pl()`` would go through pyarrow.
        return rechunked(pl.DataFrame(self._con.sql(sql, params=list(params or []))))

    def _insert(self, table: str, rows: Columns, types: dict[str, str]) -> None:
        """Insert column lists: one list parameter per column, unnested side by side (DuckDB
        converts each list in C; ``executemany`` would bind row by row, in Python).

        Every column of ``types`` must be present, all of the same length.
        """
        lengths = {name: len(rows[name]) for name in types}
        if len(set(lengths.values())) > 1:
            raise StoreError(f"{table}: columns of unequal length {lengths}")
        if not next(iter(lengths.values()), 0):
            return
        names = ", ".join(types)
        unnested = ", ".join(f"UNNEST(${i}::{t}[])" for i, t in enumerate(types.values(), 1))
        self._con.execute(
            f"INSERT INTO {table} ({names}) SELECT {unnested}", [rows[name] for name in types]
        )

    def _append(self, table: str, frame: pl.DataFrame) -> None:
        name = f"_batch_{table}"
        # Through the Arrow C stream, not ``frame.to_arrow()``: DuckDB reads the capsule
        # itself, so writing never imports pyarrow (a large import for a short run).
        self._con.register(name, ArrowStream(frame))
        try:
            columns = ", ".join(frame.columns)
            self._con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {name}")
        finally:
            self._con.unregister(name)

    def _transaction(self) -> Transaction:
        if self.read_only:  # DuckDB's own refusal does not say how to open for writing
            raise StoreError(
                f"{self.path}: this store was opened for reading; to write, open it with "
                "open_store(path, write=True)"
            )
        return Transaction(self._con, self.path)


_LIFECYCLE = frozenset({"release", "reopen", "close"})


def _lets_go_after_each_call(
    method: Callable[Concatenate[Store, _P], _R],
) -> Callable[Concatenate[Store, _P], _R]:
    """A read-only store closes the DuckDB file when its outermost public call returns, so it
    never holds the file while idle (a writer cannot open a file any reader holds)."""

    @functools.wraps(method)
    def call(self: Store, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not self.read_only:
            return method(self, *args, **kwargs)
        with self._lock:
            self._calls += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                self._calls -= 1
                if not self._calls and self._conn is not None:
                    con, self._conn = self._conn, None
                    con.close()

    return call


def _wrap_public_methods(cls: type[Store]) -> None:
    for name in dir(cls):
        if name.startswith("_") or name in _LIFECYCLE:
            continue
        value = getattr(cls, name)
        if callable(value) and not isinstance(value, type):
            setattr(cls, name, _lets_go_after_each_call(value))


_wrap_public_methods(Store)
