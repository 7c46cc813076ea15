"""Issue 42 beyond the matrix: a blocked sibling of the same configuration blocks whatever the
corpus edits since; a genuinely better candidate that adds and rewords cases passes on the
pinned exam; a case decides only when most of its replays were decided."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from exam_support import Project, edit_case, gate_flow, run_candidate, write_project
from synthetic_runs import C, make_run

from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.verdicts import verdicts
from evalkit.scorers.registry import SCORERS


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    before = dict(SCORERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EK_EXAM_OUTAGE", raising=False)
    project = write_project(tmp_path / "suite", "contains")
    yield project
    SCORERS.clear()
    SCORERS.update(before)


def _promote(project: Project, label: str) -> None:
    promote = ["baseline", "promote", label, "--db", project.db, "--who", "ana", "--reason", "v"]
    assert main(promote) == 0


@pytest.mark.timeout(300)
def test_a_blocked_sibling_still_blocks_after_a_one_line_corpus_edit(project, monkeypatch):
    run_candidate(project, "base", "v1")
    _promote(project, "base")
    monkeypatch.setenv("EK_EXAM_OUTAGE", "1")  # the same configuration, a bad day
    run_candidate(project, "first", "v1b")
    assert gate_flow(project, "first")[1].status == "BLOCKED"
    monkeypatch.delenv("EK_EXAM_OUTAGE")
    # One line of the corpus changes (a non-fragile case reworded), and the run is tried again.
    assert edit_case(project.root, {"policy-3"}, lambda b: b.replace("question", "a question")) == 1
    run_candidate(project, "second", "v1b")
    _, decision = gate_flow(project, "second")
    (sibling,) = [f for f in decision.findings if f.kind == "siblings"]
    assert decision.status == "BLOCKED" and sibling.severity == "block", decision.summary()
    assert "1 BLOCKED" in sibling.message and len(sibling.case_ids) == 1
    # Opting out in the pull request is a loosening: the pinned policy still decides.
    config = Path(project.config)
    config.write_text(config.read_text().replace("bootstrap_iters: 200", "bootstrap_iters: 200, "
                                                 "siblings: report"))  # fmt: skip
    _, opted_out = gate_flow(project, "second")
    assert opted_out.status == "BLOCKED" and opted_out.policy.siblings == "block"
    (loosened,) = [f for f in opted_out.blocking() if f.kind == "loosened"]
    assert "gate.siblings block → report" in loosened.message


@pytest.mark.timeout(300)
def test_a_better_candidate_that_adds_and_rewords_cases_passes(project):
    run_candidate(project, "base", "v2")  # the promoted baseline breaks the five fragile cases
    _promote(project, "base")
    reworded = {"billing-00", "billing-01", "billing-30"}
    edit_case(project.root, reworded, lambda b: b.replace("content: 'question", "content: 'Q:"))
    extra = "".join(
        f"- id: new-{i}\n  tags: [billing]\n  input: {{messages: [{{role: user, content: "
        f"'new {i}'}}]}}\n  expect: [{{contains: refund}}]\n"
        for i in range(3)
    )
    (project.root / "cases" / "new.yaml").write_text(extra)
    run_candidate(project, "better", "v1")
    comparison, decision = gate_flow(project, "better")
    assert decision.status == "PASSED", decision.summary()
    exam = comparison.exam
    assert (exam.added, set(exam.edited), exam.missing) == (
        ("new-0", "new-1", "new-2"),
        reworded,
        (),
    )
    assert set(exam.answered) == reworded  # their pinned wording, answered by the candidate
    (state,) = decision.critical
    assert (state.fixed, state.broken) == (5, 0)  # judged on the pinned exam: all five fixed
    assert "this PR adds 3 cases, edits 3" in decision.exam_line


def test_one_pass_and_four_undecided_replays_is_errored_not_a_pass():
    outputs = pl.DataFrame({"run_id": "r", "case_id": "a", "replay": range(5),
                            "error": [None] * 5, "fail_reason": [None] * 5})  # fmt: skip
    scores = outputs.select("run_id", "case_id", "replay").with_columns(
        scorer=pl.lit("judge"), score=pl.lit(1.0),
        passed=pl.Series([True, None, None, None, None]), error=pl.Series([False] + [True] * 4),
    )  # fmt: skip
    row = verdicts(outputs, scores).row(0, named=True)
    assert (row["passed"], row["error"], row["n_pass"], row["n_error"]) == (None, True, 1, 4)
    three = scores.with_columns(passed=pl.Series([True, True, True, None, None]),
                                error=pl.Series([False] * 3 + [True] * 2))  # fmt: skip
    assert verdicts(outputs, three)["passed"].to_list() == [True]  # 3 of 5 decided: decides


def test_a_must_pass_case_with_one_decided_replay_of_five_is_unverified():
    cases = [C(f"billing-{i:02d}", "ppppp", ["billing"]) for i in range(10)]
    base = make_run("b", [*cases, C("mp", "ppppp", [], "must_pass")])
    cand = make_run("c", [*cases, C("mp", "pssss", [], "must_pass")])
    base, cand = (replace(run, manifest=replace(run.manifest, replays=5)) for run in (base, cand))
    comparison = compare(base, cand)
    decision = decide(comparison.paired, GatePolicy(critical_tags=("billing",)),
                      corpus=cand.cases)  # fmt: skip
    assert decision.status == "UNVERIFIED"
    assert "tier1/must_pass/errored/mp" in {f.key for f in decision.blocking()}


@pytest.mark.timeout(300)
def test_an_exam_pinned_by_a_pull_request_job_judges_nothing(project, monkeypatch):
    from evalkit.compare.exam import trusted_exam
    from evalkit.store import open_store

    run_candidate(project, "base", "v1")
    _promote(project, "base")
    with open_store(project.db) as store:
        base = store.resolve_run("base")
        trusted = trusted_exam(store, base)
    assert trusted is not None
    # The pull request's job promotes the same run again (and so pins an exam of its own).
    monkeypatch.setenv("EVALKIT_CI_EVENT", "pull_request")
    monkeypatch.setenv("EVALKIT_CI_JOB", "7")
    _promote(project, "base")
    with open_store(project.db) as store:
        assert store.exam(base).exam_id != trusted.exam_id  # the newest one is the job's
        assert trusted_exam(store, base).exam_id == trusted.exam_id  # the trusted one decides
