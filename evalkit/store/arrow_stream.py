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


def rechunked(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each column in one chunk, copied a column at a time: the chunks read from
    DuckDB's stream of each column are let go once it is copied, so what a read holds at once
    is the frame and one column more, not twice the frame (a million cases' hashes).

    Examples:
        >>> import polars as pl
        >>> parts = pl.concat([pl.DataFrame({"a": [1], "b": ["x"]})] * 2, rechunk=False)
        >>> frame = rechunked(parts)
        >>> frame.n_chunks("all"), frame.rows()
        ([1, 1], [(1, 'x'), (1, 'x')])
    """
    import polars as pl

    if max(frame.n_chunks("all"), default=1) <= 1:
        return frame
    columns = []
    for name in frame.columns:
        columns.append(frame.get_column(name).rechunk())
        frame = frame.drop(name)
    return pl.DataFrame(columns)
