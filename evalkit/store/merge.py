"""The merge: Parquet parts into the DuckDB store, by its single writer, idempotently.

Only a store opened for writing merges, so the merge holds the store's writer lock for as long
as it runs and is the only writer of the file. Each (run, case, replay) is inserted once: a key
already stored wins, and among new parts the one written first wins (its scores come with it,
from the same chunk attempt). Every merged part is recorded in ``merged_parts``, one
transaction per batch of parts, so a merge that dies part-way is simply run again; running it
twice adds nothing the second time. The run itself (manifest and cases) is created from the
parts when the store does not have it yet.

No part is trusted. Before anything is written, every manifest, every cases part and every
pending chunk attempt (outputs, scores and cache parts) is read and checked: Parquet of its
table's schema; each row of the run being merged, of a case of its corpus and of one of its
replays (:class:`~evalkit.store.parts.RunKeys`); each score of an output of the same attempt;
a cases part holding exactly the corpus its manifest hashed. The first part that fails is
refused in one line naming its file, and nothing is merged. (A part whose other columns cannot
be decoded is refused when its batch is read, before that batch is written.) A run counts as
complete only by its real (case, replay) keys.

``merged_parts`` is the only table this adds; it is created by the first merge, and none of
the existing tables change. It names every part a merge took (outputs parts and cases parts)
and holds the merge's watermark (the run's stored real keys and output rows after it). A merge
lists the run's outputs and cases parts once (names only: on S3 one LIST request per thousand
parts) and reads only the parts not named there: a part written late by a straggler attempt
is a name not merged yet, whenever it was written, and a chunk Ray ran again after a lost node
is written under the next attempt number, so its name is new too. With nothing new and the
run's output rows as the watermark recorded them, it reads no part and counts no key.

What a merge costs is what it adds, so a driver merging every few seconds does not pay for its
run again at each merge: the watermark grows by the keys the merge wrote (and those of rows
stored before their case, once their case comes), the stored keys and cases are probed with
the merge's own ids, a merge that fits one batch reads each part file once
(:meth:`PartsRoot.holding`), and each written batch is handed to ``on_batch`` (the driver's
running summary grows by it: :mod:`evalkit.run.merge_tally`). Only a merge whose watermark is
stale (rows the merges did not write) counts the run's keys again. What stays proportional to
the run is the listing of part names and a scan of a few key columns, in bounded memory.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import StoreError
from evalkit.redact import redact_known
from evalkit.run_manifest import RunManifest
from evalkit.store.batches import STAGE_MEMORY
from evalkit.store.db import Store
from evalkit.store.merge_cases import CaseStaging, drop_staged
from evalkit.store.part_checks import CACHE_SCHEMA
from evalkit.store.parts import PartInfo, PartsRoot
from evalkit.store.schema import (
    MERGED_PARTS_DDL,
    OUTPUT_SCHEMA,
    SCORE_SCHEMA,
    initial_scoring_id,
)
from evalkit.store.scrub import scrub_json, scrub_outputs, scrub_scores

if TYPE_CHECKING:
    import duckdb

#: At most this many output parts are merged per transaction ...
BATCH_PARTS = 64
#: ... and parts are added to a batch only while it holds fewer output rows than this: what a
#: merge holds at once is one batch (of at most this many rows plus one part), however large
#: the run.
BATCH_ROWS = 50_000
#: The merge's watermark, two rows of ``merged_parts`` beside the parts' names (no part is
#: named so: part names are ``<table>/<chunk>-<attempt>``): the run's stored real keys after
#: the last merge, and its rows in ``outputs`` then. A merge with no new part and the same
#: row count takes the keys from here instead of counting them.
_REAL_KEYS = "#real-keys"
_OUTPUT_ROWS = "#output-rows"


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    """What one merge added; ``stored``/``expected`` count the run's (case, replay) keys after
    it (only keys of its cases and replays: nothing else makes a run complete)."""

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
    cases_added: int = 0  # cases the merge added to the store (a new run's, or a late shard's)
    # the run's rows in ``outputs`` before the merge, when every one of them is known to have
    # come from merges (its watermark held); None: not known
    rows_before: int | None = None

    @property
    def complete(self) -> bool:
        return self.stored >= self.expected

    @property
    def changed(self) -> bool:
        """Whether the merge wrote anything the run's summary reads."""
        return self.run_created or bool(self.parts_merged or self.cases_added)


