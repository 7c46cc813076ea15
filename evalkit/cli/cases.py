"""``evalkit cases …`` beyond lint: the corpus lifecycle (review drafts, retire, convert,
coverage) and the case index a CI matrix caches (``index``). ``running`` creates the
``cases`` group and hands its subparsers here."""

from __future__ import annotations

import argparse

from evalkit.cli.options import db_arg, suite_args


def add_cases_parsers(cases_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the lifecycle subcommands to ``evalkit cases``."""
    review = cases_sub.add_parser(
        "review", help="mark cases reviewed (review: reviewed, provenance reviewer and date)"
    )
    suite_args(review)
    review.add_argument("ids", nargs="+", metavar="ID", help="case ids")
    review.add_argument("--who", required=True, help="who read the cases and vouches for them")
    review.set_defaults(handler=_cmd_review)

    convert = cases_sub.add_parser(
        "convert",
        help='rewrite cases in the seed article\'s spelling (input: "...", expected:, '
        "scorer: exact_match) in the canonical form, in place",
    )
    convert.add_argument("file", help="a case file")
    convert.add_argument("--out", help="write the converted file here instead of in place")
    convert.set_defaults(handler=_cmd_convert)

    retire = cases_sub.add_parser(
        "retire", help="move cases out of the gated corpus to retired/ (their results stay)"
    )
    suite_args(retire)
    retire.add_argument("ids", nargs="+", metavar="ID", help="case ids")
    retire.add_argument("--reason", required=True, help="why the cases retire")
    retire.add_argument("--who", help="who retires them")
    retire.set_defaults(handler=_cmd_retire)

    coverage = cases_sub.add_parser(
        "coverage",
        help="saturated cases other cases cover (same tags and scorers, passing in the last "
        "K runs): retirement candidates",
    )
    suite_args(coverage)
    db_arg(coverage)
    coverage.add_argument("--runs", type=int, default=5, help="K: the suite's newest runs")
    coverage.set_defaults(handler=_cmd_coverage)

    index = cases_sub.add_parser(
        "index",
        help="build or refresh the case index of the whole corpus (sealed cases too), which "
        "`run --shard K/N` reads: warm it once and cache corpus/.evalkit/case-index for the "
        "shards of a CI matrix",
    )
    suite_args(index)
    index.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that load the files without an entry (default: one per core, "
        "for a large corpus; 1: this process alone)",
    )
    index.set_defaults(handler=_cmd_index)


def _cmd_review(args: argparse.Namespace) -> int:
    from evalkit.corpus.review import review_cases
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    result = review_cases(suite.root, args.ids, args.who)
    for case_id in result.reviewed:
        print(f"reviewed {case_id} (by {' '.join(args.who.split())})")
    for case_id in result.unchanged:
        print(f"{case_id}: already reviewed, left as it is")
    if result.files:
        print(f"edited {', '.join(result.files)}: review the diff and commit it")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from evalkit.corpus.convert import convert_file

    result = convert_file(args.file, args.out)
    for line in result.notes:
        print(line)
    where = args.out or args.file
    print(
        f"converted {len(result.converted)} cases, {len(result.kept)} already canonical → "
        f"{where}; check it with: evalkit cases lint"
    )
    return 0


def _cmd_retire(args: argparse.Namespace) -> int:
    from evalkit.corpus.retire import retire_cases
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    for item in retire_cases(suite.root, args.ids, args.reason, args.who):
        print(f"retired {item.case_id}: {item.source} → {item.target} (its results stay stored)")
    return 0


def _cmd_coverage(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.coverage import find_coverage
    from evalkit.corpus.suite import load_suite
    from evalkit.errors import ConfigError
    from evalkit.store import open_store

    if args.runs < 1:
        raise ConfigError(f"--runs {args.runs}: look at one run at least")
    if not Path(args.db).is_file():
        raise ConfigError(f"{args.db}: no evalkit store here (run `evalkit run` first)")
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root)
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        found = find_coverage(store, suite.config.suite, corpus.cases, args.runs)
    print(
        f"{found.saturated} of {len(corpus.cases)} cases passed in each of the last "
        f"{len(found.runs)} runs; {len(found.candidates)} are covered by others:"
    )
    for item in found.candidates:
        print(
            f"  {item.case_id} [{', '.join(item.tags) or 'untagged'}] covered by "
            f"{', '.join(item.covered_by)}"
        )
    if found.candidates:
        ids = " ".join(c.case_id for c in found.candidates)
        print(f"retire them after review: evalkit cases retire {ids} --reason 'saturated'")
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    """Every case file's entry made (or kept, when it is of the file's bytes), entries of
    files no longer in the corpus removed. A bad case is an input error as in ``cases lint``
    (exit 2, its one-line error); entries are written whole or not at all (a temporary file,
    then a rename)."""
    import time

    from evalkit.corpus.case_facts import refresh_index
    from evalkit.corpus.suite import load_suite
    from evalkit.errors import ConfigError

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: one process at least")
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    started = time.perf_counter()
    done = refresh_index(
        suite.root, user_template=suite.config.system.user_template, workers=args.workers
    )
    counts = done.facts.counts
    print(
        f"case index: {done.files} files, {len(done.facts.cases)} cases: "
        f"{counts.entries_used} entries reused, {counts.entries_written} written, "
        f"{done.removed} removed, in {time.perf_counter() - started:.2f} s → {done.directory}",
        flush=True,
    )
    return 0
