"""Corpus files of any size: the YAML node limit holds per case in a file read case by case (a
long case list is no alias bomb: its size is bounded in bytes before parsing), and what evalkit
writes (imports, trace samples) comes in files of a bounded size that load, lint and review."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit.cli import main
from evalkit.corpus import cases, file_parts, yaml_input
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.traces.drafting import write_drafts
from evalkit.errors import CorpusError


@pytest.fixture
def project(project_factory) -> SimpleNamespace:
    """An ``evalkit init`` project without cases of its own."""
    made = project_factory(api_key="unused", keep_cases=False)
    return SimpleNamespace(root=made.root, config=str(made.config), cases=made.cases)


def _rows(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            row = {"id": f"r{i}", "question": f"Where is order {i}?", "answer": f"order {i}"}
            out.write(json.dumps(row) + "\n")
    return path


def _import(project: SimpleNamespace, rows: Path, *more: str) -> int:
    maps = ["--map", "input=question", "--map", "expect.contains=answer", "--map", "id=id"]
    return main(["cases", "import", "jsonl", str(rows), *maps, "--config", project.config, *more])


def test_an_import_past_the_node_limit_is_written_in_bounded_files_that_lint_after_review(
    project: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """60,000 one-turn cases (~21 values each) hold more values than one document may: written
    as files of at most WRITTEN_FILE_CASES cases, each loads, and reviewed they lint clean.
    Scaled down fiftyfold, limits with it (the YAML emitter writing 60,000 cases takes
    minutes on a shared machine; ``bench/large_import.py`` runs the full size)."""
    n = 1_200
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", 20_000)  # 1,000,000 / 50
    monkeypatch.setattr(file_parts, "WRITTEN_FILE_CASES", 400)
    assert n * 21 > yaml_input.MAX_YAML_NODES
    assert _import(project, _rows(tmp_path / "rows.jsonl", n)) == 0
    out = capsys.readouterr().out
    files = sorted(project.cases.glob("jsonl_rows*.yaml"))
    assert len(files) == 3, out
    assert "in 3 files: jsonl_rows.yaml to jsonl_rows-3.yaml" in out
    assert all(p.stat().st_size <= file_parts.WRITTEN_FILE_BYTES for p in files)
    corpus = load_corpus(project.root)
    assert len(corpus.cases) == n
    sources = {c.source.rpartition(":")[0] for c in corpus.cases}
    assert sources == {f"cases/{p.name}" for p in files}
    assert main(["cases", "lint", "--config", project.config]) != 0  # drafts never gate
    assert "is a draft" in capsys.readouterr().err
    ids = [c.id for c in corpus.cases]
    assert main(["cases", "review", *ids, "--who", "ana", "--config", project.config]) == 0
    capsys.readouterr()
    assert main(["cases", "lint", "--config", project.config]) == 0, capsys.readouterr().err
    # the same text as one file: read case by case, it loads; read whole, it is refused
    one = "".join(p.read_text() for p in files)
    for p in files:
        p.unlink()
    (project.cases / "all.yaml").write_text(one)
    assert len(load_corpus(project.root).cases) == n
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", 10**9)
    with pytest.raises(CorpusError, match="more than 20,000 values"):
        load_corpus(project.root)


def test_a_smaller_reimport_removes_the_files_only_the_larger_one_wrote(
    project: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(file_parts, "WRITTEN_FILE_CASES", 4)
    rows = _rows(tmp_path / "rows.jsonl", 10)
    assert _import(project, rows) == 0
    assert [len(load_corpus(project.root).cases)] == [10]
    assert sorted(p.name for p in project.cases.iterdir()) == [
        "jsonl_rows-2.yaml", "jsonl_rows-3.yaml", "jsonl_rows.yaml",
    ]  # fmt: skip
    mine = project.cases / "jsonl_rows-4.yaml"  # not an import's file: never removed
    mine.write_text("- id: mine\n  input: {vars: {q: a}}\n  expect: [json_valid]\n")
    capsys.readouterr()
    (project.cases / "jsonl_rows.yaml").unlink()
    assert _import(project, _rows(rows, 5)) == 2  # a file of that cut exists: refused
    assert "jsonl_rows-2.yaml: exists; pass --force" in capsys.readouterr().err
    assert _import(project, rows, "--force") == 0
    assert "removed" in capsys.readouterr().out
    assert sorted(p.name for p in project.cases.iterdir()) == [
        "jsonl_rows-2.yaml", "jsonl_rows-4.yaml", "jsonl_rows.yaml",
    ]  # fmt: skip
    assert len(load_corpus(project.root).cases) == 6


def test_trace_drafts_are_written_in_bounded_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_parts, "WRITTEN_FILE_CASES", 3)
    drafts = [
        {"id": f"t{i}", "review": "draft", "provenance": {"date": "2026-12-01"},
         "input": {"messages": [{"role": "user", "content": f"hi {i}"}]},
         "expect": [{"scorer": "json_valid"}]}
        for i in range(7)
    ]  # fmt: skip
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "traces-2026-12-01.yaml").write_text("[]\n")  # taken: numbered on
    paths = write_drafts(drafts, tmp_path / "cases", today=__import__("datetime").date(2026, 12, 1))
    assert [p.name for p in paths] == [f"traces-2026-12-01-{n}.yaml" for n in (2, 3, 4)]
    loaded = load_corpus(tmp_path)
    assert [c.id for c in loaded.cases] == [f"t{i}" for i in range(7)]


def test_a_bad_draft_removes_every_file_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(file_parts, "WRITTEN_FILE_CASES", 2)
    good = {"id": "a", "input": {"vars": {"q": 1}}, "expect": [{"scorer": "json_valid"}]}
    bad = {**good, "id": "b", "expect": [{"scorer": "contans"}]}
    with pytest.raises(CorpusError, match="contans"):
        write_drafts([good, {**good, "id": "c"}, bad], tmp_path / "cases")
    assert list((tmp_path / "cases").iterdir()) == []


def _case(i: int, values: int) -> str:
    tags = "[" + ", ".join(["t"] * values) + "]"
    return f"- id: c{i}\n  tags: {tags}\n  input: {{vars: {{q: hi}}}}\n  expect: [json_valid]\n"


def _corpus(tmp_path: Path, text: str) -> Path:
    (tmp_path / "cases").mkdir(parents=True)
    (tmp_path / "cases" / "big.yaml").write_text(text)
    return tmp_path


def test_the_node_limit_holds_per_case_in_a_file_read_case_by_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of many small cases, more values in all than the limit: loads (the file read
    whole, an anchor in it, is refused at the limit, as any document is)."""
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", 500)
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", 8)
    text = "".join(_case(i, 20) for i in range(100))  # 34 values a case, 3,401 in all
    root = _corpus(tmp_path, text)
    assert len(load_corpus(root).cases) == 100
    (root / "cases" / "big.yaml").write_text("# &anchor: read whole\n" + text)
    with pytest.raises(CorpusError, match="more than 500 values; split the file"):
        load_corpus(root)


@pytest.mark.parametrize("at", [0, 37])
def test_one_case_over_the_node_limit_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", 500)
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", 8)
    items = [_case(i, 20) for i in range(40)]
    items[at] = _case(at, 487)  # 501 values with its 14 others
    root = _corpus(tmp_path, "".join(items))
    with pytest.raises(CorpusError) as refused:
        load_corpus(root)
    assert "more than 500 values (the limit for one case)" in str(refused.value)
    assert (refused.value.path, refused.value.line) == ("cases/big.yaml", at * 4 + 1)
    items[at] = _case(at, 486)  # 500 values: loads
    (root / "cases" / "big.yaml").write_text("".join(items))
    assert len(load_corpus(root).cases) == 40
