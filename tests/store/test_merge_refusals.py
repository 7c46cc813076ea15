"""`evalkit runs merge` trusts no part (evalkit.store.merge, evalkit.store.parts): a forged,
ghost, truncated, random or wrongly typed part is refused in one line naming its file, exit 2,
and the store's rows are exactly what they were; only real (case, replay) keys complete a run."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.run.merging import merge_run
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store
from evalkit.store.parts import PartsRoot

RUN = "half-done"
VICTIM = "victim"
REPO = Path(__file__).resolve().parents[2]


class _Case:
    def __init__(self, case_id: str) -> None:
        self.id, self.hash, self.tags, self.criticality = case_id, "h-" + case_id, ("t",), "normal"
        self.sealed, self.provenance, self.source = False, {}, "cases/a.yaml:1"

    def input_json(self) -> str:
        return "{}"


def _record(root: PartsRoot, run_id: str, case_ids: list[str]) -> None:
    cases = [_Case(c) for c in case_ids]
    digest = hashlib.sha256()  # as Corpus.hash: "id\0hash\n" of each case, by id
    for case in sorted(cases, key=lambda c: c.id):
        digest.update(f"{case.id}\0{case.hash}\n".encode())
    corpus = {"hash": digest.hexdigest(), "n_cases": len(cases)}
    manifest = {
        "config_hash": "c" * 64, "replays": 1, "corpus": corpus, "warnings": [],
        "run": {"run_id": run_id, "label": run_id, "cache": True},
    }  # fmt: skip
    root.write_manifest(run_id, "shard-1", manifest)
    root.write_cases(run_id, "shard-1", cases)


def _frames(
    run_id: str, case_ids: list[str], passed: bool = True
) -> tuple[pl.DataFrame, pl.DataFrame]:
    n, now = len(case_ids), dt.datetime.now(dt.UTC)
    outputs = pl.DataFrame(
        {
            "run_id": [run_id] * n, "case_id": case_ids, "replay": [0] * n, "text": ["t"] * n,
            "tool_calls": ["[]"] * n, "steps": [1] * n, "error": [None] * n,
            "fail_reason": [None] * n, "latency_ms": [1.0] * n, "prompt_tokens": [1] * n,
            "completion_tokens": [1] * n, "cost_usd": [0.0] * n, "cached": [False] * n,
            "request_hash": ["r"] * n, "model": ["m"] * n, "created_at": [now] * n,
        },
        schema=OUTPUT_SCHEMA,
    )  # fmt: skip
    scores = pl.DataFrame(
        {
            "run_id": [run_id] * n, "scoring_id": [f"{run_id}/s0"] * n, "case_id": case_ids,
            "replay": [0] * n, "scorer": ["contains"] * n, "scorer_index": [0] * n,
            "tier": [0] * n, "score": [float(passed)] * n, "passed": [passed] * n,
            "error": [False] * n, "reason": [None] * n, "details": [None] * n,
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    return outputs, scores


VICTIM_CASES = [f"v-{i:02d}" for i in range(40)]
RUN_CASES = [f"q-{i:02d}" for i in range(40)]


@pytest.fixture
def merged(tmp_path: Path) -> tuple[PartsRoot, Path]:
    """A store holding a complete run (40 passing scores) and a half-done one (20 of 40)."""
    root = PartsRoot(tmp_path / "parts")
    db = tmp_path / "e.duckdb"
    _record(root, VICTIM, VICTIM_CASES)
    root.write_chunk(VICTIM, "v", *_frames(VICTIM, VICTIM_CASES), {})
    _record(root, RUN, RUN_CASES)
    root.write_chunk(RUN, "first", *_frames(RUN, RUN_CASES[:20]), {"k": '{"x": 1}'})
    for run_id in (VICTIM, RUN):
        assert main(["runs", "merge", run_id, "--parts", str(root.location), "--db", str(db)]) == 0
    return root, db


def _snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (sorted), read through a read-only store."""
    with open_store(db, read_only=True) as store:
        tables = store.query("SELECT table_name FROM information_schema.tables")["table_name"]
        return {
            table: sorted(store.query(f"SELECT * FROM {table}").rows(), key=repr)
            for table in sorted(tables)
        }


def _part_path(root: PartsRoot, table: str, chunk: str) -> Path:
    return Path(root.base) / "runs" / RUN / "parts" / table / f"{chunk}-1.parquet"


def _forged_scores(root: PartsRoot) -> Path:
    """The issue's forgery: an honest outputs part whose scores carry the victim's run id."""
    outputs, _ = _frames(RUN, RUN_CASES[20:25])
    _, forged = _frames(VICTIM, VICTIM_CASES[:5], passed=False)
    root.write_part(RUN, "scores", "forged", forged.to_arrow(), 1)
    root.write_part(RUN, "outputs", "forged", outputs.to_arrow(), 1)
    return _part_path(root, "scores", "forged")


def _forged_outputs(root: PartsRoot) -> Path:
    root.write_chunk(RUN, "forged", *_frames(VICTIM, VICTIM_CASES[:5]), {})
    return _part_path(root, "outputs", "forged")


