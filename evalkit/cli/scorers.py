"""``evalkit scorers list``: every registered scorer with its arguments, defaults and a
description."""

from __future__ import annotations

import argparse
import inspect
import json
import re
from typing import Any

_TIERS = {0: "deterministic", 1: "executable", 2: "similarity", 3: "judge"}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    scorers = sub.add_parser("scorers", help="the scorers a case's expect: can name")
    scorers_sub = scorers.add_subparsers(dest="scorers_command")
    scorers.set_defaults(handler=lambda _args: scorers.print_help() or 2)
    listing = scorers_sub.add_parser("list", help="list every scorer, its arguments and defaults")
    listing.add_argument("--json", action="store_true", help="print a JSON list instead")
    listing.add_argument(
        "--config",
        default=None,
        help="suite config whose scorers: modules are listed too "
        "(default: ./evalkit.yaml, else corpus/evalkit.yaml, when present)",
    )
    listing.set_defaults(handler=_cmd_scorers)


def describe_scorers() -> list[dict[str, Any]]:
    """One dict per registered scorer: name, tier, module, description (first docstring
    sentence), the short-form argument, and each argument with its default and whether it is a
    file relative to the corpus root."""
    import evalkit.scorers  # noqa: F401  (registers the built-in scorers)
    from evalkit.scorers.registry import SCORERS

    out = []
    for name, definition in sorted(SCORERS.items()):
        args = []
        for param in inspect.signature(definition.factory).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                args.append({"name": f"**{param.name}", "required": False})
                continue
            arg: dict[str, Any] = {"name": param.name, "required": param.default is param.empty}
            if param.default is not param.empty:
                arg["default"] = param.default
            if param.name in definition.files:
                arg["file"] = True
            args.append(arg)
        out.append(
            {
                "name": name,
                "tier": _TIERS.get(definition.tier, str(definition.tier)),
                "module": definition.factory.__module__,
                "description": _first_sentence(definition.factory.__doc__),
                "short_form": definition.primary,
                "args": args,
            }
        )
    return out


# A sentence ends at ". " unless the period closes an abbreviation (e.g., i.e., etc., vs.).
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)\.\s")


def _first_sentence(doc: str | None) -> str:
    """The docstring's first sentence, on one line.

    Examples:
        >>> _first_sentence("Check a field (dotted path, e.g. a.b) equals a value. More here.")
        'Check a field (dotted path, e.g. a.b) equals a value.'
    """
    text = " ".join((doc or "").split())
    end = _SENTENCE_END.search(text)
    return text if end is None else text[: end.start() + 1]


def _signature(entry: dict[str, Any]) -> str:
    parts = []
    for arg in entry["args"]:
        if arg["required"] or arg["name"].startswith("**"):
            parts.append(arg["name"])
        else:
            parts.append(f"{arg['name']}={json.dumps(arg['default'], default=str)}")
    return ", ".join(parts)


def _cmd_scorers(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.config and Path(args.config).is_file():
        from evalkit.corpus.suite import load_suite

        load_suite(args.config)  # imports its scorers: modules, which register their scorers
    entries = describe_scorers()
    if args.json:
        print(json.dumps(entries, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("scorer", "tier", "arguments (default)", "what it checks", show_lines=False)
    for e in entries:
        short = f"\n[dim]- {e['name']}: <{e['short_form']}>[/]" if e["short_form"] else ""
        own = "" if e["module"].startswith("evalkit.") else f"\n[dim]from {e['module']}[/]"
        name = e["name"] + short + own
        table.add_row(name, e["tier"], _signature(e), e["description"])
    Console(highlight=False).print(table)
    return 0
