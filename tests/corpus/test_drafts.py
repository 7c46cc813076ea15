"""Drafts never gate (lint and run refuse them until `evalkit cases review`), the review edits
only the reviewed cases' lines, ``policy.require_provenance`` refuses blocking cases without a
reviewer and a date, and ``evalkit cases convert`` rewrites the seed article's spelling."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.drafts import draft_errors, refuse_drafts
from evalkit.errors import CorpusError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

DRAFTS = """\
# drafts sampled from production traces
- id: trace-a1
  review: draft      # until a person reads it
  provenance: {date: 2026-12-01, source: "traces: prod.json span 01"}
  input:
    vars: {message: "Where is my order 8812?"}
  expect:
    - {scorer: json_schema, args: {schema: schemas/reply.json}}

# a second one, with a comment between
- id: trace-a2
  review: draft
  provenance:
    date: 2026-12-01
    source: "traces: prod.json span 02"
  input:
    vars: {message: "I want to cancel my subscription."}
  expect:
    - {scorer: json_schema, args: {schema: schemas/reply.json}}
"""


@pytest.fixture
def project(project_factory):
    """An ``evalkit init`` project with two draft cases in cases/sampled.yaml."""
    made = project_factory(server=True, cases={"sampled.yaml": DRAFTS})
    run = ["run", "--no-progress", *made.args]
    return SimpleNamespace(root=made.root, config=str(made.config), run=run)


def test_lint_and_run_refuse_drafts_until_reviewed(project, capsys) -> None:
    assert main(["cases", "lint", "--config", project.config]) == 2
    err = capsys.readouterr().err
    assert (
        "cases/sampled.yaml:2: case trace-a1: is a draft (review: draft) and never gates; after "
        "reading it, mark it reviewed: evalkit cases review trace-a1 --who NAME"
    ) in err
    assert "cases/sampled.yaml:11: case trace-a2: is a draft" in err
    assert main(project.run) == 2  # refused before any request
    err = capsys.readouterr().err
    assert "case trace-a1: is a draft" in err and "1 more drafts" in err
    assert not Path(project.run[5]).exists()  # no store, no run: nothing was asked
    flakes = ["flakes", "measure", "--runs", "2", "--no-progress", *project.run[2:]]
    assert main(flakes) == 2  # the flake list gates too
    assert "case trace-a1: is a draft" in capsys.readouterr().err

    assert main(["cases", "review", "trace-a1", "trace-a2", "--who", "ana", "--config",
                 project.config]) == 0  # fmt: skip
    assert "reviewed trace-a1 (by ana)" in capsys.readouterr().out
    assert main(["cases", "lint", "--config", project.config]) == 0
    assert main([*project.run, "--label", "reviewed"]) == 0


def test_review_edits_only_the_reviewed_cases_lines(project, capsys) -> None:
    path = project.root / "cases" / "sampled.yaml"
    assert main(["cases", "review", "trace-a2", "--who", "Kari  Nordmann", "--config",
                 project.config]) == 0  # fmt: skip
    new = path.read_text()
    old_lines, new_lines = DRAFTS.splitlines(), new.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)) if a != b]
    head = DRAFTS.split("# a second one")[0]
    assert new.startswith(head + "# a second one")  # trace-a1 as it was
    assert all(i >= 10 for i in changed), changed  # only trace-a2's lines
    assert "  review: reviewed\n" in new and "# drafts sampled from production traces" in new
    cases = {c.id: c for c in load_corpus(project.root).cases}
    assert cases["trace-a1"].review == "draft"
    assert cases["trace-a2"].review == "reviewed"
    assert cases["trace-a2"].provenance["reviewer"] == "Kari Nordmann"
    assert cases["trace-a2"].provenance["source"] == "traces: prod.json span 02"
    # reviewing again changes nothing; an unknown id is an error with a did-you-mean
    assert main(["cases", "review", "trace-a2", "--who", "x", "--config", project.config]) == 0
    assert "already reviewed" in capsys.readouterr().out and path.read_text() == new
    assert main(["cases", "review", "trace-a3", "--who", "x", "--config", project.config]) == 2
    assert "did you mean 'trace-a" in capsys.readouterr().err


def test_drafts_are_gated_only_where_a_gate_looks(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "sealed").mkdir()
    (tmp_path / "cases" / "d.yaml").write_text(DRAFTS.replace("schemas/reply.json", "s.json"))
    (tmp_path / "s.json").write_text("{}")
    (tmp_path / "sealed" / "d.yaml").write_text(
        DRAFTS.replace("trace-a", "sealed-a").replace("schemas/reply.json", "s.json")
    )
    corpus = load_corpus(tmp_path, sealed=True)
    assert [e.case_id for e in draft_errors(corpus.cases)] == ["trace-a1", "trace-a2"]
    assert draft_errors(corpus.cases, kind="live") == []  # a live run is reported, never gated
    with pytest.raises(CorpusError, match="1 more drafts"):
        refuse_drafts(corpus.cases)
    refuse_drafts([c for c in corpus.cases if c.sealed])  # sealed drafts only report


def test_require_provenance_refuses_blocking_cases_without_reviewer(project, capsys) -> None:
    (project.root / "cases" / "sampled.yaml").unlink()
    config = Path(project.config)
    config.write_text(config.read_text() + "policy: {require_provenance: [must_pass]}\n")
    assert main(["cases", "lint", "--config", project.config]) == 0  # init's cases name one
    cases = project.root / "cases" / "support.yaml"
    text = cases.read_text()
    cases.write_text(text.replace("{reviewer: you, date: 2026-01-15, ", "{date: 2026-01-15, ", 1))
    assert main(["cases", "lint", "--config", project.config]) == 2
    assert (
        "cases/support.yaml:3: case billing-double-charge-001: is must_pass and "
        "policy.require_provenance asks for a named reviewer and a date"
    ) in capsys.readouterr().err
    assert main(["cases", "review", "billing-double-charge-001", "--who", "lead", "--config",
                 project.config]) == 0  # fmt: skip
    assert main(["cases", "lint", "--config", project.config]) == 0
    config.write_text(config.read_text().replace("[must_pass]", "[must_pas]"))
    assert main(["cases", "lint", "--config", project.config]) == 2  # a typo is refused
    assert "policy.require_provenance" in capsys.readouterr().err


def test_the_demo_corpus_meets_its_own_provenance_policy(project_factory, capsys) -> None:
    demo = project_factory("corpus", demo=True)
    demo.add_config("policy: {require_provenance: [must_pass, critical]}\n")
    config = demo.config
    code = main(["cases", "lint", "--config", str(config)])
    assert code == 0, capsys.readouterr().err
    assert yaml.safe_load(config.read_text())["policy"]["require_provenance"] == [
        "must_pass",
        "critical",
    ]


ARTICLE = """\
# the seed article's spelling
- id: extraction_001
  input: "My card was charged twice for the same order, order number 88213."
  expected:
    category: "billing"
    order_id: "88213"
  scorer: exact_match

