"""``evalkit import jsonl|csv|promptfoo|inspect``: bring cases in from where they already live."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.errors import ConfigError


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add this group's subcommands to ``evalkit``."""
    group = sub.add_parser(
        "import",
        help="import cases (as drafts) from JSONL/CSV, OpenAI chat logs, promptfoo or Inspect",
        description="Write the cases of another tool's file as canonical case YAML, each "
        "`review: draft` with its provenance, ids stable across imports. Prints what it mapped "
        "and what it could not. Review them with `evalkit cases review ID --who NAME`.",
    )
    formats = group.add_subparsers(dest="format", metavar="FORMAT")
    group.set_defaults(handler=lambda _args: group.print_help() or 2)
    for name, what in (
        ("jsonl", "a JSONL file: OpenAI chat `messages` rows, or any rows with --map"),
        ("csv", "a CSV file with a header row, through --map"),
        ("promptfoo", "a promptfooconfig.yaml and the tests it names"),
        ("inspect", "an Inspect AI eval log (.eval or .json)"),
    ):
        parser = formats.add_parser(name, help=what, description=what)
        parser.add_argument("file", metavar="CONFIG" if name == "promptfoo" else "FILE")
        if name in ("jsonl", "csv"):
            parser.add_argument(
                "--map",
                dest="mapping",
                action="append",
                default=[],
                metavar="TARGET=FIELD",
                help="input=FIELD, vars.NAME=FIELD, expect.SCORER=FIELD, tags=FIELD, id=FIELD, "
                "notes=FIELD, messages=FIELD (repeatable)",
            )
        if name == "promptfoo":
            parser.add_argument(
                "--allow-outside",
                action="store_true",
                help="follow file:// references out of the config's folder (a trusted config "
                "only: what they name is copied into the cases)",
            )
        parser.add_argument(
            "--out", help="folder for the case file (default: the suite's cases/ folder)"
        )
        parser.add_argument("--force", action="store_true", help="overwrite files that exist")
        parser.add_argument(
            "--config", default=None, help="suite config whose cases/ folder is the default --out"
        )
        parser.set_defaults(handler=_cmd_import)


def _cmd_import(args: argparse.Namespace) -> int:
    from evalkit.corpus.importers.draft_cases import write_import

    result = _read(args)
    if args.out:
        cases_dir = Path(args.out)
    elif Path(args.config).is_file():
        cases_dir = Path(args.config).parent / "cases"
    else:
        raise ConfigError(f"no suite config at {args.config}: pass --out DIR (or --config FILE)")
    written = write_import(result, cases_dir, cases_dir.parent, force=args.force)
    print(f"imported {len(written.ids)} draft cases from {result.source} -> {written.path}")
    if len(written.case_files) > 1:
        print(f"  in {len(written.case_files)} files: {written.path.name} to "
              f"{written.case_files[-1].name} (each a size a reviewer can read)")  # fmt: skip
    for stale in written.removed:
        print(f"  removed {stale}: a file of an earlier import of this name")
    if written.duplicates:
        print(f"  {written.duplicates} duplicates of another case, written once")
    for label, counts in (("mapped", result.mapped), ("not mapped", result.unmapped)):
        print(f"{label}:" + ("" if counts else " nothing"))
        for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            reason = result.why.get(kind, "") if label == "not mapped" else ""
            print(f"  {kind} ({n})" + (f": {reason}" if reason else ""))
    for path in written.files:
        print(f"wrote {path}")
    for note in result.notes:
        print(f"note: {note}")
    if written.ids:
        print(f"next: read them, then: evalkit cases review {written.ids[0]} ... --who NAME")
    return 0


def _read(args: argparse.Namespace):
    from evalkit.errors import CorpusError

    try:
        return _read_format(args)
    except RecursionError:  # the readers bound nesting; this is the last line of defence
        raise CorpusError("nested too deeply to read", path=args.file) from None


def _read_format(args: argparse.Namespace):
    if args.format == "promptfoo":
        from evalkit.corpus.importers.promptfoo import import_promptfoo

        return import_promptfoo(args.file, allow_outside=args.allow_outside)
    if args.format == "inspect":
        from evalkit.corpus.importers.inspect_log import import_inspect

        return import_inspect(args.file)
    from evalkit.corpus.importers.columns import import_rows, parse_mapping

    return import_rows(args.file, parse_mapping(args.mapping), args.format)
