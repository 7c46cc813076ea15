"""The command line's old spellings (before commands became nouns with verbs) still work, say
their new spelling in one line on stderr, and appear in no help and no reference page."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

from evalkit.cli import COMMAND_GROUP, _parser, main
from evalkit.cli.aliases import OLD_SPELLINGS, respell
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs"))
import gen_reference as GEN  # noqa: E402

#: The top-level words that are old spellings alone (``runs``, ``flakes`` and ``scorers`` are
#: nouns of the new command line too).
RETIRED = {"import", "rescore", "merge", "calibrate", "judge-pairs", "sealed"}


def _subcommands(group: str) -> set[str]:
    (top,) = [a for a in _parser(group)._actions if isinstance(a, argparse._SubParsersAction)]
    (own,) = [a for a in top.choices[group]._actions if isinstance(a, argparse._SubParsersAction)]
    return set(own.choices)


@pytest.mark.parametrize("spelling", OLD_SPELLINGS, ids=lambda s: " ".join(s.old))
def test_each_old_spelling_becomes_a_command_the_parser_knows(spelling) -> None:
    words, note = respell([*spelling.old, "--help"] if not spelling.unless else [*spelling.old])
    assert words[: len(spelling.new)] == list(spelling.new)
    assert note == f"`evalkit {' '.join(spelling.old)}` is now `evalkit {' '.join(spelling.new)}`"
    group, verb = spelling.new[0], spelling.new[1]
    assert spelling.new[0] in COMMAND_GROUP and verb in _subcommands(group)
    if spelling.unless:  # the group's own verbs are never taken for the old spelling
        assert spelling.unless == _subcommands(group)
        for own in sorted(spelling.unless):
            assert respell([group, own, "x"]) == ([group, own, "x"], None)
        assert respell([group, "--help"]) == ([group, "--help"], None)


def test_a_new_spelling_or_another_command_is_left_alone() -> None:
    for words in (["cases", "import", "csv", "f"], ["run", "--label", "merge"], [], ["--version"]):
        assert respell(words) == (words, None)


def test_the_old_spellings_are_in_no_help_and_no_reference_page(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.search(r"\{([a-z,-]+)\}", capsys.readouterr().out)
    assert listed is not None
    commands = set(listed[1].split(","))
    assert commands == set(COMMAND_GROUP) and not commands & RETIRED
    reference = {c.words for c in GEN.cli_commands()}
    for spelling in OLD_SPELLINGS:
        assert spelling.old not in reference or spelling.unless, spelling.old
    assert {c.words[0] for c in GEN.cli_commands()} == set(COMMAND_GROUP)
    assert ("runs", "list") in reference and ("cases", "seal") in reference
    table = GEN.render_cli().split("## Old spellings", 1)[1]  # named once, in their own table
    for spelling in OLD_SPELLINGS:
        assert f"| `evalkit {' '.join(spelling.old)}`" in table


def _said(capsys, old: str, new: str) -> str:
    """The command's stdout, once its stderr was checked to begin with the one line."""
    out, err = capsys.readouterr()
    assert err.splitlines()[0] == f"`evalkit {old}` is now `evalkit {new}`"
    assert sum("is now" in line for line in err.splitlines()) == 1
    return out


def test_old_spellings_of_reading_commands_still_work(tmp_path: Path, capsys) -> None:
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True):
        pass
    assert main(["runs", "--json", "--db", str(db)]) == 0
    assert json.loads(_said(capsys, "runs", "runs list")) == []
    assert main(["scorers", "--json"]) == 0
    assert "contains" in {e["name"] for e in json.loads(_said(capsys, "scorers", "scorers list"))}


def test_old_spelling_of_import_still_imports(tmp_path: Path, capsys) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "Where is my order?", "a": "order"}\n')
    argv = ["import", "jsonl", str(rows), "--map", "input=q", "--map", "expect.contains=a"]
    assert main([*argv, "--out", str(tmp_path / "cases")]) == 0
    assert "imported 1 draft cases" in _said(capsys, "import", "cases import")
    (written,) = (tmp_path / "cases").glob("*.yaml")
    assert written.read_text().startswith("# Imported by `evalkit cases import jsonl`")


def test_old_spellings_reach_the_new_commands_own_checks(project_factory, tmp_path, capsys):
    """Each runs the new command as far as its first refusal (no model is asked): the error is
    the new command's own, after the line naming the new spelling."""
    project = project_factory()
    missing = str(tmp_path / "missing.duckdb")
    config = ["--config", str(project.config)]
    cases = {
        ("rescore", "runs rescore"): (
            ["rescore", "base", *config, "--db", missing], "no evalkit store"
        ),
        ("flakes", "flakes measure"): (
            ["flakes", "--runs", "1", *project.args], "evalkit flakes measure needs --runs 2"
        ),
        ("sealed rotate", "cases seal"): (
            ["sealed", "rotate", *config, "--share", "250%", "--seed", "1"], "share"
        ),
        ("merge", "runs merge"): (
            ["merge", "r", "--parts", str(tmp_path / "parts"), "--db", missing], "r"
        ),
    }  # fmt: skip
    for (old, new), (argv, error) in cases.items():
        assert main(argv) == 2, old
        _, err = capsys.readouterr()
        first, *rest = err.splitlines()
        assert first == f"`evalkit {old}` is now `evalkit {new}`"
        assert rest and rest[-1].startswith("evalkit: error: ") and error in rest[-1], (old, err)


def test_old_judge_spellings_reach_the_judges_group(tmp_path: Path, capsys) -> None:
    missing = str(tmp_path / "missing.duckdb")
    assert main(["calibrate", "--run", "base", "--db", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("`evalkit calibrate` is now `evalkit judges calibrate`\n")
    assert "evalkit: error:" in err
    with pytest.raises(SystemExit) as usage:  # --rubric is required: the new parser's rule
        main(["judge-pairs", "base", "cand", "--db", missing])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("`evalkit judge-pairs` is now `evalkit judges pairs`\n")
    assert "evalkit judges pairs: error: the following arguments are required: --rubric" in err
