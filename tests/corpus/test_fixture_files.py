"""Rewriting a case's ``fixtures.tools`` and ``provenance`` in its YAML file: only those keys'
text changes; other cases, comments, key order and quoting stay byte for byte."""

from __future__ import annotations

import datetime as dt
import difflib
from pathlib import Path

import pytest
import yaml
from projects import make_project

from evalkit.corpus.cases import load_cases_file
from evalkit.corpus.fixture_files import CaseEdit, rewrite_case_file, rewrite_text
from evalkit.errors import CorpusError

REPO = Path(__file__).resolve().parents[2]
KEYED = {"lookup_order": [{"args": {"order_id": "8812"}, "response": {"status": "returned"}}]}

TWO_CASES = """\
# orders: comments stay where they are
- id: o-1   # the first
  tags: [orders]
  provenance: {reviewer: ops, date: 2026-07-01, source: "ticket 9"}
  input:
    messages:
      - {role: user, content: "Where is order 8812?"}

  expect: [json_valid]   # cheap first

# the second case, untouched
- id: o-2
  input: {messages: [{role: user, content: 'hi'}]}
  fixtures:
    documents: ["Refunds take 5 days."]
  expect:
    - {contains: "refund"}
"""


def _changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_a_new_fixtures_block_goes_before_expect_and_nothing_else_moves() -> None:
    new = rewrite_text(TWO_CASES, [CaseEdit("o-1", tools=KEYED)], "cases/o.yaml")
    assert all(line.startswith("+") for line in _changed_lines(TWO_CASES, new))
    assert new.startswith(TWO_CASES.split("  expect: [json_valid]")[0])
    assert "  fixtures:\n    tools:\n      lookup_order:\n        - args: {order_id: '8812'}" in new
    assert "  expect: [json_valid]   # cheap first\n\n# the second case, untouched\n" in new
    assert new.endswith(TWO_CASES.split("# the second case, untouched\n")[1])
    data = yaml.safe_load(new)
    assert data[0]["fixtures"] == {"tools": KEYED} and data[1] == yaml.safe_load(TWO_CASES)[1]


def test_tools_join_a_fixtures_block_that_holds_only_documents() -> None:
    new = rewrite_text(TWO_CASES, [CaseEdit("o-2", tools=KEYED)], "cases/o.yaml")
    case = yaml.safe_load(new)[1]
    assert case["fixtures"] == {"tools": KEYED, "documents": ["Refunds take 5 days."]}
    assert new.split("- id: o-2")[0] == TWO_CASES.split("- id: o-2")[0]


def test_existing_tools_are_replaced_in_place_keeping_the_comments_around_them() -> None:
    text = (REPO / "corpus" / "cases" / "agents.yaml").read_text(encoding="utf-8")
    first = yaml.safe_load(text)[0]["id"]
    new = rewrite_text(text, [CaseEdit(first, tools=KEYED)], "cases/agents.yaml")
    before, after = yaml.safe_load(text), yaml.safe_load(new)
    assert after[0]["fixtures"]["tools"] == KEYED
    assert after[1:] == before[1:]
    # every removed line is one of the first case's old tools; the header comment is intact
    removed = [line for line in _changed_lines(text, new) if line.startswith("-")]
    assert removed and all(line[1:] in text.split("- id:")[1] for line in removed)
    assert new.split("- id:")[0] == text.split("- id:")[0]
    assert new.split("- id:", 2)[2] == text.split("- id:", 2)[2]


def test_only_the_tools_whose_fixture_changed_are_rewritten() -> None:
    text = (REPO / "corpus" / "cases" / "agents.yaml").read_text(encoding="utf-8")
    first = yaml.safe_load(text)[0]
    tools = {**first["fixtures"]["tools"], **KEYED}
    new = rewrite_text(text, [CaseEdit(first["id"], tools=tools)], "cases/agents.yaml")
    changed = _changed_lines(text, new)
    assert changed and not any(
        "lookup_customer" in line or "issue_refund" in line for line in changed
    )
    assert (
        "      lookup_order:\n        - args: {order_id: '8812'}\n"
        "          response: {status: returned}\n      lookup_customer:\n" in new
    )
    assert yaml.safe_load(new)[0]["fixtures"]["tools"] == tools


