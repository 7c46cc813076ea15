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
the existing tables change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import StoreError
from evalkit.redact import redact_known
from evalkit.store.db import Store
from evalkit.store.part_checks import CACHE_SCHEMA, CASE_SCHEMA, RunKeys, corpus_problem
from evalkit.store.parts import PartInfo, PartsRoot
from evalkit.store.schema import MERGED_PARTS_DDL, OUTPUT_SCHEMA, SCORE_SCHEMA, initial_scoring_id
from evalkit.store.scrub import scrub_json, scrub_outputs, scrub_scores

if TYPE_CHECKING:
    import duckdb

#: Output parts merged per transaction.
BATCH_PARTS = 64


@dataclass(frozen=True)
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

    @property
    def complete(self) -> bool:
        return self.stored >= self.expected


def merge_parts(store: Store, root: PartsRoot, run_id: str) -> MergeResult:
    """Merge every committed, not yet merged part of ``run_id`` under ``root`` into ``store``.

    Raises:
        StoreError: the store is read-only; no part or manifest of the run exists; the parts'
            manifests disagree with each other or with the stored run; or a part is refused
            (named, and nothing merged).
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
        self._has_table: Callable[[str], bool] = store._has_table

    def merge(self, root: PartsRoot, run_id: str) -> MergeResult:
        manifest, stored_run = self._manifest(root, run_id)
        cases, keys = self._cases(root, run_id, manifest, stored_run)
        merged = self._merged(run_id)
        pending = [p for p in root.parts(run_id, "outputs") if p.name not in merged]
        side = {
            table: {(p.chunk_id, p.attempt): p for p in root.parts(run_id, table)}
            for table in ("scores", "cache")
        }
        for part in pending:  # all of them before anything is written
            attempt = (part.chunk_id, part.attempt)
            root.check_attempt(part, side["scores"].get(attempt), side["cache"].get(attempt), keys)
        self._con.execute(MERGED_PARTS_DDL)
        if not stored_run:
            self._record_run(run_id, manifest, cases)
        elif cases.height:
            with self._transaction():
                self._append("cases", cases.select(list(CASE_SCHEMA)))
        added = scores_added = cache_added = duplicates = 0
        # the keys already stored, read once and grown with each batch's winners: the merge
        # reads the run's stored keys once, not once per batch of parts
        stored = set(
            self._frame_of(
                "SELECT case_id, replay FROM outputs WHERE run_id = ?",
                [run_id],
                {"case_id": pl.String, "replay": pl.Int32},
            ).iter_rows()
        )
        for start in range(0, len(pending), BATCH_PARTS):
            batch = pending[start : start + BATCH_PARTS]
            outputs = scrub_outputs(_read_tagged(root, batch, OUTPUT_SCHEMA))
            first = outputs.sort("_order", maintain_order=True).unique(
                ["case_id", "replay"], keep="first", maintain_order=True
            )
            new_key = [key not in stored for key in first.select("case_id", "replay").iter_rows()]
            winners = first.filter(pl.Series(new_key, dtype=pl.Boolean))
            stored.update(winners.select("case_id", "replay").iter_rows())
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
                    cache_added += self._insert_cache(cache)
                self._append("merged_parts", records)
            added += winners.height
            scores_added += scores.height
        expected = int(manifest["corpus"]["n_cases"]) * int(manifest["replays"])
        return MergeResult(
            run_id, not stored_run, len(pending), added, scores_added, cache_added, duplicates,
            self._real_keys(run_id, int(manifest["replays"])), expected, manifest["config_hash"],
            manifest["run"]["label"],
        )  # fmt: skip

    def _manifest(self, root: PartsRoot, run_id: str) -> tuple[dict[str, Any], bool]:
        """The run's manifest (the stored one, else its parts'), and whether it is stored."""
        manifests = root.manifests(run_id)  # each checked by the root
        hashes = sorted({m["config_hash"] for m in manifests})
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
            manifest = json.loads(rows[0][0])
            if hashes and hashes[0] != manifest["config_hash"]:
                raise StoreError(
                    f"{root}: the parts of run {run_id} have config_hash {hashes[0][:12]}, the "
                    f"stored run {manifest['config_hash'][:12]}; merge them into another --db"
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

    def _cases(
        self, root: PartsRoot, run_id: str, manifest: dict[str, Any], stored_run: bool
    ) -> tuple[pl.DataFrame, RunKeys]:
        """The run's cases its parts add to the store (each checked to be the run's corpus,
        first written wins), and the keys every row of the run must have."""
        replays = int(manifest["replays"])
        stored = self._frame_of(
            "SELECT case_id FROM cases WHERE run_id = ?", [run_id], {"case_id": pl.String}
        )
        parts = root.parts(run_id, "cases")
        if not parts and not stored_run:
            raise StoreError(
                f"{root}: run {run_id} has no cases part (expected under "
                f"{root.run_dir(run_id)}/parts/cases/): run one of its shards again"
            )
        frames = []
        for part in parts:
            frame = root.read_frame(part)
            problem = RunKeys(run_id, frozenset(), replays).refusal("cases", frame)
            problem = problem or corpus_problem(frame, manifest)
            if problem:
                raise root.refused(part, problem)
            frames.append(frame)
        cases = pl.concat([pl.DataFrame(schema=CASE_SCHEMA), *frames]).unique(
            "case_id", keep="first", maintain_order=True
        )
        case_ids = frozenset(stored["case_id"].to_list()) | frozenset(cases["case_id"].to_list())
        new = cases.join(stored, on="case_id", how="anti")
        return new, RunKeys(run_id, case_ids, replays)

    def _record_run(self, run_id: str, manifest: dict[str, Any], cases: pl.DataFrame) -> None:
        """The run, its own scoring and its cases, in one transaction."""
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
                [initial_scoring_id(run_id), run_id, _now()],
            )
            if cases.height:
                self._append("cases", cases.select(list(CASE_SCHEMA)))

    def _merged(self, run_id: str) -> set[str]:
        if not self._has_table("merged_parts"):  # no merge yet: nothing written before checks
            return set()
        rows = self._con.execute(
            "SELECT part FROM merged_parts WHERE run_id = ?", [run_id]
        ).fetchall()
        return {row[0] for row in rows}

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
        return frame.cast(schema) if frame.height else pl.DataFrame(schema=schema)  # type: ignore[arg-type]


def _shape(manifest: dict[str, Any]) -> tuple[str, int, int]:
    """What the merge checks rows against: the corpus (hash, size) and the replays."""
    corpus = manifest["corpus"]
    return str(corpus["hash"]), int(corpus["n_cases"]), int(manifest["replays"])


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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
