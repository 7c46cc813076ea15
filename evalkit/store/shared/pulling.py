"""A pull's copy of a published run into a local store, in bounded memory: the run's large
tables (:data:`STREAMED`) read from the shared scans data file by data file into a scratch
DuckDB file, sealed and checked there (:mod:`evalkit.store.shared.staging`), its other rows read
whole (they are few), then everything inserted in one local transaction.

A run staged, verified and new to the local store has its seals and the shared data files it
was read from recorded with its rows (``pulled_seals``); pulled again while both are the same
(the files read from the tables' manifests alone), it is not staged: nothing of it would be
added, and nothing of the shared rows is taken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from evalkit.store.shared.local_rows import insert_missing
from evalkit.store.shared.staging import RunStage, verify_staged
from evalkit.store.shared.tables import (
    SHARED_ONLY,
    TABLES,
    arrow_frame,
    planned_files,
    scan_batches,
    with_columns,
)
from evalkit.store.shared.trust_rows import pulled_exams, trusted_promotions
from evalkit.store.shared.verify import SEAL_COLUMN, SEAL_GROUP, verify_promotions

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
    staged_rows: int

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
        planned = stage.files[name] = []
        found = scan_batches(table, column, values, planned) if table is not None else iter(())
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
    rest read whole, then all in one local transaction; returns rows added per table.

    A run an earlier pull verified and copied in, whose shared seals are still the ones that
    pull recorded (and whose rows the local store still holds, as many as sealed), stages
    none of its large tables: they would add nothing, and nothing of them is taken."""
    import polars as pl

    with RunStage() as stage:
        frames = verified_before(shared, local, run_id)
        if frames is None:
            frames = stage_run(shared, run_id, stage)
            rows_of: RowsOf = stage.rows
        else:
            rows_of = functools.partial(_local_rows_of, local)
        shared.largest_batch = stage.largest_batch
        shared.staged_rows = sum(stage.counts.values())
        config_hashes = frames["runs"]["config_hash"].to_list()
        for name in tables:
            if name in frames or name in STREAMED or name in ("exams", "exam_files"):
                continue  # exams: those of the trusted promotions, read below
            if name in ("overrides", "gates"):
                rows = pa_concat(
                    shared._read(name, "cand_run_id", [run_id]),
                    shared._read(name, "base_run_id", [run_id]),
                )
            elif name == "human_labels":
                rows = labels_of(shared, rows_of, run_id)
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
        # the seals are recorded where the run's rows are this pull's: staged, verified and
        # new to the local store (a run it had already may differ from them)
        new_run = not local.query("SELECT count(*) AS n FROM runs WHERE run_id = ?", [run_id])["n"][
            0
        ]
        record = _seals_record(run_id, frames, stage.files) if new_run else None
        frames["exams"], frames["exam_files"] = pulled_exams(shared._read, trusted)
        for name, columns in SHARED_ONLY.items():
            if name in frames:
                frames[name] = frames[name].drop(list(columns))
        small = {name: frames[name] for name in tables if name not in STREAMED}
        if stage.counts:  # staged and verified: its seals recorded with its rows
            added = insert_missing(
                local, small, staged=stage.finish(), record=record,
                groups={n: SEAL_GROUP[n] for n in STREAMED},
            )  # fmt: skip
        else:
            added = insert_missing(local, small)
    return {name: added.get(name, 0) for name in tables if name in added or name in STREAMED}


