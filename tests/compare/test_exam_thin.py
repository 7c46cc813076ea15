"""The pinned exam's gate holds what the plain gate holds (issue 48, item 4): both runs read thin,
the as-stored cases' score rows left in the store (read a range of cases at a time), only the
rescored and exam-answered cases held whole (`evalkit.compare.exam_thin`). On a promoted suite
whose pull request adds, edits (an input, an expectation), removes and seals cases, with a
must_pass case, judge-scored cases and (or not) an exam run, the decision, every frame, the
exam's summary and the report are the whole-run path's."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from exam_support import (
    LOOSE_EXPECT,
    LOOSE_SCHEMA,
    Project,
    edit_case,
    gate_flow,
    move_cases,
    run_candidate,
    write_project,
)

from evalkit.cli import main
from evalkit.compare import exam, verdicts
from evalkit.compare.pin import gate_pair
from evalkit.report.build import build_report, to_json
from evalkit.store import Store, open_store

#: A judge check's identity as a judge scorer records it (`evalkit.judges.gating`).
_JUDGE = json.dumps({"judge_model": "judge-m", "rubric": "tone.md", "rubric_hash": "ab12",
                     "judge_score": 4})  # fmt: skip


def _sealed(root: Path) -> None:
    """Two sealed cases in the pinned corpus (reported, never gated)."""
    (root / "sealed").mkdir()
    (root / "sealed" / "held.yaml").write_text(
        "".join(
            f"- id: sealed-{i}\n  tags: [policy]\n  input: {{messages: [{{role: user, content: "
            f"'sealed {i}'}}]}}\n  expect: [{{contains: refund}}]\n"
            for i in range(2)
        ),
        encoding="utf-8",
    )


def _pull_request(root: Path) -> None:
    """Loosen three regressed billing cases' expectation (their pinned input answered: rescored),
    reword one policy case (a new input), delete another, add two cases."""

    def loosen(block: str) -> str:
        head, _, _ = block.partition("  expect: ")
        return f"{head}  expect: {LOOSE_EXPECT}\n"

    assert edit_case(root, {"billing-00", "billing-01", "billing-02"}, loosen) == 3
    reword = lambda b: b.replace("content: 'question", "content: 'Please answer:")  # noqa: E731
    assert edit_case(root, {"policy-1"}, reword) == 1
    move_cases(root, {"policy-3"}, "")
    (root / "cases" / "added.yaml").write_text(
        "".join(
            f"- id: added-{i}\n  tags: [billing]\n  input: {{messages: [{{role: user, content: "
            f"'added {i}'}}]}}\n  expect: [{{contains: refund}}]\n"
            for i in range(2)
        ),
        encoding="utf-8",
    )


def _judged(db: str, run_ids: list[str]) -> None:
    """A judge check's row beside each first check's row of ``run_ids`` (uncalibrated: reported,
    not gated; held by a thin load, as the gating reads them)."""
    with open_store(db, write=True) as store:
        store._con.execute(
            "INSERT INTO scores SELECT run_id, scoring_id, case_id, replay, 'judge:tone', 9, 3, "
            "0.75, true, false, 'polite', ? FROM scores "
            f"WHERE scorer_index = 0 AND run_id IN ({', '.join('?' * len(run_ids))})",
            [_JUDGE, *run_ids],
        )


@pytest.fixture(autouse=True)
def _own_scorers(registry: None) -> None:
    """Each test's suite registers its custom scorer module; removed again after it."""


def _project(tmp_path: Path) -> tuple[Project, str]:
    project = write_project(tmp_path / "suite", "contains")
    _sealed(project.root)
    base = run_candidate(project, "base", "v1", sealed=True)
    promote = ["baseline", "promote", "base", "--db", project.db, "--who", "ana", "--reason", "v1",
               "--config", project.config]  # fmt: skip
    assert main(promote) == 0
    _pull_request(project.root)
    cand = run_candidate(project, "cand", "v2", sealed=True)  # breaks five billing cases
    _judged(project.db, [base, cand])
    return project, cand


