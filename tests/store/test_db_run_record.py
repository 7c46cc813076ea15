"""Recording a run: the cases inserted in slices inside one transaction, the history tables
made when the store is, the warnings replaced in the run's finish, and the case counts that
finish recorded handed back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from evalkit.store import open_store
from evalkit.store.db import CASE_ROWS_PER_INSERT
from evalkit.store.history_queries import case_counts
from evalkit.store.schema import OUTPUT_COLUMNS, SCORE_COLUMNS


@dataclass(frozen=True)
class _Case:
    id: str
    hash: str = "h"
    tags: tuple[str, ...] = ("t",)
    criticality: str = "normal"
    sealed: bool = False
    provenance: dict[str, str] = field(default_factory=dict)
    source: str = "cases/a.yaml:1"
    group: str | None = None

    def input_json(self) -> str:
        return "{}"


def _manifest(run_id: str) -> dict[str, object]:
    return {"run": {"run_id": run_id, "label": "l"}, "config_hash": "c", "warnings": ["old"]}


def test_a_run_of_more_cases_than_one_insert_records_every_case(tmp_path: Path) -> None:
    cases = [_Case(f"c{i:05d}") for i in range(2 * CASE_ROWS_PER_INSERT + 3)]
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(_manifest("r1"), cases)
        store.finish_run("r1", "incomplete", {"outputs": 0}, warnings=["new", "newer"])
    with duckdb.connect(str(tmp_path / "e.duckdb"), read_only=True) as con:
        (count, distinct) = con.execute(
            "SELECT count(*), count(DISTINCT case_id) FROM cases"
        ).fetchone()
        status, manifest, summary = con.execute(
            "SELECT status, manifest, summary FROM runs"
        ).fetchone()
        tables = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
    assert count == distinct == len(cases)
    assert status == "incomplete" and json.loads(summary) == {"outputs": 0}
    assert json.loads(manifest)["warnings"] == ["new", "newer"]
    assert {"history_counts", "history_usage"} <= tables  # made with the store: a finish makes none


def test_a_finish_whose_history_cannot_be_recorded_is_recorded_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalkit.store.history_sql as history_sql

    def broken(con: duckdb.DuckDBPyConnection, run_id: str, scoring_id: str, **_: object) -> None:
        con.execute("INSERT INTO history_usage (run_id) VALUES (?)", [run_id])  # then fails
        raise duckdb.InvalidInputException("history broke")

    monkeypatch.setattr(history_sql, "record_history", broken)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(_manifest("r1"), [_Case("c1")])
        assert store.finish_run("r1", "complete", {"outputs": 1}, warnings=["w"]) is None
    with duckdb.connect(str(tmp_path / "e.duckdb"), read_only=True) as con:
        status, manifest = con.execute("SELECT status, manifest FROM runs").fetchone()
        (usage,) = con.execute("SELECT count(*) FROM history_usage").fetchone()
    assert status == "complete" and json.loads(manifest)["warnings"] == ["w"]
    assert usage == 0  # the half-written history went with its transaction


def test_a_complete_finish_returns_the_case_counts_it_recorded(tmp_path: Path) -> None:
    """What the run's summary shows without reading them back: the counts ``case_counts``
    reads; a finish that records none (a run not complete) returns None."""
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(_manifest("r1"), [_Case("c1"), _Case("c2", tags=("t", "u"))])
        outputs = {name: [None, None] for name in OUTPUT_COLUMNS}
        outputs |= {"run_id": ["r1"] * 2, "case_id": ["c1", "c2"], "replay": [0, 0]}
        scores = {name: [None] for name in SCORE_COLUMNS}
        scores |= {"run_id": ["r1"], "scoring_id": ["r1/s0"], "case_id": ["c1"], "replay": [0]}
        scores |= {"scorer": ["s"], "scorer_index": [0], "passed": [True], "error": [False]}
        store.write_results(outputs, scores)
        recorded = store.finish_run("r1", "complete", {"outputs": 2})
        assert recorded == case_counts(store, ["r1"])["r1"]
        assert (recorded.cases, recorded.decided, recorded.passed) == (2, 1, 1)
        store.create_run(_manifest("r2"), [_Case("c1")])
        assert store.finish_run("r2", "incomplete", {"outputs": 0}) is None


def test_a_release_leaves_the_wal_for_readers_and_a_close_folds_it_in(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    wal = tmp_path / "e.duckdb.wal"
    store = open_store(db, write=True)
    try:
        store.create_run(_manifest("r1"), [_Case("c1"), _Case("c2")])
        store.release()  # no checkpoint: the run is in the WAL, and readers see it
        assert wal.exists()
        with duckdb.connect(str(db), read_only=True) as reader:
            assert reader.execute("SELECT count(*) FROM cases").fetchone() == (2,)
    finally:
        store.close()
    assert not wal.exists()  # a closed store is one file
    with duckdb.connect(str(db), read_only=True) as reader:
        assert reader.execute("SELECT count(*) FROM cases").fetchone() == (2,)
