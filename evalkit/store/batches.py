"""A run's rows in and out of the store batch by batch, in bounded memory: what ``evalkit push``
reads and ``evalkit pull`` writes, however large the run.

Reads stream a query as Arrow record batches (DuckDB's own reader: it produces a batch as it is
asked for one). Writes stage batches into temporary tables of the store's connection, which
DuckDB spills to disk past :data:`STAGE_MEMORY`, checked there by SQL and then copied into the
store's tables in one transaction together with any other rows (:meth:`BatchIO.import_staged`).

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

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalkit.errors import StoreError

if TYPE_CHECKING:
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
    _con: duckdb.DuckDBPyConnection
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
            try:
                cursor.execute("SET TimeZone = 'UTC'")
                reader = cursor.sql(sql, params=list(params)).to_arrow_reader(batch_rows)
                yield from reader
            finally:
                cursor.close()
        finally:
            with self._lock:
                self._calls -= 1
                if self.read_only and not self._calls and self._conn is not None:
                    con, self._conn = self._conn, None
                    con.close()

    def stage(self, name: str, batches: Iterable[pa.RecordBatch], columns: Sequence[str]) -> int:
        """Copy ``batches`` (each with at least ``columns``) into a new temporary table
        ``name`` of this connection (replacing one of that name), limiting DuckDB's memory to
        :data:`STAGE_MEMORY` so the table spills to disk rather than grow in memory; returns
        the rows staged. :meth:`drop_staged` removes it."""
        if self.read_only:
            raise StoreError("staging rows needs the store opened for writing")
        con = self._con
        con.execute(f"SET memory_limit = '{STAGE_MEMORY}'")
        staged = 0
        listed = ", ".join(columns)
        for batch in batches:
            con.register("_stage_batch", batch)
            try:
                if not staged:
                    con.execute(
                        f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {listed} FROM _stage_batch"
                    )
                else:
                    con.execute(f"INSERT INTO {name} SELECT {listed} FROM _stage_batch")
            finally:
                con.unregister("_stage_batch")
            staged += batch.num_rows
        if not staged:
            raise ValueError(f"{name}: no batch to stage (stage an empty batch for no rows)")
        return staged

    def staged_query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a small query over staged tables (counts, a few examples)."""
        return self._con.execute(sql, list(params)).fetchall()

    def drop_staged(self, names: Iterable[str]) -> None:
        """Remove staged tables and give DuckDB its default memory limit back."""
        for name in names:
            self._con.execute(f"DROP TABLE IF EXISTS temp.{name}")
        self._con.execute("RESET memory_limit")

    def import_staged(
        self,
        staged: Mapping[str, tuple[str, Sequence[str]]],
        frames: Mapping[str, pa.Table | pl.DataFrame],
        *,
        replace_on: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, int]:
        """Insert staged rows and ``frames`` in one transaction (all land or none).

        ``staged`` maps a table to ``(temporary table, key columns)``: the staged rows go in
        unless the table holds a row with their key already (a run's outputs land whole or
        not at all). ``frames`` go in as :meth:`~evalkit.store.Store.import_rows` takes them.
        Returns rows added per table.
        """
        import duckdb

        from evalkit.store.schema import known_tables

        if self.read_only:
            raise StoreError("importing rows needs the store opened for writing")
        known = known_tables()
        replace_on = dict(replace_on or {})
        checked = self._checked_frames(frames, replace_on)  # type: ignore[attr-defined]
        added: dict[str, int] = {}
        try:
            with self._transaction():  # type: ignore[attr-defined]
                for name, (temp, key) in staged.items():
                    columns = ", ".join({**known[name][0], **known[name][1]})
                    same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM s.{c}" for c in key)
                    row = self._con.execute(
                        f"INSERT INTO {name} ({columns}) SELECT {columns} FROM temp.{temp} s "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {name} t WHERE {same})"
                    ).fetchone()
                    added[name] = int(row[0]) if row else 0
                added.update(self._insert_frames(checked, replace_on))  # type: ignore[attr-defined]
        except duckdb.Error as exc:  # a value its column refuses: rolled back whole
            raise StoreError(f"cannot import rows: {str(exc).splitlines()[0]}") from None
        return added
