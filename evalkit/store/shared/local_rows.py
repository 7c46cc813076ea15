"""Rows between the local DuckDB store and the shared tables: a run's rows read out of the
local store as Arrow (what a push publishes), and pulled rows inserted into it, skipping those it
holds already.

Only the store writes SQL; these are the store package's own reads of its tables, and its one
write goes through the store's batch append inside one of its transactions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalkit.store.shared.tables import TABLES

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from evalkit.store.db import Store


def local_rows(local: Store, name: str, run_id: str) -> pa.Table:
    """The rows of ``run_id`` in local table ``name`` that a push publishes, as Arrow with
    every shared column (an older store's missing columns as nulls)."""
    import pyarrow as pa

    where = {
        "scoring_cases": "scoring_id IN (SELECT scoring_id FROM scorings WHERE run_id = $1)",
        "flakes": "config_hash = (SELECT config_hash FROM runs WHERE run_id = $1)",
        # the run's first requests, and what it cached while it ran (later tool-loop steps)
        "response_cache": "cache_key IN (SELECT request_hash FROM outputs WHERE run_id = $1) "
        "OR created_at BETWEEN (SELECT created_at FROM runs WHERE run_id = $1) AND "
        "(SELECT coalesce(finished_at, now()) FROM runs WHERE run_id = $1)",
    }.get(name, "run_id = $1")
    frame = local.query(f"SELECT * FROM {name} WHERE {where}", [run_id]).to_arrow()
    spec = TABLES[name]
    for column in spec.columns:
        if column not in frame.column_names:
            frame = frame.append_column(
                column, pa.nulls(frame.num_rows, spec.arrow.field(column).type)
            )
    return frame.select(list(spec.columns)).cast(spec.arrow)


def insert_missing(local: Store, frames: dict[str, pl.DataFrame]) -> dict[str, int]:
    """Insert each frame's rows whose key ``local`` lacks, all in one local transaction.

    Uses the store's private batch append: ``Store`` has no public insert of whole rows (a
    ``Store.import_rows(table, frame)`` would be the hook)."""

    added: dict[str, int] = {}
    with local._transaction():
        for name, frame in frames.items():
            spec = TABLES[name]
            key = list(spec.key)
            values = frame[key[0]].drop_nulls().unique().to_list()
            present = local.query(
                f"SELECT DISTINCT {', '.join(key)} FROM {name} "
                f"WHERE {key[0]} IN (SELECT UNNEST($1::VARCHAR[]))",
                [values],
            )
            present = present.cast({c: frame.schema[c] for c in key})
            new = frame.join(present, on=key, how="anti", nulls_equal=True)
            if spec.unique:
                new = new.unique(key, keep="first", maintain_order=True)
            if new.height:
                local._append(name, new.select(list(spec.columns)))
            added[name] = new.height
    return added