def test_a_flow_provenance_stays_flow_with_its_key_order() -> None:
    edit = CaseEdit("o-1", provenance={"reviewer": "lead", "note": "refreshed"})
    new = rewrite_text(TWO_CASES, [edit], "cases/o.yaml")
    assert (
        "  provenance: {reviewer: lead, date: 2026-07-01, source: ticket 9, note: refreshed}\n"
        in new
    )
    assert len(_changed_lines(TWO_CASES, new)) == 2  # one line out, one in


def test_a_block_provenance_stays_block_and_the_lines_around_it_stay() -> None:
    text = TWO_CASES.replace(
        '  provenance: {reviewer: ops, date: 2026-07-01, source: "ticket 9"}\n',
        "  provenance:\n    reviewer: ops   # the owner\n    date: 2026-07-01\n\n",
    )
    new = rewrite_text(text, [CaseEdit("o-1", provenance={"note": "n"})], "cases/o.yaml")
    assert "  provenance:\n    reviewer: ops\n    date: 2026-07-01\n    note: n\n\n  input:" in new
    assert yaml.safe_load(new)[0]["provenance"]["note"] == "n"


def test_a_missing_provenance_is_added_before_the_input() -> None:
    edit = CaseEdit("o-2", provenance={"date": dt.date(2026, 12, 3), "note": "recorded"})
    new = rewrite_text(TWO_CASES, [edit], "cases/o.yaml")
    assert "- id: o-2\n  provenance: {date: 2026-12-03, note: recorded}\n  input:" in new
    assert yaml.safe_load(new)[1]["provenance"] == {
        "date": dt.date(2026, 12, 3),
        "note": "recorded",
    }


def test_a_flow_fixtures_mapping_is_rewritten_in_block_style_keeping_its_documents() -> None:
    text = (
        "- id: f-1\n  input: {vars: {q: x}}\n  fixtures: {documents: [a], tools: {t: 1}}\n"
        "  expect: [json_valid]\n"
    )
    new = rewrite_text(text, [CaseEdit("f-1", tools={"t": 2})], "c.yaml")
    assert yaml.safe_load(new)[0]["fixtures"] == {"documents": ["a"], "tools": {"t": 2}}
    assert new.endswith("  expect: [json_valid]\n")


def test_a_case_written_as_one_flow_mapping_is_refused_with_its_line() -> None:
    text = (
        "- id: a\n  input: {vars: {q: x}}\n  expect: [json_valid]\n"
        "- {id: b, input: {vars: {q: y}}, expect: [json_valid]}\n"
    )
    with pytest.raises(CorpusError) as caught:
        rewrite_text(text, [CaseEdit("b", tools=KEYED)], "cases/c.yaml")
    assert str(caught.value).startswith("cases/c.yaml:4: case b: the case is one flow mapping")


def test_an_unknown_case_is_refused() -> None:
    with pytest.raises(CorpusError, match="case nope: case not found in this file"):
        rewrite_text(TWO_CASES, [CaseEdit("nope", tools=KEYED)], "cases/o.yaml")


def test_the_file_keeps_crlf_line_endings_and_reloads_with_only_the_edited_case_changed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "corpus"
    make_project(root, demo=True)
    path = root / "cases" / "agents.yaml"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    before = {c.id: c for c in load_cases_file(path, root)}
    target = sorted(before)[1]
    rewrite_case_file(path, [CaseEdit(target, tools=KEYED)], "cases/agents.yaml")
    raw = path.read_bytes()
    assert raw.count(b"\n") == raw.count(b"\r\n")  # no bare LF slipped in
    after = {c.id: c for c in load_cases_file(path, root)}
    assert after[target].fixtures["tools"] == KEYED and after[target].hash != before[target].hash
    assert {k: c.hash for k, c in after.items() if k != target} == {
        k: c.hash for k, c in before.items() if k != target
    }
    assert not list(root.glob("cases/.*.tmp"))  # the temporary file was renamed away
