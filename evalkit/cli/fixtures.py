"""``evalkit fixtures record|check|refresh``: tool fixtures from a live run, checked for rot."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from evalkit.cli.options import db_arg, find_config, set_arg

if TYPE_CHECKING:
    from evalkit.corpus.cases import Corpus
    from evalkit.corpus.suite import Suite

#: How much of a frozen or live answer ``check`` shows.
_SHOWN = 120


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    fixtures = sub.add_parser(
        "fixtures", help="record tool fixtures from a live run, check them against the live tools"
    )
    fixtures_sub = fixtures.add_subparsers(dest="fixtures_command", required=True)

    record = fixtures_sub.add_parser(
        "record", help="freeze the live tool calls of a kind: live run into the cases' fixtures"
    )
    db_arg(record)
    record.add_argument("run", help="the live run: run id, or a label naming one run")
    _config_args(record)
    record.add_argument("--who", help="record this reviewer in the cases' provenance")
    record.set_defaults(handler=_cmd_record)

    check = fixtures_sub.add_parser(
        "check", help="ask the live tools again for every frozen call; exit 1 when any is stale"
    )
    check.add_argument("ids", nargs="*", metavar="ID", help="only these cases (default: all)")
    _config_args(check)
    check.set_defaults(handler=_cmd_check)

    refresh = fixtures_sub.add_parser(
        "refresh", help="rewrite the stale fixtures of cases with the live answers (reviewed)"
    )
    refresh.add_argument("ids", nargs="+", metavar="ID", help="the cases to refresh")
    _config_args(refresh)
    refresh.add_argument("--who", required=True, help="who reviewed the new answers")
    refresh.add_argument("--reason", help="why the new answers are right (into the provenance)")
    refresh.set_defaults(handler=_cmd_refresh)


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="suite config naming the live tools under tools: (default: ./evalkit.yaml, else "
        "corpus/evalkit.yaml)",
    )
    set_arg(parser)


def _suite_and_corpus(args: argparse.Namespace) -> tuple[Suite, Corpus]:
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config or find_config(), overrides=args.overrides)
    # sealed cases too: their fixtures are recorded and rot like any other
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    return suite, corpus


def _cmd_record(args: argparse.Namespace) -> int:
    from evalkit.run.fixture_recording import record_fixtures
    from evalkit.store import open_store

    suite, corpus = _suite_and_corpus(args)
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        result = record_fixtures(store, suite, corpus, args.run, who=args.who)
    for line in result.skipped:
        print(f"  skipped: {line}")
    if not result.cases:
        why = "the fixtures already hold its answers" if result.calls else "no live tool call"
        print(f"nothing recorded from {result.run_id}: {why}")
        return 0
    print(
        f"recorded {result.calls} live tool call(s) of run {result.run_id} into "
        f"{len(result.cases)} case(s) in {', '.join(result.files)}"
    )
    print(
        "  the cases changed (new hashes): review the diff, then rebaseline them "
        "(`evalkit gate --rebaseline`) or promote a new baseline run"
    )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from evalkit.run.fixture_recording import check_fixtures

    suite, corpus = _suite_and_corpus(args)
    states = check_fixtures(suite, corpus, args.ids)
    counts = {k: sum(s.state == k for s in states) for k in ("stale", "error", "unchecked")}
    cases = len({s.case_id for s in states})
    tools = ", ".join(sorted(suite.config.tools))
    print(
        f"fixtures check: {len(states)} frozen answer(s) of live tools ({tools}) in {cases} "
        f"case(s): {counts['stale']} stale, {counts['error']} failed, {counts['unchecked']} "
        "unchecked"
    )
    for s in states:
        if s.state == "fresh":
            continue
        call = f"{s.tool}({_args(s.arguments)})" if s.arguments is not None else s.tool
        print(f"  {s.state.upper():9} {s.source} case {s.case_id}: {call}")
        if s.state == "stale":
            print(f"            frozen {_shown(s.frozen)}")
            print(f"            live   {_shown(s.live)}")
        else:
            print(f"            {s.detail}")
    stale = sorted({s.case_id for s in states if s.state == "stale"})
    if stale:
        print(f"refresh after review: evalkit fixtures refresh {' '.join(stale)} --who NAME")
    return 1 if counts["stale"] or counts["error"] else 0


def _cmd_refresh(args: argparse.Namespace) -> int:
    from evalkit.run.fixture_recording import refresh_fixtures

    suite, corpus = _suite_and_corpus(args)
    result = refresh_fixtures(suite, corpus, args.ids, args.who, args.reason)
    for case_id in result.fresh:
        print(f"  {case_id}: fresh, unchanged")
    if not result.changed:
        print("nothing refreshed: every frozen answer matches the live tools")
        return 0
    print(f"refreshed {result.entries} answer(s) in {len(result.changed)} case(s), by {args.who}")
    for case_id, (old, new) in result.changed.items():
        print(f"  {case_id}: case hash {old[:12]} → {new[:12]}")
    print(
        "  edited cases never pair with the baseline: rebaseline them (`evalkit gate "
        "--rebaseline`) or promote a new baseline run"
    )
    return 0


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)  # escapes control characters: inert on a terminal
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
