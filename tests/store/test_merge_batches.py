"""A merge holds a run batch by batch (issue 48, item 4): on a run of more parts than one
batch holds, no step holds more output rows at once than a batch (its row bound plus one
part), every row still lands once, and the run's cases are checked as a stream of pairs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from test_merge_refusals import _frames, _record

from evalkit.run.merging import merge_run
from evalkit.store import merge as merge_module
from evalkit.store import open_store
from evalkit.store.part_checks import cases_problem
from evalkit.store.parts import PartsRoot
from evalkit.store.schema import corpus_digest

RUN = "big-run"
PART_ROWS = 7  # cases per chunk: parts of 7 rows
BATCH_ROWS = 20  # a batch closes once it holds 20 rows: 21 at most (3 parts)
CASES = [f"c-{i:03d}" for i in range(100)]


def test_merge_of_a_run_larger_than_a_batch_holds_one_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = PartsRoot(tmp_path / "parts")
    _record(root, RUN, CASES)
    for start in range(0, len(CASES), PART_ROWS):
        ids = CASES[start : start + PART_ROWS]
        root.write_chunk(RUN, f"k{start:03d}", *_frames(RUN, ids), {})
    monkeypatch.setattr(merge_module, "BATCH_ROWS", BATCH_ROWS)
    held: list[int] = []  # output rows of each batch: what the merge held at once
    real_batches = merge_module._output_batches

    def counted(root: PartsRoot, parts):  # type: ignore[no-untyped-def]
        for batch, rows in real_batches(root, parts):
            held.append(rows.height)
            yield batch, rows

    monkeypatch.setattr(merge_module, "_output_batches", counted)
    appended: list[tuple[str, int]] = []  # rows of each insert into the store

    with open_store(tmp_path / "e.duckdb", write=True) as store:
        real_append = store._append

        def append(table: str, frame: pl.DataFrame) -> None:
            appended.append((table, frame.height))
            real_append(table, frame)

        monkeypatch.setattr(store, "_append", append)
        merged = merge_run(store, root, RUN)
        stored = store.query(
            "SELECT count(*) AS n, count(DISTINCT case_id) AS ids FROM outputs WHERE run_id = ?",
            [RUN],
        ).row(0)
        scores = store.query("SELECT count(*) FROM scores WHERE run_id = ?", [RUN]).item()
    assert merged.result.complete and merged.result.parts_merged == 15
    assert stored == (100, 100) and scores == 100  # every row once
    assert len(held) > 1 and sum(held) == 100  # several batches, together the whole run
    assert max(held) <= BATCH_ROWS + PART_ROWS - 1  # never more than one batch's rows
    outputs_appended = [n for table, n in appended if table == "outputs"]
    assert len(outputs_appended) == len(held) and max(outputs_appended) <= max(held)


def test_the_run_s_cases_are_checked_as_a_stream_in_ascending_order() -> None:
    pairs = [(f"c-{i:03d}", f"h{i}") for i in range(50)]
    corpus = type("Corpus", (), {"hash": corpus_digest(pairs), "n_cases": 50})()
    assert cases_problem(iter(pairs), corpus, presorted=True) is None  # type: ignore[arg-type]
    assert cases_problem(reversed(pairs), corpus) is None  # type: ignore[arg-type]
    problem = cases_problem(iter(pairs[:49]), corpus, presorted=True)  # type: ignore[arg-type]
    assert problem is not None and "49 cases" in problem
    with pytest.raises(ValueError, match="out of order"):  # never a silently wrong digest
        cases_problem(reversed(pairs), corpus, presorted=True)  # type: ignore[arg-type]
