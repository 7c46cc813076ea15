"""The ``evalkit`` command. Each subcommand is a thin call into the package.

Exit codes: 0 success, 1 gate blocked, 2 usage / config / corpus errors (one line, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evalkit.cli import baseline, demo, gating, judging, running
from evalkit.errors import EvalkitError


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:2] == ["demo", "serve"]:
        # The simulator owns its flags; hand them over untouched.
        from evalkit.demo.server import main as serve

        return serve(args_list[2:]) or 0
    parser = _parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except EvalkitError as exc:
        message = " ".join(str(exc).split())  # always one line, whatever the input held
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
    sub = parser.add_subparsers(dest="command")
    for command_group in (running, gating, baseline, judging, demo):
        command_group.add_parsers(sub)
    return parser
