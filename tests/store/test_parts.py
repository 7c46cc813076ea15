"""Parquet parts (evalkit.store.parts) and the merge (evalkit.store.merge): immutable parts, one
row per (run, case, replay) however often a part is written, first completion wins, safe to run
again, the store's writer lock held; the same through pyarrow.fs on an S3 server on loopback."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from s3_support import endpoint, moto_server, set_test_keys

from evalkit.errors import StoreError
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store
from evalkit.store.merge import merge_parts
from evalkit.store.parts import PartsRoot
from evalkit.store.schema import corpus_digest

RUN = "run-parts-1"


class _Case:
    """What the store records of a case (``StoredCase``), with an optional group."""

    def __init__(self, case_id: str, group: str | None = None) -> None:
        self.id, self.hash, self.tags, self.criticality = case_id, "h-" + case_id, ("t",), "normal"
        self.sealed, self.provenance, self.source = False, {"by": "ana"}, "cases/a.yaml:1"
        self.group = group

    def input_json(self) -> str:
        return "{}"


def _manifest(cases: list[_Case], config_hash: str = "c" * 64, replays: int = 1) -> dict:
    corpus = {"hash": corpus_digest((c.id, c.hash) for c in cases), "n_cases": len(cases)}
    return {
        "config_hash": config_hash,
        "replays": replays,
        "corpus": corpus,
        "run": {"run_id": RUN, "label": "parts", "cache": True},
        "warnings": [],
    }


def _record(
    root: PartsRoot, case_ids: list[str], writer: str = "shard-1", replays: int = 1
) -> list[_Case]:
    """What every shard writes first: the run's manifest and all of its cases."""
    cases = [_Case(case_id) for case_id in case_ids]
    root.write_manifest(RUN, writer, _manifest(cases, replays=replays))
    root.write_cases(RUN, writer, cases)
    return cases


