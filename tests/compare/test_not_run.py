"""A candidate that did not run some of the baseline's cases is incomplete, not a pull request
that removed them (`evalkit.compare.not_run`): the gate checks the cases the candidate lacks
against the corpus checked out where it runs.

Each test is a small pinned-exam suite (`exam_support`): the baseline run and promoted through
the CLI (which pins the exam), then a candidate that leaves cases out, or a pull request that
deletes them, then the gate — `gate_pair` in this process, or the real ``evalkit gate``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from exam_support import Project, gate_flow, move_cases, run_candidate, write_project

from evalkit.cli import main
from evalkit.compare.not_run import CaseReference, NotRun, checked_out_cases, not_run_finding
from evalkit.compare.pin import gate_pair
from evalkit.store import open_store

#: Ordinary cases (tag ``policy``, not critical, not must_pass): leaving them out can never
#: block on its own, so only the not-run rule can stop the gate.
LEFT_OUT = frozenset({"policy-1", "policy-2"})


@pytest.fixture
def project(tmp_path: Path, registry, monkeypatch) -> Project:
    monkeypatch.chdir(tmp_path)
    made = write_project(tmp_path / "suite", "contains")
    run_candidate(made, "base", "v1")
    promote = ["baseline", "promote", "base", "--db", made.db, "--who", "ana", "--reason", "v1"]
    assert main(promote) == 0
    return made


def _gate(project: Project, config: str | None):
    with open_store(project.db, read_only=True) as store:
        return gate_pair(store, None, "cand", config, ("prompt",))


def test_a_candidate_that_left_out_cases_still_in_the_corpus_is_unverified(project):
    run_candidate(project, "cand", "v1b", skip=LEFT_OUT)
    comparison, decision = _gate(project, project.config)
    assert decision.status == "UNVERIFIED", decision.summary()
    assert decision.exit_code == 1
    (found,) = [f for f in decision.blocking() if f.kind == "not-run"]
    assert set(found.case_ids) == LEFT_OUT
    assert "did not run 2 of the baseline's cases still in the corpus checked out at" in (
        found.message
    )
    assert "policy-1, policy-2" in found.message and "--rebaseline" in found.message
    # the first screen says so, and no longer calls them removed by the pull request
    assert decision.exam_line is not None
    assert "removes 0" in decision.exam_line
    assert "did not run 2 pinned cases still in the corpus (policy-1, policy-2)" in (
        decision.exam_line
    )
    assert comparison.exam.not_run == ("policy-1", "policy-2")
    shown = dict(comparison.changes.select("case_id", "change").iter_rows())
    assert shown == {"policy-1": "not run", "policy-2": "not run"}
    assert "(selection: the full suite)" in found.message
    assert "run the candidate again from this checkout" in found.message


def test_the_same_cases_deleted_by_the_pull_request_are_a_removal_as_before(project):
    move_cases(project.root, set(LEFT_OUT), "")
    run_candidate(project, "cand", "v1b")
    comparison, decision = _gate(project, project.config)
    assert decision.status == "PASSED", decision.summary()
    assert not [f for f in decision.findings if f.kind == "not-run"]
    assert "removes 2 (evidence missing: policy-1, policy-2)" in (decision.exam_line or "")
    assert comparison.exam.not_run == ()


def test_a_deleted_must_pass_case_is_still_unverified(project):
    move_cases(project.root, {"mp-0"}, "")
    run_candidate(project, "cand", "v1b")
    _, decision = _gate(project, project.config)
    assert decision.status == "UNVERIFIED", decision.summary()
    assert not [f for f in decision.findings if f.kind == "not-run"]
    assert any("mp-0" in f.case_ids for f in decision.blocking())


def test_without_a_checked_out_corpus_no_missing_case_passes_as_removed(project):
    move_cases(project.root, set(LEFT_OUT), "")  # removed, but the gate cannot see it
    run_candidate(project, "cand", "v1b")
    _, decision = _gate(project, None)
    assert decision.status == "UNVERIFIED", decision.summary()
    (found,) = [f for f in decision.blocking() if f.kind == "not-run"]
    assert set(found.case_ids) == LEFT_OUT
    assert "no corpus checked out where the gate ran" in found.message
    assert "none can be told removed by the pull request" in found.message


def test_answering_the_left_out_cases_in_their_pinned_version_verifies_them(project):
    run_candidate(project, "cand", "v1b", skip=LEFT_OUT)
    comparison, decision = gate_flow(project, "cand")  # what `evalkit gate --rebaseline` does
    assert decision.status == "PASSED", decision.summary()
    assert set(LEFT_OUT) <= set(comparison.exam.answered)
    # answered, but still not the pull request's removal: the first screen says what happened
    assert "removes 0" in (decision.exam_line or "")
    assert "did not run 2 pinned cases still in the corpus (policy-1, policy-2): answered in " in (
        decision.exam_line or ""
    )


def test_removing_more_than_max_changed_share_without_evidence_is_unverified(project):
    project_config = Path(project.config)
    text = project_config.read_text().replace(
        "gate: {bootstrap_iters: 200}", "gate: {bootstrap_iters: 200, max_changed_share: 0.03}"
    )
    project_config.write_text(text)  # stricter than the pin: applies at once
    move_cases(project.root, set(LEFT_OUT), "")
    run_candidate(project, "cand", "v1b")
    _, decision = _gate(project, project.config)
    assert decision.status == "UNVERIFIED", decision.summary()
    (found,) = [f for f in decision.blocking() if f.kind == "removed-share"]
    assert set(found.case_ids) == LEFT_OUT
    assert "removes 2 of the baseline's 54 cases (4% > gate.max_changed_share 3%)" in (
        found.message
    )


def test_the_reference_follows_the_baselines_selection_and_leaves_drafts_out(tmp_path):
    made = write_project(tmp_path / "suite", "contains")
    text = (made.root / "cases" / "policy.yaml").read_text()
    marked = text.replace("- id: policy-3\n", "- id: policy-3\n  review: draft\n")
    (made.root / "cases" / "policy.yaml").write_text(marked)
    everything = checked_out_cases(made.config, {"tier": None, "tags": []})
    assert everything.case_ids is not None and len(everything.case_ids) == 53
    assert "policy-3" not in everything.case_ids
    policy = checked_out_cases(made.config, {"tags": ["policy"]})
    assert policy.case_ids == {"mp-0", "policy-1", "policy-2"}
    assert policy.selection == "--tag policy"
    assert checked_out_cases(None, {}).case_ids is None


@pytest.mark.timeout(600)
def test_the_gate_command_says_which_cases_were_not_run(project, tmp_path, capsys):
    run_candidate(project, "cand", "v1b", skip=LEFT_OUT)
    out_dir = tmp_path / "reports"
    gate = ["gate", "cand", "--db", project.db, "--config", project.config,
            "--allow-diff", "prompt", "--out", str(out_dir)]  # fmt: skip
    assert main(gate) == 1
    printed = capsys.readouterr().out
    assert "gate UNVERIFIED" in printed
    assert "did not run 2 pinned cases still in the corpus (policy-1, policy-2)" in printed
    assert "UNVERIFIED tier 0: the candidate did not run 2 of the baseline's cases" in printed
    report = json.loads(next(out_dir.rglob("report.json")).read_text(encoding="utf-8"))
    kinds = {f["kind"]: f for f in report["decision"]["findings"]}
    assert kinds["not-run"]["case_ids"] == ["policy-1", "policy-2"]
    assert kinds["not-run"]["severity"] == "unverified"
    html = next(out_dir.rglob("gate.html")).read_text(encoding="utf-8")
    assert "did not run 2 of the baseline" in html and "policy-1 (not run)" in html
    markdown = next(out_dir.rglob("gate.md")).read_text(encoding="utf-8")
    assert "did not run 2 of the baseline" in markdown
    junit = next(out_dir.rglob("junit.xml")).read_text(encoding="utf-8")
    assert junit.count("in the corpus; the candidate did not run it") == 2


def test_without_a_pinned_exam_the_baselines_cases_are_the_reference(tmp_path, registry):
    made = write_project(tmp_path / "suite", "contains")
    run_candidate(made, "base", "v1")  # never promoted: no exam is pinned
    run_candidate(made, "cand", "v1b", skip=LEFT_OUT)
    with open_store(made.db, read_only=True) as store:
        comparison, decision = gate_pair(store, "base", "cand", made.config, ("prompt",))
    assert comparison.exam is None
    assert decision.status == "UNVERIFIED", decision.summary()
    (found,) = [f for f in decision.blocking() if f.kind == "not-run"]
    assert set(found.case_ids) == LEFT_OUT
    assert "--rebaseline" not in found.message  # nothing answers a case without a pinned exam


def test_an_unfinished_candidate_is_told_to_finish():
    reference = CaseReference(where="the corpus checked out at /s", case_ids=frozenset({"a"}))
    found = NotRun(not_run=("a",), removed=(), reference=reference, considered=4,
                   cand_status="incomplete")  # fmt: skip
    (finding,) = not_run_finding(found, "B", "C", exam=True)
    assert "finish the candidate (`evalkit run --resume C`" in finding.message
    assert "`evalkit runs merge C`" in finding.message
    assert finding.message.endswith("`evalkit gate B C --rebaseline`")
    done = not_run_finding(replace(found, cand_status="complete"), "B", "C", exam=False)
    assert "run the candidate again from this checkout and gate that run" in done[0].message
    assert not not_run_finding(replace(found, not_run=()), "B", "C", exam=True)


def test_a_shard_never_merged_is_not_run_not_removed(project, tmp_path, capsys):
    parts = ["--parts", str(tmp_path / "parts")]
    run = ["run", "--config", project.config, "--db", project.db, "--prompt",
           project.prompt("v1b"), "--no-progress", "--label", "cand", *parts]  # fmt: skip
    assert main([*run, "--shard", "1/2", "--run-id", "sharded"]) == 0
    assert main(["runs", "merge", "sharded", "--db", project.db, *parts]) == 0
    capsys.readouterr()
    gate = ["compare", "sharded", "--db", project.db, "--config", project.config,
            "--allow-diff", "prompt"]  # fmt: skip
    assert main(gate) == 1  # refused: the run says how much of it is missing
    assert "(status incomplete, 27 of 54 outputs stored)" in capsys.readouterr().err
    with open_store(project.db, read_only=True) as store:
        held = store.cases("sharded").height
        _, decision = gate_pair(
            store, None, "sharded", project.config, ("prompt",), allow_incomplete=True
        )
    assert held == 27
    assert decision.status == "UNVERIFIED", decision.summary()
    (found,) = [f for f in decision.blocking() if f.kind == "not-run"]
    assert len(found.case_ids) == 54 - held
    assert "finish the candidate (`evalkit run --resume sharded`" in found.message
    assert "removes 0" in (decision.exam_line or "")


def test_the_notebook_api_says_the_same_with_and_without_a_checkout(project, tmp_path):
    import evalkit

    run_candidate(project, "cand", "v1b", skip=LEFT_OUT)
    here = evalkit.Project(project.root, db=project.db)
    decision = here.gate(None, "cand", allow_diff=["prompt"])
    assert decision.status == "UNVERIFIED" and decision.exit_code == 1
    (found,) = [f for f in decision.blocking() if f.kind == "not-run"]
    assert f"still in the corpus checked out at {project.root.resolve()}" in found.message
    assert "did not run 2 of the baseline" in decision._repr_html_()
    store_only = tmp_path / "reader"
    store_only.mkdir()
    elsewhere = evalkit.Project(store_only, db=project.db)  # a notebook on the store alone
    assert elsewhere.config is None
    result = elsewhere.compare(None, "cand", allow_diff=["prompt"])
    assert result.decision.status == "UNVERIFIED"
    (found,) = [f for f in result.decision.blocking() if f.kind == "not-run"]
    assert "no corpus checked out where the gate ran" in found.message
    assert dict(result.comparison.changes.select("case_id", "change").iter_rows()) == {
        "policy-1": "not run", "policy-2": "not run"
    }  # fmt: skip


def test_critical_and_must_pass_cases_not_run_are_not_called_removed(project):
    skipped = frozenset({f"billing-{i:02d}" for i in range(10, 20)} | {"mp-0"})
    run_candidate(project, "cand", "v1b", skip=skipped)
    comparison, decision = _gate(project, project.config)
    assert decision.status == "UNVERIFIED", decision.summary()
    (stopping,) = decision.blocking()  # one finding accounts for them: not run
    assert stopping.kind == "not-run" and set(stopping.case_ids) == skipped
    assert "removed" not in decision.summary()
    assert comparison.delta is not None
    assert not set(comparison.delta["case_id"].to_list()) & skipped
    billing = {row["tag"]: row for row in decision.corpus_delta}["billing"]
    assert billing["removed"] == 0 and billing["unaccounted"] == 0


def test_the_corpus_is_read_only_when_the_candidate_lacks_cases(project):
    from evalkit.errors import CorpusError

    run_candidate(project, "cand", "v1b")
    run_candidate(project, "part", "v1b", skip=LEFT_OUT)
    (project.root / "cases" / "zz.yaml").write_text("- id: [unclosed\n", encoding="utf-8")
    _, decision = _gate(project, project.config)  # holds every case: nothing read
    assert decision.status == "PASSED", decision.summary()
    with open_store(project.db, read_only=True) as store, pytest.raises(CorpusError) as raised:
        gate_pair(store, None, "part", project.config, ("prompt",), with_siblings=False)
    assert "zz.yaml" in str(raised.value)


def _removed_pair(removed: list[str], sealed: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    """A comparison as `find_not_run` reads it: the baseline's cases and the changes."""
    from types import SimpleNamespace

    import polars as pl

    ids = [f"case-{i:03d}" for i in range(200)] + [None]
    cases = pl.DataFrame({"case_id": ids, "sealed": [c in sealed for c in ids]})
    changes = pl.DataFrame(
        {"case_id": [*removed, "case-010"], "change": ["removed"] * len(removed) + ["edited"]},
        schema={"case_id": pl.String, "change": pl.String},
    )
    return SimpleNamespace(base=SimpleNamespace(cases=cases), changes=changes, exam=None)


