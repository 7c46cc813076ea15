"""User-facing errors: one line, naming the file, line and case id, saying what to do.

The CLI prints ``str(error)`` without a traceback and exits 2.
"""

from __future__ import annotations

from pathlib import Path

from evalkit.redact import redact_secrets


class EvalkitError(Exception):
    """Base class for errors the user can act on."""

    exit_code = 2


class CorpusError(EvalkitError):
    """A case file or suite config is invalid.

    Examples:
        >>> str(CorpusError("duplicate id", path="cases/a.yaml", line=3, case_id="x-1"))
        'cases/a.yaml:3: case x-1: duplicate id'
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        case_id: str | None = None,
        column: int | None = None,
    ) -> None:
        self.message = " ".join(str(message).split())  # always one line
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        self.case_id = case_id
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where = f"{where}:{self.line}"
            if self.column is not None:
                where = f"{where}:{self.column}"
        who = f" case {self.case_id}:" if self.case_id else ""
        return f"{where}:{who} {self.message}"


class ConfigError(EvalkitError):
    """The suite config or gate policy is invalid (one line, names the file and key)."""


class StoreError(EvalkitError):
    """The DuckDB store cannot be used (locked by another writer, unknown run id, ...)."""


class ComparabilityError(EvalkitError):
    """Two runs differ in more than the declared variable under test."""


class ProviderError(Exception):
    """A provider call failed. ``retryable`` errors are retried with backoff.

    ``cause`` (what the runner stores and prints) has secrets removed.
    """

    def __init__(self, cause: str, *, retryable: bool, retry_after: float | None = None) -> None:
        cause = redact_secrets(cause)
        super().__init__(cause)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after


class IncompleteRunError(EvalkitError):
    """A run to compare or gate is not complete: the gate cannot verify what never ran.

    Exits 1 like an UNVERIFIED gate (it is one), not 2: nothing is wrong with the command.
    """

    exit_code = 1
