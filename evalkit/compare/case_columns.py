"""A run's cases read a column at a time, each column the other run's own where equal (issue 48,
item 4).

The usual gate's candidate ran the baseline's corpus: its cases frame holds the baseline's ids,
hashes, tags and groups row by row. Read whole, a million cases are held three times at once
(DuckDB's result, Polars' copy and the baseline's), only for `share_cases` to drop the copy.
`cases_like` reads ``case_id`` and one column per query instead, and keeps the baseline's column
in place of each one equal to it as it is read: what is held on top of the baseline is one
column (and the ids), not the frame. The values are those of the whole read.

The baseline's own cases are read a column at a time too (``like`` None): a column read beside
the others kept the pages their copies were freed from (a million cases' 64-character hashes
held 150 MiB read with six other columns, 80 read alone).

Examples:
    >>> import polars as pl
    >>> frame = pl.DataFrame({"run_id": ["c", "c"], "case_id": ["a", "b"], "case_hash": ["h", "i"]})
    >>> like = frame.with_columns(run_id=pl.lit("b"))
    >>> read = lambda column: frame.select(list(dict.fromkeys(["case_id", column])))
    >>> cases_like(read, frame.columns, like).rows()
    [('c', 'a', 'h'), ('c', 'b', 'i')]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import polars as pl

from evalkit.compare.shared_cases import same_column
from evalkit.compare.verdicts import strictly_increasing

if TYPE_CHECKING:
    from evalkit.store import Store


def read_cases(
    store: Store,
    run_id: str,
    *,
    without: Sequence[str],
    scoring_id: str,
    like: pl.DataFrame | None,
    compact: Callable[[pl.DataFrame], pl.DataFrame] | None,
) -> pl.DataFrame:
    """``compact(store.cases(run_id, ...))``; with ``compact`` (a thin read), a column at a
    time beside ``like`` (another run's cases, read so) where it holds the same case ids in
    the same order (`cases_like`). None: the frame as stored, read whole."""
    read = partial(store.cases, run_id, without=without, scoring_id=scoring_id)
    if compact is None:
        return read()
    if like is None or like.height:
        stored = store.query("SELECT * FROM cases LIMIT 0").columns
        names = [name for name in stored if name not in without]
        held = cases_like(lambda column: compact(read(column=column)), names, like)
        if held is not None:
            return held
    return compact(read())


def cases_like(
    read: Callable[[str], pl.DataFrame], columns: Sequence[str], like: pl.DataFrame | None
) -> pl.DataFrame | None:
    """The cases frame of ``columns`` from ``read(column)`` (``case_id`` and that column, in
    ``case_id`` order), each column ``like``'s own where its values and type are equal; None
    when the ids read are not each once in order, or ``like`` does not hold the same ids in
    the same order (then read the frame whole). ``like`` None: the run's own columns alone."""
    ids = read("case_id").get_column("case_id")
    if not strictly_increasing(ids):
        return None
    if like is None:
        like = pl.DataFrame([ids])
    if ids.len() != like.height or "case_id" not in like.columns:
        return None
    if not same_column(ids, like.get_column("case_id")):
        return None
    held = []
    for name in columns:
        if name == "case_id":
            held.append(like.get_column("case_id"))
            continue
        piece = read(name)
        if not same_column(piece.get_column("case_id"), ids):  # each once and sorted: cannot differ
            return None
        column = piece.get_column(name)
        del piece  # its ids go before the next column's are read
        if name in like.columns and same_column(column, like.get_column(name)):
            column = like.get_column(name)
        held.append(column)
    return pl.DataFrame(held)
