"""The cases one merge adds: its new cases parts staged in DuckDB, checked, and looked up
against the stored run by the ids they name only (:mod:`evalkit.store.merge` runs it).

Every query here costs what the merge brings: the staged parts, the case ids its pending rows
name. The run's stored cases and outputs are probed with those ids (a join whose hash table is
the merge's own rows, never the run's), so a driver's periodic merge late in a large run holds
no more than one early in it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import StoreError
from evalkit.run_manifest import RunManifest
from evalkit.store.case_pieces import piece_shard, pieces_problem
from evalkit.store.part_checks import CASE_SCHEMA, RunKeys, digest_problem
from evalkit.store.parts import ROW_GROUP_ROWS, PartInfo, PartsRoot
from evalkit.store.schema import batch_pairs, sorted_corpus_digest

if TYPE_CHECKING:
    import duckdb

#: (case id, hash) pairs per record batch when a staged part's digest is computed.
_DIGEST_ROWS = 50_000


class CaseStaging:
    """The staged cases of one merge: ``_merge_cases`` (every row of its new cases parts) and
    ``_merge_new`` (those the store does not have yet), temporary tables the merge drops."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, append: Callable[[str, pl.DataFrame], None]
    ) -> None:
        self._con, self._append = con, append

    def stage(
        self,
        root: PartsRoot,
        run_id: str,
        manifest: RunManifest,
        stored_run: bool,
        parts: Sequence[PartInfo],
        mentioned: set[str],
    ) -> tuple[int, RunKeys]:
        """Stage the cases the not yet merged cases ``parts`` add to the store (each part
        checked to be the run's corpus or one of its shares, first written wins); returns how
        many, and the keys the pending rows must have: the run's case ids among ``mentioned``
        (the case ids of the pending parts) and the parts' cases.

        A part goes through DuckDB a batch at a time (spilled to disk past the merge's memory
        limit): its ids are counted and hashed there, in order, as a stream; its rows never
        come into Python whole."""
        replays = manifest.replays
        if not parts and not stored_run:
            raise StoreError(
                f"{root}: run {run_id} has no cases part (expected under "
                f"{root.run_dir(run_id)}/parts/cases/): run one of its shards again"
            )
        columns = ", ".join(CASE_SCHEMA)
        self._con.execute(
            f"CREATE OR REPLACE TEMP TABLE _merge_cases AS SELECT {columns}, 0::INTEGER AS "
            "_part, 0::BIGINT AS _row FROM cases LIMIT 0"
        )
        run_only = RunKeys(run_id, frozenset(), replays)
        pieces: dict[tuple[int, int], list[int]] = {}  # a shard's share in pieces: checked whole
        for index, part in enumerate(parts):
            rows = 0
            for frame in root.read_batches(part, ROW_GROUP_ROWS):
                problem = run_only.refusal("cases", frame)
                if problem:
                    raise root.refused(part, problem)
                self._append(
                    "_merge_cases",
                    frame.with_columns(
                        pl.lit(index, pl.Int32).alias("_part"),
                        pl.int_range(rows, rows + frame.height, dtype=pl.Int64).alias("_row"),
                    ),
                )
                rows += frame.height
            if (shard := piece_shard(part.chunk_id)) is not None:
                pieces.setdefault(shard, []).append(index)
            elif problem := self._corpus_problem(index, manifest.corpus):
                raise root.refused(part, problem)
        for shard, indexes in pieces.items():
            problem = pieces_problem(self._con, "_merge_cases", indexes, shard, manifest.corpus)
            if problem:
                raise root.refused(parts[indexes[0]], problem)
        # first written wins among the parts, and a case the run has already wins over both:
        # the stored ones are found by the staged ids (a NOT IN over the run's cases would
        # hash every case of the run at every merge)
        of_run = "c.run_id = ?" if stored_run else "c.run_id = ? AND false"  # a new run: none
        self._con.execute(
            "CREATE OR REPLACE TEMP TABLE _merge_had AS SELECT DISTINCT case_id FROM cases c "
            f"SEMI JOIN _merge_cases m USING (case_id) WHERE {of_run}",
            [run_id],
        )
        self._con.execute(
            f"CREATE OR REPLACE TEMP TABLE _merge_new AS SELECT {columns} FROM _merge_cases m "
            "ANTI JOIN _merge_had h USING (case_id) QUALIFY row_number() OVER (PARTITION BY "
            "case_id ORDER BY _part, _row) = 1 ORDER BY _part, _row"
        )
        ((added,),) = self._con.execute("SELECT count(*) FROM _merge_new").fetchall()
        new_ids = _frame_of(
            self._con, "SELECT DISTINCT case_id FROM _merge_cases", [], {"case_id": pl.String()}
        )["case_id"]  # a Series: a million ids as Python strings would not be bounded
        if not stored_run:
            return int(added), RunKeys(run_id, new_ids, replays)
        stored = self._stored_cases(run_id, mentioned)
        known = pl.concat([pl.Series("case_id", sorted(stored), pl.String), new_ids]).unique()
        return int(added), RunKeys(run_id, known, replays)

    def insert_new(self) -> None:
        """The cases :meth:`stage` staged, into the store (inside the caller's transaction)."""
        columns = ", ".join(CASE_SCHEMA)
        self._con.execute(f"INSERT INTO cases ({columns}) SELECT {columns} FROM _merge_new")

    def revived_keys(self, run_id: str, replays: int) -> int:
        """The (case, replay) keys of the run's rows in ``outputs`` whose case the merge has
        just added: rows stored before their case was (a local run's), real keys from now
        on. Probed with the added ids only."""
        (count,) = self._con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT case_id, replay FROM outputs o "
            "SEMI JOIN _merge_new n USING (case_id) WHERE o.run_id = ? AND replay >= 0 "
            "AND replay < ?)",
            [run_id, replays],
        ).fetchall()[0]
        return int(count)

    def _corpus_problem(self, index: int, corpus: Any) -> str | None:
        """`corpus_problem` of the staged part ``index``: its ids counted, and hashed in
        ascending order a record batch at a time."""
        ((count, distinct),) = self._con.execute(
            "SELECT count(*), count(DISTINCT case_id) FROM _merge_cases WHERE _part = ?", [index]
        ).fetchall()
        if count != distinct:
            return "a case id appears twice"
        reader = self._con.sql(
            "SELECT case_id, case_hash FROM _merge_cases WHERE _part = ? "
            "ORDER BY case_id, case_hash",
            params=[index],
        ).to_arrow_reader(_DIGEST_ROWS)
        digest, _ = sorted_corpus_digest(batch_pairs(reader))
        return digest_problem(digest, int(count), corpus)

    def _stored_cases(self, run_id: str, case_ids: set[str]) -> set[str]:
        """Which of ``case_ids`` the stored run has."""
        if not case_ids:
            return set()
        rows = self._con.execute(
            "SELECT DISTINCT case_id FROM cases WHERE run_id = ? AND case_id IN "
            "(SELECT UNNEST(?::VARCHAR[]))",
            [run_id, sorted(case_ids)],
        ).fetchall()
        return {row[0] for row in rows}


def _frame_of(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any], schema: dict[str, Any]
) -> pl.DataFrame:
    frame = con.sql(sql, params=list(params)).pl()
    return frame.cast(schema) if frame.height else pl.DataFrame(schema=schema)


def drop_staged(con: duckdb.DuckDBPyConnection) -> None:
    """The temporary tables of :class:`CaseStaging`, gone."""
    con.execute(
        "DROP TABLE IF EXISTS _merge_cases; DROP TABLE IF EXISTS _merge_new; "
        "DROP TABLE IF EXISTS _merge_had"
    )
