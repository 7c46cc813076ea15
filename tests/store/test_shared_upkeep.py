"""Every shared table stays small after pushes (evalkit.store.shared.compaction.maintain_table):
its old snapshots expired past KEEP_SNAPSHOTS, its data files compacted past COMPACT_AT_FILES,
and not a row lost or doubled. Counts of snapshots, files and rows, never timers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalkit.store import open_store
from evalkit.store.shared import compaction, open_shared_store, parse_store_uri
from evalkit.store.shared.compaction import data_files
from evalkit.store.shared.store import PUSH_ORDER
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synthetic_runs import C, make_run, write_store


def test_repeated_pushes_leave_a_bounded_number_of_snapshots_and_files_per_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "KEEP_SNAPSHOTS", 3)
    monkeypatch.setattr(compaction, "COMPACT_AT_FILES", 4)
    runs = [
        make_run(f"run{i}", [C(f"c{j:02d}", ("pp", "pf")[j % 2], ["t"]) for j in range(12)])
        for i in range(6)
    ]
    write_store(tmp_path / "a.duckdb", runs)
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"
    shared = open_shared_store(uri)
    pushed = 0
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        for run in runs:
            pushed += shared.push_run(store, run.run_id).added["outputs"]
    catalog = open_catalog(parse_store_uri(uri))
    seen = {}
    for name in PUSH_ORDER:
        table = load_table(catalog, TABLES[name], create=False)
        if table is None or table.current_snapshot() is None:
            continue
        seen[name] = (len(table.metadata.snapshots), data_files(table))
    assert {"runs", "cases", "outputs", "scores"} <= set(seen)
    for name, (snapshots, files) in seen.items():
        assert 1 <= snapshots <= 3, (name, seen)
        assert files <= 4 + 1, (name, seen)  # compacted past 4: at most one push's file more
    outputs = load_table(catalog, TABLES["outputs"], create=False).scan().to_arrow()
    assert outputs.num_rows == pushed == 6 * 12 * 2  # two replays a case, every row once
    keys = {(r["run_id"], r["case_id"], r["replay"]) for r in outputs.to_pylist()}
    assert len(keys) == outputs.num_rows
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        assert shared.pull(store, "run5").added["outputs"] == 24  # still reads as pushed


def test_a_table_under_the_bounds_is_left_as_it_is(tmp_path: Path) -> None:
    write_store(tmp_path / "a.duckdb", [make_run("r", [C("c1", "pp", ["t"])])])
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"
    shared = open_shared_store(uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        shared.push_run(store, "r")
    table = load_table(open_catalog(parse_store_uri(uri)), TABLES["outputs"], create=False)
    done = compaction.maintain_table(table, TABLES["outputs"])
    assert (done.expired_snapshots, done.compacted, done.failure) == (0, None, None)


def test_a_run_table_past_the_row_bound_is_not_read_whole_but_its_snapshots_expire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction reads its table into memory: a run table past COMPACT_MAX_ROWS keeps its
    data files (one a batch of each push) and is never read whole; the cache still is."""
    monkeypatch.setattr(compaction, "KEEP_SNAPSHOTS", 2)
    monkeypatch.setattr(compaction, "COMPACT_AT_FILES", 2)
    monkeypatch.setattr(compaction, "COMPACT_MAX_ROWS", 30)
    runs = [make_run(f"r{i}", [C(f"c{j:02d}", "p", ["t"]) for j in range(20)]) for i in range(3)]
    write_store(tmp_path / "a.duckdb", runs)
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"
    shared = open_shared_store(uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        for run in runs:
            shared.push_run(store, run.run_id, batch_rows=10)  # two data files a run
    table = load_table(open_catalog(parse_store_uri(uri)), TABLES["outputs"], create=False)
    assert data_files(table) == 6  # 60 rows past the bound of 30: left as pushed
    assert len(table.metadata.snapshots) <= 2
    runs_table = load_table(open_catalog(parse_store_uri(uri)), TABLES["runs"], create=False)
    assert data_files(runs_table) <= 2 + 1  # 3 rows: under the bound, compacted as before
