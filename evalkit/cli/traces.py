"""``evalkit traces sample``: production traces become draft cases."""

from __future__ import annotations

import argparse

from evalkit.cli.options import suite_args


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    traces = sub.add_parser("traces", help="production traces as draft cases")
    traces_sub = traces.add_subparsers(dest="traces_command")
    sample = traces_sub.add_parser(
        "sample",
        help="write draft cases from OpenTelemetry GenAI spans (OTLP JSON) or OpenAI-format "
        "request/response logs, where the corpus lacks cases",
    )
    suite_args(sample)
    sample.add_argument("files", nargs="+", metavar="FILE", help="OTLP JSON or OpenAI JSONL")
    sample.add_argument("--n", type=int, default=50, help="how many drafts at most")
    sample.add_argument(
        "--by",
        metavar="ATTR",
        help="slice by this trace attribute (e.g. app.intent; its value becomes the draft's "
        "tag); default: the neediest tag of the closest corpus case",
    )
    sample.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a regular expression to scrub besides keys, e-mails, phone and card numbers",
    )
    sample.add_argument("--out", metavar="DIR", help="where to write (default: the suite's cases/)")
    sample.add_argument("--seed", type=int, default=0, help="seeds which traces a slice keeps")
    sample.add_argument(
        "--drop", type=float, default=0.05, help="the net drop each slice should detect"
    )
    sample.add_argument(
        "--psi", type=float, default=0.10, help="expected fraction of cases that flip"
    )
    sample.set_defaults(handler=_cmd_sample)


def _cmd_sample(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.corpus.traces import read_traces
    from evalkit.corpus.traces.drafting import compile_patterns, draft_case, write_drafts
    from evalkit.corpus.traces.sampler import sample
    from evalkit.errors import ConfigError

    if args.n < 1:
        raise ConfigError(f"--n {args.n}: ask for at least one draft")
    try:
        patterns = compile_patterns(args.redact)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, sealed=True)
    try:
        read = read_traces(args.files)
    except RecursionError:  # the readers bound nesting; this is the last line of defence
        raise ConfigError(f"{', '.join(args.files)}: nested too deeply to read") from None
    try:
        picked = sample(
            read.traces, corpus.cases, args.n, by=args.by,
            user_template=suite.config.system.user_template, drop=args.drop, psi=args.psi,
            alpha=float(suite.config.gate.get("alpha", 0.05)), seed=args.seed,
            patterns=patterns,
        )  # fmt: skip
    except ValueError as exc:  # drop/psi outside what the sizing formula takes
        raise ConfigError(f"--drop {args.drop} --psi {args.psi}: {exc}") from None
    console = Console(highlight=False, soft_wrap=True)
    skipped = sum(read.skipped.values())
    console.print(
        f"read {len(read.traces)} traces from {len(args.files)} files"
        + (f" ({skipped} without a GenAI conversation skipped)" if skipped else "")
        + f"; {picked.duplicates_of_corpus} already in the corpus, "
        f"{picked.duplicates_of_traces} repeated, dropped"
    )
    table = Table("slice", "cases", f"needed (drop {args.drop:g})", "new traces", "drafts")
    for row in picked.slices:
        table.add_row(row.slice, str(row.in_corpus), str(row.needed), str(row.traces),
                      str(row.drafts))  # fmt: skip
    console.print(table)
    if not picked.chosen:
        console.print("no new traces to draft: nothing written")
        return 0
    cases = [draft_case(trace, tags, patterns) for trace, tags in picked.chosen]
    paths = write_drafts(cases, args.out or suite.root / "cases")
    where = str(paths[0]) if len(paths) == 1 else f"{len(paths)} files, {paths[0]} to {paths[-1]}"
    console.print(
        f"wrote {len(cases)} draft cases to {where} (seed {picked.seed}); they never gate until "
        "reviewed: read each, fix its expect, then `evalkit cases review ID --who NAME`"
    )
    return 0
