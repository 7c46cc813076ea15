"""A driver's periodic merges cost what they add (issue 48): over a run merged every few
chunks, each part file is read by one merge only and once there, no merge after the first
counts the whole run again (summary, keys), a chunk rewritten under a new attempt is merged
again with its first completion kept, and the result is the one-merge result."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from evalkit.run import merging
from evalkit.run.merging import merge_run, stored_summary
from evalkit.run.summary import SessionCounts, summarize
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store
from evalkit.store import merge as merge_module
from evalkit.store.part_checks import CASE_SCHEMA
from evalkit.store.parts import PartInfo, PartsRoot
from evalkit.store.schema import case_columns, corpus_digest

RUN = "periodic"
REPLAYS = 2
CASES = [f"c{i:02d}" for i in range(24)]
#: The figures a running summary keeps exactly (the mean latency and causes are near).
EXACT = ("cases", "outputs", "passed", "failed", "errored", "cached_outputs", "prompt_tokens",
         "completion_tokens", "cost_usd", "cost_cached_usd", "expected_outputs")  # fmt: skip


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id, self.hash, self.tags, self.criticality = case_id, "h-" + case_id, ("t",), "normal"
        self.sealed, self.provenance, self.source = False, {}, "cases/a.yaml:1"
        self.group = None

    def input_json(self) -> str:
        return "{}"


def _start(root: PartsRoot, ids: list[str]) -> None:
    """The run's manifest (a corpus of ``ids``, one share), as a Ray driver records it."""
    digest = corpus_digest((i, "h-" + i) for i in ids)
    manifest = {
        "config_hash": "c" * 64, "replays": REPLAYS, "warnings": [],
        "corpus": {"hash": digest, "n_cases": len(ids)},
        "run": {"run_id": RUN, "label": RUN, "cache": True},
    }  # fmt: skip
    root.write_manifest(RUN, "driver", manifest)


def _piece(root: PartsRoot, name: str, ids: list[str]) -> None:
    """A piece of the run's one share (the cases of the chunks about to go out)."""
    frame = pl.DataFrame(case_columns(RUN, [_Case(i) for i in ids]), schema=CASE_SCHEMA)
    root.write_part(RUN, "cases", f"driver-1-of-1.{name}", frame.to_arrow(), 1)