@dataclass(frozen=True)
class MergedBatch:
    """One batch of a merge as it was written: the output rows that won (new keys of the run)
    with their scores, and how many of their case ids had no output stored before."""

    outputs: pl.DataFrame
    scores: pl.DataFrame
    new_cases: int


def merge_parts(
    store: Store,
    root: PartsRoot,
    run_id: str,
    *,
    on_batch: Callable[[MergedBatch], None] | None = None,
) -> MergeResult:
    """Merge every committed, not yet merged part of ``run_id`` under ``root`` into ``store``;
    ``on_batch`` is handed each batch once it is written (what a driver's periodic merge adds
    to the run's running figures, without reading the run back).

    Raises:
        StoreError: the store is read-only; no part or manifest of the run exists; the parts'
            manifests disagree with each other or with the stored run; or a part is refused
            (named, and nothing merged).
    """
    if store.read_only:
        raise StoreError("merging needs the store opened for writing (its single writer)")
    return _Merger(store, on_batch).merge(root, run_id)


@dataclass(frozen=True)
class _Watermark:
    """What the last merge left: the run's real keys and its rows in ``outputs``."""

    keys: int
    rows: int


class _Merger:
    """One merge into one store (the store's connection, appends and transactions)."""

    def __init__(self, store: Store, on_batch: Callable[[MergedBatch], None] | None) -> None:
        self._con: duckdb.DuckDBPyConnection = store._con
        self._append: Callable[[str, pl.DataFrame], None] = store._append
        self._transaction: Callable[[], Any] = store._transaction
        self._has_table: Callable[[str], bool] = store._has_table
        self._on_batch = on_batch
        self._cases = CaseStaging(self._con, self._append)

    def merge(self, root: PartsRoot, run_id: str) -> MergeResult:
        # DuckDB's buffer pool keeps the blocks a merge writes up to its limit (most of the
        # machine's memory by default): held lower, it writes them out instead
        self._con.execute(f"SET memory_limit = '{STAGE_MEMORY}'")
        try:
            # a merge that fits one batch (a driver's periodic one) reads each part once for
            # its checks and its writes; a larger one reads the key columns, then each batch
            with root.holding(BATCH_ROWS):
                return self._merge(root, run_id)
        finally:
            drop_staged(self._con)
            self._con.execute("RESET memory_limit")

    def _merge(self, root: PartsRoot, run_id: str) -> MergeResult:
        manifest, stored_run = self._manifest(root, run_id)
        merged = self._merged(run_id)
        replays = manifest.replays
        expected = manifest.corpus.n_cases * replays
        # one listing of the outputs and one of the cases parts: nothing is read but the parts
        # no merge took yet, so a merge with nothing new costs the same at any size of run
        pending = [p for p in root.parts(run_id, "outputs") if p.name not in merged]
        new_cases = [p for p in root.parts(run_id, "cases") if p.name not in merged]
        watermark = self._watermark(run_id, merged) if stored_run else None
        if stored_run and not pending and not new_cases and watermark is not None:
            return MergeResult(
                run_id=run_id,
                run_created=False,
                parts_merged=0,
                outputs_added=0,
                scores_added=0,
                cache_added=0,
                duplicates=0,
                stored=watermark.keys,
                expected=expected,
                config_hash=manifest.config_hash,
                label=manifest.run.label,
                cases_added=0,
                rows_before=watermark.rows,
            )
        side = self._side_parts(root, run_id, pending)
        # the stored cases are looked up by the ids the pending rows name, and only when the
        # store has the run: a new run's cases all come from its parts
        named = [*pending, *side["scores"].values()]
        mentioned = _case_ids_of(root, named) if stored_run else set()
        cases_added, keys = self._cases.stage(
            root, run_id, manifest, stored_run, new_cases, mentioned
        )
        for part in pending:  # all of them before anything is written
            attempt = (part.chunk_id, part.attempt)
            root.check_attempt(part, side["scores"].get(attempt), side["cache"].get(attempt), keys)
        self._con.execute(MERGED_PARTS_DDL)
        case_records = _records(run_id, [(p.name, -1) for p in new_cases])
        if not stored_run:
            self._record_run(run_id, manifest, cases_added, case_records)
        elif new_cases:
            with self._transaction():
                if cases_added:
                    self._cases.insert_new()
                self._append("merged_parts", case_records)
        # rows stored before their case (a local run's) are real keys once it is: counted by
        # the ids just added, before this merge's own rows land
        revived = (
            self._cases.revived_keys(run_id, replays)
            if watermark is not None and cases_added
            else 0
        )
        added = scores_added = cache_added = duplicates = 0
        for batch, read in _output_batches(root, pending):
            outputs = scrub_outputs(read)
            del read
            first = outputs.sort("_order", maintain_order=True).unique(
                ["case_id", "replay"], keep="first", maintain_order=True
            )
            # a key stored already (by an earlier batch or merge, or a local run) wins: only the
            # batch's own cases are looked up, never the run's whole key set
            stored = self._stored_of(run_id, first.select("case_id").unique())
            winners = first.join(
                stored, on=["case_id", "replay"], how="anti", maintain_order="left"
            )
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
            rows = [int((outputs["_order"] == i).sum()) for i in range(len(batch))]
            records = _records(run_id, [(p.name, n) for p, n in zip(batch, rows, strict=True)])
            with self._transaction():
                if winners.height:
                    self._append("outputs", winners.select(list(OUTPUT_SCHEMA)))
                if scores.height:
                    self._append("scores", scores.select(list(SCORE_SCHEMA)))
                if cache.height:
                    cache_added += self._insert_cache(cache)
                self._append("merged_parts", records)
            added += winners.height
            scores_added += scores.height
            if self._on_batch is not None:
                had = stored.select("case_id").unique()
                fresh = winners.select("case_id").unique().join(had, on="case_id", how="anti")
                self._on_batch(
                    MergedBatch(
                        outputs=winners.select(list(OUTPUT_SCHEMA)),
                        scores=scores.select(list(SCORE_SCHEMA)),
                        new_cases=fresh.height,
                    )
                )
        # every winner is a new key of the run's own cases and replays (checked above), so a
        # valid watermark grows by the winners (and the revived keys); only without one are
        # the real keys and rows counted, over the whole run
        if watermark is not None:
            after = _Watermark(watermark.keys + revived + added, watermark.rows + added)
        else:
            after = _Watermark(self._real_keys(run_id, replays), self._output_rows(run_id))
        self._set_watermark(run_id, after)
        return MergeResult(
            run_id=run_id,
            run_created=not stored_run,
            parts_merged=len(pending),
            outputs_added=added,
            scores_added=scores_added,
            cache_added=cache_added,
            duplicates=duplicates,
            stored=after.keys,
            expected=expected,
            config_hash=manifest.config_hash,
            label=manifest.run.label,
            cases_added=cases_added,
            rows_before=watermark.rows if watermark is not None else None,
        )

    def _stored_of(self, run_id: str, case_ids: pl.DataFrame) -> pl.DataFrame:
        """The (case_id, replay) keys the run has in ``outputs`` of ``case_ids`` (every replay
        of those cases: which of a batch's keys are stored, and which of its cases are)."""
        self._con.register("_batch_keys", case_ids.to_arrow())
        try:
            return self._frame_of(
                "SELECT DISTINCT case_id, replay FROM outputs o SEMI JOIN _batch_keys k "
                "USING (case_id) WHERE o.run_id = ?",
                [run_id],
                {"case_id": pl.String(), "replay": pl.Int32()},
            )
        finally:
            self._con.unregister("_batch_keys")

    def _side_parts(
        self, root: PartsRoot, run_id: str, pending: Sequence[PartInfo]
    ) -> dict[str, dict[tuple[str, int], PartInfo]]:
        """The scores and cache parts of the pending chunk attempts (listed only when some
        are pending)."""
        if not pending:
            return {"scores": {}, "cache": {}}
        wanted = {(p.chunk_id, p.attempt) for p in pending}
        return {
            table: {
                (p.chunk_id, p.attempt): p
                for p in root.parts(run_id, table)
                if (p.chunk_id, p.attempt) in wanted
            }
            for table in ("scores", "cache")
        }

    def _watermark(self, run_id: str, merged: dict[str, int]) -> _Watermark | None:
        """The run's stored real keys and rows as the last merge left them, when the outputs
        table still holds as many of the run's rows as it did then (a local ``--resume`` that
        added rows since makes it stale: None, and the keys are counted again)."""
        keys, rows = merged.get(_REAL_KEYS), merged.get(_OUTPUT_ROWS)
        if keys is None or rows is None:
            return None
        return _Watermark(keys, rows) if self._output_rows(run_id) == rows else None

    def _output_rows(self, run_id: str) -> int:
        """The run's rows in ``outputs`` (a count of one column: no row is held)."""
        (now,) = self._con.execute(
            "SELECT count(*) FROM outputs WHERE run_id = ?", [run_id]
        ).fetchall()[0]
        return int(now)

    def _set_watermark(self, run_id: str, mark: _Watermark) -> None:
        with self._transaction():
            self._con.execute(
                "DELETE FROM merged_parts WHERE run_id = ? AND part IN (?, ?)",
                [run_id, _REAL_KEYS, _OUTPUT_ROWS],
            )
            self._append(
                "merged_parts",
                _records(run_id, [(_REAL_KEYS, mark.keys), (_OUTPUT_ROWS, mark.rows)]),
            )

    def _manifest(self, root: PartsRoot, run_id: str) -> tuple[RunManifest, bool]:
        """The run's manifest (the stored one, else its parts'), and whether it is stored."""
        manifests = root.manifests(run_id)  # each checked by the root
        hashes = sorted({m.config_hash for m in manifests})
        if len(hashes) > 1:
            raise StoreError(
                f"{root}: the writers of run {run_id} ran different configurations (config_hash "
                f"{', '.join(h[:12] for h in hashes)}): each shard must use the same "
                "--config/--set/--prompt and selection"
            )
        shapes = {_shape(m) for m in manifests}
        if len(shapes) > 1:
            raise StoreError(
                f"{root}: the writers of run {run_id} recorded different corpora or replays: "
                "each shard must use the same corpus, selection and --replays"
            )
        rows = self._con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if rows:
            manifest = RunManifest.from_stored(json.loads(rows[0][0]), source=f"run {run_id}")
            if hashes and hashes[0] != manifest.config_hash:
                raise StoreError(
                    f"{root}: the parts of run {run_id} have config_hash {hashes[0][:12]}, the "
                    f"stored run {manifest.config_hash[:12]}; merge them into another --db"
                )
            if shapes and shapes != {_shape(manifest)}:
                raise StoreError(
                    f"{root}: the parts of run {run_id} recorded another corpus or replays than "
                    "the stored run; merge them into another --db"
                )
            return manifest, True
        if not manifests:
            raise StoreError(
                f"{root}: no parts of run {run_id} (expected {root.run_dir(run_id)}/manifest/); "
                "check --parts and the run id"
            )
        return manifests[0], False

    def _record_run(
        self, run_id: str, manifest: RunManifest, cases_added: int, merged: pl.DataFrame
    ) -> None:
        """The run, its own scoring, its cases and the cases parts they came from (``merged``),
        in one transaction."""
        with self._transaction():
            self._con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, 'running', ?, NULL)",
                [
                    run_id,
                    manifest.run.label,
                    _now(),
                    manifest.config_hash,
                    redact_known(json.dumps(manifest.to_dict())),
                ],
            )
            self._con.execute(
                "INSERT INTO scorings (scoring_id, run_id, created_at, note) "
                "VALUES (?, ?, ?, 'run')",
                [initial_scoring_id(run_id), run_id, _now()],
            )
            if cases_added:
                self._cases.insert_new()
            self._append("merged_parts", merged)

    def _merged(self, run_id: str) -> dict[str, int]:
        """What earlier merges recorded of the run: each merged part's name (outputs parts
        with their rows, cases parts with -1) and the watermark rows (:data:`_REAL_KEYS`)."""
        if not self._has_table("merged_parts"):  # no merge yet: nothing written before checks
            return {}
        rows = self._con.execute(
            "SELECT part, rows FROM merged_parts WHERE run_id = ?", [run_id]
        ).fetchall()
        return {part: int(count) for part, count in rows}

    def _insert_cache(self, cache: pl.DataFrame) -> int:
        """Add the entries not cached yet; returns how many."""
        self._con.register("_part_cache", cache.to_arrow())
        try:
            (before,) = self._con.execute("SELECT count(*) FROM response_cache").fetchall()[0]
            self._con.execute(
                "INSERT INTO response_cache SELECT cache_key, response, created_at "
                "FROM _part_cache n WHERE NOT EXISTS (SELECT 1 FROM response_cache "
                "c WHERE c.cache_key = n.cache_key)"
            )
            (after,) = self._con.execute("SELECT count(*) FROM response_cache").fetchall()[0]
        finally:
            self._con.unregister("_part_cache")
        return int(after - before)

    def _real_keys(self, run_id: str, replays: int) -> int:
        """Stored (case, replay) keys of the run's own cases and replays."""
        (count,) = self._con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT case_id, replay FROM outputs WHERE run_id = ? "
            "AND replay >= 0 AND replay < ? "
            "AND case_id IN (SELECT case_id FROM cases WHERE run_id = ?))",
            [run_id, replays, run_id],
        ).fetchall()[0]
        return int(count)

    def _frame_of(
        self, sql: str, params: Sequence[Any], schema: dict[str, pl.DataType]
    ) -> pl.DataFrame:
        frame = self._con.sql(sql, params=list(params)).pl()
        return frame.cast(schema) if frame.height else pl.DataFrame(schema=schema)