def test_not_run_cases_are_found_as_the_python_sets_found_them():
    from evalkit.compare.not_run import find_not_run

    removed = ["case-150", "case-007", "case-199", "case-007", "gone-1", "case-042"]
    pair = _removed_pair(removed, sealed=frozenset({"case-042"}))
    reference = CaseReference(where="here", case_ids=frozenset({"case-150", "case-199"}))
    found = find_not_run(pair, lambda: reference)  # type: ignore[arg-type]
    # the old formula: a set of the baseline's live ids, the removed ones in it, sorted
    live = {
        c
        for c, s in zip(pair.base.cases["case_id"], pair.base.cases["sealed"], strict=True)
        if not s
    }
    lacking = sorted(c for c in removed if c in live)
    assert found is not None
    assert found.not_run == tuple(c for c in lacking if reference.holds(c))
    assert found.removed == tuple(c for c in lacking if not reference.holds(c))
    assert found.considered == len(live) == 200
    assert found.not_run == ("case-150", "case-199")
    assert found.removed == ("case-007", "case-007")  # as listed, twice


def test_with_no_case_removed_the_baseline_s_ids_are_not_read():
    from evalkit.compare.not_run import find_not_run

    asked: list[int] = []
    pair = _removed_pair([])
    pair.base.cases = pair.base.cases.drop("case_id")  # a read of the ids would fail
    assert find_not_run(pair, lambda: asked.append(1)) is None  # type: ignore[arg-type, func-returns-value]
    assert asked == []
