"""Scorers are built once per distinct entry, and (deferred) only for the cases a run selects.

Counted, not timed: ``build_scorer`` as the corpus loader calls it is wrapped with a counter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.corpus import case_scorers
from evalkit.corpus.case_scorers import is_pending
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.selection import Selection
from evalkit.errors import CorpusError

SCHEMA = {"type": "object", "properties": {"category": {"type": "string"}}}


def write_corpus(root: Path, n: int, *, bad_regex_at: int | None = None) -> Path:
    """N cases: a shared json_schema entry, a json_fields entry of their own, two tagged pick."""
    (root / "cases").mkdir(parents=True)
    (root / "schemas").mkdir()
    (root / "schemas" / "reply.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    lines = []
    for i in range(n):
        tags = '["pick"]' if i < 2 else '["other"]'
        pattern = "(" if i == bad_regex_at else "order"
        lines.append(
            f"- id: case-{i:03d}\n"
            f"  tags: {tags}\n"
            f"  input: {{messages: [{{role: user, content: 'order {i}?'}}]}}\n"
            "  expect:\n"
            "    - {scorer: json_schema, args: {schema: schemas/reply.json}}\n"
            f'    - {{scorer: json_fields, args: {{fields: {{order_id: "{i}"}}}}}}\n'
            f'    - {{scorer: regex, args: {{pattern: "{pattern}"}}}}\n'
        )
    (root / "cases" / "all.yaml").write_text("".join(lines), encoding="utf-8")
    return root


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the scorers the loader builds, in order."""
    seen: list[str] = []
    real = case_scorers.build_scorer

    def counting(name, args, resolve=None):
        seen.append(name)
        return real(name, args, resolve)

    monkeypatch.setattr(case_scorers, "build_scorer", counting)
    return seen


def test_each_distinct_entry_is_built_once(tmp_path: Path, builds: list[str]) -> None:
    corpus = load_corpus(write_corpus(tmp_path, 60))
    assert len(corpus.cases) == 60
    assert builds.count("json_schema") == 1  # one schema, 60 cases
    assert builds.count("regex") == 1
    assert builds.count("json_fields") == 60  # each case's own fields
    first, last = corpus.cases[0].scorers, corpus.cases[-1].scorers
    assert first[0] is last[0]  # the same bound json_schema scorer, shared


def test_deferred_load_builds_only_selected_cases(tmp_path: Path, builds: list[str]) -> None:
    corpus = load_corpus(write_corpus(tmp_path, 60), defer_scorers=True)
    assert builds == [] and all(is_pending(c) for c in corpus.cases)
    chosen = Selection(tags=("pick",)).apply(corpus)
    assert [c.id for c in chosen.cases] == ["case-000", "case-001"]
    assert sorted(builds) == ["json_fields", "json_fields", "json_schema", "regex"]
    assert sum(is_pending(c) for c in corpus.cases) == 58  # the others never built
    assert [s.name for s in chosen.cases[0].scorers] == ["json_schema", "json_fields", "regex"]


def test_deferred_and_eager_loads_agree(tmp_path: Path) -> None:
    root = write_corpus(tmp_path, 5)
    eager, deferred = load_corpus(root), load_corpus(root, defer_scorers=True)
    assert deferred.file_hashes == eager.file_hashes != {}
    assert deferred.hash == eager.hash
    assert [c.scorers for c in deferred.cases] == [c.scorers for c in eager.cases]
    assert deferred.cases == eager.cases


def test_bad_args_fail_when_their_case_is_selected(tmp_path: Path) -> None:
    root = write_corpus(tmp_path, 6, bad_regex_at=4)
    with pytest.raises(CorpusError) as eager:
        load_corpus(root)
    deferred = load_corpus(root, defer_scorers=True)
    assert len(Selection(tags=("pick",)).apply(deferred).cases) == 2  # case-004 not selected
    with pytest.raises(CorpusError) as selected:
        deferred.select(ids=["case-004"])
    for exc in (eager.value, selected.value):
        assert (exc.path, exc.case_id) == ("cases/all.yaml", "case-004")
        assert exc.line == 4 * 7 + 7  # the regex entry's line
        assert "regex" in str(exc)


def test_missing_file_fails_at_load_even_deferred(tmp_path: Path) -> None:
    root = write_corpus(tmp_path, 3)
    (root / "schemas" / "reply.json").unlink()
    with pytest.raises(CorpusError, match="not found") as caught:
        load_corpus(root, defer_scorers=True)
    assert (caught.value.case_id, caught.value.line) == ("case-000", 5)
