"""CLI basics: ``runs list --json`` and full ids when piped, ``runs show``, the exact
``--resume`` command after Ctrl-C, an unknown tag with a did-you-mean and the list."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from projects import Project

from evalkit.cli import main
from evalkit.run import runner
from evalkit.store import open_store


@pytest.fixture
def project(project_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """An ``evalkit init`` project run once (``base``) against the demo server; the cwd is
    elsewhere."""
    made = project_factory(server=True, runs=["base"])
    monkeypatch.chdir(tmp_path)
    return made


def test_runs_json_and_full_ids_when_piped(project, capsys) -> None:
    assert main(["runs", "list", "--db", str(project.db), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["label"] == "base" and run["status"] == "complete" and len(run["config_hash"]) == 64
    assert main(["runs", "list", "--db", str(project.db)]) == 0  # stdout is no terminal here
    piped = capsys.readouterr().out
    assert piped.split("\t")[:2] == [run["run_id"], "base"]  # full id, no table
    assert run["config_hash"] in piped


def test_runs_show_names_the_configuration_the_corpus_and_the_outcome(project, capsys) -> None:
    assert main(["runs", "list", "--db", str(project.db), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert main(["runs", "show", "base", "--db", str(project.db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_id"] == listed["run_id"] and shown["config_hash"] == listed["config_hash"]
    manifest = shown["manifest"]  # the stored manifest, as an object, not a string
    assert manifest["suite"] == "my-assistant" and manifest["corpus"]["n_cases"] == 4
    assert main(["runs", "show", listed["run_id"][:8], "--db", str(project.db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run {listed['run_id']} (base): complete"
    assert "  suite: my-assistant" in lines and f"  model: {manifest['model']['id']}" in lines
    assert shown["pass_rate"] == listed["pass_rate"]  # one figure, as `runs list` gives it
    assert f"  pass rate (per case): {listed['pass_rate']:.1%}" in lines
    assert main(["runs", "show", "nope", "--db", str(project.db)]) == 2
    assert capsys.readouterr().err.startswith("evalkit: error: ")


def test_runs_in_a_terminal_is_a_table_with_status_pass_rate_and_age(
    project, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["runs", "list", "--db", str(project.db)]) == 0
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # a terminal gets colours
    header = next(line for line in out.splitlines() if "run_id" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "run_id", "label", "suite", "status", "pass rate (per case)", "age", "config",
    ]  # fmt: skip
    row = next(line for line in out.splitlines() if " base " in line)
    assert "complete" in row and "%" in row and (" s " in row or " min " in row)


def test_ctrl_c_prints_the_exact_resume_command(
    project, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert main(["runs", "list", "--db", str(project.db), "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)[0]["run_id"]

    def interrupted(suite, corpus, store, options):
        options.on_start(
            SimpleNamespace(
                run_id=run_id, label="base", resumed=False, stored=0, expected_outputs=4,
                to_do=4, use_cache=True, warnings=(),
            )
        )  # fmt: skip
        raise KeyboardInterrupt

    real = runner.run_suite
    monkeypatch.setattr(runner, "run_suite", interrupted)
    assert main(["run", "--label", "base", "--no-progress", *project.args]) == 130
    err = capsys.readouterr().err
    command = err.split("Continue it with: ")[1].strip()
    assert command == shlex.join(
        ["evalkit", "run", "--resume", run_id, "--db", project.args[3], "--config",
         project.args[1], "--set", project.args[5]]
    )  # fmt: skip
    monkeypatch.setattr(runner, "run_suite", real)
    # the printed command is one that works: same configuration, nothing left to do
    assert main([*shlex.split(command)[1:], "--no-progress"]) == 0
    assert (
        f"resuming run {run_id} (base): 4 of 4 outputs stored, 0 to go" in capsys.readouterr().err
    )


def test_an_unknown_tag_gets_a_did_you_mean_and_the_list(project, capsys) -> None:
    assert main(["run", "--tag", "biling", *project.args]) == 2
    assert capsys.readouterr().err == (
        "evalkit: error: unknown tag 'biling' (did you mean 'billing'?); tags: account, billing, "
        "injection, negation\n"
    )


def test_a_missing_prompt_file_is_blamed_on_the_flag_not_the_config(project, capsys) -> None:
    assert main(["run", "--prompt", "prompts/v9.md", *project.args]) == 2
    assert capsys.readouterr().err == "evalkit: error: --prompt prompts/v9.md: file not found\n"


def test_a_judge_scorer_without_a_judge_section_is_refused_by_lint_and_before_a_run(
    project, capsys
) -> None:
    config = Path(project.args[1])
    (config.parent / "rubrics").mkdir(exist_ok=True)
    (config.parent / "rubrics" / "tone.md").write_text("# Tone\n\n1: rude\n4: polite\n5: kind\n")
    cases = config.parent / "cases" / "support.yaml"
    cases.write_text(
        cases.read_text() + "\n- id: tone-judge-009\n  tags: [account]\n"
        "  provenance: {reviewer: you, date: 2026-01-15, source: test}\n"
        "  input: {vars: {message: hello}}\n"
        "  expect:\n    - {scorer: judge, args: {rubric: rubrics/tone.md, min_score: 4}}\n"
    )
    assert main(["cases", "lint", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "(case tone-judge-009): the judge scorer needs a judge: section" in err
    with open_store(project.db, read_only=True) as store:
        before = store.runs().height
    assert main(["run", "--label", "judged", "--no-progress", *project.args]) == 2
    assert "needs a judge: section" in capsys.readouterr().err
    with open_store(project.db, read_only=True) as store:
        assert store.runs().height == before  # no failed run left holding the label
