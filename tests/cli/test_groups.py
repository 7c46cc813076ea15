"""The ``evalkit`` parser imports the module of the command it is given, and only that one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import evalkit.cli as cli

REPO = Path(__file__).resolve().parents[2]


def test_every_command_maps_to_the_group_that_registers_it() -> None:
    full = cli._parser()
    (commands,) = [a for a in full._actions if a.dest == "command"]
    assert set(commands.choices) == set(cli.COMMAND_GROUP)
    assert set(cli.COMMAND_GROUP.values()) <= set(cli.COMMAND_GROUPS)
    for command, group in cli.COMMAND_GROUP.items():
        (own,) = [a for a in cli._parser(command)._actions if a.dest == "command"]
        assert command in own.choices, f"{command} is not registered by evalkit.cli.{group}"


_GROUPS_LOADED = """
import json, sys
from evalkit.cli import COMMAND_GROUPS, _parser
args = _parser(sys.argv[1]).parse_args(sys.argv[1:])
loaded = sorted(g for g in COMMAND_GROUPS if f"evalkit.cli.{g}" in sys.modules)
print(json.dumps({"command": args.command, "loaded": loaded}))
"""


def test_a_command_loads_its_own_group_alone() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _GROUPS_LOADED, "run", "--db", "x.duckdb"],
        capture_output=True, text=True, cwd=REPO, check=True, timeout=60,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"command": "run", "loaded": ["run"]}


def test_an_unknown_or_optional_first_word_builds_the_whole_parser() -> None:
    assert cli._command_in(["--version"]) is None
    assert cli._command_in(["rn"]) is None  # argparse's own error names the choices
    assert cli._command_in([]) is None
    assert cli._command_in(["run", "--tag", "x"]) == "run"


#: The modules of evalkit/cli/ that register no command: the parser's options and the helpers
#: a command's module calls.
SUPPORT_MODULES = {"__init__", "__main__", "aliases", "options", "reask", "rebaseline",
                   "report_files", "serve", "shard"}  # fmt: skip


def test_each_module_of_the_cli_is_a_command_group_named_after_its_command() -> None:
    modules = {path.stem for path in (REPO / "evalkit" / "cli").glob("*.py")}
    groups = modules - SUPPORT_MODULES
    assert groups == set(cli.COMMAND_GROUPS), (
        "a module of evalkit/cli/ that registers commands is a COMMAND_GROUPS entry named after "
        f"its command; a helper is listed in SUPPORT_MODULES: {groups ^ set(cli.COMMAND_GROUPS)}"
    )
    for group in groups - {"push_pull"}:  # push and pull share one module
        assert group in cli.COMMAND_GROUP and cli.COMMAND_GROUP[group] == group, group