def _frames(case_ids: list[str], text: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    now = dt.datetime.now(dt.UTC)
    n = len(case_ids)
    outputs = pl.DataFrame(
        {
            "run_id": [RUN] * n, "case_id": case_ids, "replay": [0] * n, "text": [text] * n,
            "tool_calls": ["[]"] * n, "steps": [1] * n, "error": [None] * n,
            "fail_reason": [None] * n, "latency_ms": [1.0] * n, "prompt_tokens": [3] * n,
            "completion_tokens": [4] * n, "cost_usd": [0.0] * n, "cached": [False] * n,
            "request_hash": ["r"] * n, "model": ["m"] * n, "created_at": [now] * n,
        },
        schema=OUTPUT_SCHEMA,
    )  # fmt: skip
    scores = pl.DataFrame(
        {
            "run_id": [RUN] * n, "scoring_id": [f"{RUN}/s0"] * n, "case_id": case_ids,
            "replay": [0] * n, "scorer": ["contains"] * n, "scorer_index": [0] * n,
            "tier": [0] * n, "score": [1.0] * n, "passed": [True] * n, "error": [False] * n,
            "reason": [text] * n, "details": [None] * n,
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    return outputs, scores


def _counts(db: Path) -> tuple[int, int, int]:
    with open_store(db, read_only=True) as store:
        rows = store.query(
            "SELECT (SELECT count(*) FROM outputs), (SELECT count(DISTINCT (case_id, replay)) "
            "FROM outputs), (SELECT count(*) FROM scores)"
        ).row(0)
    return int(rows[0]), int(rows[1]), int(rows[2])


def test_a_part_written_twice_merges_to_one_row_per_key(tmp_path: Path) -> None:
    root = PartsRoot(tmp_path / "parts")
    _record(root, ["a", "b", "c", "d"])
    first = root.write_chunk(RUN, "c1", *_frames(["a", "b"], "first"), {"k1": '{"x": 1}'})
    time.sleep(0.01)  # a retry after a slow write: the same chunk again, the next attempt
    again = root.write_chunk(RUN, "c1", *_frames(["a", "b"], "again"), {"k1": '{"x": 2}'})
    assert (first.attempt, again.attempt) == (1, 2)
    root.write_chunk(RUN, "c2", *_frames(["c"], "first"), {})
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        result = merge_parts(store, root, RUN)
        assert result.run_created and result.parts_merged == 3
        assert (result.outputs_added, result.duplicates, result.stored) == (3, 2, 3)
        texts = dict(store.outputs(RUN).select("case_id", "text").iter_rows())
        assert texts == {"a": "first", "b": "first", "c": "first"}  # first completion wins
        reasons = store.scores(RUN)["reason"].to_list()
        assert reasons == ["first"] * 3  # scores come from the winning attempt, not mixed
        assert store.cache_get(["k1"]) == {"k1": '{"x": 1}'}
        assert not result.complete and result.expected == 4
    assert _counts(db) == (3, 3, 3)
    with open_store(db, write=True) as store:  # again, with nothing new: nothing added
        again_result = merge_parts(store, root, RUN)
    assert (again_result.parts_merged, again_result.outputs_added) == (0, 0)
    assert _counts(db) == (3, 3, 3)


def test_a_part_merged_after_its_key_was_stored_adds_nothing(tmp_path: Path) -> None:
    root = PartsRoot(tmp_path / "parts")
    _record(root, ["a", "b"], writer="w")
    root.write_chunk(RUN, "c1", *_frames(["a"], "early"), {})
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        merge_parts(store, root, RUN)
    root.write_chunk(RUN, "c1", *_frames(["a", "b"], "late"), {})  # a retried chunk, later
    with open_store(db, write=True) as store:
        result = merge_parts(store, root, RUN)
        texts = dict(store.outputs(RUN).select("case_id", "text").iter_rows())
    assert texts == {"a": "early", "b": "late"} and result.duplicates == 1 and result.complete


def test_chunk_commits_list_the_run_once_and_the_merge_reads_only_its_batches_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalkit.store.merge as merge

    root = PartsRoot(tmp_path / "parts")
    ids = [f"c{i:02d}" for i in range(12)]
    _record(root, ids)
    for case_id in ids:  # twelve chunk commits: one listing of the run's four tables in all
        root.write_chunk(RUN, f"chunk-{case_id}", *_frames([case_id], "x"), {})
    assert root.listings == 4
    assert root.write_chunk(RUN, "chunk-c00", *_frames(["c00"], "y"), {}).attempt == 2
    reads: list[str] = []
    frame_of = merge._Merger._frame_of

    def counted(self, sql, *args):  # type: ignore[no-untyped-def]
        reads.append(sql)
        return frame_of(self, sql, *args)

    monkeypatch.setattr(merge._Merger, "_frame_of", counted)
    monkeypatch.setattr(merge, "BATCH_PARTS", 2)  # seven batches of parts
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        result = merge_parts(store, root, RUN)
    assert (result.parts_merged, result.outputs_added, result.duplicates) == (13, 12, 1)
    # the run's whole key set is never read: each batch looks up only its own keys
    assert sum("FROM outputs WHERE run_id" in sql for sql in reads) == 0
    assert sum("SEMI JOIN _batch_keys" in sql for sql in reads) == 7


def test_a_merge_with_nothing_new_reads_no_part_and_counts_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalkit.store.merge as merge

    root = PartsRoot(tmp_path / "parts")
    ids = [f"c{i:02d}" for i in range(12)]
    _record(root, ids)
    _record(root, ids, writer="shard-2")  # a second writer: a second cases part
    for case_id in ids[:10]:
        root.write_chunk(RUN, f"chunk-{case_id}", *_frames([case_id], "x"), {})
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        assert merge_parts(store, root, RUN).stored == 10
    reads: list[str] = []
    counted: list[str] = []
    read_frame, real_keys = PartsRoot.read_frame, merge._Merger._real_keys

    def reading(self, part, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(part.name)
        return read_frame(self, part, *args, **kwargs)

    def counting(self, *args):  # type: ignore[no-untyped-def]
        counted.append("real keys")
        return real_keys(self, *args)

    monkeypatch.setattr(PartsRoot, "read_frame", reading)
    monkeypatch.setattr(merge._Merger, "_real_keys", counting)
    for _ in range(3):  # nothing new, three times: no part read, no key counted
        with open_store(db, write=True) as store:
            result = merge_parts(store, root, RUN)
        assert (result.parts_merged, result.stored, result.changed) == (0, 10, False)
    assert reads == [] and counted == []
    # a straggler's chunk written late (an earlier attempt number of a chunk merged already)
    # and one new chunk: read, merged, and the watermark grown by their winners
    root.write_chunk(RUN, "chunk-c00", *_frames(["c00", "c10"], "late"), {})
    root.write_chunk(RUN, "chunk-c11", *_frames(["c11"], "x"), {})
    with open_store(db, write=True) as store:
        result = merge_parts(store, root, RUN)
    assert (result.parts_merged, result.outputs_added, result.duplicates) == (2, 2, 1)
    assert result.stored == 12 and result.complete and counted == []
    assert {name.split("/")[1] for name in reads} == {"chunk-c00-2", "chunk-c11-1"}
    # rows the merge did not write (a local --resume) make the watermark stale: counted again
    with open_store(db, write=True) as store:
        store._append("outputs", _frames(["c05"], "local")[0])
        result = merge_parts(store, root, RUN)
    assert result.stored == 12 and counted == ["real keys"]


def test_parts_are_never_overwritten(tmp_path: Path) -> None:
    root = PartsRoot(tmp_path / "parts")
    outputs, _ = _frames(["a"], "x")
    one = root.write_part(RUN, "outputs", "c1", outputs.to_arrow(), attempt=1)
    two = root.write_part(RUN, "outputs", "c1", outputs.to_arrow(), attempt=1)  # taken: next
    assert (one.attempt, two.attempt) == (1, 2)
    assert sorted(p.name for p in root.parts(RUN, "outputs")) == ["outputs/c1-1", "outputs/c1-2"]
    leftovers = [p.name for p in (tmp_path / "parts").rglob("*") if p.name.startswith(".")]
    assert leftovers == []  # no temporary files left behind


def test_the_merge_refuses_parts_of_other_configurations(tmp_path: Path) -> None:
    root = PartsRoot(tmp_path / "parts")
    cases = [_Case("a"), _Case("b")]
    root.write_manifest(RUN, "shard-1", _manifest(cases, "a" * 64))
    root.write_manifest(RUN, "shard-2", _manifest(cases, "b" * 64))
    with (
        open_store(tmp_path / "e.duckdb", write=True) as store,
        pytest.raises(StoreError, match="shard"),
    ):
        merge_parts(store, root, RUN)
    with (
        open_store(tmp_path / "e.duckdb", write=True) as store,
        pytest.raises(StoreError, match="no parts"),
    ):
        merge_parts(store, root, "other-run")


def test_the_merge_is_the_only_writer(tmp_path: Path) -> None:
    """A merge needs the store opened for writing, which holds the writer lock: a second
    writer (another merge, a run) is refused while it is open."""
    root = PartsRoot(tmp_path / "parts")
    _record(root, ["a"], writer="w")
    root.write_chunk(RUN, "c1", *_frames(["a"], "x"), {})
    db = tmp_path / "e.duckdb"
    open_store(db, write=True).close()
    with open_store(db, read_only=True) as reader, pytest.raises(StoreError, match="writing"):
        merge_parts(reader, root, RUN)
    import subprocess
    import sys

    with open_store(db, write=True) as store:
        merge_parts(store, root, RUN)
        other = subprocess.run(
            [sys.executable, "-c",
             f"import evalkit.store as s; s.open_store({str(db)!r}, write=True)"],
            capture_output=True, text=True,
        )  # fmt: skip
    assert other.returncode != 0 and "being written by another process" in other.stderr


# -- S3 through pyarrow.fs, against moto's server on 127.0.0.1 -----------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_server() as server:
        yield endpoint(server).removeprefix("http://")


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    set_test_keys(monkeypatch)


def _s3_root(endpoint: str, bucket: str) -> str:
    return (
        f"s3://{bucket}/evalkit?endpoint_override={endpoint}&scheme=http&region=us-east-1"
        "&allow_bucket_creation=true"
    )


def test_parts_on_s3_are_written_and_merged_through_pyarrow_fs(
    tmp_path: Path, s3_endpoint: str, s3_env: None
) -> None:
    import pyarrow.fs as pafs

    location = _s3_root(s3_endpoint, "parts-bucket")
    root = PartsRoot(location)
    assert isinstance(root.fs, pafs.S3FileSystem)
    root.fs.create_dir("parts-bucket")
    _record(root, ["a", "b", "c"])
    root.write_chunk(RUN, "c1", *_frames(["a", "b"], "first"), {"k": "{}"})
    root.write_chunk(RUN, "c1", *_frames(["a", "b"], "again"), {})  # a retry: attempt 2
    root.write_chunk(RUN, "c2", *_frames(["c"], "first"), {})
    names = sorted(p.name for p in PartsRoot(location).parts(RUN, "outputs"))
    assert names == ["outputs/c1-1", "outputs/c1-2", "outputs/c2-1"]
    stored = root.fs.get_file_info(pafs.FileSelector("parts-bucket/evalkit", recursive=True))
    assert any(i.path.endswith("/parts/outputs/c1-2.parquet") for i in stored)
    db = tmp_path / "s3.duckdb"
    for _ in range(2):  # twice: the second merge adds nothing
        with open_store(db, write=True) as store:
            result = merge_parts(store, PartsRoot(location), RUN)
    assert result.parts_merged == 0 and result.stored == 3 and result.complete
    assert _counts(db) == (3, 3, 3)
    assert "testing" not in repr(root)


def test_a_sharded_run_writes_its_parts_to_s3(
    tmp_path: Path,
    s3_endpoint: str,
    s3_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``evalkit run --shard K/N --parts s3://...`` for each shard, then ``evalkit runs merge``."""
    from evalkit.cli import main

    config = _python_suite(tmp_path, monkeypatch, n_cases=12)
    location = _s3_root(s3_endpoint, "shards-bucket")
    PartsRoot(location).fs.create_dir("shards-bucket")
    db = str(tmp_path / "merged.duckdb")
    for k in (1, 2, 3):
        args = ["run", "--config", config, "--shard", f"{k}/3", "--run-id", "ci-7"]
        assert main([*args, "--parts", location, "--chunk-size", "2", "--db", db]) == 0
    assert not os.path.exists(db)  # shards never open the store
    capsys.readouterr()
    assert main(["runs", "merge", "ci-7", "--parts", location, "--db", db]) == 0
    printed = capsys.readouterr().out
    assert "run ci-7: 12 cases" in printed and "this session" not in printed
    with open_store(db, read_only=True) as store:
        assert store.run_status("ci-7") == "complete"
        assert store.outputs("ci-7").height == 12 and store.scores("ci-7").height == 12


_APP = """
def answer(messages, **context):
    return "fine " + messages[-1]["content"]
"""
_app_names = iter(range(10**6))


def _python_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_cases: int) -> str:
    name = f"ek_parts_app_{next(_app_names)}"
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / f"{name}.py").write_text(_APP)
    monkeypatch.syspath_prepend(str(tmp_path / "app"))
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: q-{i:03d}\n  input: {{messages: [{{role: user, content: 'q {i}'}}]}}\n"
            "  expect: [{contains: fine}]\n"
            for i in range(n_cases)
        )
    )
    (root / "evalkit.yaml").write_text(
        f"suite: py\nsystem: {{provider: python, model: app, function: '{name}:answer'}}\n"
    )
    return str(root / "evalkit.yaml")


def test_case_groups_survive_the_parts_and_the_merge(tmp_path: Path) -> None:
    """A sharded run's cases keep their ``group:`` (the slices cluster over it); parts written
    before the column existed merge as cases without a group."""
    root = PartsRoot(tmp_path / "parts")
    cases = [_Case("a", "inc-1"), _Case("b")]
    root.write_manifest(RUN, "shard-1", _manifest(cases))
    root.write_cases(RUN, "shard-1", cases)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        merge_parts(store, root, RUN)
        grouped = store.cases(RUN)
    assert grouped.select("case_id", "case_group").rows() == [("a", "inc-1"), ("b", None)]
    assert grouped["provenance"].to_list() == ['{"by": "ana"}'] * 2

    old_root = PartsRoot(tmp_path / "old-parts")
    old_root.write_manifest(RUN, "old-writer", _manifest(cases))
    old = pl.DataFrame({"run_id": [RUN] * 2, "case_id": ["a", "b"], "case_hash": ["h-a", "h-b"],
                        "tags": [["t"]] * 2, "criticality": ["normal"] * 2, "sealed": [False] * 2,
                        "input": ["{}"] * 2, "provenance": ["{}"] * 2,
                        "source": ["cases/a.yaml:3"] * 2})  # fmt: skip
    old_root.write_part(RUN, "cases", "old-writer", old.to_arrow(), 1)
    with open_store(tmp_path / "old.duckdb", write=True) as store:
        merge_parts(store, old_root, RUN)
        ungrouped = store.cases(RUN)
    assert ungrouped.select("case_id", "case_group").rows() == [("a", None), ("b", None)]