def _whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate through the whole-run exam path (both runs read whole, as before)."""
    load = exam.load_exam_comparison
    monkeypatch.setattr(
        exam, "load_exam_comparison", lambda *a, **k: load(*a, **{**k, "thin": False})
    )


def _gated(project: Project, candidate: str, answered: bool):  # type: ignore[no-untyped-def]
    if answered:  # what `evalkit gate --rebaseline` does before deciding
        comparison, decision = gate_flow(project, candidate)
    else:
        with open_store(project.db, read_only=True) as store:
            comparison, decision = gate_pair(store, None, candidate, project.config, ("prompt",))
    with open_store(project.db, read_only=True) as store:  # the report reads back from it
        report = to_json(build_report(comparison, decision))
    return comparison, decision, report


@pytest.mark.parametrize("answered", [True, False], ids=["exam run", "no exam run"])
def test_the_thin_exam_path_decides_as_the_whole_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: bool
) -> None:
    project, cand = _project(tmp_path)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 7)  # 8 ranges of case ids
    thin_cmp, thin, thin_report = _gated(project, cand, answered)
    _whole(monkeypatch)
    whole_cmp, whole, whole_report = _gated(project, cand, answered)

    summary = whole_cmp.exam
    assert set(summary.rescored) == {"billing-00", "billing-01", "billing-02"}
    assert summary.loosened == ("billing-00", "billing-01", "billing-02")
    assert summary.added == ("added-0", "added-1") and summary.edited == (
        "billing-00", "billing-01", "billing-02", "policy-1",
    )  # fmt: skip
    if answered:  # the exam run answered the reworded and the removed case's pinned version
        assert summary.answered == ("policy-1", "policy-3") and not summary.missing
    else:
        assert summary.missing == ("policy-1", "policy-3") and not summary.answered
    assert whole.status == "BLOCKED" and whole_cmp.judge_paired.height > 0  # type: ignore[union-attr]
    assert whole_cmp.cand.cases.filter(pl.col("sealed")).height == 2
    assert whole_cmp.cand.cases.filter(pl.col("criticality") == "must_pass").height == 1

    assert thin_cmp.exam == summary
    assert thin.to_dict() == whole.to_dict()
    for frame in ("paired", "base_verdicts", "cand_verdicts", "changes", "delta", "additions",
                  "judge_paired"):  # fmt: skip
        assert getattr(thin_cmp, frame).equals(getattr(whole_cmp, frame)), frame
    assert thin_report == whole_report
    assert "Please answer" not in thin_report  # the pinned input is what the report shows
    assert "question billing-00" in thin_report and "missing 'refund'" in thin_report


def test_a_changed_schema_rescores_every_case_as_the_whole_path_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = write_project(tmp_path / "suite", "schema")
    run_candidate(project, "base", "v1")
    promote = ["baseline", "promote", "base", "--db", project.db, "--who", "ana", "--reason", "v1",
               "--config", project.config]  # fmt: skip
    assert main(promote) == 0
    (project.root / "schemas" / "reply.json").write_text(json.dumps(LOOSE_SCHEMA))
    cand = run_candidate(project, "cand", "v2")  # breaks five billing cases, the schema hides it
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 7)
    with open_store(project.db, read_only=True) as store:
        thin_cmp, thin = gate_pair(store, None, cand, project.config, ("prompt", "scorers"))
        thin_report = to_json(build_report(thin_cmp, thin))
        _whole(monkeypatch)
        whole_cmp, whole = gate_pair(store, None, cand, project.config, ("prompt", "scorers"))
        whole_report = to_json(build_report(whole_cmp, whole))
    assert len(whole_cmp.exam.rescored) == 54 and whole.status == "BLOCKED"  # the pinned schema
    assert thin_cmp.exam == whole_cmp.exam and thin.to_dict() == whole.to_dict()
    assert thin_cmp.paired.equals(whole_cmp.paired) and thin_report == whole_report


def _score_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every read of a run's score rows that is not a read-back of named cases nor
    of its judges' rows (which the judge gating reads, held by a thin load)."""
    heights: list[int] = []
    read = Store.scores

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        frame = read(self, *args, **kwargs)
        if kwargs.get("case_ids") is None and kwargs.get("tier") is None:
            heights.append(frame.height)
        return frame

    monkeypatch.setattr(Store, "scores", counted)
    return heights


def test_the_thin_exam_path_holds_no_run_s_score_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, cand = _project(tmp_path)
    with open_store(project.db, read_only=True) as store:
        stored = store.query(
            f"SELECT count(*) AS n FROM scores WHERE run_id = '{cand}' AND tier <> 3"
        )
    per_run = int(stored["n"][0])  # 58 cases x 1 replay x 1 check
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 7)
    _gated(project, cand, answered=True)  # the exam run answers (its reads are not the gate's)
    heights = _score_reads(monkeypatch)
    comparison, _, _ = _gated(project, cand, answered=False)  # the gate, on that exam run
    ordinary = pl.col("tier") != 3
    assert comparison.base.scores.filter(ordinary).height == 0  # the judges' rows alone
    held = comparison.cand.scores.filter(ordinary)
    overlay = comparison.cand.overlay
    assert set(held["case_id"]) == set(overlay.cases["case_id"]) == {
        "billing-00", "billing-01", "billing-02", "policy-1", "policy-3",
    }  # fmt: skip  # the rescored and exam-answered cases, no other
    # 2 runs of 56 cases a range of 7 at a time (1 check, 2 rows with the judge's)
    assert len(heights) >= 2 * 56 // 7 and max(heights) <= 7 * 2 < per_run

    heights.clear()
    _whole(monkeypatch)
    _gated(project, cand, answered=False)  # the whole path: each run's rows at once
    assert max(heights) >= per_run
