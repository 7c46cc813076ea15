"""Push and pull hold a run batch by batch (issue 48, item 4): on a run larger than one batch,
no step holds more rows at once than the batch size, and the rows still round-trip whole."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.table import Transaction
from synthetic_runs import seed000_runs, write_store
from test_shared_store import _frames, _uri

from evalkit.store import open_store
from evalkit.store.shared import open_shared_store
from evalkit.store.shared.seals import SealBuilder
from evalkit.store.shared.staging import RunStage
from evalkit.store.shared.verify import table_seal

BATCH = 100


def test_push_and_pull_of_a_run_larger_than_a_batch_hold_one_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = seed000_runs()  # 600 outputs, 1,200 scores: several batches of 100
    write_store(tmp_path / "a.duckdb", [base, cand])
    appended: list[int] = []  # rows of each Iceberg append: what the push held at once
    real_append = Transaction.append

    def counted(self: Transaction, df: pa.Table, *args: object, **kwargs: object) -> None:
        appended.append(df.num_rows)
        real_append(self, df, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Transaction, "append", counted)
    staged: list[int] = []  # rows of each batch a pull stages
    real_add = RunStage.add

    def staged_add(self: RunStage, name: str, batches, schema, group) -> int:  # type: ignore[no-untyped-def]
        def each():  # type: ignore[no-untyped-def]
            for batch in batches:
                staged.append(batch.num_rows)
                yield batch

        return real_add(self, name, each(), schema, group)

    monkeypatch.setattr(RunStage, "add", staged_add)
    shared = open_shared_store(_uri(tmp_path))
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        pushed = shared.push_run(store, "base-run", batch_rows=BATCH)
    assert pushed.added["outputs"] == 600 and pushed.added["scores"] == 1200
    assert pushed.batches["outputs"] >= 600 // BATCH and pushed.batches["scores"] >= 1200 // BATCH
    assert max(appended) <= BATCH and pushed.largest_batch <= BATCH
    big = [n for n in appended if n > 1]  # the runs row and the scorings row are appended whole
    assert sum(big) >= 600 + 600 + 1200  # cases, outputs and scores all went in batch by batch

    with open_store(tmp_path / "b.duckdb", write=True) as store:
        pulled = shared.pull(store, "base-run")
    assert pulled.added["outputs"] == 600 and pulled.added["scores"] == 1200
    assert max(staged) <= BATCH and shared.largest_batch <= BATCH
    assert sum(staged) >= 600 + 600 + 1200
    for name, frame in _frames(tmp_path / "a.duckdb", "base-run").items():
        assert frame.equals(_frames(tmp_path / "b.duckdb", "base-run")[name]), name


def test_a_seal_made_batch_by_batch_is_the_seal_of_the_rows_whole() -> None:
    """Whatever the order and the batching, the streamed seal is `table_seal`'s: text in
    several scripts (UTF-8 byte order is code-point order), nulls, numbers, timestamps."""
    import datetime as dt

    rng = random.Random(7)
    alphabet = ["a", "Z", "é", "ß", "中", "😀", " ", '"', "\\", "0"]
    rows = [
        {
            "grp": rng.choice(["s1", "s2", "s3"]),
            "text": None if rng.random() < 0.1 else "".join(rng.choices(alphabet, k=5)),
            "n": rng.randint(-3, 3),
            "x": rng.random(),
            "at": dt.datetime(2026, 12, 7, tzinfo=dt.UTC) + dt.timedelta(seconds=rng.randint(0, 9)),
        }
        for _ in range(500)
    ]
    table = pa.Table.from_pylist(rows)
    with SealBuilder("grp") as builder:
        for batch in table.to_batches(max_chunksize=37):
            builder.add(batch)
        made = builder.seals()
    assert set(made) == {"s1", "s2", "s3"}
    for group, seal in made.items():
        whole = table.filter(pa.compute.equal(table["grp"], group))
        assert seal == table_seal(whole.take(list(reversed(range(whole.num_rows)))))
    with SealBuilder() as one:
        one.add(table)
        assert one.seals()[None] == table_seal(table)


def test_a_read_only_store_lets_go_of_its_file_once_the_batches_are_read(tmp_path: Path) -> None:
    base, cand = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base, cand])
    store = open_store(tmp_path / "a.duckdb")
    sql = "SELECT * FROM outputs WHERE run_id = $1"
    sizes = [b.num_rows for b in store.record_batches(sql, ["base-run"], batch_rows=BATCH)]
    assert sizes == [BATCH] * 6
    assert store._conn is None  # a writer may open the file again
