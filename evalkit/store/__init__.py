"""The DuckDB store, the ground floor of evalkit: it records runs, outputs, scores, labels and
calibrations and returns Polars frames. It imports nothing above it (a test checks).

Examples:
    >>> store = open_store("data/evalkit.duckdb")          # doctest: +SKIP
    >>> store.runs().select("run_id", "label").head(2)      # doctest: +SKIP
"""

from evalkit.store.db import (
    DEFAULT_DB,
    READ_RETRY_S,
    REOPEN_WAIT_S,
    RunRef,
    Store,
    StoredCase,
    initial_scoring_id,
    new_run_id,
    open_store,
)
from evalkit.store.schema import (
    CALIBRATION_SCHEMA,
    HUMAN_LABEL_SCHEMA,
    OUTPUT_SCHEMA,
    PAIRWISE_SCHEMA,
    SCORE_SCHEMA,
)

__all__ = [
    "CALIBRATION_SCHEMA",
    "DEFAULT_DB",
    "HUMAN_LABEL_SCHEMA",
    "OUTPUT_SCHEMA",
    "PAIRWISE_SCHEMA",
    "READ_RETRY_S",
    "REOPEN_WAIT_S",
    "SCORE_SCHEMA",
    "RunRef",
    "Store",
    "StoredCase",
    "initial_scoring_id",
    "new_run_id",
    "open_store",
]
