"""``evalkit.cli.main`` itself, in this process: the ``--version`` shortcut, no command, an
error's one line, a reader gone mid-output, and the command line's own process ending at
``os._exit`` once a run has written everything.

The same paths seen from outside (a fresh interpreter's imports, the real ``os._exit``, a
closed pipe) are in tests/test_cli_start.py, tests/run/test_fixed_cost_exit.py and
tests/cli/test_onboarding.py; these check the decisions ``main`` makes without starting one.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import duckdb
import pytest
from projects import Project

import evalkit.cli as cli
from evalkit.errors import ConfigError
from evalkit.version import __version__


@pytest.fixture
def ended(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The exit codes ``main`` ended the process with (``_end_process`` recorded, not run),
    with the teardown flag left set as an earlier run in this process leaves it: each call of
    ``main`` starts from its own command's say."""
    codes: list[int] = []
    monkeypatch.setattr(cli, "_teardown_skippable", True)
    monkeypatch.setattr(cli, "_own_process", False)
    monkeypatch.setattr(cli, "_end_process", codes.append)
    monkeypatch.setattr(cli, "_skip_final_collection", lambda: None)
    return codes


def _no_parser(command: str | None = None) -> None:
    raise AssertionError(f"a parser was built for {command!r}")


def test_version_is_answered_without_building_a_parser(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_parser", _no_parser)
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"evalkit {__version__}\n"
    with pytest.raises(AssertionError, match="a parser was built"):  # the shortcut is exact
        cli.main(["--version", "--help"])


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: evalkit ") and "regression testing" in out
    for command in ("run", "gate", "runs", "scorers"):  # the whole parser: every command
        assert command in out, command


def test_an_error_is_one_line_without_url_credentials_and_at_most_1000_characters(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-entry-point-7f3a"

    def refuse(config: str | None) -> Path:
        raise ConfigError(f"cannot reach\nhttp://me:{secret}@gw.local:8000/v1\n  " + "x " * 700)

    monkeypatch.setattr(cli, "find_config", refuse)
    assert cli.main(["cases", "lint"]) == ConfigError.exit_code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    line = captured.err.rstrip("\n")
    assert line.startswith("evalkit: error: cannot reach http://gw.local:8000/v1 x x")
    assert secret not in line
    assert len(line) == len("evalkit: error: ") + 1000 and line.endswith("...")


def test_a_reader_gone_mid_output_ends_quietly_with_0(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``evalkit runs list | head``: the write that hits the closed pipe ends the command with
    0 and nothing on stderr (stdout goes to /dev/null so the interpreter's last flush is
    quiet too; here that is the captured descriptor, restored after the test)."""

    def closed_pipe(args: list[str]) -> int:
        print("a first line", flush=True)
        raise BrokenPipeError

    monkeypatch.setattr(cli, "_main", closed_pipe)
    assert cli.main(["runs", "list"]) == 0
    assert capfd.readouterr().err == ""


def test_the_command_lines_run_ends_the_process_once_everything_is_written(
    project_factory, ended: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``main()`` of the command line (its ``sys.argv``): a finished run ends the process at
    once with its exit code, the store already closed and checkpointed; the same run through
    ``main(argv)`` (a caller's process) returns instead."""
    project: Project = project_factory(server=True)
    run = ["run", "--no-progress", *project.args]
    monkeypatch.setattr(sys, "argv", ["evalkit", *run, "--label", "own"])
    assert cli.main() == 0
    assert ended == [0]
    assert not project.db.with_name(project.db.name + ".wal").exists()
    with duckdb.connect(str(project.db), read_only=True) as con:
        assert con.execute("SELECT label, status FROM runs").fetchall() == [("own", "complete")]

    assert cli.main([*run, "--label", "caller"]) == 0  # a caller of main(argv): returns
    assert ended == [0]


def test_a_refused_run_and_other_commands_return_through_the_shutdown(
    project_factory,
    ended: list[int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    typo = "- id: t\n  input: {messages: [{role: user, content: hi}]}\n  expect: [contans]\n"
    project: Project = project_factory(cases={"typo.yaml": typo})
    monkeypatch.setattr(sys, "argv", ["evalkit", "run", "--no-progress", *project.args])
    assert cli.main() == 2
    assert "unknown scorer 'contans'" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["evalkit", "scorers", "list", "--json"])
    assert cli.main() == 0
    assert ended == []


def test_start_up_imports_freeze_only_in_the_command_lines_own_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(cli, "_own_process", False)
    with cli.start_up_imports():
        assert gc.isenabled()  # a caller's process keeps its collector as it was
    assert frozen == []
    monkeypatch.setattr(cli, "_own_process", True)
    with cli.start_up_imports():
        assert not gc.isenabled()
    assert gc.isenabled() and frozen == [True]
