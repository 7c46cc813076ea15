"""The merge: Parquet parts into the DuckDB store, by its single writer, idempotently.

Only a store opened for writing merges, so the merge holds the store's writer lock for as long
as it runs and is the only writer of the file. Each (run, case, replay) is inserted once: a key
already stored wins, and among new parts the one written first wins (its scores come with it,
from the same chunk attempt). Every merged part is recorded in ``merged_parts``, one
transaction per batch of parts, so a merge that dies part-way is simply run again; running it
twice adds nothing the second time. The run itself (manifest and cases) is created from the
parts when the store does not have it yet.

``merged_parts`` is the only table this adds; it is created by the first merge, and none of
the existing tables change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from evalkit.errors import StoreError
from evalkit.redact import redact_known
from evalkit.store.db import Store
from evalkit.store.parts import CASE_SCHEMA, PartInfo, PartsRoot
from evalkit.store.schema import OUTPUT_SCHEMA, SCORE_SCHEMA
from evalkit.store.scrub import scrub_json, scrub_outputs, scrub_scores

if TYPE_CHECKING:
    import duckdb

MERGED_PARTS_DDL = """
CREATE TABLE IF NOT EXISTS merged_parts (
    run_id VARCHAR, part VARCHAR, rows BIGINT, merged_at TIMESTAMPTZ
);
"""
#: Output parts merged per transaction.
BATCH_PARTS = 64
CACHE_SCHEMA: dict[str, pl.DataType] = {"cache_key": pl.String, "response": pl.String}


@dataclass(frozen=True)
class MergeResult:
    """What one merge added; ``stored``/``expected`` count the run's outputs after it."""

    run_id: str
    run_created: bool
    parts_merged: int
    outputs_added: int
    scores_added: int
    cache_added: int
    duplicates: int  # output rows not inserted: their (case, replay) was stored already
    stored: int
    expected: int
    config_hash: str
    label: str

    @property
    def complete(self) -> bool:
        return self.stored >= self.expected


def merge_parts(store: Store, root: PartsRoot, run_id: str) -> MergeResult:
    """Merge every committed, not yet merged part of ``run_id`` under ``root`` into ``store``.

    Raises:
        StoreError: the store is read-only, no part or manifest of the run exists, or the
            parts' manifests disagree with each other or with the stored run.
    """
    if store.read_only:
        raise StoreError("merging needs the store opened for writing (its single writer)")
    return _Merger(store).merge(root, run_id)


