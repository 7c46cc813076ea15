"""A table's seal (:func:`~evalkit.store.shared.verify.table_seal`) made batch by batch, in
bounded memory: what a push of a million outputs records and a pull of them checks, without
holding the run.

A seal hashes each row's canonical JSON line in sorted order, so it is the same whatever order
the rows come in. Sorting a million lines in Python holds them all; here each batch's lines go
into a scratch DuckDB database with a memory limit, whose sort spills to disk past it, and the
sorted lines come back in batches to be hashed. DuckDB compares text byte by byte, and UTF-8's
byte order is its code points' order (Python's ``sorted``): the two seals are equal.

Rows may be sealed in groups (a run's scores, one seal per scoring): each group's lines are
hashed apart, in the order of their text.

Examples:
    >>> import pyarrow as pa
    >>> from evalkit.store.shared.verify import table_seal
    >>> rows = pa.table({"g": ["s1", "s2", "s1"], "v": ["é", "b", "a"]})
    >>> with SealBuilder("g") as seals:
    ...     for batch in rows.to_batches(max_chunksize=2):
    ...         seals.add(batch)
    ...     made = seals.seals()
    >>> made["s1"] == table_seal(rows.filter(pa.compute.equal(rows["g"], "s1")))
    True
    >>> made["s2"]["rows"]
    1
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

#: What the scratch database may hold in memory before its sort spills to disk.
SCRATCH_MEMORY = "128MB"
#: Sorted lines read back per batch.
READ_ROWS = 20_000


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def row_line(row: dict[str, Any]) -> str:
    """One row's canonical JSON line, as :func:`~evalkit.store.shared.verify.table_seal`
    hashes it (sorted keys; timestamps in ISO form)."""
    return json.dumps(row, sort_keys=True, default=_iso, ensure_ascii=False)


def empty_seal() -> dict[str, Any]:
    """The seal of no rows."""
    return {"rows": 0, "sha256": hashlib.sha256().hexdigest()}


class SealBuilder:
    """Seals of rows added batch by batch, one per value of column ``group`` (None: one seal,
    under the key None). A context manager: its scratch database is removed on exit."""

    def __init__(self, group: str | None = None) -> None:
        import duckdb

        self._group = group
        self._folder = tempfile.mkdtemp(prefix="evalkit-seal-")
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect()
        self._con.execute(
            f"SET memory_limit = '{SCRATCH_MEMORY}'; SET threads = 1; "
            f"SET temp_directory = '{self._folder}'; SET preserve_insertion_order = false"
        )
        self._con.execute("CREATE TABLE lines (grp VARCHAR, line VARCHAR)")
        self.rows = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add the rows of ``batch`` (every column is hashed, the group's too)."""
        import pyarrow as pa

        assert self._con is not None
        rows = batch.to_pylist()
        if not rows:
            return
        groups = [row[self._group] for row in rows] if self._group else [None] * len(rows)
        lines = pa.table(
            {"grp": pa.array(groups, pa.string()), "line": [row_line(r) for r in rows]}
        )
        self._con.register("_lines", lines)
        try:
            self._con.execute("INSERT INTO lines SELECT grp, line FROM _lines")
        finally:
            self._con.unregister("_lines")
        self.rows += len(rows)

    def seals(self) -> dict[str | None, dict[str, Any]]:
        """``{group: {"rows": n, "sha256": digest}}`` of every group added so far."""
        assert self._con is not None
        found: dict[str | None, dict[str, Any]] = {}
        digest, group, count = hashlib.sha256(), None, 0
        reader = self._con.sql("SELECT grp, line FROM lines ORDER BY grp, line").to_arrow_reader(
            READ_ROWS
        )
        started = False
        for batch in reader:
            for grp, line in zip(
                batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True
            ):
                if started and grp != group:
                    found[group] = {"rows": count, "sha256": digest.hexdigest()}
                    digest, count = hashlib.sha256(), 0
                started, group = True, grp
                digest.update(line.encode("utf-8"))
                digest.update(b"\n")
                count += 1
        if started:
            found[group] = {"rows": count, "sha256": digest.hexdigest()}
        return found

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> SealBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
