"""A frame handed to DuckDB through the Arrow C stream alone.

DuckDB scans a Polars frame by converting it with pyarrow, but an object exposing nothing except
``__arrow_c_stream__`` it reads itself, with no pyarrow at all: writing to the store never
imports pyarrow (an optional extra, and a large import for a short run).

Examples:
    >>> import duckdb, polars as pl
    >>> con = duckdb.connect()
    >>> con.register("t", ArrowStream(pl.DataFrame({"x": [1, 2]})))  # doctest: +ELLIPSIS
    <...>
    >>> con.execute("SELECT sum(x) FROM t").fetchall()
    [(3,)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a lean run writes without importing polars
    import polars as pl


class ArrowStream:
    """Only the Arrow PyCapsule stream of ``frame``."""

    __slots__ = ("_frame",)

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._frame.__arrow_c_stream__(requested_schema)
