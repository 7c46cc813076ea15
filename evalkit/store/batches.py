"""A run's rows in and out of the store batch by batch, in bounded memory: what ``evalkit push``
reads and ``evalkit pull`` writes, however large the run.

Reads stream a query as Arrow record batches (DuckDB's own reader: it produces a batch as it is
asked for one). Writes take rows staged in another DuckDB file (a pull stages a run there, batch
by batch, and checks it) and copy them into the store's tables in one transaction together with
any other rows (:meth:`BatchIO.import_staged`).

Examples:
    >>> import tempfile
    >>> from evalkit.store import open_store
    >>> tmp = tempfile.TemporaryDirectory()
    >>> store = open_store(f"{tmp.name}/s.duckdb", write=True)
    >>> sql = "SELECT range AS n FROM range(5)"
    >>> [b.num_rows for b in store.record_batches(sql, batch_rows=2)]
    [2, 2, 1]
    >>> store.close(); tmp.cleanup()
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import StoreError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import duckdb
    import polars as pl
    import pyarrow as pa

#: Rows per batch a push reads and a pull writes: a run's outputs at ~400 bytes a row keep
#: each batch near 20 MB of Arrow.
BATCH_ROWS = 50_000
#: DuckDB's memory while a pull stages a run: past it, its temporary tables spill to disk.
STAGE_MEMORY = "256MB"


class BatchIO:
    """Store methods reading and writing rows batch by batch (mixed into
    :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

        def _transaction(self) -> AbstractContextManager[None]: ...

        def _checked_frames(
            self,
            tables: Mapping[str, pa.Table | pl.DataFrame],
            replace_on: Mapping[str, Sequence[str]],
        ) -> dict[str, pl.DataFrame]: ...

        def _insert_frames(
            self, frames: Mapping[str, pl.DataFrame], replace_on: Mapping[str, Sequence[str]]
        ) -> dict[str, int]: ...

    _conn: duckdb.DuckDBPyConnection | None
    _lock: threading.RLock
    _calls: int
    read_only: bool

    def record_batches(
        self, sql: str, params: Sequence[Any] = (), *, batch_rows: int = BATCH_ROWS
    ) -> Iterator[pa.RecordBatch]:
        """The rows of a read-only query as Arrow record batches of at most ``batch_rows``
        rows, read as they are asked for. A read-only store keeps the file open until the
        batches are read (or the iterator is closed)."""
        with self._lock:
            self._calls += 1
        try:
            cursor = self._con.cursor()  # its own result: other reads may run meanwhile
            # the blocks read stay in DuckDB's buffer pool up to its limit (most of the
            # machine's memory by default): held lower while the batches are read
            ((limit,),) = cursor.execute("SELECT current_setting('memory_limit')").fetchall()
            try:
                cursor.execute(f"SET TimeZone = 'UTC'; SET memory_limit = '{STAGE_MEMORY}'")
                reader = cursor.sql(sql, params=list(params)).to_arrow_reader(batch_rows)
                yield from reader
            finally:
                with contextlib.suppress(Exception):
                    cursor.execute(f"SET memory_limit = '{limit}'")
                cursor.close()
        finally:
            with self._lock:
                self._calls -= 1
                if self.read_only and not self._calls and self._conn is not None:
                    con, self._conn = self._conn, None
                    con.close()

    def import_staged(
        self,
        source: Path,
        staged: Mapping[str, str],
        frames: Mapping[str, pa.Table | pl.DataFrame],
        *,
        replace_on: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, int]:
        """Insert the rows staged in DuckDB file ``source`` and ``frames``, in one transaction
        (all land or none), with DuckDB's memory held to :data:`STAGE_MEMORY` (a million rows
        go from file to file, never through Python).

        ``staged`` maps a table to its group column: the table of that name in ``source`` goes
        in, but for the groups (a run, a scoring) the store holds already, which land whole or
        not at all. ``frames`` go in as :meth:`~evalkit.store.Store.import_rows` takes them.
        Returns rows added per table.

        Raises:
            StoreError: a read-only store, a frame :meth:`import_rows` refuses, or a value its
                column refuses (nothing written then).
        """
        import duckdb

        from evalkit.store.schema import known_tables

        if self.read_only:
            raise StoreError("importing rows needs the store opened for writing")
        known = known_tables()
        replace_on = dict(replace_on or {})
        checked = self._checked_frames(frames, replace_on)
        added: dict[str, int] = {}
        con = self._con
        quoted = str(source).replace("'", "''")
        con.execute(f"SET memory_limit = '{STAGE_MEMORY}'")
        con.execute(f"ATTACH '{quoted}' AS _staged (READ_ONLY)")
        try:
            with self._transaction():
                for name, group in staged.items():
                    columns = ", ".join({**known[name][0], **known[name][1]})
                    present = [
                        r[0]
                        for r in con.execute(
                            f"SELECT DISTINCT {group} FROM {name} WHERE {group} IN "
                            f"(SELECT DISTINCT {group} FROM _staged.{name})"
                        ).fetchall()
                    ]
                    row = con.execute(
                        f"INSERT INTO {name} ({columns}) SELECT {columns} FROM _staged.{name} "
                        f"WHERE NOT list_contains($1::VARCHAR[], {group})",
                        [present],
                    ).fetchone()
                    added[name] = int(row[0]) if row else 0
                added.update(self._insert_frames(checked, replace_on))
        except duckdb.Error as exc:  # a value its column refuses: rolled back whole
            raise StoreError(f"cannot import rows: {str(exc).splitlines()[0]}") from None
        finally:
            con.execute("DETACH _staged")
            con.execute("RESET memory_limit")
        return added
