"""A pull's copy of a published run into a local store, in bounded memory: the run's large
tables (:data:`STREAMED`) read from the shared scans data file by data file into a scratch
DuckDB file, sealed and checked there (:mod:`evalkit.store.shared.staging`), its other rows read
whole (they are few), then everything inserted in one local transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from evalkit.store.shared.local_rows import insert_missing
from evalkit.store.shared.staging import RunStage, verify_staged
from evalkit.store.shared.tables import (
    SHARED_ONLY,
    TABLES,
    arrow_frame,
    scan_batches,
    with_columns,
)
from evalkit.store.shared.trust_rows import pulled_exams, trusted_promotions
from evalkit.store.shared.verify import SEAL_GROUP, verify_promotions

if TYPE_CHECKING:
    from collections.abc import Iterable

    import polars as pl
    import pyarrow as pa
    from pyiceberg.table import Table

    from evalkit.store.db import Store

#: A run's tables that grow with it: a push reads and appends them, a pull reads and stages
#: them, batch by batch (at most one batch's rows held at once), never whole.
STREAMED = ("cases", "outputs", "scores", "scoring_cases")


class SharedStore(Protocol):
    """What a copy reads of :class:`evalkit.store.shared.store.SharedStore`."""

    largest_batch: int

    def _table(self, name: str, *, create: bool = False) -> Table | None: ...

    def _read(self, name: str, column: str, values: Iterable[str]) -> pa.Table: ...

    def run_ids(self, candidates: Iterable[str]) -> set[str]: ...


def pa_concat(*tables: pa.Table) -> pa.Table:
    """Rows of ``tables`` (one schema), each row once (an override of a run against itself
    is found as base and as candidate)."""
    import polars as pl

    return pl.concat([arrow_frame(t) for t in tables]).unique(maintain_order=True).to_arrow()


def stage_run(shared: SharedStore, run_id: str, stage: RunStage) -> dict[str, pl.DataFrame]:
    """Stage the shared rows of run ``run_id`` (:data:`STREAMED`) in ``stage``, batch by
    batch, and check them with its ``runs`` and ``scorings`` rows as one unit
    (:func:`verify_staged`); returns those two."""
    import polars as pl

    frames: dict[str, pl.DataFrame] = {}
    for name in ("runs", "scorings"):
        frames[name] = pl.from_arrow(shared._read(name, "run_id", [run_id]))  # type: ignore[assignment]
    scorings = set(frames["scorings"]["scoring_id"].drop_nulls().to_list())
    for name in STREAMED:
        column, values = (
            ("scoring_id", scorings) if name == "scoring_cases" else ("run_id", {run_id})
        )
        table = shared._table(name)
        found = scan_batches(table, column, values) if table is not None else iter(())
        spec = TABLES[name]
        batches = (with_columns(pa_table(b), spec).to_batches() for b in found)
        stage.add(name, (b for bs in batches for b in bs), spec.arrow, SEAL_GROUP[name])
    verify_staged(run_id, frames["runs"], frames["scorings"], stage)
    return frames


def copy_run(
    shared: SharedStore, local: Store, run_id: str, suite: str | None, tables: Sequence[str]
) -> dict[str, int]:
    """Copy published run ``run_id`` (``tables`` of it; with ``suite``, its promotion
    history) into ``local``: the run's large tables staged and checked batch by batch, the
    rest read whole, then all in one local transaction; returns rows added per table."""
    import polars as pl

    with RunStage() as stage:
        frames = stage_run(shared, run_id, stage)
        shared.largest_batch = stage.largest_batch
        config_hashes = frames["runs"]["config_hash"].to_list()
        for name in tables:
            if name in frames or name in STREAMED or name in ("exams", "exam_files"):
                continue  # exams: those of the trusted promotions, read below
            if name == "overrides":
                rows = pa_concat(
                    shared._read(name, "cand_run_id", [run_id]),
                    shared._read(name, "base_run_id", [run_id]),
                )
            elif name == "human_labels":
                rows = labels_of(shared, stage)
            elif name == "flakes":
                rows = shared._read(name, "config_hash", config_hashes)
            elif name == "baselines":
                rows = (
                    shared._read(name, "suite", [suite])
                    if suite
                    else shared._read(name, "run_id", [run_id])
                )
            else:
                rows = shared._read(name, "run_id", [run_id])
            frames[name] = pl.from_arrow(rows)  # type: ignore[assignment]
        promotions = frames["baselines"]
        verify_promotions(promotions, shared.run_ids(promotions["run_id"].to_list()))
        trusted = trusted_promotions(promotions.filter(promotions["run_id"] == run_id))
        frames["exams"], frames["exam_files"] = pulled_exams(shared._read, trusted)
        for name, columns in SHARED_ONLY.items():
            if name in frames:
                frames[name] = frames[name].drop(list(columns))
        small = {name: frames[name] for name in tables if name not in STREAMED}
        added = insert_missing(
            local, small, staged=stage.finish(), groups={n: SEAL_GROUP[n] for n in STREAMED}
        )
    return {name: added[name] for name in tables if name in added}  # as a push lists them


def labels_of(shared: SharedStore, stage: RunStage) -> pa.Table:
    """The shared human labels of a run (its cases and outputs staged in ``stage``): those
    of its outputs' texts (``output_hash``) and those of its cases that name no output."""
    import polars as pl

    spec = TABLES["human_labels"]
    table = shared._table("human_labels")
    if table is None or table.current_snapshot() is None:
        return spec.arrow.empty_table()
    # labels are made by hand (thousands, not millions): one scan, filtered here, rather
    # than a filter naming every case id of the run
    found = pl.from_arrow(table.scan().to_arrow().select(list(spec.columns)).cast(spec.arrow))
    assert isinstance(found, pl.DataFrame)
    labelled = found["case_id"].drop_nulls().unique().to_list()
    known = stage.rows(
        "SELECT case_id FROM cases WHERE list_contains($1::VARCHAR[], case_id)", [labelled]
    )
    found = found.filter(pl.col("case_id").is_in([r[0] for r in known]))
    if not found.height:  # no label of the run's cases: no output text hashed
        return found.to_arrow()
    hashes = stage.rows(  # sha256 of each output's UTF-8 text, in hex, as labels name it
        "SELECT DISTINCT sha256(text) FROM outputs WHERE text IS NOT NULL "
        "AND list_contains($1::VARCHAR[], case_id)",
        [found["case_id"].unique().to_list()],
    )
    kept = found.filter(
        pl.col("output_hash").is_null() | pl.col("output_hash").is_in([h[0] for h in hashes])
    )
    return kept.to_arrow()


def pa_table(batch: pa.RecordBatch) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_batches([batch])