def _ghost_cases(root: PartsRoot) -> Path:
    """Outputs of case ids the run does not have: 20 of them would have made it 'complete'."""
    root.write_chunk(RUN, "ghost", *_frames(RUN, [f"ghost-{i:02d}" for i in range(20)]), {})
    return _part_path(root, "outputs", "ghost")


def _ghost_cases_part(root: PartsRoot) -> Path:
    """A cases part adding cases the run's corpus does not have (the ghosts' alibi)."""
    ghosts = [_Case(c) for c in [*RUN_CASES, "ghost-00"]]
    root.write_cases(RUN, "intruder", ghosts)
    root.write_chunk(RUN, "ghost", *_frames(RUN, ["ghost-00"]), {})
    return Path(root.base) / "runs" / RUN / "parts" / "cases" / "intruder-1.parquet"


def _truncated(root: PartsRoot) -> Path:
    root.write_chunk(RUN, "second", *_frames(RUN, RUN_CASES[20:]), {})
    path = _part_path(root, "outputs", "second")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _random_bytes(root: PartsRoot) -> Path:
    root.write_chunk(RUN, "second", *_frames(RUN, RUN_CASES[20:]), {})
    path = _part_path(root, "scores", "second")
    path.write_bytes(bytes(range(256)) * 8)
    return path


def _wrong_type(root: PartsRoot) -> Path:
    outputs, scores = _frames(RUN, RUN_CASES[20:])
    root.write_part(RUN, "scores", "second", scores.to_arrow(), 1)
    wrong = outputs.with_columns(pl.col("replay").cast(pl.String))  # "0": castable, yet wrong
    root.write_part(RUN, "outputs", "second", wrong.to_arrow(), 1)
    return _part_path(root, "outputs", "second")


@pytest.mark.parametrize(
    "make_bad_part",
    [
        _forged_scores,
        _forged_outputs,
        _ghost_cases,
        _ghost_cases_part,
        _truncated,
        _random_bytes,
        _wrong_type,
    ],
)
def test_a_bad_part_is_refused_in_one_line_and_nothing_is_merged(
    merged: tuple[PartsRoot, Path],
    make_bad_part: Callable[[PartsRoot], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, db = merged
    root.write_chunk(RUN, "good", *_frames(RUN, RUN_CASES[38:]), {})  # would merge alone
    bad = make_bad_part(root)
    before = _snapshot(db)
    capsys.readouterr()
    assert main(["runs", "merge", RUN, "--parts", str(root.location), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("evalkit: error: "), err
    assert f"{bad}: " in err and "refused" in err, err
    assert "Traceback" not in err
    assert _snapshot(db) == before  # nothing of the bad part, nor of the good one beside it
    with open_store(db, read_only=True) as store:
        assert store.run_status(RUN) == "incomplete"
        assert store.scores(VICTIM)["passed"].to_list() == [True] * 40
    bad.unlink()  # the part removed: the rest merges
    if make_bad_part is _ghost_cases_part:
        _part_path(root, "outputs", "ghost").unlink()
    assert main(["runs", "merge", RUN, "--parts", str(root.location), "--db", str(db)]) == 0
    with open_store(db, read_only=True) as store:
        assert {(c, 0) for c in RUN_CASES[38:]} <= store.completed(RUN)
        assert {c for c, _ in store.completed(RUN)} <= set(RUN_CASES)
        assert store.scores(VICTIM)["passed"].to_list() == [True] * 40


def test_a_manifest_that_is_not_json_is_refused_by_name(
    merged: tuple[PartsRoot, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, db = merged
    manifest = Path(root.run_dir(RUN)) / "manifest" / "shard-9.json"
    manifest.write_text('{"config_hash": ')
    before = _snapshot(db)
    capsys.readouterr()
    assert main(["runs", "merge", RUN, "--parts", str(root.location), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{manifest}: manifest refused" in err, err
    assert _snapshot(db) == before


def test_ghost_outputs_never_complete_a_half_done_run(merged: tuple[PartsRoot, Path]) -> None:
    """Rows of case ids the run does not have (stored before merges checked them) are not
    counted: 20 real of 40 is incomplete, whatever else the table holds."""
    root, db = merged
    with open_store(db, write=True) as store:
        ghosts, scores = _frames(RUN, [f"ghost-{i:02d}" for i in range(20)])
        store.write_results(ghosts, scores)
        assert store.outputs(RUN).height == 40
        merged_run = merge_run(store, root, RUN)
        assert (merged_run.result.stored, merged_run.result.expected) == (20, 40)
        assert not merged_run.result.complete
        assert store.run_status(RUN) == "incomplete"


def test_the_corpus_hash_the_merge_checks_is_the_corpus_hash() -> None:
    from evalkit.store.schema import corpus_digest

    corpus = load_corpus(REPO / "corpus")
    assert corpus_digest((c.id, c.hash) for c in corpus.cases) == corpus.hash


def test_a_merge_with_no_parts_names_the_folder_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal names ``--parts`` as the user wrote it, never the object's repr."""
    (tmp_path / "parts").mkdir()
    db = str(tmp_path / "e.duckdb")
    assert main(["runs", "merge", "nope", "--parts", str(tmp_path / "parts"), "--db", db]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'parts'}: no parts of run nope" in err
    assert "PartsRoot(" not in err and err.count("\n") == 1
