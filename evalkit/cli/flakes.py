"""``evalkit flakes measure``: rerun one configuration k times, uncached, and store which cases
changed verdict with nothing changed (the flake list, the gate's noise floor)."""

from __future__ import annotations

import argparse

from evalkit.cli.options import db_arg, suite_args


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    flakes = sub.add_parser("flakes", help="the measured flake list: the gate's noise floor")
    flakes_sub = flakes.add_subparsers(dest="flakes_command")
    flakes.set_defaults(handler=lambda _args: flakes.print_help() or 2)
    measure = flakes_sub.add_parser(
        "measure", help="rerun one configuration k times; store the flake list"
    )
    suite_args(measure)
    db_arg(measure)
    measure.add_argument("--runs", type=int, default=5, help="how many uncached runs (k)")
    measure.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    measure.add_argument("--no-progress", action="store_true", help="no progress bar")
    measure.set_defaults(handler=_cmd_measure)


def _cmd_measure(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.compare.flakes import measure_flakes
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    corpus = corpus.select(tags=args.tag)
    from evalkit.corpus.drafts import refuse_drafts

    refuse_drafts(corpus.cases, suite.config.kind)  # the flake list gates: no drafts in it
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        result = measure_flakes(suite, corpus, store, runs=args.runs, progress=not args.no_progress)
    console = Console(highlight=False)
    console.print(
        f"{args.runs} uncached runs of config {result.config_hash[:12]}: "
        f"{result.flaky.height} of {result.per_case.height} cases changed verdict with nothing "
        "changed"
    )
    table = Table("tag", "cases", "flaky", "flake rate")
    for row in result.per_slice.iter_rows(named=True):
        table.add_row(row["tag"], str(row["cases"]), str(row["flaky"]), f"{row['flake_rate']:.1%}")
    console.print(table)
    for row in result.flaky.iter_rows(named=True):
        console.print(f"  noisy: {row['case_id']} ({row['flips']}/{row['runs']} runs disagree)")
    return 0