def _chunk(root: PartsRoot, name: str, ids: list[str], text: str = "t") -> PartInfo:
    """Both replays of ``ids``: every fifth output errored, every seventh failing a scorer,
    every eleventh with a scorer error; cached every third; a cache entry per chunk."""
    keys = [(i, r) for i in ids for r in range(REPLAYS)]
    n, now = len(keys), dt.datetime.now(dt.UTC)
    at = [CASES.index(i) * REPLAYS + r for i, r in keys]
    outputs = pl.DataFrame(
        {
            "run_id": [RUN] * n, "case_id": [i for i, _ in keys], "replay": [r for _, r in keys],
            "text": [text] * n, "tool_calls": ["[]"] * n, "steps": [1] * n,
            "error": ["timeout" if k % 5 == 0 else None for k in at],
            "fail_reason": [None] * n, "latency_ms": [float(k) for k in at],
            "prompt_tokens": [3] * n, "completion_tokens": [k % 4 for k in at],
            "cost_usd": [0.25] * n, "cached": [k % 3 == 0 for k in at],
            "request_hash": ["r"] * n, "model": ["m"] * n, "created_at": [now] * n,
        },
        schema=OUTPUT_SCHEMA,
    )  # fmt: skip
    scores = pl.DataFrame(
        {
            "run_id": [RUN] * n, "scoring_id": [f"{RUN}/s0"] * n,
            "case_id": [i for i, _ in keys], "replay": [r for _, r in keys],
            "scorer": ["contains"] * n, "scorer_index": [0] * n, "tier": [0] * n,
            "score": [1.0] * n, "passed": [k % 7 != 0 for k in at],
            "error": [k % 11 == 0 for k in at], "reason": [text] * n, "details": [None] * n,
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    return root.write_chunk(RUN, name, outputs, scores, {f"k-{name}": '{"x": 1}'})


def _write_run(root: PartsRoot, rounds: list[list[str]]) -> list[list[str]]:
    """Each round: a piece of its cases and a chunk of 2 cases at a time; returns the chunk
    names of each round."""
    names = []
    for k, ids in enumerate(rounds):
        _piece(root, f"p{k}", ids)
        names.append([f"k{k}-{j}" for j in range(0, len(ids), 2)])
        for j in range(0, len(ids), 2):
            _chunk(root, f"k{k}-{j}", ids[j : j + 2])
    return names


def _tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with open_store(db, read_only=True) as store:
        return {
            table: sorted(
                store.query(f"SELECT * EXCLUDE ({drop}) FROM {table} WHERE run_id = ?", [RUN])
                .rows()
            )
            for table, drop in (("outputs", "created_at"), ("scores", "run_id"),
                                ("cases", "run_id"))
        }  # fmt: skip


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each whole-run count runs: the summary from the store, the real keys."""
    calls: Counter[str] = Counter()
    real_summarize, real_keys = merging.summarize, merge_module._Merger._real_keys

    def summarizing(*args: Any, **kwargs: Any) -> Any:
        calls["summarize"] += 1
        return real_summarize(*args, **kwargs)

    def counting(self: Any, *args: Any) -> int:
        calls["real keys"] += 1
        return real_keys(self, *args)

    monkeypatch.setattr(merging, "summarize", summarizing)
    monkeypatch.setattr(merge_module._Merger, "_real_keys", counting)
    return calls


def _reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Part files read, by name (``read_frame`` of a file not held, or its batches)."""
    read: Counter[str] = Counter()
    real_frame, real_batches = PartsRoot._read_frame, PartsRoot.read_batches

    def frame(self: PartsRoot, part: PartInfo, *args: Any) -> pl.DataFrame:
        read[part.name] += 1
        return real_frame(self, part, *args)

    def batches(self: PartsRoot, part: PartInfo, *args: Any) -> Any:
        read[part.name] += 1
        return real_batches(self, part, *args)

    monkeypatch.setattr(PartsRoot, "_read_frame", frame)
    monkeypatch.setattr(PartsRoot, "read_batches", batches)
    return read


def test_periodic_merges_read_each_part_once_and_equal_one_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = [CASES[:6], CASES[6:12], CASES[12:18], CASES[18:]]
    periodic, once = PartsRoot(tmp_path / "periodic"), PartsRoot(tmp_path / "once")
    for root in (periodic, once):
        _start(root, CASES)
    _write_run(once, rounds)
    with open_store(tmp_path / "once.duckdb", write=True) as store:
        one = merge_run(store, once, RUN)
    calls, read = _counted(monkeypatch), _reads(monkeypatch)
    db = tmp_path / "periodic.duckdb"
    with open_store(db, write=True) as store:
        _piece(periodic, "p0", rounds[0])
        merge_run(store, periodic, RUN, in_progress=True)  # records the run, as a driver does
        calls.clear()
        for k, ids in enumerate(rounds):
            if k:
                _piece(periodic, f"p{k}", ids)
            for j in range(0, len(ids), 2):
                _chunk(periodic, f"k{k}-{j}", ids[j : j + 2])
            running = merge_run(store, periodic, RUN, in_progress=True)
            assert running.result.parts_merged == 3 and running.result.outputs_added == 12
            full = summarize(store, RUN, RUN, "c" * 64, expected_outputs=48,
                             session=SessionCounts())  # fmt: skip
            kept = stored_summary(store, RUN)
            assert kept is not None
            assert {f: getattr(kept, f) for f in EXACT} == {f: getattr(full, f) for f in EXACT}
            assert kept.mean_latency_ms == pytest.approx(full.mean_latency_ms, abs=0.02)
        # nothing counted the whole run again, and every part file was read once, by one merge
        assert calls == Counter()
        chunk_files = 3 * sum(len(range(0, len(ids), 2)) for ids in rounds)
        assert len(read) == chunk_files + len(rounds) and set(read.values()) == {1}
        last = merge_run(store, periodic, RUN)
    assert last.result.complete and one.result.complete
    assert _tables(db) == _tables(tmp_path / "once.duckdb")
    assert last.summary.to_dict() | {"wall_s": 0} == one.summary.to_dict() | {"wall_s": 0}
    assert last.summary.case_counts == one.summary.case_counts is not None


def test_a_chunk_rewritten_under_a_new_attempt_is_merged_again_and_its_first_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = PartsRoot(tmp_path / "parts")
    ids = CASES[:8]
    _start(root, ids)
    _piece(root, "p0", ids)
    _chunk(root, "a", ids[:4], text="first")
    db = tmp_path / "s.duckdb"
    with open_store(db, write=True) as store:
        merge_run(store, root, RUN, in_progress=True)
    # a node lost after the chunk committed: Ray runs it again, under the next attempt
    again = _chunk(root, "a", ids[:4], text="again")
    _chunk(root, "b", ids[4:], text="first")
    assert again.attempt == 2
    calls, read = _counted(monkeypatch), _reads(monkeypatch)
    with open_store(db, write=True) as store:  # a driver restarted: a new store handle
        running = merge_run(store, root, RUN, in_progress=True)
        result = running.result
        assert (result.parts_merged, result.outputs_added, result.duplicates) == (2, 8, 8)
        assert {n.split("/")[1] for n in read} == {"a-2", "b-1"} and set(read.values()) == {1}
        assert calls == Counter() and result.stored == 16 and result.complete
        kept = stored_summary(store, RUN)
        texts = set(store.outputs(RUN)["text"].to_list())
        reasons = set(store.scores(RUN)["reason"].to_list())
        done = merge_run(store, root, RUN)
    assert texts == reasons == {"first"}  # the first completion, with its own scores
    assert kept is not None and kept.outputs == done.summary.outputs == 16
    assert {f: getattr(kept, f) for f in EXACT} == {f: getattr(done.summary, f) for f in EXACT}


def test_a_running_summary_not_of_the_rows_stored_is_counted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed session (its stop recorded) or rows a local run wrote, the next
    periodic merge counts the run from the store, once; then it grows again."""
    root = PartsRoot(tmp_path / "parts")
    ids = CASES[:8]
    _start(root, ids)
    _piece(root, "p0", ids)
    _chunk(root, "a", ids[:2])
    db = tmp_path / "s.duckdb"
    calls = _counted(monkeypatch)
    with open_store(db, write=True) as store:
        merge_run(store, root, RUN, in_progress=True)
        store.finish_run(RUN, "failed", {"stopped": "KeyboardInterrupt"})  # then resumed
        calls.clear()
        _chunk(root, "b", ids[2:4])
        assert merge_run(store, root, RUN, in_progress=True).summary.outputs == 8
        assert calls["summarize"] == 1
        _chunk(root, "c", ids[4:6])
        assert merge_run(store, root, RUN, in_progress=True).summary.outputs == 12
        assert calls["summarize"] == 1  # grown, not counted
        store.write_results(*_local_rows(ids[6:7]))  # a local run's rows: not a merge's
        _chunk(root, "d", ids[7:])
        running = merge_run(store, root, RUN, in_progress=True)
        assert running.summary.outputs == 16 and calls["summarize"] == 2
        assert calls["real keys"] == 1 and running.result.stored == 16


def _local_rows(ids: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    outputs = pl.DataFrame(
        {c: [None] * (len(ids) * REPLAYS) for c in OUTPUT_SCHEMA}, schema=OUTPUT_SCHEMA
    ).with_columns(
        run_id=pl.lit(RUN),
        case_id=pl.Series([i for i in ids for _ in range(REPLAYS)]),
        replay=pl.Series([r for _ in ids for r in range(REPLAYS)], dtype=pl.Int32),
        text=pl.lit("local"),
        cached=pl.lit(False),
        latency_ms=pl.lit(1.0),
        created_at=pl.lit(dt.datetime.now(dt.UTC)),
    )
    return outputs, pl.DataFrame(schema=SCORE_SCHEMA)


def test_rows_stored_before_their_case_count_once_their_case_is_merged(
    tmp_path: Path,
) -> None:
    """A key of a case the store did not have is no real key; once a merge adds the case it
    is, and the merge's watermark says so without counting the run's keys again."""
    root = PartsRoot(tmp_path / "parts")
    ids = CASES[:4]
    _start(root, ids)
    _piece(root, "p0", ids[:2])
    _chunk(root, "a", ids[:2])
    db = tmp_path / "s.duckdb"
    with open_store(db, write=True) as store:
        store.write_results(*_local_rows(ids[2:3]))  # before its case: not a real key yet
        assert merge_run(store, root, RUN, in_progress=True).result.stored == 4
        assert merge_run(store, root, RUN, in_progress=True).result.stored == 4
        _piece(root, "p1", ids[2:])
        result = merge_run(store, root, RUN, in_progress=True).result
        assert result.cases_added == 2 and result.rows_before == 6 and result.stored == 6
        _chunk(root, "b", ids[3:])
        assert merge_run(store, root, RUN).result.complete


def test_parts_are_held_only_while_they_fit_the_bound(tmp_path: Path) -> None:
    root = PartsRoot(tmp_path / "parts")
    _start(root, CASES)
    parts = [_chunk(root, f"h{j}", CASES[j : j + 2]) for j in range(0, 6, 2)]  # 4 rows each
    scores = [p for p in root.parts(RUN, "scores") if p.chunk_id == "h0"]
    with root.holding(8):
        for _ in range(2):
            for part in [*parts[:2], *scores]:
                root.read_frame(part, ["case_id"])
                root.read_frame(part)
        assert root.reads == 3  # two outputs parts fit (a scores part rides along): read once
        root.read_frame(parts[2], ["case_id"])  # a third does not: every part is let go
        root.read_frame(parts[0], ["case_id"])
        assert root.reads == 5
    root.read_frame(parts[0])
    assert root.reads == 6  # nothing is held outside
