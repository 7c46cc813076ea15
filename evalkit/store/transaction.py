"""How the store makes a write whole: one DuckDB transaction per write, and the store's thread
lock around the calls that a worker thread and the event loop may make at once.

A file system that refuses a write (disk full, read-only, an I/O error) rolls the transaction
back and becomes one :class:`~evalkit.errors.StoreError` line naming the store and the cause.

Examples:
    >>> io_reason(OSError(28, "No space left on device"))
    'disk full (No space left on device (ENOSPC))'
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import duckdb

from evalkit.errors import StoreError
from evalkit.store.lock import os_reason


class _Locked(Protocol):
    @property
    def _lock(self) -> AbstractContextManager[Any]: ...


_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound=_Locked)


def serialized(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Run ``method`` holding the store's lock: the runner writes batches from a worker thread
    (so the event loop keeps serving requests) while the loop may read the response cache."""

    @functools.wraps(method)
    def locked(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


#: What DuckDB says when the file system refused a write (it raises an ``IOException``, or a
#: ``TransactionException`` when the refused write was the commit's own WAL append).
_IO_WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "Input/output error",
    "Could not write file",
)


def is_io_failure(exc: BaseException) -> bool:
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


class Transaction:
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
                if not is_io_failure(failed):
                    raise
                exc = failed
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back already
            self._con.execute("ROLLBACK")
        if exc is not None and is_io_failure(exc):
            raise StoreError(f"{self._path}: cannot write the store: {io_reason(exc)}") from None
