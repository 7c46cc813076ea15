"""``evalkit.cli.main`` itself, in this process: the ``--version`` shortcut, no command, an
error's one line, a reader gone mid-output, and the command line's own process ending at
``os._exit`` once a run has written everything.

The same paths seen from outside (a fresh interpreter's imports, the real ``os._exit``, a
closed pipe) are in tests/test_cli_start.py, tests/run/test_fixed_cost_exit.py and
tests/cli/test_onboarding.py; these check the decisions ``main`` makes without starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from pathlib import Path

import duckdb
import pytest
from projects import Project

import evalkit.cli as cli
from evalkit.cli.options import pair_refs
from evalkit.cli.shard import run_exit_code
from evalkit.errors import ConfigError
from evalkit.run.summary import RunSummary
from evalkit.store import open_store
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


# --- what the commands share: run references, a run's exit code, the simulator's flags -------


def _summary(outputs: int, errored: int, expected: int) -> RunSummary:
    zero = dict.fromkeys(
        ("cases", "passed", "failed", "cache_hits", "requests", "retries", "resumed_skipped",
         "prompt_tokens", "completion_tokens"), 0,
    )  # fmt: skip
    return RunSummary(run_id="r1", label="l", config_hash="h", outputs=outputs, errored=errored,
                      expected_outputs=expected, wall_s=0.0, cost_usd=0.0, mean_latency_ms=0.0,
                      **zero)  # fmt: skip


def test_a_runs_exit_code_is_1_for_half_a_run_or_one_that_verified_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_exit_code(_summary(outputs=4, errored=3, expected=4)) == 0
    assert capsys.readouterr().err == ""
    assert run_exit_code(_summary(outputs=4, errored=4, expected=4)) == 1  # every one errored
    assert capsys.readouterr().err == ""
    assert run_exit_code(_summary(outputs=3, errored=0, expected=4)) == 1
    assert capsys.readouterr().err == "evalkit: run r1 is incomplete: 3 of 4 outputs stored\n"


def test_run_references_are_a_candidate_or_a_baseline_and_a_candidate() -> None:
    assert pair_refs(argparse.Namespace(runs=["cand"])) == (None, "cand")
    assert pair_refs(argparse.Namespace(runs=["base", "cand"])) == ("base", "cand")
    with pytest.raises(ConfigError, match="expected \\[BASELINE\\] CANDIDATE, got 3"):
        pair_refs(argparse.Namespace(runs=["a", "b", "c"]))


def test_compare_with_three_runs_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "e.duckdb"
    open_store(db, write=True).close()
    assert cli.main(["compare", "a", "b", "c", "--db", str(db)]) == 2
    assert capsys.readouterr().err == (
        "evalkit: error: expected [BASELINE] CANDIDATE, got 3 run references\n"
    )


def test_demo_serve_refuses_a_non_loopback_host_before_it_listens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(asyncio, "run", _never)
    assert cli.main(["demo", "serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        "evalkit: error: the simulator binds loopback only, not 0.0.0.0\n"
    )
    with pytest.raises(SystemExit) as usage:  # its own flags, handed over untouched
        cli.main(["demo", "serve", "--error-rate", "1.5"])
    assert usage.value.code == 2 and "is not a fraction in [0, 1]" in capsys.readouterr().err


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the simulator started serving")