class _Merger:
    """One merge into one store (the store's connection, appends and transactions)."""

    def __init__(self, store: Store) -> None:
        self._con: duckdb.DuckDBPyConnection = store._con
        self._append: Callable[[str, pl.DataFrame], None] = store._append
        self._transaction: Callable[[], Any] = store._transaction

    def merge(self, root: PartsRoot, run_id: str) -> MergeResult:
        self._con.execute(MERGED_PARTS_DDL)
        manifest, created = self._ensure_run(root, run_id)
        self._merge_cases(root, run_id)
        merged = {
            row[0]
            for row in self._con.execute(
                "SELECT part FROM merged_parts WHERE run_id = ?", [run_id]
            ).fetchall()
        }
        pending = [p for p in root.parts(run_id, "outputs") if p.name not in merged]
        side = {
            table: {(p.chunk_id, p.attempt): p for p in root.parts(run_id, table)}
            for table in ("scores", "cache")
        }
        added = scores_added = cache_added = duplicates = 0
        for start in range(0, len(pending), BATCH_PARTS):
            batch = pending[start : start + BATCH_PARTS]
            outputs = scrub_outputs(_read_tagged(root, batch, OUTPUT_SCHEMA))
            wrong = outputs.filter(pl.col("run_id") != run_id)
            if wrong.height:
                raise StoreError(
                    f"{root}: part {batch[0].name} of run {run_id} holds rows of run "
                    f"{wrong['run_id'][0]}"
                )
            stored = self._frame_of(
                "SELECT case_id, replay FROM outputs WHERE run_id = ?",
                [run_id],
                {"case_id": pl.String, "replay": pl.Int32},
            )
            first = outputs.sort("_order", maintain_order=True).unique(
                ["case_id", "replay"], keep="first", maintain_order=True
            )
            winners = first.join(stored, on=["case_id", "replay"], how="anti")
            duplicates += outputs.height - winners.height
            score_parts = [
                side["scores"][(p.chunk_id, p.attempt)]
                for p in batch
                if (p.chunk_id, p.attempt) in side["scores"]
            ]
            scores = scrub_scores(_read_tagged(root, score_parts, SCORE_SCHEMA, batch))
            scores = scores.join(
                winners.select("case_id", "replay", "_order"),
                on=["case_id", "replay", "_order"],
                how="semi",
            )
            cache_parts = [
                side["cache"][(p.chunk_id, p.attempt)]
                for p in batch
                if (p.chunk_id, p.attempt) in side["cache"]
            ]
            cache = _read_tagged(root, cache_parts, CACHE_SCHEMA, batch).unique(
                "cache_key", keep="first", maintain_order=True
            )
            cache = cache.with_columns(
                pl.col("response").map_elements(scrub_json, return_dtype=pl.String),
                pl.lit(_now()).dt.cast_time_unit("us").alias("created_at"),
            )
            now = _now()
            records = pl.DataFrame(
                {
                    "run_id": [run_id] * len(batch),
                    "part": [p.name for p in batch],
                    "rows": [int((outputs["_order"] == i).sum()) for i in range(len(batch))],
                    "merged_at": [now] * len(batch),
                },
                schema={
                    "run_id": pl.String,
                    "part": pl.String,
                    "rows": pl.Int64,
                    "merged_at": pl.Datetime("us", "UTC"),
                },
            )
            with self._transaction():
                if winners.height:
                    self._append("outputs", winners.select(list(OUTPUT_SCHEMA)))
                if scores.height:
                    self._append("scores", scores.select(list(SCORE_SCHEMA)))
                if cache.height:
                    self._con.register("_part_cache", cache.to_arrow())
                    try:
                        (before,) = self._con.execute(
                            "SELECT count(*) FROM response_cache"
                        ).fetchall()[0]
                        self._con.execute(
                            "INSERT INTO response_cache SELECT cache_key, response, created_at "
                            "FROM _part_cache n WHERE NOT EXISTS (SELECT 1 FROM response_cache "
                            "c WHERE c.cache_key = n.cache_key)"
                        )
                        (after,) = self._con.execute(
                            "SELECT count(*) FROM response_cache"
                        ).fetchall()[0]
                    finally:
                        self._con.unregister("_part_cache")
                    cache_added += after - before
                self._append("merged_parts", records)
            added += winners.height
            scores_added += scores.height
        (stored_n,) = self._con.execute(
            "SELECT count(*) FROM outputs WHERE run_id = ?", [run_id]
        ).fetchall()[0]
        expected = int(manifest["corpus"]["n_cases"]) * int(manifest["replays"])
        return MergeResult(
            run_id, created, len(pending), added, scores_added, cache_added, duplicates,
            int(stored_n), expected, manifest["config_hash"], manifest["run"]["label"],
        )  # fmt: skip

    def _ensure_run(self, root: PartsRoot, run_id: str) -> tuple[dict[str, Any], bool]:
        """The run's manifest, recording the run from its parts when the store lacks it."""
        manifests = root.manifests(run_id)
        hashes = sorted({m["config_hash"] for m in manifests})
        if len(hashes) > 1:
            raise StoreError(
                f"{root}: the writers of run {run_id} ran different configurations (config_hash "
                f"{', '.join(h[:12] for h in hashes)}): each shard must use the same "
                "--config/--set/--prompt and selection"
            )
        rows = self._con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if rows:
            manifest = json.loads(rows[0][0])
            if hashes and hashes[0] != manifest["config_hash"]:
                raise StoreError(
                    f"{root}: the parts of run {run_id} have config_hash {hashes[0][:12]}, the "
                    f"stored run {manifest['config_hash'][:12]}; merge them into another --db"
                )
            return manifest, False
        if not manifests:
            raise StoreError(
                f"{root}: no parts of run {run_id} (expected {root.run_dir(run_id)}/manifest/); "
                "check --parts and the run id"
            )
        manifest = manifests[0]
        with self._transaction():
            self._con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, 'running', ?, NULL)",
                [
                    run_id,
                    manifest["run"]["label"],
                    _now(),
                    manifest["config_hash"],
                    redact_known(json.dumps(manifest)),
                ],
            )
            self._con.execute(
                "INSERT INTO scorings (scoring_id, run_id, created_at, note) "
                "VALUES (?, ?, ?, 'run')",
                [f"{run_id}/s0", run_id, _now()],
            )
        return manifest, True

    def _merge_cases(self, root: PartsRoot, run_id: str) -> None:
        """The run's cases from its ``cases`` parts, each case once (first written wins)."""
        parts = root.parts(run_id, "cases")
        if not parts:
            return
        # Parts written before cases carried their group lack the column: no group, as then.
        cases = _read_tagged(root, parts, CASE_SCHEMA, optional=("case_group",)).unique(
            "case_id", keep="first", maintain_order=True
        )
        stored = self._frame_of(
            "SELECT case_id FROM cases WHERE run_id = ?", [run_id], {"case_id": pl.String}
        )
        new = cases.join(stored, on="case_id", how="anti").filter(pl.col("run_id") == run_id)
        if new.height:
            with self._transaction():
                self._append("cases", new.select(list(CASE_SCHEMA)))

    def _frame_of(
        self, sql: str, params: Sequence[Any], schema: dict[str, pl.DataType]
    ) -> pl.DataFrame:
        frame = self._con.sql(sql, params=list(params)).pl()
        return frame.cast(schema) if frame.height else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


def _read_tagged(
    root: PartsRoot,
    parts: Sequence[PartInfo],
    schema: dict[str, pl.DataType],
    order_of: Sequence[PartInfo] | None = None,
    optional: Sequence[str] = (),
) -> pl.DataFrame:
    """The rows of ``parts`` with the schema's columns and ``_order``: the position of the
    part's chunk attempt in ``order_of`` (default: in ``parts``), i.e. its completion order.
    An ``optional`` column a part lacks is null."""
    position = {(p.chunk_id, p.attempt): i for i, p in enumerate(order_of or parts)}
    frames = []
    for part in parts:
        table: pa.Table = root.read(part)
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        missing = [c for c in schema if c not in frame.columns and c not in optional]
        if missing:
            raise StoreError(f"{root}: part {part.name} lacks columns {', '.join(missing)}")
        columns = (
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in schema.items()
        )
        frames.append(
            frame.select(columns).with_columns(
                pl.lit(position[(part.chunk_id, part.attempt)], pl.Int64).alias("_order")
            )
        )
    if not frames:
        return pl.DataFrame(schema={**schema, "_order": pl.Int64})
    return pl.concat(frames, how="vertical")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
