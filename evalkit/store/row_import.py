"""Copying rows in from another store: whole rows into evalkit's tables, every table in one
transaction, as ``evalkit pull`` brings them from the team's shared store (mixed into
:class:`evalkit.store.Store`).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from evalkit.errors import StoreError
from evalkit.store.arrow_stream import ArrowStream
from evalkit.store.schema import LAZY_DDL
from evalkit.store.transaction import serialized

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa


class RowImports:
    """Store methods that import rows (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    path: Path
    read_only: bool
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _lock: threading.RLock
    _append: Callable[[str, pl.DataFrame], None]
    _transaction: Callable[[], Any]

    @serialized
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
            >>> import datetime as dt, tempfile, polars as pl
            >>> from evalkit.store import open_store
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
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only; cannot import rows")
        frames = self._checked_frames(tables, replace_on or {})
        try:
            with self._transaction():
                return self._insert_frames(frames, replace_on or {})
        except duckdb.Error as exc:  # a value its column refuses: rolled back whole
            raise StoreError(
                f"{self.path}: cannot import rows: {str(exc).splitlines()[0]}"
            ) from None

    def _checked_frames(
        self,
        tables: Mapping[str, pa.Table | pl.DataFrame],
        replace_on: Mapping[str, Sequence[str]],
    ) -> dict[str, pl.DataFrame]:
        """``tables`` as frames of exactly their table's columns (:meth:`import_rows`)."""
        import polars as pl

        from evalkit.store.schema import known_tables

        known = known_tables()
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
        return frames

    def _insert_frames(
        self, frames: Mapping[str, pl.DataFrame], replace_on: Mapping[str, Sequence[str]]
    ) -> dict[str, int]:
        """Insert checked frames inside the caller's transaction; rows per table."""
        imported: dict[str, int] = {}
        for name, frame in frames.items():
            imported[name] = frame.height
            if not frame.height:
                continue
            if name in LAZY_DDL:  # made by its first write (a first pull's seals or gates)
                self._con.execute(LAZY_DDL[name])
            if replace_on.get(name):
                self._delete_matching(name, frame, replace_on[name])
            self._append(name, frame)
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