- id: extraction_002
  tags: [bug, must_pass]
  reviewer: support-lead
  provenance_date: 2026-07-01
  input: "The app crashes every time I try to upload a photo on iOS."
  expected:
    category: "bug_report"
    order_id: null
  scorer: exact_match

# already canonical: left byte for byte
- id: canonical-003
  input: {messages: [{role: user, content: hi}]}   # a comment that stays
  expect: [json_valid]
"""


def test_convert_rewrites_the_article_spelling_canonically(project, capsys) -> None:
    (project.root / "cases" / "sampled.yaml").unlink()
    path = project.root / "cases" / "article.yaml"
    path.write_text(ARTICLE)
    assert main(["cases", "lint", "--config", project.config]) == 2  # the old spelling: refused
    capsys.readouterr()
    assert main(["cases", "convert", str(path)]) == 0
    out = capsys.readouterr().out
    assert "converted 2 cases, 1 already canonical" in out
    assert "extraction_002: input → input.messages; tag must_pass → criticality" in out
    text = path.read_text()
    assert text.startswith("# the seed article's spelling\n- id: extraction_001\n")
    assert text.endswith(ARTICLE[ARTICLE.index("# already canonical") :])
    assert main(["cases", "lint", "--config", project.config]) == 0
    cases = {c.id: c for c in load_corpus(project.root).cases}
    first, second = cases["extraction_001"], cases["extraction_002"]
    assert first.messages == ({"role": "user", "content": ARTICLE.split('"')[1]},)
    assert [(s.name, s.args) for s in first.scorers] == [
        ("json_fields", {"fields": {"category": "billing", "order_id": "88213"}})
    ]
    assert second.criticality == "must_pass" and second.tags == ("bug",)
    assert second.provenance == {"reviewer": "support-lead", "date": "2026-07-01"}
    assert main(["cases", "convert", str(path)]) == 0  # converting again changes nothing
    assert path.read_text() == text


def test_convert_refuses_what_it_cannot_map_and_writes_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "judge.yaml"
    path.write_text(ARTICLE.replace("scorer: exact_match", "scorer: llm_judge", 1))
    assert main(["cases", "convert", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: case extraction_001: cannot convert scorer 'llm_judge'" in err
    assert "rubrics/NAME.md" in err and path.read_text().count("llm_judge") == 1
