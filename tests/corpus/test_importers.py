"""``evalkit cases import``: real files of each format (tests/fixtures/importers/README.md says
which tool wrote each) become draft cases that validate, count what they could not map, keep their
ids across imports, never overwrite without ``--force``, and run against the demo simulator."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.importers.columns import import_rows, parse_mapping
from evalkit.corpus.importers.draft_cases import write_import
from evalkit.corpus.importers.inspect_log import import_inspect
from evalkit.corpus.importers.promptfoo import import_promptfoo
from evalkit.demo.server import DemoServer
from evalkit.errors import ConfigError, CorpusError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
PROMPTFOO = FIXTURES / "promptfoo" / "promptfooconfig.yaml"
INSPECT_EVAL = FIXTURES / "inspect" / "support_triage.eval"
INSPECT_JSON = FIXTURES / "inspect" / "support_triage.json"
CHAT = FIXTURES / "openai_chat.jsonl"
CSV = FIXTURES / "tickets.csv"
CSV_MAP = ["input=question", "expect.contains=answer", "tags=category", "id=ticket"]
DAY = dt.date(2026, 12, 3)
JUDGE = """judge:
  model: demo-judge-1
  base_url: http://127.0.0.1:8765/v1
  api_key_env: OPENAI_API_KEY
"""


@pytest.fixture
def project(project_factory) -> SimpleNamespace:
    """An ``evalkit init`` project with a (demo) judge configured and no cases of its own."""
    made = project_factory(api_key="unused", keep_cases=False, config=JUDGE)
    return SimpleNamespace(root=made.root, config=str(made.config), cases=made.cases)


def _import(project: SimpleNamespace, *args: str) -> int:
    return main(["cases", "import", *args, "--config", project.config])


def _cases(root: Path) -> dict:
    return {c.id: c for c in load_corpus(root).cases}


def test_promptfoo_config_maps_six_assertion_types_and_counts_the_rest(project, capsys) -> None:
    assert _import(project, "promptfoo", str(PROMPTFOO)) == 0
    out = capsys.readouterr().out
    assert "imported 4 draft cases" in out
    for line in (
        "contains -> contains (2)",
        "icontains -> contains (4)",  # defaultTest's assertion, on every test
        "regex -> regex (1)",
        "equals -> exact (1)",
        "is-json -> json_valid (1)",
        "contains-json -> json_valid (1)",
        "not-contains -> not_contains (1)",
        "similar -> similar (1)",
        "llm-rubric -> judge (1)",
    ):
        assert f"  {line}\n" in out, line
    assert "not mapped:\n  javascript (1): refused: evalkit runs no JavaScript" in out
    cases = _cases(project.root)
    assert len(cases) == 4 and all(c.review == "draft" for c in cases.values())
    late = cases["promptfoo-late-parcel-86c6b6b0"]
    assert late.vars == {"channel": "email", "message": late.vars["message"]}  # defaultTest vars
    assert sorted(s.name for s in late.scorers) == ["contains", "not_contains", "similar"]
    assert late.provenance["source"] == "promptfoo: tests.yaml#2"
    assert str(late.provenance["date"]) == str(dt.datetime.now(dt.UTC).date())
    tent = next(c for c in cases.values() if c.id.startswith("promptfoo-tent-overcharge-"))
    judge = next(s for s in tent.scorers if s.name == "judge")
    assert any(p.startswith("rubrics/promptfoo_") for p in judge.file_hashes)
    prompt = project.root / "prompts" / "promptfoo_1.md"
    assert prompt.read_text() == "Customer message: {{message}}\n"


def test_inspect_eval_and_json_logs_give_the_same_cases(tmp_path: Path) -> None:
    from_eval, from_json = import_inspect(INSPECT_EVAL), import_inspect(INSPECT_JSON)
    assert [replace(c, source="") for c in from_eval.cases] == [
        replace(c, source="") for c in from_json.cases
    ]
    assert from_json.cases[1].source == "support_triage.json sample login"
    assert from_eval.provenance_note == from_json.provenance_note
    assert from_eval.provenance_note.startswith(
        "inspect task support_triage, model openai/demo-support-1, run 2026-12-03"
    )
    assert from_eval.mapped == {"target (includes -> contains)": 3, "input -> input.messages": 3}
    first = from_eval.cases[0]
    assert first.source_id == "support_triage-double-charge"
    assert first.input["messages"][0]["content"].startswith("Customer message: I was charged")
    assert first.expect == ({"scorer": "contains", "args": {"text": "8812", "ignore_case": True}},)
    assert first.tags == ("support_triage", "billing")
    assert '"category": "billing"' in first.notes and "demo-support-1 answered" in first.notes
    written = write_import(from_eval, tmp_path / "cases", tmp_path, today=DAY)
    assert written.path.name == "inspect_support-triage.yaml"  # the task, not the log's stamp
    assert written.ids == (
        "inspect-support-triage-double-charge",
        "inspect-support-triage-login",
        "inspect-support-triage-late-parcel",
    )
    loaded = _cases(tmp_path)
    assert loaded[written.ids[0]].provenance["note"] == from_eval.provenance_note


def test_openai_chat_rows_keep_tool_calls_as_fixtures(tmp_path: Path) -> None:
    result = import_rows(CHAT, {}, "jsonl")
    assert result.mapped == {
        "messages -> input.messages": 3,
        "tool call -> fixtures + tool_called": 1,
    }
    assert result.unmapped == {"system message": 1, "tools (function schemas)": 1}
    refund = result.cases[0]
    assert refund.input["messages"] == [
        {
            "role": "user",
            "content": "Customer message: I was charged twice for order 8812, please refund one "
            "of the payments.",
        }
    ]
    assert refund.fixtures["tools"]["lookup_order"][0]["args"] == {"order_id": "8812"}
    assert refund.fixtures["tools"]["lookup_order"][0]["response"]["refundable"] is True
    assert [e["scorer"] for e in refund.expect] == ["tool_called", "similar"]
    assert result.cases[1].input["messages"][0]["content"].endswith("where is it?")  # text parts
    written = write_import(result, tmp_path / "cases", tmp_path, today=DAY)
    case = _cases(tmp_path)[written.ids[0]]
    assert case.fixtures["tools"]["lookup_order"][0]["response"]["status"] == "delivered"
    assert "&id" not in written.path.read_text()  # values spelled out, no YAML anchors


def test_csv_column_mapping(tmp_path: Path) -> None:
    result = import_rows(CSV, parse_mapping(CSV_MAP), "csv")
    assert result.unmapped == {"field 'priority'": 3}
    assert result.mapped == {"question -> input": 3, "answer -> expect.contains": 3}
    assert [c.source for c in result.cases] == ["tickets.csv:2", "tickets.csv:3", "tickets.csv:4"]
    written = write_import(result, tmp_path / "cases", tmp_path, today=DAY)
    assert written.ids == ("csv-t-101", "csv-t-102", "csv-t-103")
    late = _cases(tmp_path)["csv-t-103"]
    assert late.tags == ("shipping", "delays")
    assert late.messages == (
        {"role": "user", "content": "My order 7731 is two weeks late, where is it?"},
    )


def test_ids_are_stable_and_derived_from_content(tmp_path: Path) -> None:
    """The same source twice gives the same file; reordered rows keep their ids."""
    first = write_import(import_rows(CHAT, {}, "jsonl"), tmp_path / "a", tmp_path, today=DAY)
    again = write_import(import_rows(CHAT, {}, "jsonl"), tmp_path / "b", tmp_path, today=DAY)
    assert first.ids == again.ids and len(set(first.ids)) == 3
    assert first.path.read_text() == again.path.read_text()
    reordered = tmp_path / "openai_chat.jsonl"
    reordered.write_text("".join(reversed(CHAT.read_text().splitlines(keepends=True))))
    moved = write_import(import_rows(reordered, {}, "jsonl"), tmp_path / "c", tmp_path, today=DAY)
    assert moved.ids == tuple(reversed(first.ids))
    pf = [write_import(import_promptfoo(PROMPTFOO), tmp_path / d, tmp_path / d, today=DAY).ids
          for d in ("p", "q")]  # fmt: skip
    assert pf[0] == pf[1]


def test_never_overwrites_without_force(project, capsys) -> None:
    assert _import(project, "csv", str(CSV), *_maps()) == 0
    path = project.cases / "csv_tickets.yaml"
    path.write_text(path.read_text() + "# my edit\n")
    capsys.readouterr()
    assert _import(project, "csv", str(CSV), *_maps()) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evalkit: error: {path}: exists; pass --force to overwrite it")
    assert path.read_text().endswith("# my edit\n")
    assert _import(project, "csv", str(CSV), *_maps(), "--force") == 0
    assert not path.read_text().endswith("# my edit\n")
    # side files count too: a second promptfoo import refuses before writing anything
    assert _import(project, "promptfoo", str(PROMPTFOO)) == 0
    (project.cases / "promptfoo_promptfooconfig.yaml").unlink()
    assert _import(project, "promptfoo", str(PROMPTFOO)) == 2
    assert "prompts/promptfoo_1.md: exists" in capsys.readouterr().err
    assert not (project.cases / "promptfoo_promptfooconfig.yaml").exists()


def _maps() -> list[str]:
    return [part for item in CSV_MAP for part in ("--map", item)]


def test_bad_input_is_one_line_naming_file_and_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [\n')
    assert main(["cases", "import", "jsonl", str(bad), "--out", str(tmp_path / "cases")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evalkit: error: {bad}:2: invalid JSON") and err.count("\n") == 1
    with pytest.raises(ConfigError, match="'contans' is not a scorer"):
        parse_mapping(["expect.contans=answer"])
    with pytest.raises(ConfigError, match="needs --map input=COLUMN"):
        import_rows(CSV, {}, "csv")
    with pytest.raises(CorpusError, match="no 'messages' array"):
        import_rows(_plain(tmp_path), {}, "jsonl")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("prompts: ['{{q}}']\ntests: file://missing.yaml\n")
    with pytest.raises(CorpusError, match=r"missing\.yaml: cannot read"):
        import_promptfoo(config)
    with pytest.raises(CorpusError, match=r"not an Inspect \.eval log"):
        import_inspect(shutil.copy(CSV, tmp_path / "x.eval"))


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.jsonl"
    path.write_text('{"question": "hi", "answer": "hello"}\n')
    return path


def test_imported_cases_lint_and_run_against_the_demo(
    project, demo_server: DemoServer, tmp_path: Path, capsys
) -> None:
    """Every format into one project: drafts refused until reviewed, then lint, run and gate."""
    assert _import(project, "promptfoo", str(PROMPTFOO)) == 0
    assert _import(project, "inspect", str(INSPECT_EVAL)) == 0
    assert _import(project, "jsonl", str(CHAT)) == 0
    assert _import(project, "csv", str(CSV), *_maps()) == 0
    ids = sorted(_cases(project.root))
    assert len(ids) == 13
    capsys.readouterr()
    assert main(["cases", "lint", "--config", project.config]) == 2
    assert "13 cases cannot gate yet" in capsys.readouterr().err
    assert main(["cases", "review", *ids, "--who", "ana", "--config", project.config]) == 0
    assert main(["cases", "lint", "--config", project.config]) == 0
    db = str(tmp_path / "e.duckdb")
    run = ["run", "--no-progress", "--config", project.config, "--db", db,
           "--set", f"system.base_url={demo_server.base_url}",
           "--set", f"judge.base_url={demo_server.base_url}"]  # fmt: skip
    capsys.readouterr()
    assert main([*run, "--label", "imported"]) == 0
    out = capsys.readouterr().out
    assert "13 cases, 13 outputs" in out and "errors 0" in out
    assert main([*run, "--label", "again"]) == 0
    capsys.readouterr()
    assert main(["compare", "--db", db, "--config", project.config, "imported", "again"]) == 0
    assert "over 13 cases; 0 broken, 0 fixed" in " ".join(capsys.readouterr().out.split())
    gate = ["gate", "imported", "again", "--db", db, "--config", project.config]
    assert main([*gate, "--out", str(tmp_path / "reports")]) == 0  # the gate itself, papermill
    assert "gate PASSED" in capsys.readouterr().out


def test_inspect_chat_input_with_a_tool_call(tmp_path: Path) -> None:
    """A sample whose input is a message list, with Inspect's own tool-call spelling."""
    log = json.loads(INSPECT_JSON.read_text())
    log["samples"] = [log["samples"][0]]
    call = {"id": "t1", "function": "issue_refund", "arguments": {"order_id": "8812"}}
    log["samples"][0]["input"] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Refund order 8812"}]},
        {"role": "assistant", "content": "",
         "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "t1", "content": '{"refund_id": "RF-1"}'},
        {"role": "user", "content": "And confirm by email."},
    ]  # fmt: skip
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(log))
    result = import_inspect(path)
    (case,) = result.cases
    assert case.input["messages"] == [
        {"role": "user", "content": "Refund order 8812"},
        {"role": "user", "content": "And confirm by email."},
    ]
    assert result.unmapped == {"system message": 1, "earlier tool turn": 2}
    write_import(result, tmp_path / "cases", tmp_path, today=DAY)
    assert len(load_corpus(tmp_path).cases) == 1


