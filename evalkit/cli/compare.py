"""``evalkit compare``: the paired comparison report of two runs (terminal, JSON, JUnit, HTML,
Markdown), under the gate's decision against the pin; ``--transfer`` says whether the live
gains transfer to the sealed cases."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalkit.cli.options import DEFAULT_CONFIG, pair_args, pair_refs
from evalkit.cli.reask import add_reask_args, maybe_reask
from evalkit.cli.rebaseline import add_rebaseline_args, maybe_rebaseline
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision
    from evalkit.store import Store


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    compare = sub.add_parser("compare", help="paired comparison report of two runs")
    pair_args(compare)
    compare.add_argument("--json", metavar="FILE", help="write the report as JSON")
    compare.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    compare.add_argument("--html", metavar="FILE", help="write the report as HTML")
    compare.add_argument("--markdown", metavar="FILE", help="write the pull-request Markdown")
    add_rebaseline_args(compare)
    add_reask_args(compare)
    compare.add_argument(
        "--transfer", action="store_true",
        help="say whether the live gains transfer to the sealed cases (both runs ran --sealed)",
    )  # fmt: skip
    compare.set_defaults(handler=_cmd_compare)


def gate_config(args: argparse.Namespace) -> str | None:
    """The suite config holding the gate policy; without one, the default policy applies."""
    if args.config == DEFAULT_CONFIG and not Path(args.config).is_file():
        return None
    return args.config


def decide_pair(store: Store, args: argparse.Namespace) -> tuple[Comparison, GateDecision]:
    """The checked pair's comparison and gate decision against the pin (refusals raise
    one-line errors): `evalkit.compare.pin.gate_pair`, as the gate notebook calls it."""
    from evalkit.compare.pin import gate_pair

    return gate_pair(
        store, *pair_refs(args), gate_config(args), args.allow_diff, tier=args.tier,
        allow_incomplete=args.allow_incomplete, db=args.db,
    )  # fmt: skip


def _cmd_compare(args: argparse.Namespace) -> int:
    from evalkit.cli.report_files import write_report
    from evalkit.compare.pairing import resolve_pair
    from evalkit.report.build import build_report, render_terminal
    from evalkit.report.html import to_html
    from evalkit.report.json_file import write_json
    from evalkit.report.junit import to_junit
    from evalkit.report.markdown import to_markdown
    from evalkit.store import open_store

    if args.rebaseline:
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            pair = resolve_pair(store, *pair_refs(args))
        maybe_rebaseline(args, *pair)
    if args.reask_flakes:
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            pair = resolve_pair(store, *pair_refs(args))
        maybe_reask(args, *pair)
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        comparison, decision = decide_pair(store, args)
        report = dataclasses.replace(build_report(comparison, decision), command="compare")
    log_decision(
        args, "compare", comparison.base.run_id, comparison.cand.run_id, decision.to_dict()
    )
    render_terminal(report)
    if args.transfer:
        print_transfer(comparison, decision)
    link = Path(args.html).name if args.html else None
    if args.json:  # written as it is encoded: a million case ids never held as one text
        write_report(args.json, lambda out: write_json(report, out))
        print(f"wrote {args.json}")
    renderers = ((args.junit, to_junit), (args.html, to_html),
                 (args.markdown, lambda r: to_markdown(r, link)))  # fmt: skip
    for path, render in renderers:
        if path:
            write_report(path, render(report))
            print(f"wrote {path}")
    return 0


def log_decision(
    args: argparse.Namespace, command: str, base: str, cand: str, decision: dict
) -> None:
    """Append the decision to the store's gate log (`evalkit.compare.decision_log`); when the
    store cannot be written the decision stands and a note on stderr says so."""
    from evalkit.compare.decision_log import log_decision as append

    note = append(args.db, command, base, cand, decision, wait_s=args.wait)
    if note:
        print(f"evalkit: note: {note}", file=sys.stderr)


def print_transfer(comparison: Comparison, decision: GateDecision) -> None:
    """Print `evalkit.compare.transfer.transfer` of the pair under the decision's policy.

    Raises:
        ConfigError: the runs hold too few sealed cases decided in both (run with --sealed).
    """
    from evalkit.compare.transfer import transfer

    policy = decision.policy
    result = transfer(
        comparison.paired, policy.bootstrap_iters, policy.level, policy.bootstrap_seed
    )
    if result.verdict == "untested":
        raise ConfigError(result.message())
    print(result.message())