def _shape(manifest: RunManifest) -> tuple[str, int, int]:
    """What the merge checks rows against: the corpus (hash, size) and the replays."""
    return str(manifest.corpus.hash), manifest.corpus.n_cases, manifest.replays


def _read_tagged(
    root: PartsRoot,
    parts: Sequence[PartInfo],
    schema: dict[str, pl.DataType],
    order_of: Sequence[PartInfo] | None = None,
) -> pl.DataFrame:
    """The rows of ``parts`` (each read and checked against its schema) with ``_order``: the
    position of the part's chunk attempt in ``order_of`` (default: in ``parts``), i.e. its
    completion order."""
    position = {(p.chunk_id, p.attempt): i for i, p in enumerate(order_of or parts)}
    frames = [
        root.read_frame(part).with_columns(
            pl.lit(position[(part.chunk_id, part.attempt)], pl.Int64).alias("_order")
        )
        for part in parts
    ]
    if not frames:
        return pl.DataFrame(schema={**schema, "_order": pl.Int64})
    return pl.concat(frames, how="vertical")


def _output_batches(
    root: PartsRoot, parts: Sequence[PartInfo]
) -> Iterator[tuple[list[PartInfo], pl.DataFrame]]:
    """``parts`` in order, a batch at a time: (its parts, their outputs rows tagged as
    :func:`_read_tagged` tags them); a batch takes parts while it holds fewer than
    :data:`BATCH_ROWS` rows (and fewer than :data:`BATCH_PARTS` parts), one part at least."""
    batch: list[PartInfo] = []
    frames: list[pl.DataFrame] = []
    rows = 0
    for part in parts:
        frame = root.read_frame(part).with_columns(pl.lit(len(batch), pl.Int64).alias("_order"))
        batch.append(part)
        frames.append(frame)
        rows += frame.height
        if rows >= BATCH_ROWS or len(batch) >= BATCH_PARTS:
            yield batch, pl.concat(frames, how="vertical")
            batch, frames, rows = [], [], 0
    if batch:
        yield batch, pl.concat(frames, how="vertical")


def _case_ids_of(root: PartsRoot, parts: Sequence[PartInfo]) -> set[str]:
    """The case ids the rows of ``parts`` name (their ``case_id`` column only; a part that
    is not readable is refused here, naming it, as its full check would)."""
    found: set[str] = set()
    for part in parts:
        found.update(root.read_frame(part, ["case_id"])["case_id"].to_list())
    return found


def _records(run_id: str, parts: Sequence[tuple[str, int]]) -> pl.DataFrame:
    """``merged_parts`` rows: (name, rows) of each part, merged now."""
    now = _now()
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(parts),
            "part": [name for name, _ in parts],
            "rows": [rows for _, rows in parts],
            "merged_at": [now] * len(parts),
        },
        schema={
            "run_id": pl.String,
            "part": pl.String,
            "rows": pl.Int64,
            "merged_at": pl.Datetime("us", "UTC"),
        },
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
