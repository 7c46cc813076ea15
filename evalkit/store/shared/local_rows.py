"""Rows between the local DuckDB store and the shared tables: a run's rows read out of the
local store as Arrow (what a push publishes), and pulled rows inserted into it, skipping those it
holds already.

Only the store writes SQL; these are the store package's own reads of its tables, and its one
write is the store's public :meth:`~evalkit.store.db.Store.import_rows` (every table of a pull
in one transaction).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalkit.store.shared.tables import TABLES

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl
    import pyarrow as pa

    from evalkit.store.db import Store


#: Which of a run's rows each local table publishes (``$1``: the run id); the run's own rows
#: (``run_id = $1``) where a table is not named.
_WHERE = {
    "scoring_cases": "scoring_id IN (SELECT scoring_id FROM scorings WHERE run_id = $1)",
    "flakes": "config_hash = (SELECT config_hash FROM runs WHERE run_id = $1)",
    # the run's first requests, and what it cached while it ran (later tool-loop steps)
    "response_cache": "cache_key IN (SELECT request_hash FROM outputs WHERE run_id = $1) "
    "OR created_at BETWEEN (SELECT created_at FROM runs WHERE run_id = $1) AND "
    "(SELECT coalesce(finished_at, now()) FROM runs WHERE run_id = $1)",
    "overrides": "cand_run_id = $1 OR base_run_id = $1",
    # the gate decisions that looked at the run, as candidate or as baseline
    "gates": "cand_run_id = $1 OR base_run_id = $1",
    "exam_files": "exam_id IN (SELECT exam_id FROM exams WHERE run_id = $1)",
    # the labels of the run's outputs (by the sha256 of their text, as labelling names
    # them) and those of its cases that name no output
    "human_labels": "(output_hash IS NULL AND case_id IN "
    "(SELECT case_id FROM cases WHERE run_id = $1)) OR EXISTS (SELECT 1 FROM outputs o "
    "WHERE o.run_id = $1 AND o.case_id = human_labels.case_id "
    "AND sha256(o.text) = human_labels.output_hash)",
}


def local_rows(local: Store, name: str, run_id: str) -> pa.Table:
    """The rows of ``run_id`` in local table ``name`` that a push publishes, as Arrow with
    every shared column (an older store's missing columns as nulls)."""
    spec = TABLES[name]
    if not local.has_table(name):  # an older store: nothing of this table to publish
        return spec.arrow.empty_table()
    where = _WHERE.get(name, "run_id = $1")
    frame = local.query(f"SELECT * FROM {name} WHERE {where}", [run_id]).to_arrow()
    return conformed(frame, name)


def seal_local(
    local: Store, run_id: str, names: Sequence[str], groups: pa.Array, batch_rows: int
) -> tuple[dict[str, dict[Any, dict[str, Any]]], dict[str, int]]:
    """The seals of the rows of ``run_id`` in each of local tables ``names`` whose group (the
    run for its cases and outputs, a scoring for its scores) is one of ``groups``, and their
    row counts, read batch by batch; a table none of whose groups is named is not read."""
    import pyarrow.compute as pc

    from evalkit.store.shared.seals import SealBuilder
    from evalkit.store.shared.verify import SEAL_GROUP

    named = set(groups.to_pylist())
    seals: dict[str, dict[Any, dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    for name in names:
        with SealBuilder(SEAL_GROUP[name]) as builder:
            of_run = SEAL_GROUP[name] == "run_id"  # else grouped by the run's scorings
            if (run_id in named) if of_run else bool(named - {run_id}):
                for batch in local_batches(local, name, run_id, batch_rows):
                    column = batch.column(SEAL_GROUP[name])
                    builder.add(batch.filter(pc.is_in(column, groups)))
            seals[name], counts[name] = builder.seals(), builder.rows
    return seals, counts


def local_batches(
    local: Store, name: str, run_id: str, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """:func:`local_rows` as record batches of at most ``batch_rows`` rows, read as they
    are asked for (none from a store without the table)."""
    if not local.has_table(name):
        return
    where = _WHERE.get(name, "run_id = $1")
    sql = f"SELECT * FROM {name} WHERE {where}"
    for batch in local.record_batches(sql, [run_id], batch_rows=batch_rows):
        yield from conformed(batch, name).to_batches()


def conformed(rows: pa.Table | pa.RecordBatch, name: str) -> pa.Table:
    """``rows`` with exactly shared table ``name``'s columns and types (a column the rows
    lack as nulls)."""
    import pyarrow as pa

    spec = TABLES[name]
    frame = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
    for column in spec.columns:
        if column not in frame.column_names:
            frame = frame.append_column(
                column, pa.nulls(frame.num_rows, spec.arrow.field(column).type)
            )
    return frame.select(list(spec.columns)).cast(spec.arrow)


def insert_missing(
    local: Store,
    frames: dict[str, pl.DataFrame],
    *,
    staged: Path | None = None,
    groups: Mapping[str, str] | None = None,
    record: pl.DataFrame | None = None,
) -> dict[str, int]:
    """Insert each frame's rows whose key ``local`` lacks (of human labels, the newer ones),
    and the rows staged in DuckDB file ``staged`` (table -> its group column in ``groups``:
    a group the local store holds is skipped), with them the run's verified seals ``record``
    (a ``pulled_seals`` row), all in one local transaction; returns rows added per table.

    The keys ``local`` holds are read first, then the rows it lacks go in together: a
    writing store holds its writer lock for its whole life, so nothing lands in between.
    """
    new: dict[str, pl.DataFrame] = {}
    for name, frame in frames.items():
        new[name] = (
            _newest_labels(local, frame) if name == "human_labels" else _absent(local, name, frame)
        )
    labels: dict[str, Sequence[str]] | None = (
        {"human_labels": _LABEL_IDENTITY} if "human_labels" in new else None
    )
    if staged is None:
        return local.import_rows(new, replace_on=labels)
    if record is not None:  # the run's seals, replacing those an earlier pull recorded
        new["pulled_seals"], labels = record, {**(labels or {}), "pulled_seals": ("run_id",)}
    added = local.import_staged(staged, dict(groups or {}), new, replace_on=labels)
    return {name: added[name] for name in TABLES if name in added}


def _absent(local: Store, name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``frame`` whose key local table ``name`` lacks, each unique key once."""
    spec = TABLES[name]
    key = list(spec.key)
    if not local.has_table(name):  # made by its first write (schema.LAZY_DDL): none held
        new = frame.unique(key, keep="first", maintain_order=True) if spec.unique else frame
        return new.select([c for c in spec.columns if c in frame.columns])
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
    return new.select([c for c in spec.columns if c in frame.columns])


#: What names one human label (a relabel replaces it): as ``Store.save_human_labels``.
_LABEL_IDENTITY = ("case_id", "output_hash", "rater", "scorer")


def text_hashes(outputs: pl.DataFrame) -> set[str]:
    """The ``output_hash`` of each output text (sha256 of its UTF-8, as labels name it)."""
    import hashlib

    return {
        hashlib.sha256(text.encode("utf-8")).hexdigest()
        for text in outputs["text"].drop_nulls().to_list()
    }


def _newest_labels(local: Store, frame: pl.DataFrame) -> pl.DataFrame:
    """Of each pulled label's identity the newest, where it is newer than ``local``'s (or
    ``local`` has none): the rows to import, replacing the local label of the same identity."""
    import polars as pl

    spec = TABLES["human_labels"]
    if not frame.height:
        return frame.select(list(spec.columns))
    identity = list(_LABEL_IDENTITY)
    newest = frame.sort("imported_at", descending=True, nulls_last=True).unique(
        identity, keep="first", maintain_order=True
    )
    mine = local.query(
        "SELECT case_id, output_hash, rater, scorer, max(imported_at) AS local_at "
        "FROM human_labels WHERE case_id IN (SELECT UNNEST($1::VARCHAR[])) "
        "GROUP BY ALL",
        [newest["case_id"].unique().to_list()],
    )
    mine = mine.cast({c: newest.schema[c] for c in identity})
    joined = newest.join(mine, on=identity, how="left", nulls_equal=True)
    newer = pl.col("imported_at") > pl.col("local_at")
    return joined.filter(pl.col("local_at").is_null() | newer).select(list(spec.columns))
