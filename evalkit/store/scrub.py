"""The storage boundary: registered secrets are never written. Output text keeps every byte but
a registered key; errors and reasons also lose anything key-shaped; JSON stays valid JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from evalkit.redact import has_secrets, redact_known, redact_secrets

if TYPE_CHECKING:
    import polars as pl

#: Columns as lists (the run's batches) or a Polars frame (rescoring, merging, imports).
Table = TypeVar("Table", "pl.DataFrame", dict[str, list[Any]])


def _scrub(table: Table, redactions: dict[str, Callable[[str], str]]) -> Table:
    """``table`` with each named string column passed through its redaction (a no-op when no
    secret is registered)."""
    if not has_secrets():
        return table
    if isinstance(table, dict):
        return {
            name: [None if v is None else redactions[name](v) for v in values]
            if name in redactions
            else values
            for name, values in table.items()
        }
    import polars as pl

    if table.is_empty():
        return table
    return table.with_columns(
        pl.col(name).map_elements(fn, return_dtype=pl.String, skip_nulls=True)
        for name, fn in redactions.items()
        if name in table.columns and table.schema[name] == pl.String
    )


# Overloads rather than the type variable alone: a caller holding either kind (a union) gets
# the union back.
@overload
def scrub_outputs(table: pl.DataFrame) -> pl.DataFrame: ...
@overload
def scrub_outputs(table: dict[str, list[Any]]) -> dict[str, list[Any]]: ...
def scrub_outputs(table: Table) -> Table:
    """Output text keeps every byte but a registered key; errors lose anything key-shaped.

    Examples:
        >>> scrub_outputs({"text": ["hi", None], "replay": [0, 1]})
        {'text': ['hi', None], 'replay': [0, 1]}
    """
    return _scrub(
        table,
        {"text": redact_known, "tool_calls": scrub_json, "error": redact_secrets,
         "fail_reason": redact_secrets},
    )  # fmt: skip


@overload
def scrub_scores(table: pl.DataFrame) -> pl.DataFrame: ...
@overload
def scrub_scores(table: dict[str, list[Any]]) -> dict[str, list[Any]]: ...
def scrub_scores(table: Table) -> Table:
    return _scrub(table, {"reason": redact_secrets, "details": scrub_json})


def scrub_json(text: str) -> str:
    """A JSON document without registered keys: scrubbed value by value, so the result is still
    valid JSON (a key inside an escaped string is found after decoding)."""
    if not has_secrets() or (redact_known(text) == text and "\\u" not in text):
        return text  # keys are plain ASCII: one hidden in the JSON would need a \u escape
    try:
        value = json.loads(text)
    except ValueError:
        return redact_known(text)
    cleaned = _scrub_value(value)
    return text if cleaned == value else json.dumps(cleaned, ensure_ascii=False)


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_known(value)
    if isinstance(value, list):
        return [_scrub_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    return value
