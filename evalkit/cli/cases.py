"""``evalkit cases …``: the corpus and its lifecycle. ``lint`` validates every case, ``import``
brings cases in as drafts from other tools' files, ``review`` marks drafts reviewed, ``retire``,
``convert`` and ``coverage`` keep the corpus honest, ``seal`` rotates the held-out sealed slice
by seed, and ``index`` builds the case index a CI matrix caches."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from evalkit.cli.options import db_arg, find_config, suite_args
from evalkit.errors import ConfigError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    cases = sub.add_parser("cases", help="the corpus: lint, import, review, retire, seal, index")
    cases_sub = cases.add_subparsers(dest="cases_command")
    lint = cases_sub.add_parser("lint", help="validate every case and print corpus statistics")
    suite_args(lint)
    lint.add_argument("--sealed", action="store_true", help="include corpus/sealed/")
    lint.set_defaults(handler=_cmd_lint)
    cases.set_defaults(handler=lambda _args: cases.print_help() or 2)

    group = cases_sub.add_parser(
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

    seal = cases_sub.add_parser(
        "seal",
        help="rotate the held-out sealed slice: seal a reproducible share of the cases (moving "
        "case YAML to sealed/ and back)",
    )
    seal.add_argument("--config", default=None, help="suite config (default: found as for run)")
    seal.add_argument("--share", required=True, help="share of the cases to seal: 10%% or 0.1")
    seal.add_argument("--seed", type=int, required=True, help="which sample: same seed, same cases")
    seal.add_argument("--dry-run", action="store_true", help="print the moves, move nothing")
    seal.set_defaults(handler=_cmd_seal)

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
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.coverage import find_coverage
    from evalkit.corpus.suite import load_suite
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

    from evalkit.corpus.index_refresh import refresh_index
    from evalkit.corpus.suite import load_suite

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: one process at least")
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    started = time.perf_counter()
    done = refresh_index(
        suite.root, user_template=suite.config.system.user_template, workers=args.workers
    )
    counts = done.counts
    print(
        f"case index: {done.files} files, {done.cases} cases: "
        f"{counts.entries_used} entries reused, {counts.entries_written} written, "
        f"{done.removed} removed, in {time.perf_counter() - started:.2f} s → {done.directory}",
        flush=True,
    )
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:

    from rich.console import Console
    from rich.table import Table

    from evalkit.corpus.cases import MAX_LINT_ERRORS, MIN_CRITICAL_CASES, CorpusErrors, load_corpus
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    try:
        corpus = load_corpus(
            suite.root,
            sealed=True,
            user_template=suite.config.system.user_template,
            max_errors=MAX_LINT_ERRORS,
        )
    except CorpusErrors as many:  # every problem in one pass, one line each
        for error in many.errors:
            print(f"evalkit: error: {error}", file=sys.stderr)
        shown = f"the first {len(many.errors)}" if many.truncated else str(len(many.errors))
        print(f"evalkit: {shown} problems in the corpus; fix them and lint again", file=sys.stderr)
        return 2
    for warning in corpus.warnings:
        print(f"evalkit: warning: {warning}", file=sys.stderr)
    from evalkit.corpus.drafts import draft_errors, provenance_errors

    refused = [
        *draft_errors(corpus.cases, suite.config.kind),
        *provenance_errors(
            corpus.cases, suite.config.policy.require_provenance, suite.config.critical_tags
        ),
    ]
    for error in refused:  # drafts and unreviewed blocking cases: never gated
        print(f"evalkit: error: {error}", file=sys.stderr)
    if refused:
        print(f"evalkit: {len(refused)} cases cannot gate yet; review them", file=sys.stderr)
        return 2
    from evalkit.project.planning import policy_warnings, tag_counts
    from evalkit.run.judging import require_judge

    require_judge(suite, corpus)  # a judge scorer with no judge: section fails every run
    policy_warnings(suite, tag_counts(corpus.cases))  # the gate's checks, before any run
    stats = corpus.stats(suite.config.critical_tags)
    console = Console(highlight=False)
    console.print(
        f"[bold]{suite.config.suite}[/]: {stats.n_cases} cases ({stats.sealed} sealed), "
        f"corpus hash {corpus.hash[:12]}"
    )
    table = Table("tag", "cases", "critical")
    for tag, count in sorted(stats.per_tag.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(tag, str(count), "yes" if tag in suite.config.critical_tags else "")
    console.print(table)
    console.print("criticality: " + ", ".join(f"{k} {v}" for k, v in stats.per_criticality.items()))
    for tag, count in stats.thin_critical_tags.items():
        console.print(
            f"[yellow]warning[/]: critical tag {tag!r} has {count} cases (< {MIN_CRITICAL_CASES}): "
            "it cannot gate; add cases or drop it from critical_tags"
        )
    return 2 if stats.thin_critical_tags else 0


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


def _cmd_seal(args: argparse.Namespace) -> int:
    from evalkit.compare.policy import check_policy
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.sealed import apply_rotation, parse_share, plan_rotation
    from evalkit.corpus.suite import load_suite

    share = parse_share(args.share)
    suite = load_suite(args.config or find_config())
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    rotation = plan_rotation(suite.root, corpus.cases, share, args.seed)
    # The live corpus after the move must still carry the gate's critical tags (≥ min cases).
    sealed = set(rotation.sealed)
    counts = Counter(t for c in corpus.cases if c.id not in sealed for t in c.tags)
    try:
        check_policy(suite.config, counts, source=str(suite.path))
    except ConfigError as exc:
        raise ConfigError(
            f"--share {args.share} --seed {args.seed} would leave the live corpus failing the "
            f"gate policy ({exc}): seal a smaller share or add cases"
        ) from None
    print(rotation.summary())
    for move in rotation.moves:
        print(f"  {move.case_id}: {move.source} → {move.target}")
    if args.dry_run:
        print("dry run: nothing moved")
        return 0
    apply_rotation(suite.root, rotation)
    if rotation.moves:
        print(
            "the moved cases keep their text and hashes; runs made before the rotation pair them "
            "as before, and `evalkit run --sealed` runs the new sealed slice"
        )
    return 0
