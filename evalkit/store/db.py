"""The DuckDB store: schema, batched writes, and read helpers that return Polars frames.

It is one class over one connection and one writer lock, so its core reads and writes stay
together here (~500 lines); the judges' tables, the people's decisions and the secret scrubbing
live in :mod:`~evalkit.store.judgments`, :mod:`~evalkit.store.decisions` and
:mod:`~evalkit.store.scrub`.

Only this module writes SQL. Writes are batched (one insert per table per flush, inside one
transaction), so a crash loses at most the batch in flight and never leaves half a batch behind.
A run's batches are plain column lists, inserted as one ``UNNEST`` of list parameters per table,
so ``evalkit run`` never imports Polars (about 35 MiB and 0.1 s); frames (rescoring, merging,
imports) go in through their Arrow C stream, and reads return Polars frames except
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
import difflib
import functools
import json
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import duckdb

from evalkit.errors import StoreError
from evalkit.redact import redact_known
from evalkit.store.arrow_stream import ArrowStream
from evalkit.store.cache_records import CacheRecords
from evalkit.store.decisions import DecisionRecords
from evalkit.store.exams import ExamRecords
from evalkit.store.gate_log import GateLog
from evalkit.store.judgments import JudgmentRecords
from evalkit.store.lock import WriterLock, connect_duckdb, evalkit_store, os_reason
from evalkit.store.schema import (
    CACHE_COLUMNS,
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
from evalkit.store.scrub import scrub_json, scrub_outputs, scrub_scores

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

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
        store = Store(db_path, evalkit_store(con, db_path, read_only=True), True)
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
        if existed:  # a file DuckDB just created has no tables to check
            con = evalkit_store(con, db_path, read_only=False)
    except BaseException:
        lock.release(discard=True)  # a file refused: leave its directory as it was
        raise
    try:
        return Store(db_path, con, False, lock)
    except BaseException:
        lock.release()
        raise


#: The name ``evalkit.open_store`` had while it differed from the store's own: the same function.
open_for_analysis = open_store


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _serialized(
    method: Callable[Concatenate[Store, _P], _R],
) -> Callable[Concatenate[Store, _P], _R]:
    """Run ``method`` holding the store's lock: the runner writes batches from a worker thread
    (so the event loop keeps serving requests) while the loop may read the response cache."""

    @functools.wraps(method)
    def locked(self: Store, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Store(DecisionRecords, JudgmentRecords, CacheRecords, ExamRecords, GateLog):
    """A DuckDB-backed results store. Use :func:`open_store` to get one."""

    def __init__(
        self,
        path: Path,
        con: duckdb.DuckDBPyConnection,
        read_only: bool,
        writer_lock: WriterLock | None = None,
    ) -> None:
        self.path = path
        self._conn: duckdb.DuckDBPyConnection | None = con
        self.read_only = read_only
        self._writer_lock = writer_lock
        self._lock = threading.RLock()  # see _serialized
        self._read_wait_s = READ_RETRY_S  # a read-only store's retry on each reopen
        self._calls = 0  # public calls in progress (a read-only store lets go at zero)
        self._opened = 0  # times the file was opened (tests count it)
        con.execute("SET TimeZone = 'UTC'")
        if not read_only:
            # One transaction, not a commit per statement: a new store's ~30 statements cost
            # ~8 ms so, ~70 ms one by one (each commit writes and syncs the WAL). The history
            # tables too, so a run's finish (record_history) creates none.
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

    @_serialized
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

    @_serialized
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
        con.execute("SET TimeZone = 'UTC'")
        self._conn = con
        self._opened += 1
        return True

    @_serialized
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

    def create_run(self, manifest: dict[str, Any], cases: Sequence[StoredCase]) -> str:
        """Record a run's manifest and the cases it will execute; returns the run id."""
        run = manifest["run"]
        run_id = run["run_id"]
        with self._transaction():
            self._con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, 'running', ?, NULL)",
                [
                    run_id,
                    run["label"],
                    _now(),
                    manifest["config_hash"],
                    redact_known(json.dumps(manifest)),
                ],
            )
            # In slices: the column lists of 100k cases at once, and DuckDB's copy of them,
            # were the peak of a whole run's memory (+260 MiB over the corpus itself).
            for start in range(0, len(cases), CASE_ROWS_PER_INSERT):
                chunk = cases[start : start + CASE_ROWS_PER_INSERT]
                self._insert("cases", case_columns(run_id, chunk), CASE_COLUMNS)
            self._con.execute(  # its scorer sources are the manifest's: none recorded here
                "INSERT INTO scorings (scoring_id, run_id, created_at, note) "
                "VALUES (?, ?, ?, 'run')",
                [initial_scoring_id(run_id), run_id, _now()],
            )
        return run_id

    @_serialized
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
    ) -> None:
        """Record a run's status and summary; with ``warnings``, also replace its manifest's
        (:meth:`set_warnings`) in the same statement. A complete run's history counts are
        recorded in the same transaction (one commit); when they cannot be (derived data),
        the finish is recorded alone."""
        if status == "complete":
            try:
                with self._transaction():
                    self._record_finish(run_id, status, summary, warnings)
                    self._record_history(run_id)
                return
            except (duckdb.Error, StoreError):
                pass  # rolled back whole: record the finish without the history counts
        self._record_finish(run_id, status, summary, warnings)

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
        manifest = self.manifest(run_id)
        manifest["warnings"] = list(warnings)
        self._con.execute(
            "UPDATE runs SET status = ?, finished_at = ?, summary = ?, manifest = ? "
            "WHERE run_id = ?",
            [status, _now(), json.dumps(summary), json.dumps(manifest), run_id],
        )

    def record_history(self, run_id: str) -> None:
        """A complete run's (or new scoring's) history counts, for `evalkit history`: derived
        data, so a failure to record them loses nothing (history counts the run instead)."""
        # one transaction (one commit, not five): a failure records nothing, and a run not
        # recorded is counted from its rows instead
        with contextlib.suppress(duckdb.Error, StoreError), self._transaction():
            self._record_history(run_id)

    def _record_history(self, run_id: str) -> None:
        from evalkit.store.history_sql import record_history

        record_history(self._con, run_id, self.latest_scoring(run_id))

    def set_warnings(self, run_id: str, warnings: Sequence[str]) -> None:
        """Replace ``manifest["warnings"]`` of a run (the config hash does not cover them)."""
        manifest = self.manifest(run_id)
        manifest["warnings"] = list(warnings)
        self._con.execute(
            "UPDATE runs SET manifest = ? WHERE run_id = ?", [json.dumps(manifest), run_id]
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

    def save_flakes(self, config_hash: str, flakes: pl.DataFrame) -> None:
        """Store one flake measurement (columns case_id, tags, runs, flips, flake_rate, and
        case_hash: the hash of each case version measured; NULL when the frame has none)."""
        import polars as pl

        from evalkit.provenance import current_writer

        case_hash = pl.col("case_hash") if "case_hash" in flakes.columns else pl.lit(None)
        written_by = current_writer().to_json()
        frame = flakes.select(
            pl.lit(config_hash).alias("config_hash"),
            pl.lit(_now()).dt.cast_time_unit("us").alias("measured_at"),
            "case_id",
            pl.col("tags").cast(pl.List(pl.String)),
            pl.col("runs").cast(pl.Int32),
            pl.col("flips").cast(pl.Int32),
            pl.col("flake_rate").cast(pl.Float64),
            case_hash.cast(pl.String).alias("case_hash"),
            pl.lit(written_by, pl.String).alias("written_by"),
        )
        with self._transaction():
            self._append("flakes", frame)

    @_serialized
    def import_rows(
        self,
        tables: Mapping[str, pa.Table | pl.DataFrame],
        *,
        replace_on: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, int]:
        """Insert whole rows into evalkit's tables, every table in one transaction (all land
        or none): rows copied from another store, as ``evalkit pull`` brings them from the
        team's shared store. Rows go in as given (the caller leaves out those the store
        holds already); returns how many went into each table.

        Each frame (Polars or Arrow) has exactly its table's columns, in any order; values
        are cast to the column types as an insert casts them. With ``replace_on[table]``
        (column names), stored rows equal to an imported row on those columns (nulls equal)
        are deleted first, in the same transaction: a newer copy replaces the older one.

        Raises:
            StoreError: a read-only store; an unknown table; a frame with a missing or an
                extra column, or ``replace_on`` naming a column the table lacks; a value its
                column's type refuses. Nothing is written then.

        Examples:
            >>> import tempfile, polars as pl
            >>> tmp = tempfile.TemporaryDirectory()
            >>> store = open_store(f"{tmp.name}/s.duckdb", write=True)
            >>> rows = pl.DataFrame({"cache_key": ["k1"], "response": ["{}"],
            ...                      "created_at": [dt.datetime.now(dt.UTC)]})
            >>> store.import_rows({"response_cache": rows})
            {'response_cache': 1}
            >>> store.import_rows({"response_cache": rows.drop("created_at")})
            Traceback (most recent call last):
            ...
            evalkit.errors.StoreError: ...: missing column created_at (the table has ...)
            >>> store.close(); tmp.cleanup()
        """
        import polars as pl

        from evalkit.store.schema import known_tables

        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only; cannot import rows")
        known = known_tables()
        replace_on = dict(replace_on or {})
        frames: dict[str, pl.DataFrame] = {}
        for name, given in tables.items():
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise StoreError(f"{self.path}: cannot import into {name!r}: no such table{hint}")
            columns = {**known[name][0], **known[name][1]}
            frame = given if isinstance(given, pl.DataFrame) else pl.from_arrow(given)
            assert isinstance(frame, pl.DataFrame)
            missing = [c for c in columns if c not in frame.columns]
            extra = [c for c in frame.columns if c not in columns]
            unknown_key = [c for c in replace_on.get(name, ()) if c not in columns]
            for what, names in (("missing", missing), ("extra", extra),
                                ("replace_on names no", unknown_key)):  # fmt: skip
                if names:
                    plural = "s" if len(names) > 1 else ""
                    raise StoreError(
                        f"{self.path}: cannot import into {name}: {what} column{plural} "
                        f"{', '.join(names)} (the table has {', '.join(columns)})"
                    )
            frames[name] = frame.select(list(columns))
        unexpected = sorted(set(replace_on) - set(frames))
        if unexpected:
            raise StoreError(f"{self.path}: replace_on names {unexpected[0]}, not imported")
        imported: dict[str, int] = {}
        try:
            with self._transaction():
                for name, frame in frames.items():
                    imported[name] = frame.height
                    if not frame.height:
                        continue
                    if replace_on.get(name):
                        self._delete_matching(name, frame, replace_on[name])
                    self._append(name, frame)
        except duckdb.Error as exc:  # a value its column refuses: rolled back whole
            raise StoreError(
                f"{self.path}: cannot import rows: {str(exc).splitlines()[0]}"
            ) from None
        return imported

    def _delete_matching(self, table: str, frame: pl.DataFrame, on: Sequence[str]) -> None:
        """Delete ``table``'s rows equal to a row of ``frame`` on columns ``on`` (nulls
        equal), inside the caller's transaction."""
        name = f"_import_{table}"
        self._con.register(name, ArrowStream(frame.select(list(on)).unique()))
        try:
            same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM n.{c}" for c in on)
            self._con.execute(
                f"DELETE FROM {table} t WHERE EXISTS (SELECT 1 FROM {name} n WHERE {same})"
            )
        finally:
            self._con.unregister(name)

    # -- cache (keyed by provider, model, rendered request, sampling and replay index) --------

    @_serialized
    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = self._con.execute(
            "SELECT c.cache_key, c.response FROM response_cache c "
            "JOIN (SELECT UNNEST(?::VARCHAR[]) AS cache_key) w USING (cache_key)",
            [wanted],
        ).fetchall()
        return dict(rows)

    @_serialized
    def cache_put(self, entries: dict[str, str]) -> None:
        if not entries:
            return
        rows: Columns = {
            "cache_key": list(entries),
            "response": [scrub_json(v) for v in entries.values()],
            "created_at": [_now()] * len(entries),
        }
        with self._transaction():
            self._insert("response_cache", rows, CACHE_COLUMNS)

    # -- reads ------------------------------------------------------------------------------

    def runs(self) -> pl.DataFrame:
        return self._frame(
            "SELECT run_id, label, created_at, finished_at, config_hash, status, manifest, summary "
            "FROM runs ORDER BY created_at"
        )

    def resolve_run(self, ref: str) -> str:
        """A run id from an id, a unique id prefix, a label that names one run, or
        ``label@latest`` (the newest run with that label). A label that several runs carry
        resolves to its one *complete* run when exactly one is complete: a run that failed or
        was killed does not capture the label of the run it was meant to replace.

        Raises:
            StoreError: no such run, or a label or prefix that names several runs (listed).
        """
        label, latest = (ref[: -len("@latest")], True) if ref.endswith("@latest") else (ref, False)
        exact = self._con.execute("SELECT run_id FROM runs WHERE run_id = ?", [ref]).fetchall()
        if exact:
            return exact[0][0]
        rows = self._con.execute(
            "SELECT run_id, created_at, status FROM runs WHERE label = ? ORDER BY created_at DESC",
            [label],
        ).fetchall()
        complete = [r for r in rows if r[2] == "complete"]
        if len(rows) > 1 and not latest and len(complete) == 1:
            return complete[0][0]
        if len(rows) > 1 and not latest:
            listed = ", ".join(f"{r[0]} ({str(r[1])[:19]})" for r in rows[:5])
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise StoreError(
                f"label {label!r} names {len(rows)} runs: {listed}{more}; pass a run id, or "
                f"{label}@latest for the newest"
            )
        if not rows:
            rows = self._con.execute(
                "SELECT run_id FROM runs WHERE run_id LIKE ? ORDER BY created_at DESC", [f"{ref}%"]
            ).fetchall()
            if len(rows) > 1:
                raise StoreError(f"run {ref!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
        if not rows:
            labels = [
                r[0]
                for r in self._con.execute(
                    "SELECT DISTINCT label FROM runs ORDER BY label"
                ).fetchall()
            ]
            hint = difflib.get_close_matches(label, labels, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            known = f"; labels: {', '.join(labels[:20])}" if labels else "; the store has no runs"
            raise StoreError(f"{self.path}: no run with id or label {ref!r}{suggestion}{known}")
        return rows[0][0]

    def manifest(self, run_id: str) -> dict[str, Any]:
        rows = self._con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return json.loads(rows[0][0])

    def run_status(self, run_id: str) -> str:
        rows = self._con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return rows[0][0]

    def cases(self, run_id: str) -> pl.DataFrame:
        """The cases a run executed. After a rescore against edited expectations, ``case_hash``
        is the hash the newest scoring scored against (the stored outputs are unchanged).
        ``run_id`` may be a label (`resolve_run`), as for every per-run frame."""
        run_id = self.resolve_run(run_id)
        scoring_id = self.latest_scoring(run_id)
        return self._frame(
            "SELECT c.* REPLACE (coalesce(s.case_hash, c.case_hash) AS case_hash) FROM cases c "
            "LEFT JOIN scoring_cases s ON s.scoring_id = ? AND s.case_id = c.case_id "
            "WHERE c.run_id = ? ORDER BY c.case_id",
            [scoring_id, run_id],
        )

    def outputs(self, run_id: str, *, ordered: bool = True) -> pl.DataFrame:
        """A run's outputs by (case_id, replay); ``ordered=False``: in the order they were
        written, skipping a sort that costs more than the read at a million rows (the
        analysis groups them itself). ``run_id`` may be a label: an unknown one is an error,
        never an empty frame."""
        run_id = self.resolve_run(run_id)
        order = " ORDER BY case_id, replay" if ordered else ""
        return self._frame(f"SELECT * FROM outputs WHERE run_id = ?{order}", [run_id])

    def scores(
        self, run_id: str, scoring_id: str | None = None, *, ordered: bool = True
    ) -> pl.DataFrame:
        """Long scores of a run: the newest scoring unless ``scoring_id`` is given, by
        (case_id, replay, scorer_index); ``ordered=False``: in the order they were written."""
        run_id = self.resolve_run(run_id)
        scoring_id = scoring_id or self.latest_scoring(run_id)
        order = " ORDER BY case_id, replay, scorer_index" if ordered else ""
        return self._frame(
            f"SELECT * FROM scores WHERE run_id = ? AND scoring_id = ?{order}",
            [run_id, scoring_id],
        )

    def latest_scoring(self, run_id: str) -> str:
        rows = self._con.execute(
            "SELECT scoring_id FROM scorings WHERE run_id = ? ORDER BY created_at DESC, scoring_id "
            "DESC LIMIT 1",
            [run_id],
        ).fetchall()
        return rows[0][0] if rows else initial_scoring_id(run_id)

    def scorings(self, run_id: str) -> pl.DataFrame:
        return self._frame("SELECT * FROM scorings WHERE run_id = ? ORDER BY created_at", [run_id])

    def completed(self, run_id: str) -> set[tuple[str, int]]:
        """(case_id, replay) pairs already stored for a run (what --resume skips)."""
        rows = self._con.execute(
            "SELECT case_id, replay FROM outputs WHERE run_id = ?", [run_id]
        ).fetchall()
        return {(c, int(r)) for c, r in rows}

    def latest_flakes(self, config_hash: str) -> pl.DataFrame:
        """The newest flake measurement of a configuration (``case_hash`` NULL where it was
        measured before evalkit recorded one)."""
        return self._frame(
            f"SELECT case_id, tags, runs, flips, flake_rate, measured_at, {self._flake_hash()} "
            "FROM flakes WHERE config_hash = ? AND measured_at = (SELECT max(measured_at) "
            "FROM flakes WHERE config_hash = ?) ORDER BY case_id",
            [config_hash, config_hash],
        )

    def flake_measurements(self, config_hashes: Sequence[str]) -> pl.DataFrame:
        """Every stored flake row of these configurations, newest first, with columns
        ``config_hash, measured_at, case_id, case_hash, runs, flips, flake_rate, written_by``
        (``case_hash`` NULL where it was measured before evalkit recorded one; ``written_by``,
        `evalkit.provenance.Writer` JSON, NULL where it was measured before evalkit recorded
        who measured it)."""
        written_by = (
            "written_by"
            if self._has_column("flakes", "written_by")
            else "CAST(NULL AS VARCHAR) AS written_by"
        )
        return self._frame(
            f"SELECT config_hash, measured_at, case_id, {self._flake_hash()}, runs, flips, "
            f"flake_rate, {written_by} FROM flakes "
            "WHERE config_hash IN (SELECT UNNEST(?::VARCHAR[])) "
            "ORDER BY measured_at DESC, config_hash, case_id",
            [list(config_hashes)],
        )

    def _flake_hash(self) -> str:
        """The flakes' ``case_hash`` column, or NULL in an older store opened read-only."""
        if self._has_column("flakes", "case_hash"):
            return "case_hash"
        return "CAST(NULL AS VARCHAR) AS case_hash"

    def query(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        """Run a read-only SQL query and return a Polars frame (for notebooks)."""
        return self._frame(sql, list(params))

    def records(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query and return its rows as dicts, without Polars (the run
        path's summary uses it).

        Examples:
            >>> store.records("SELECT count(*) AS n FROM runs")  # doctest: +SKIP
            [{'n': 2}]
        """
        result = self._con.execute(sql, list(params))
        names = [column[0] for column in result.description]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]

    def _has_column(self, table: str, column: str) -> bool:
        """False for a store created before the column existed and opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = ? "
            "AND column_name = ?",
            [table, column],
        ).fetchall()
        return bool(rows[0][0])

    def has_table(self, name: str) -> bool:
        """Whether the store has table ``name`` (a store of an older evalkit may lack one)."""
        return self._has_table(name)

    def _has_table(self, name: str) -> bool:
        """False for a store created before the table existed and opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()
        return bool(rows[0][0])

    # -- internals --------------------------------------------------------------------------

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        import polars as pl

        # Polars reads the relation's Arrow C stream; ``.pl()`` would go through pyarrow.
        return pl.DataFrame(self._con.sql(sql, params=list(params or [])))

    def _insert(self, table: str, rows: Columns, types: dict[str, str]) -> None:
        """Insert column lists: one list parameter per column, unnested side by side (DuckDB
        converts each list in C; ``executemany`` would bind row by row, ~50x slower).

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
        # itself, so writing never imports pyarrow (~40 MiB and ~20 ms at start-up).
        self._con.register(name, ArrowStream(frame))
        try:
            columns = ", ".join(frame.columns)
            self._con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {name}")
        finally:
            self._con.unregister(name)

    def _transaction(self) -> _Transaction:
        if self.read_only:  # DuckDB's own refusal does not say how to open for writing
            raise StoreError(
                f"{self.path}: this store was opened for reading; to write, open it with "
                "open_store(path, write=True)"
            )
        return _Transaction(self._con, self.path)


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


#: What DuckDB says when the file system refused a write (it raises an ``IOException``, or a
#: ``TransactionException`` when the refused write was the commit's own WAL append).
_IO_WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "Input/output error",
    "Could not write file",
)


def _is_io_failure(exc: BaseException) -> bool:
    """An error of the file system under the store (disk full, read-only, I/O), not of SQL."""
    if isinstance(exc, OSError | duckdb.IOException):
        return True
    return isinstance(exc, duckdb.Error) and any(word in str(exc) for word in _IO_WORDS)


def io_reason(exc: BaseException) -> str:
    """The cause of a refused write in one line: ``disk full (No space left on device)``.

    Examples:
        >>> io_reason(OSError(28, "No space left on device"))
        'disk full (No space left on device (ENOSPC))'
    """
    text = os_reason(exc) if isinstance(exc, OSError) else str(exc).strip().splitlines()[0]
    if "No space left on device" in text or "Disk quota exceeded" in text:
        return f"disk full ({text.split(': ')[-1] if not isinstance(exc, OSError) else text})"
    return text


class _Transaction:
    """One transaction; an OS error writing the file (disk full, read-only) becomes a one-line
    StoreError naming it, with the transaction rolled back."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        self._con = con
        self._path = path

    def __enter__(self) -> None:
        self._con.execute("BEGIN TRANSACTION")

    def __exit__(self, exc_type: object, exc: BaseException | None, *rest: object) -> None:
        if exc is None:
            try:
                self._con.execute("COMMIT")
                return
            except (duckdb.Error, OSError) as failed:
                if not _is_io_failure(failed):
                    raise
                exc = failed
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back already
            self._con.execute("ROLLBACK")
        if exc is not None and _is_io_failure(exc):
            raise StoreError(f"{self._path}: cannot write the store: {io_reason(exc)}") from None
