"""The ``evalkit`` command. Each subcommand is a thin call into the package.

Exit codes: 0 success, 1 gate blocked, 2 usage / config / corpus errors (one line, no traceback).
Output piped into a reader that stops early (``evalkit runs | head``) ends quietly with 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from evalkit.cli import (
    baseline,
    cache,
    demo,
    fixture_tools,
    gating,
    history,
    importing,
    init,
    judging,
    merging,
    notebook,
    running,
    scorers,
    sealing,
    sharing,
    traces,
)
from evalkit.cli.options import find_config
from evalkit.errors import EvalkitError
from evalkit.redact import strip_userinfo
from evalkit.version import __version__


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # the reader went away (``| head``): say nothing more, and keep the interpreter's own
        # flush of stdout at exit from raising again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(args_list: list[str]) -> int:
    if args_list[:2] == ["demo", "serve"]:
        # The simulator owns its flags; hand them over untouched.
        if "--detach" in args_list:
            from evalkit.cli.serve import serve_detached

            return serve_detached([a for a in args_list[2:] if a != "--detach"])
        from evalkit.demo.server import main as serve

        return serve(args_list[2:]) or 0
    parser = _parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    if "config" in vars(args) and args.config is None:
        args.config = find_config()
    try:
        return int(args.handler(args) or 0)
    except EvalkitError as exc:
        message = " ".join(strip_userinfo(str(exc)).split())  # one line, no URL credentials
        if len(message) > 1000:
            message = message[:997] + "..."
        print(f"evalkit: error: {message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("evalkit: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalkit", description="Paired, per-slice regression testing for LLM applications."
    )
    parser.add_argument("--version", action="version", version=f"evalkit {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for command_group in (
        init,
        notebook,
        running,
        merging,
        gating,
        baseline,
        judging,
        cache,
        importing,
        traces,
        fixture_tools,
        history,
        sharing,
        sealing,
        scorers,
        demo,
    ):
        command_group.add_parsers(sub)
    return parser


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text
            or not action.option_strings
            or default in (None, False, [], argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)
