"""The pinned exam decides (issue 42, rule 1), as a generated matrix: for each corpus edit a pull
request can make, applied to the regressed cases of a really regressed candidate, the gate never
PASSES; the same edit made on an unregressed candidate PASSES (the false-block direction).

Each cell is its own small suite (`exam_support`): a Python-function system run in this
process, its baseline promoted through the CLI (which pins the exam), the pull request's edit,
the candidate run, then what ``evalkit gate --rebaseline`` does (the candidate's configuration
answers the pinned cases it lacks, the baseline's the added and edited ones) and the gate.
A few cells go through the real ``evalkit gate`` command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from exam_support import (
    FRAGILE,
    LENIENT_CHECKS,
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

BILLING = {f"billing-{i:02d}" for i in range(FRAGILE)}
MUST_PASS = {"mp-0"}


@dataclass(frozen=True)
class Edit:
    """A pull request's corpus edit: what it does to the cases ``targets`` (and the files),
    which check kind the suite uses, how the candidate runs, which regression it hides."""

    name: str
    apply: Callable[[Path, set[str]], None]
    kind: str = "contains"
    targets: frozenset[str] = frozenset(BILLING)
    regressed_prompt: str = "v2"  # breaks the five billing cases
    sealed: bool = False
    drop_drafts: bool = False
    allow_diff: tuple[str, ...] = ("prompt",)


def _retag(root: Path, ids: set[str]) -> None:
    assert edit_case(root, ids, lambda b: b.replace("tags: [billing]", "tags: [misc]")) == len(ids)


def _draft(root: Path, ids: set[str]) -> None:
    edit_case(root, ids, lambda b: b.replace("  tags:", "  review: draft\n  tags:", 1))


def _group(root: Path, ids: set[str]) -> None:
    edit_case(root, ids, lambda b: b.replace("  tags:", "  group: one-incident\n  tags:", 1))


def _loosen_yaml(root: Path, ids: set[str]) -> None:
    def loosen(block: str) -> str:
        head, _, _ = block.partition("  expect: ")
        return f"{head}  expect: {LOOSE_EXPECT}\n"

    edit_case(root, ids, loosen)


def _reword(root: Path, ids: set[str]) -> None:
    edit_case(root, ids, lambda b: b.replace("content: 'question", "content: 'Please answer:"))


def _demote(root: Path, ids: set[str]) -> None:
    edit_case(root, ids, lambda b: b.replace("  criticality: must_pass\n", ""))


def _add_passing(root: Path, ids: set[str]) -> None:
    extra = [
        f"- id: easy-{i:02d}\n  tags: [billing]\n  input: {{messages: [{{role: user, content: "
        f"'easy {i}'}}]}}\n  expect: {LOOSE_EXPECT}\n"
        for i in range(40)
    ]
    (root / "cases" / "easy.yaml").write_text("\n".join(extra), encoding="utf-8")


def _loosen_schema(root: Path, ids: set[str]) -> None:
    (root / "schemas" / "reply.json").write_text(json.dumps(LOOSE_SCHEMA))


def _loosen_fixture(root: Path, ids: set[str]) -> None:
    (root / "fixtures" / "words.txt").write_text("\n")


def _loosen_module(root: Path, ids: set[str]) -> None:
    module = next(root.glob("ekexam_*/checks.py"))
    module.write_text(LENIENT_CHECKS)


EDITS = [
    Edit("retag out of the critical tag", _retag),
    Edit("move to sealed/, run with --sealed", lambda r, i: move_cases(r, i, "sealed"),
         sealed=True),
    Edit("retire", lambda r, i: move_cases(r, i, "retired")),
    Edit("mark draft", _draft, drop_drafts=True),
    Edit("delete", lambda r, i: move_cases(r, i, "")),
    Edit("put in one group", _group),
    Edit("loosen the expectation in the YAML", _loosen_yaml),
    Edit("loosen the referenced schema", _loosen_schema, kind="schema",
         allow_diff=("prompt", "scorers")),
    Edit("loosen the referenced fixture", _loosen_fixture, kind="words",
         allow_diff=("prompt", "scorers")),
    Edit("loosen the custom scorer module", _loosen_module, kind="words",
         allow_diff=("prompt", "scorers")),
    Edit("reword the input", _reword),
    Edit("demote must_pass", _demote, targets=frozenset(MUST_PASS), regressed_prompt="v2mp"),
    Edit("add trivially passing cases", _add_passing),
]  # fmt: skip


def _promoted(tmp_path: Path, kind: str) -> Project:
    project = write_project(tmp_path / "suite", kind)
    run_candidate(project, "base", "v1")
    promote = ["baseline", "promote", "base", "--db", project.db, "--who", "ana", "--reason", "v1"]
    assert main(promote) == 0
    return project


def _cell(tmp_path: Path, edit: Edit, regressed: bool):
    project = _promoted(tmp_path, edit.kind)
    edit.apply(project.root, set(edit.targets))
    prompt = edit.regressed_prompt if regressed else "v1b"
    run_candidate(project, "cand", prompt, sealed=edit.sealed, drop_drafts=edit.drop_drafts)
    return gate_flow(project, "cand", edit.allow_diff)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("edit", EDITS, ids=[e.name for e in EDITS])
def test_an_edit_never_hides_a_real_regression(tmp_path: Path, edit: Edit, registry, monkeypatch):
    monkeypatch.chdir(tmp_path)
    comparison, decision = _cell(tmp_path, edit, regressed=True)
    assert decision.status in ("BLOCKED", "UNVERIFIED"), decision.summary()
    assert decision.exam_line and decision.exam_line.startswith("judged on the exam promoted")
    assert "by ana" in decision.exam_line
    if edit.apply is _loosen_yaml:  # the loosening is shown for what it is
        (shown,) = [f for f in decision.findings if f.kind == "loosened-expectations"]
        assert set(shown.case_ids) == set(edit.targets)
        assert f"under the pinned expectations the candidate breaks these {FRAGILE}" in (
            shown.message
        )
    # The regressed cases are judged on their pinned version: still there, still failing,
    # under the pinned tags and criticality (unless nothing answered them: missing evidence).
    pinned = comparison.paired.filter(comparison.paired["case_id"].is_in(list(edit.targets)))
    if pinned.height:
        assert pinned["cand"].to_list() == [False] * pinned.height
        assert all(
            "billing" in tags or crit == "must_pass"
            for tags, crit in pinned.select("tags", "criticality").iter_rows()
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("edit", EDITS, ids=[e.name for e in EDITS])
def test_the_same_edit_on_an_unregressed_candidate_passes(
    tmp_path: Path, edit: Edit, registry, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    comparison, decision = _cell(tmp_path, edit, regressed=False)
    assert decision.status == "PASSED", decision.summary()
    assert comparison.exam is not None and not comparison.exam.missing


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("edit", "regressed", "code"),
    [(EDITS[2], True, 1), (EDITS[10], False, 0), (EDITS[6], True, 1)],
    ids=["retire, regressed", "reword, unregressed", "loosen the YAML, regressed"],
)
def test_the_real_gate_command_judges_on_the_pinned_exam(
    tmp_path: Path, edit: Edit, regressed: bool, code: int, registry, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    project = _promoted(tmp_path, edit.kind)
    edit.apply(project.root, set(edit.targets))
    run_candidate(project, "cand", edit.regressed_prompt if regressed else "v1b")
    allow = [x for a in edit.allow_diff for x in ("--allow-diff", a)]
    gate = ["gate", "cand", "--db", project.db, "--config", project.config, *allow,
            "--rebaseline", "--out", str(tmp_path / "reports")]  # fmt: skip
    assert main(gate) == code
    out = capsys.readouterr()
    assert ("gate PASSED" if code == 0 else "gate BLOCKED") in out.out
    markdown = next((tmp_path / "reports").rglob("gate.md")).read_text(encoding="utf-8")
    assert "judged on the exam promoted" in markdown and "by ana" in markdown
