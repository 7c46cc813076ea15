"""Store round trip into Polars, batched atomic writes, scorings, overrides, flakes, one writer."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from evalkit.errors import StoreError
from evalkit.run_manifest import ModelInfo
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store


class FakeCase:
    def __init__(self, case_id: str, tags: tuple[str, ...]) -> None:
        self.id = case_id
        self.tags = tags
        self.hash = "h-" + case_id
        self.criticality = "normal"
        self.sealed = False
        self.provenance = {"reviewer": "lead"}
        self.source = f"cases/a.yaml:{len(case_id)}"

    def input_json(self) -> str:
        return '{"messages": []}'


def manifest(run_id: str, label: str) -> dict:
    return {"run": {"run_id": run_id, "label": label}, "config_hash": "cfg1", "model": {"id": "m"}}


def outputs_frame(run_id: str, rows: list[tuple[str, int, str | None]]) -> pl.DataFrame:
    now = dt.datetime.now(dt.UTC)
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(rows),
            "case_id": [r[0] for r in rows],
            "replay": [r[1] for r in rows],
            "text": [r[2] for r in rows],
            "tool_calls": ["[]"] * len(rows),
            "steps": [1] * len(rows),
            "error": [None if r[2] is not None else "HTTP 500" for r in rows],
            "fail_reason": [None] * len(rows),
            "latency_ms": [12.5] * len(rows),
            "prompt_tokens": [10] * len(rows),
            "completion_tokens": [5] * len(rows),
            "cost_usd": [0.001] * len(rows),
            "cached": [False] * len(rows),
            "request_hash": ["k"] * len(rows),
            "model": ["m"] * len(rows),
            "created_at": [now] * len(rows),
        },
        schema=OUTPUT_SCHEMA,
    )


def scores_frame(run_id: str, scoring_id: str, rows: list[tuple[str, int, bool]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(rows),
            "scoring_id": [scoring_id] * len(rows),
            "case_id": [r[0] for r in rows],
            "replay": [r[1] for r in rows],
            "scorer": ["contains"] * len(rows),
            "scorer_index": [0] * len(rows),
            "tier": [0] * len(rows),
            "score": [1.0 if r[2] else 0.0 for r in rows],
            "passed": [r[2] for r in rows],
            "error": [False] * len(rows),
            "reason": ["found" if r[2] else "missing" for r in rows],
            "details": [None] * len(rows),
        },
        schema=SCORE_SCHEMA,
    )


def test_round_trip_into_polars(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        cases = [FakeCase("a", ("billing",)), FakeCase("b", ("billing", "policy"))]
        store.create_run(manifest("r1", "baseline"), cases)
        store.write_results(
            outputs_frame("r1", [("a", 0, '{"x":1}'), ("b", 0, None)]),
            scores_frame("r1", "r1/s0", [("a", 0, True)]),
        )
        runs = store.runs()
        assert runs["run_id"].to_list() == ["r1"] and runs["status"].to_list() == ["running"]
        assert store.resolve_run("baseline") == "r1" and store.resolve_run("r") == "r1"
        assert store.manifest("r1").model == ModelInfo(id="m")
        frame = store.cases("r1")
        assert frame["tags"].to_list() == [["billing"], ["billing", "policy"]]
        assert frame.schema["tags"] == pl.List(pl.String)
        outputs = store.outputs("r1")
        assert outputs.schema["created_at"] == pl.Datetime("us", "UTC")
        assert outputs["error"].to_list() == [None, "HTTP 500"]
        assert store.completed("r1") == {("a", 0), ("b", 0)}
        scores = store.scores("r1")
        assert scores.select("case_id", "passed", "reason").rows() == [("a", True, "found")]
        store.finish_run("r1", "complete", {"passed": 1})
        assert store.run_status("r1") == "complete"


def test_rescoring_keeps_old_scores_and_reads_newest(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(manifest("r1", "x"), [FakeCase("a", ())])
        store.write_results(
            outputs_frame("r1", [("a", 0, "hi")]), scores_frame("r1", "r1/s0", [("a", 0, True)])
        )
        new = store.write_scoring(
            "r1", "rescore", scores_frame("r1", "ignored", [("a", 0, False)]), {"a": "h-a2"}
        )
        assert store.latest_scoring("r1") == new == "r1/s1"
        assert store.cases("r1")["case_hash"].to_list() == ["h-a2"]
        assert store.scores("r1")["passed"].to_list() == [False]
        assert store.scores("r1", "r1/s0")["passed"].to_list() == [True]
        assert store.scorings("r1").height == 2


def test_failed_batch_writes_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(manifest("r1", "x"), [FakeCase("a", ())])
        bad_scores = scores_frame("r1", "r1/s0", [("a", 0, True)]).drop("reason")
        with pytest.raises(Exception):  # noqa: B017 - any failure must roll back both tables
            store.write_results(outputs_frame("r1", [("a", 0, "hi")]), bad_scores)
        assert store.outputs("r1").is_empty() and store.scores("r1").is_empty()


def test_column_lists_store_the_same_rows_as_frames(tmp_path: Path) -> None:
    """The run writes column lists (no Polars on its path); they must land exactly as the
    same batch written as frames, nulls, timestamps and empty tag lists included."""
    outputs = outputs_frame("r1", [("a", 0, '{"x":1}'), ("b", 1, None)])
    scores = scores_frame("r1", "r1/s0", [("a", 0, True), ("b", 1, False)])
    stored = {}
    for how in ("frames", "columns"):
        with open_store(tmp_path / f"{how}.duckdb", write=True) as store:
            store.create_run(manifest("r1", how), [FakeCase("a", ()), FakeCase("b", ("x",))])
            if how == "frames":
                store.write_results(outputs, scores)
            else:
                store.write_results(
                    outputs.to_dict(as_series=False), scores.to_dict(as_series=False)
                )
            stored[how] = (store.outputs("r1"), store.scores("r1"), store.cases("r1"))
    for by_frames, by_columns in zip(stored["frames"], stored["columns"], strict=True):
        assert by_columns.schema == by_frames.schema
        assert by_columns.rows() == by_frames.rows()
    assert stored["columns"][2]["tags"].to_list() == [[], ["x"]]


def test_columns_of_unequal_length_write_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.create_run(manifest("r1", "x"), [FakeCase("a", ())])
        outputs = outputs_frame("r1", [("a", 0, "hi")]).to_dict(as_series=False)
        scores = scores_frame("r1", "r1/s0", [("a", 0, True)]).to_dict(as_series=False)
        scores["reason"] = []
        with pytest.raises(StoreError, match=r"scores: columns of unequal length"):
            store.write_results(outputs, scores)
        assert store.outputs("r1").is_empty() and store.scores("r1").is_empty()
        assert store.records("SELECT count(*) AS n FROM outputs") == [{"n": 0}]


def test_overrides_need_a_reason_and_flakes_keep_latest(tmp_path: Path) -> None:
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        with pytest.raises(StoreError, match="written reason"):
            store.save_override("b", "c", "ana", "  ")
        store.save_override("b", "c", "ana", "billing copy change approved by finance")
        assert store.overrides("b", "c")["who"].to_list() == ["ana"]
        assert store.overrides("c", "b").is_empty()
        first = pl.DataFrame(
            {"case_id": ["a"], "tags": [["x"]], "runs": [3], "flips": [1], "flake_rate": [0.33]}
        )
        store.save_flakes("cfg", first)
        store.save_flakes("cfg", first.with_columns(pl.lit("b").alias("case_id")))
        assert store.latest_flakes("cfg")["case_id"].to_list() == ["b"]
        assert store.latest_flakes("other").is_empty()


def test_unknown_run_is_a_clear_error(tmp_path: Path) -> None:
    with (
        open_store(tmp_path / "e.duckdb", write=True) as store,
        pytest.raises(StoreError, match="no run"),
    ):
        store.resolve_run("nope")


def test_second_writer_gets_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        store.create_run(manifest("r1", "x"), [FakeCase("a", ())])
        code = (
            "import sys\nfrom evalkit.store import open_store\n"
            "from evalkit.errors import StoreError\n"
            f"try:\n    open_store({str(db)!r}, write=True, wait_s=0.3)\nexcept StoreError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "being written by another process" in result.stdout
    with open_store(db, read_only=True) as reader:  # intact after the refused writer
        assert reader.runs()["run_id"].to_list() == ["r1"]
