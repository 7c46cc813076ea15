"""The DuckDB store, the ground floor of evalkit: it records runs, outputs, scores, labels and
calibrations and returns Polars frames. It imports nothing above it (a test checks), and
importing it does not import Polars: a run writes and summarises without it.

Examples:
    >>> store = open_store("data/evalkit.duckdb")          # doctest: +SKIP
    >>> store.runs().select("run_id", "label").head(2)      # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalkit.store import schema
from evalkit.store.db import (
    DEFAULT_DB,
    READ_RETRY_S,
    REOPEN_WAIT_S,
    RunRef,
    Store,
    StoredCase,
    initial_scoring_id,
    new_run_id,
    open_for_analysis,
    open_store,
)
from evalkit.store.schema import OUTPUT_COLUMNS, SCORE_COLUMNS

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "CALIBRATION_SCHEMA",
    "DEFAULT_DB",
    "HUMAN_LABEL_SCHEMA",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "PAIRWISE_SCHEMA",
    "READ_RETRY_S",
    "REOPEN_WAIT_S",
    "SCORE_COLUMNS",
    "SCORE_SCHEMA",
    "RunRef",
    "Store",
    "StoredCase",
    "initial_scoring_id",
    "new_run_id",
    "open_for_analysis",
    "open_store",
]


def __getattr__(name: str) -> dict[str, pl.DataType]:
    # The Polars schemas are built on first use: importing the store must not import Polars.
    if name not in schema.POLARS_SCHEMAS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(schema, name)