def test_a_row_without_its_input_names_the_file_and_line(tmp_path: Path, capsys) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("question,answer\nhello,hi\n,lost\n")
    argv = [
        "cases",
        "import",
        "csv",
        str(rows),
        "--map",
        "input=question",
        "--map",
        "expect.contains=answer",
    ]
    assert main([*argv, "--out", str(tmp_path / "cases")]) == 2
    assert capsys.readouterr().err == (
        f"evalkit: error: {rows}:3: no value for input field 'question'\n"
    )
    assert not (tmp_path / "cases").exists()  # nothing written
    assert main(["cases", "import"]) == 2
    assert "jsonl" in capsys.readouterr().out


def test_deflate_eval_logs_and_a_missing_zstandard(tmp_path: Path, monkeypatch) -> None:
    """Older Inspect wrote deflate members: read with the stdlib. zstd without the package is
    a one-line error saying what to do."""
    import zipfile

    from evalkit.corpus.importers import inspect_log

    source = zipfile.ZipFile(INSPECT_EVAL)
    deflated = tmp_path / "old.eval"
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as out:
        for name in source.namelist():
            out.writestr(name, inspect_log._member(source, INSPECT_EVAL, name))
    assert import_inspect(deflated).cases[0].input == import_inspect(INSPECT_EVAL).cases[0].input
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises
    with pytest.raises(CorpusError, match="zstd-compressed: pip install zstandard"):
        import_inspect(INSPECT_EVAL)
    assert len(import_inspect(deflated).cases) == 3  # needs nothing


