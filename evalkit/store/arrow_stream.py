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
    is the frame and one column more, not twice the frame (a million cases' hashes). A string
    column of nulls alone (`nulls_alone`) is held as nulls alone: no value of it is stored.

    Examples:
        >>> import polars as pl
        >>> parts = pl.concat([pl.DataFrame({"a": [1], "b": ["x"]})] * 2, rechunk=False)
        >>> frame = rechunked(parts)
        >>> frame.n_chunks("all"), frame.rows()
        ([1, 1], [(1, 'x'), (1, 'x')])
    """
    import polars as pl

    empty = nulls_alone(frame)
    if max(frame.n_chunks("all"), default=1) <= 1 and not empty:
        return frame
    columns = []
    for name in frame.columns:
        column = frame.get_column(name)
        if name in empty:
            column = pl.repeat(None, column.len(), dtype=column.dtype, eager=True).alias(name)
        columns.append(column.rechunk())
        frame = frame.drop(name)
    return pl.DataFrame(columns)


def nulls_alone(frame: pl.DataFrame) -> list[str]:
    """The string columns of ``frame`` holding nulls alone (a run's ``error`` and
    ``fail_reason`` where no output failed): read from DuckDB, each row of one is a 16-byte
    view all the same, 15 MiB a million rows; made by `polars.repeat`, none.

    Examples:
        >>> import polars as pl
        >>> nulls_alone(pl.DataFrame({"a": ["x", None], "b": [None, None], "c": [None, None]},
        ...     schema={"a": pl.String, "b": pl.String, "c": pl.Float64}))
        ['b']
    """
    import polars as pl

    height = frame.height
    return [
        column.name
        for column in frame.get_columns()
        if height and column.dtype == pl.String and column.null_count() == height
    ]
