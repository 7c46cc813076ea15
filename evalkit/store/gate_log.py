"""The gate log: one row per gate decision taken (``evalkit gate``, ``evalkit compare``,
``evalkit.Project.gate`` and ``.compare``), so ``evalkit history`` can say how often a
promoted baseline's exam has been consulted — each decision is one more look at the same
cases, the adaptive reuse that erodes a holdout (seed 003; Dwork et al. 2015).

A row holds ids, counts and the status only — no finding text, no model output, no path, no
environment — so nothing secret can reach it. It is appended in one transaction that also
creates the table: a store from before the log gains it on its first decision, one that never
logged has none (:meth:`GateLog.gate_log` then returns no rows), and a failed write leaves no
half-written row.

Examples:
    >>> import tempfile
    >>> from evalkit.store import open_store
    >>> tmp = tempfile.TemporaryDirectory()
    >>> store = open_store(f"{tmp.name}/s.duckdb", write=True)
    >>> store.gate_log().height
    0
    >>> record = GateRecord(command="gate", base_run_id="base-1", cand_run_id="cand-1",
    ...     status="PASSED", exam_id="e1", n_paired=40)
    >>> store.log_gate(record)
    >>> store.gate_log().select("command", "base_run_id", "status", "n_paired").row(0)
    ('gate', 'base-1', 'PASSED', 40)
    >>> store.close(); tmp.cleanup()
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import astuple, dataclass, field, fields
from typing import TYPE_CHECKING

from evalkit.store.schema import GATES_DDL

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from pathlib import Path

    import duckdb
    import polars as pl


#: The commands that take a gate decision, as the log names them.
COMMANDS = ("gate", "compare", "project.gate", "project.compare")
#: The decision's states (`evalkit.compare.decision.GateDecision.status`).
STATUSES = ("PASSED", "BLOCKED", "UNVERIFIED", "PASSED WITH OVERRIDE")


@dataclass(frozen=True, kw_only=True)
class GateRecord:
    """One gate decision as the log keeps it: which command took it, on which pair, against
    which pinned exam (``exam_id``, None for a baseline promoted without one) and corpus
    version (the baseline's corpus hash), whether the candidate ran the sealed slice, the
    status, and counts (paired cases, those with evidence on both sides, findings, and the
    findings that stopped it)."""

    command: str
    base_run_id: str
    cand_run_id: str
    status: str
    exam_id: str | None = None
    corpus_hash: str | None = None
    sealed: bool = False
    n_paired: int = 0
    n_verified: int = 0
    n_findings: int = 0
    n_stopping: int = 0
    decided_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    gate_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])

    def __post_init__(self) -> None:
        if self.command not in COMMANDS:
            raise ValueError(f"a gate record's command is one of {COMMANDS}, not {self.command!r}")
        if self.status not in STATUSES:
            raise ValueError(f"a gate record's status is one of {STATUSES}, not {self.status!r}")


_COLUMNS = ("gate_id", "decided_at", "command", "base_run_id", "cand_run_id", "exam_id",
            "corpus_hash", "sealed", "status", "n_paired", "n_verified", "n_findings",
            "n_stopping")  # fmt: skip


class GateLog:
    """Store methods for the gate log (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property and methods

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

        def _transaction(self) -> AbstractContextManager[None]: ...

        def has_table(self, name: str) -> bool: ...

    _frame: Callable[..., pl.DataFrame]
    path: Path

    def log_gate(self, record: GateRecord) -> None:
        """Append ``record`` in one transaction (creating the table if the store has none):
        all of the row or, on any failure, nothing."""
        import duckdb

        from evalkit.errors import StoreError

        values = dict(zip((f.name for f in fields(record)), astuple(record), strict=True))
        try:
            with self._transaction():
                self._con.execute(GATES_DDL)
                self._con.execute(
                    f"INSERT INTO gates ({', '.join(_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                    [values[c] for c in _COLUMNS],
                )
        except duckdb.Error as exc:  # rolled back whole (an I/O failure is a StoreError already)
            reason = str(exc).strip().splitlines()[0]
            raise StoreError(f"{self.path}: cannot log the gate decision: {reason}") from None

    def gate_log(self) -> pl.DataFrame:
        """Every logged decision, oldest first (no rows in a store that never logged one)."""
        if not self.has_table("gates"):
            return _empty()
        return self._frame(f"SELECT {', '.join(_COLUMNS)} FROM gates ORDER BY decided_at, gate_id")


def _empty() -> pl.DataFrame:
    """The log's columns with no rows (a store that never logged a decision)."""
    import polars as pl

    schema: dict[str, pl.DataType] = {c: pl.String() for c in _COLUMNS}
    schema |= {c: pl.Int64() for c in _COLUMNS if c.startswith("n_")}
    schema |= {"decided_at": pl.Datetime("us", "UTC"), "sealed": pl.Boolean()}
    return pl.DataFrame(schema=schema)