#: A query over a run's cases and outputs (``$2``: the run id): of the stage, or the local store.
RowsOf = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def _local_rows_of(local: Store, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return local.query(sql, list(params)).rows()


def run_seals(runs: pl.DataFrame, scorings: pl.DataFrame) -> str | None:
    """The seals of a published run (its ``runs`` row's, each scoring's) as one JSON text,
    or None where it has no single ``runs`` row or a row without a seal (it cannot be
    compared: a pull stages and checks it)."""
    import json

    if runs.height != 1 or SEAL_COLUMN not in runs.columns:
        return None
    found = {"": runs[SEAL_COLUMN][0]}
    for scoring_id, seal in scorings.select("scoring_id", SEAL_COLUMN).iter_rows():
        if scoring_id in found:
            return None
        found[scoring_id] = seal
    if any(seal is None for seal in found.values()):
        return None
    return json.dumps(found, sort_keys=True)


def _seals_record(
    run_id: str, frames: dict[str, pl.DataFrame], files: dict[str, list[list[Any]]]
) -> pl.DataFrame | None:
    """The ``pulled_seals`` row of a run staged and verified: its seals and the shared data
    files its rows were read from (None: a run without seals, not recorded)."""
    import datetime as dt

    import polars as pl

    seals = _recorded(frames, files)
    if seals is None:
        return None
    return pl.DataFrame(
        {"run_id": [run_id], "seals": [seals], "pulled_at": [dt.datetime.now(dt.UTC)]},
        schema={"run_id": pl.String, "seals": pl.String, "pulled_at": pl.Datetime("us", "UTC")},
    )


def _recorded(frames: dict[str, pl.DataFrame], files: dict[str, list[list[Any]]]) -> str | None:
    import json

    seals = run_seals(frames["runs"], frames["scorings"])
    if seals is None:
        return None
    return json.dumps({"seals": json.loads(seals), "files": files}, sort_keys=True)


def verified_before(
    shared: SharedStore, local: Store, run_id: str
) -> dict[str, pl.DataFrame] | None:
    """The shared ``runs`` and ``scorings`` rows of ``run_id`` where an earlier pull into
    ``local`` verified the run against these very seals and the local store still holds as
    many of its rows as they seal; None otherwise (the pull stages and checks the run)."""
    import json

    import polars as pl

    if not local.has_table("pulled_seals"):
        return None
    recorded = local.query(
        "SELECT seals FROM pulled_seals WHERE run_id = ? ORDER BY pulled_at DESC LIMIT 1", [run_id]
    )
    if not recorded.height:
        return None
    frames: dict[str, pl.DataFrame] = {}
    for name in ("runs", "scorings"):
        frames[name] = pl.from_arrow(shared._read(name, "run_id", [run_id]))  # type: ignore[assignment]
    scorings = set(frames["scorings"]["scoring_id"].drop_nulls().to_list())
    files: dict[str, list[list[Any]]] = {}
    for name in STREAMED:  # the files a staging would read now: the same, or it stages
        column, values = (
            ("scoring_id", scorings) if name == "scoring_cases" else ("run_id", {run_id})
        )
        table = shared._table(name)
        files[name] = planned_files(table, column, values) if table is not None else []
    now = _recorded(frames, files)
    if now is None or json.loads(now) != json.loads(recorded["seals"][0]):
        return None
    sealed = json.loads(now)["seals"]
    counts = local.query(
        "SELECT 'cases' AS t, '' AS g, count(*) AS n FROM cases WHERE run_id = $1 "
        "UNION ALL SELECT 'outputs', '', count(*) FROM outputs WHERE run_id = $1 "
        "UNION ALL SELECT 'scores', scoring_id, count(*) FROM scores WHERE run_id = $1 "
        "GROUP BY scoring_id UNION ALL SELECT 'scoring_cases', scoring_id, count(*) "
        "FROM scoring_cases WHERE scoring_id IN (SELECT scoring_id FROM scorings "
        "WHERE run_id = $1) GROUP BY scoring_id",
        [run_id],
    )
    held = {(t, g): n for t, g, n in counts.rows()}
    for group, seal in sealed.items():
        for name, what in json.loads(seal).items():
            if held.get((name, group), 0) != what.get("rows"):
                return None
    return frames


def labels_of(shared: SharedStore, rows_of: RowsOf, run_id: str) -> pa.Table:
    """The shared human labels of run ``run_id`` (its cases and outputs queried by
    ``rows_of``): those of its outputs' texts (``output_hash``) and those of its cases that
    name no output."""
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
    known = rows_of(
        "SELECT case_id FROM cases WHERE list_contains($1::VARCHAR[], case_id) AND run_id = $2",
        [labelled, run_id],
    )
    found = found.filter(pl.col("case_id").is_in([r[0] for r in known]))
    if not found.height:  # no label of the run's cases: no output text hashed
        return found.to_arrow()
    hashes = rows_of(  # sha256 of each output's UTF-8 text, in hex, as labels name it
        "SELECT DISTINCT sha256(text) FROM outputs WHERE text IS NOT NULL "
        "AND list_contains($1::VARCHAR[], case_id) AND run_id = $2",
        [found["case_id"].unique().to_list(), run_id],
    )
    kept = found.filter(
        pl.col("output_hash").is_null() | pl.col("output_hash").is_in([h[0] for h in hashes])
    )
    return kept.to_arrow()


def pa_table(batch: pa.RecordBatch) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_batches([batch])
