"""A report's list of case ids held as one column, read as a sequence of strings.

A report lists every unstable, failing-in-both and always-passing case: at a million cases,
800,000 ids as Python strings in tuples (about 110 MiB) held through the rest of the report.
`CaseIds` keeps them as the Polars column they were filtered from (a few bytes an id) and
reads like the tuple it replaces: its length, an id by index, a slice, iteration, ``in``, and
equality with a tuple or list of the same ids.

Examples:
    >>> import polars as pl
    >>> ids = CaseIds(pl.Series("case_id", ["a", "b", "c"]))
    >>> len(ids), ids[0], ids[:2], "b" in ids, ids == ("a", "b", "c")
    (3, 'a', ('a', 'b'), True, True)
    >>> ", ".join(ids), list(ids), bool(CaseIds())
    ('a, b, c', ['a', 'b', 'c'], False)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import polars as pl


class CaseIds(Sequence[str]):
    """Case ids as one String column, read as a sequence (see the module docstring)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: pl.Series | Iterable[str] = ()) -> None:
        column = ids if isinstance(ids, pl.Series) else pl.Series("case_id", list(ids), pl.String)
        self._ids = column.cast(pl.String).rechunk()

    @property
    def series(self) -> pl.Series:
        """The ids as the Polars column they are held in."""
        return self._ids

    def __len__(self) -> int:
        return self._ids.len()

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):  # a few shown ids: a tuple, as the tuple's slice was
            return tuple(self._ids.to_list()[index] if index.step else self._slice(index))
        if not -len(self) <= index < len(self):
            raise IndexError("case id index out of range")
        return str(self._ids[index])

    def _slice(self, index: slice) -> list[str]:
        start, stop, _ = index.indices(len(self))
        return self._ids.slice(start, max(0, stop - start)).to_list()

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids.to_list())

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and bool((self._ids == value).any())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CaseIds):
            return self._ids.equals(other._ids, check_names=False)
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and self._ids.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list: unhashable, as a list is

    def __repr__(self) -> str:
        shown = ", ".join(repr(i) for i in self[:5])
        return f"CaseIds([{shown}{', ...' if len(self) > 5 else ''}], n={len(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (CaseIds, (self._ids,))


def ids_where(frame: pl.DataFrame, condition: pl.Expr) -> CaseIds:
    """The ``case_id`` of ``frame``'s rows where ``condition`` holds, as `CaseIds`: the ids
    filtered alone (``frame.filter(...)["case_id"]`` copies every column of the rows kept, a
    million-case pair's paired frame for the cases that always pass).

    Examples:
        >>> frame = pl.DataFrame({"case_id": ["a", "b"], "passed": [True, False]})
        >>> list(ids_where(frame, pl.col("passed")))
        ['a']
    """
    return CaseIds(frame.select(pl.col("case_id").filter(condition)).to_series())