def test_promptfoo_globs_file_prompts_and_a_default_test_file(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(PROMPTFOO.parent / "tests.yaml", tmp_path / "tests" / "a.yaml")
    (tmp_path / "tests" / "b.json").write_text(
        json.dumps([{"vars": {"message": "hi"}, "assert": [{"type": "python", "value": "True"}]}])
    )
    (tmp_path / "prompt.txt").write_text("Customer message: {{message}}\n")
    (tmp_path / "default.yaml").write_text("assert: [{type: starts-with, value: Here}]\n")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(
        "prompts: [file://prompt.txt]\ndefaultTest: file://default.yaml\ntests: file://tests/*\n"
    )
    result = import_promptfoo(config)
    assert [c.source for c in result.cases] == ["a.yaml#0", "a.yaml#1", "a.yaml#2", "b.json#0"]
    assert result.mapped["starts-with -> regex"] == 4
    assert result.unmapped == {"javascript": 1, "python": 1}
    assert result.files["prompts/promptfoo_1.md"] == "Customer message: {{message}}\n"


def test_a_source_with_nothing_to_check_writes_nothing(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "hi"}\n')
    result = import_rows(rows, {"input": "question", "expect.contains": "answer"}, "jsonl")
    with pytest.raises(CorpusError, match=r"nothing to import.*row with nothing to check \(1\)"):
        write_import(result, tmp_path / "cases", tmp_path)
    assert not (tmp_path / "cases").exists()


@pytest.mark.parametrize(
    ("config_text", "named"),
    [
        ("prompts: ['{{q}}']\ntests: file://../../outside/secret.yaml\n", "../../outside"),
        ("prompts: ['{{q}}']\ntests: file://{outside}/secret.yaml\n", "/secret.yaml"),
        ("prompts: ['{{q}}']\ntests: file://../../out*/*.yaml\n", "../../out*/*.yaml"),
        ("prompts: ['{{q}}']\ntests: file://linked.yaml\n", "linked.yaml"),
        ("prompts: [file://../../outside/prompt.txt]\ntests: file://t.yaml\n", "prompt.txt"),
        ("prompts: ['{{q}}']\ndefaultTest: file://default.yaml\ntests: file://t.yaml\n", "default"),
    ],
    ids=["dot-dot", "absolute", "glob", "symlink", "prompt", "default-test"],
)
def test_promptfoo_refuses_files_outside_the_config_folder(
    tmp_path: Path, capsys, config_text: str, named: str
) -> None:
    """A config's ``file://`` references that leave its folder are refused by name, nothing is
    written, and only ``--allow-outside`` follows them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = '[{vars: {q: "SECRET-TOKEN"}, assert: [{type: contains, value: "SECRET-TOKEN"}]}]'
    (outside / "secret.yaml").write_text(secret + "\n")
    (outside / "prompt.txt").write_text("SECRET-TOKEN {{q}}\n")
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    (folder / "linked.yaml").symlink_to(outside / "secret.yaml")
    (outside / "default.yaml").write_text("assert: [{type: contains, value: SECRET-TOKEN}]\n")
    (folder / "default.yaml").symlink_to(outside / "default.yaml")
    (folder / "t.yaml").write_text("[{vars: {q: hi}, assert: [{type: contains, value: hi}]}]\n")
    config = folder / "promptfooconfig.yaml"
    config.write_text(config_text.replace("{outside}", str(outside)))
    out = tmp_path / "cases"
    assert main(["cases", "import", "promptfoo", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{config}:" in err and named in err and "outside the config's folder" in err
    assert not out.exists()
    assert (
        main(["cases", "import", "promptfoo", str(config), "--out", str(out), "--allow-outside"])
        == 0
    )
    assert "SECRET-TOKEN" in "".join(p.read_text() for p in out.parent.rglob("*.*") if p.is_file())


def test_promptfoo_follows_references_and_symlinks_that_stay_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "t.yaml").write_text(
        "[{vars: {q: hi}, assert: [{type: contains, value: hi}]}]\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.yaml").symlink_to(tmp_path / "real" / "t.yaml")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(
        "prompts: ['{{q}}']\ntests: [file://tests/*.yaml, file://./real/../real/t.yaml]\n"
    )
    assert [c.source for c in import_promptfoo(config).cases] == ["t.yaml#0", "t.yaml#0"]
