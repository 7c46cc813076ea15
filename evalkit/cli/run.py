"""``evalkit run``, ``cases lint``, ``runs``, ``rescore`` and ``flakes``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.cli import cases as case_tools
from evalkit.cli import shard
from evalkit.cli.options import db_arg, suite_args
from evalkit.errors import EvalkitError
from evalkit.redact import strip_userinfo
from evalkit.run.timeline import mark

if TYPE_CHECKING:
    from evalkit.corpus.case_facts import CorpusFacts
    from evalkit.corpus.cases import Corpus
    from evalkit.corpus.selection import Selection
    from evalkit.corpus.suite import Suite
    from evalkit.run.summary import RunSummary


def add_parsers(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run the corpus through the system under test")
    suite_args(run)
    db_arg(run)
    run.add_argument("--label", default="run", help="a name for this run (e.g. baseline)")
    run.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    run.add_argument("--exclude-tag", action="append", default=[], help="skip cases with this tag")
    run.add_argument("--sealed", action="store_true", help="include corpus/sealed/ cases")
    run.add_argument("--tier", help="a selection named in the suite's tiers: (e.g. smoke)")
    run.add_argument("--replays", type=int, help="replays per case (default: suite config)")
    run.add_argument("--concurrency", type=int, help="concurrent requests (default: suite)")
    run.add_argument("--no-cache", action="store_true", help="bypass the response cache")
    run.add_argument(
        "--store", metavar="URI", help="the team's shared store, whose response cache the run "
        "asks first and publishes to (default: store.shared of --config)",
    )  # fmt: skip
    run.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run")
    run.add_argument(
        "--retry-errors", action="store_true", help="with --resume: ask stored errors again"
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--json", metavar="FILE", help="write the run summary as JSON")
    shard.add_run_args(run)  # --shard, --run-id, --parts, --engine, --address
    run.set_defaults(handler=_cmd_run)

    cases = sub.add_parser("cases", help="corpus tools")
    cases_sub = cases.add_subparsers(dest="cases_command")
    lint = cases_sub.add_parser("lint", help="validate every case and print corpus statistics")
    suite_args(lint)
    lint.add_argument("--sealed", action="store_true", help="include corpus/sealed/")
    lint.set_defaults(handler=_cmd_lint)
    case_tools.add_cases_parsers(cases_sub)

    runs = sub.add_parser("runs", help="list stored runs")
    db_arg(runs)
    runs.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    runs.set_defaults(handler=_cmd_runs)

    rescore = sub.add_parser("rescore", help="re-apply current scorers to stored outputs")
    suite_args(rescore)
    db_arg(rescore)
    rescore.add_argument("run", help="run id or label")
    rescore.add_argument(
        "--scorer", action="append", default=[], help="recompute only this scorer (repeatable)"
    )
    rescore.set_defaults(handler=_cmd_rescore)

    flakes = sub.add_parser("flakes", help="rerun one configuration k times; store the flake list")
    suite_args(flakes)
    db_arg(flakes)
    flakes.add_argument("--runs", type=int, default=5, help="how many uncached runs (k)")
    flakes.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    flakes.add_argument("--no-progress", action="store_true")
    flakes.set_defaults(handler=_cmd_flakes)


def _cmd_run(args: argparse.Namespace) -> int:
    from evalkit.cli import start_up_imports

    with start_up_imports():  # the collector off while they load: ~0.03 s of a short run
        from evalkit.compare.policy import check_policy  # noqa: F401  (the corpus step's)
        from evalkit.project.planning import plan_run
        from evalkit.run.providers import prefetch_transport
        from evalkit.run.runner import RunOptions, RunStart, run_suite
        from evalkit.run.shared_cache import publish_new_cache, with_shared_cache
        from evalkit.store import open_store

    mark("imports")
    if args.store:  # as `--set store.shared=`, so every shard and Ray task reads it too
        from evalkit.store.shared.uri import parse_store_uri

        shared = parse_store_uri(args.store, source="--store").full
        args.overrides = [*args.overrides, f"store.shared={json.dumps(shared)}"]
    resumed = None
    if args.resume:
        if args.tier or args.tag or args.exclude_tag or args.sealed:
            raise EvalkitError(
                "--resume continues the run with the selection it started with: "
                "drop --tier/--tag/--exclude-tag/--sealed"
            )
        _require_store(args.db)
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            resumed = store.manifest(store.resolve_run(args.resume)).get("selection") or {}

    def load(suite: Suite, selection: Selection) -> Corpus | CorpusFacts:
        prefetch_transport(suite.config.system)  # imported while the corpus loads, nothing sent
        # --shard: the corpus's facts through the case index, only the shard's share built;
        # otherwise every case, scorers built for the selected ones only (selection.apply)
        return shard.load_run_corpus(args, suite, selection)

    plan = plan_run(
        args.config, overrides=args.overrides, prompt=args.prompt, tier=args.tier, tags=args.tag,
        exclude_tags=args.exclude_tag, sealed=args.sealed, resume_selection=resumed, load=load,
    )  # fmt: skip
    suite, corpus, selection, policy = plan.suite, plan.corpus, plan.selection, plan.warnings
    mark("corpus")
    started: list[RunStart] = []

    def announce(start: RunStart) -> None:  # before any model call, on a terminal or not
        mark("recorded")
        started.append(start)
        what = (
            f"resuming run {start.run_id} ({start.label}): {start.stored} of "
            f"{start.expected_outputs} outputs stored, {start.to_do} to go"
            if start.resumed
            else f"run {start.run_id} ({start.label}) started: {start.expected_outputs} outputs"
        )
        tier = f", tier {selection.tier}" if selection.tier else ""
        cache = "" if start.use_cache else ", cache off"
        print(f"evalkit: {what}{tier}{cache}", file=sys.stderr, flush=True)
        for warning in start.warnings:
            print(f"evalkit: warning: {warning}", file=sys.stderr, flush=True)

    options = RunOptions(
        label=args.label,
        replays=args.replays,
        concurrency=args.concurrency,
        use_cache=False if args.no_cache else None,
        progress=not args.no_progress,
        resume=args.resume,
        retry_errors=args.retry_errors,
        selection=selection.to_manifest(),
        on_start=announce,
        warnings=tuple(policy),  # printed by announce and kept in manifest["warnings"]
    )
    if shard.wanted(args):  # one shard into parts, or chunks on Ray
        return shard.run_distributed(args, suite, corpus, options, print_run_summary)
    try:
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            mark("store")
            cache_store = with_shared_cache(store, suite)
            summary = publish_new_cache(cache_store, run_suite(suite, corpus, cache_store, options))
    except KeyboardInterrupt:
        if started:
            run_id = started[0].run_id
            print(
                f"evalkit: run {run_id} interrupted; what finished is stored. Continue it with: "
                f"{resume_command(args, run_id)}",
                file=sys.stderr,
            )
        return 130
    mark("closed")
    print_run_summary(summary, args.db)
    mark("printed")
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_dict(), indent=2))
    if cache_store is store:  # a shared store's connection is left to the interpreter's exit
        from evalkit.cli import skip_teardown

        skip_teardown()  # the store is closed and the summary written: nothing to tear down
    return shard.run_exit_code(summary)  # 1 also when the run ended incomplete


def resume_command(args: argparse.Namespace, run_id: str) -> str:
    """The exact ``evalkit run --resume`` that continues ``run_id``: the same config, ``--set``
    and ``--prompt`` (a resume refuses a changed configuration), store and cache setting."""
    import shlex

    from evalkit.cli.options import find_config

    parts = ["evalkit", "run", "--resume", run_id, "--db", args.db]
    if args.config != find_config():
        parts += ["--config", args.config]
    for item in args.overrides:
        parts += ["--set", strip_userinfo(item)]  # a URL's password is never printed
    if args.prompt:
        parts += ["--prompt", args.prompt]
    return shlex.join(parts)


def _require_store(db: str) -> None:
    """Refuse a command that reads stored runs when ``db`` holds no store (never create one)."""
    if not Path(db).is_file():
        raise EvalkitError(f"{db}: no evalkit store here (run `evalkit run --db {db}` first)")


def print_run_summary(summary: RunSummary, db: str) -> None:
    """The run's summary on stdout: plain lines, bold/yellow/red only on a colour terminal
    (printed without Rich, whose import is about 20 ms of a short run's start-up); the lines
    are `evalkit.run.summary.summary_lines`, what a notebook's run result shows."""
    from evalkit.run.summary import summary_lines

    print("\n".join(summary_lines(summary, db, _painter(sys.stdout))), flush=True)


def _painter(stream: Any) -> Callable[[str, str], str]:
    """``paint(text, sgr)``: ``text`` in that ANSI style on a colour terminal, else as it is
    (piped, ``NO_COLOR`` set or ``TERM=dumb``: what Rich would print there)."""
    import os

    colour = stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    if not colour:
        return lambda text, _sgr: text
    return lambda text, sgr: f"\033[{sgr}m{text}\033[0m"


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


def _cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        runs = store.runs()
    if args.json:
        print(json.dumps(runs.to_dicts(), indent=2, default=str))
        return 0

    if not sys.stdout.isatty():  # piped: one full row per line, nothing clipped
        for row in runs.iter_rows(named=True):
            print(
                "\t".join(
                    str(row[k]) for k in ("run_id", "label", "created_at", "status", "config_hash")
                )
            )
        return 0
    table = Table("run_id", "label", "suite", "status", "pass rate", "age", "config")
    now = dt.datetime.now(dt.UTC)
    for row in runs.iter_rows(named=True):
        table.add_row(
            row["run_id"],
            row["label"],
            _suite(row["manifest"]),
            row["status"],
            _pass_rate(row["summary"]),
            _age(now, row["created_at"]),
            row["config_hash"][:12],
        )
    Console().print(table)
    return 0


def _suite(manifest: str | None) -> str:
    """The suite a run belongs to (runs of two suites do not pair)."""
    try:
        return str(json.loads(manifest or "{}").get("suite", ""))
    except (ValueError, AttributeError):
        return ""


def _pass_rate(summary: str | None) -> str:
    """The stored summary's pass rate of scored outputs, with the errors beside it.

    Examples:
        >>> _pass_rate('{"passed": 9, "failed": 3, "errored": 1}')
        '75.0% (+1 errored)'
        >>> _pass_rate(None)
        '–'
    """
    try:
        counts = json.loads(summary or "null") or {}
        passed, failed = int(counts["passed"]), int(counts["failed"])
    except (ValueError, KeyError, TypeError):
        return "–"
    errored = int(counts.get("errored") or 0)
    rate = f"{passed / (passed + failed):.1%}" if passed + failed else "–"
    return rate + (f" (+{errored} errored)" if errored else "")


def _age(now: dt.datetime, created: Any) -> str:
    """How long ago, in the largest unit that fits.

    Examples:
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        >>> _age(t, t - dt.timedelta(minutes=5)), _age(t, t - dt.timedelta(days=3, hours=2))
        ('5 min', '3 d')
    """
    if not isinstance(created, dt.datetime):
        return "–"
    created = created if created.tzinfo else created.replace(tzinfo=dt.UTC)
    seconds = max(0.0, (now - created).total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def _cmd_rescore(args: argparse.Namespace) -> int:
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.judging import judge_client
    from evalkit.run.rescore import rescore_run, scorer_sources
    from evalkit.scorers.registry import JUDGE
    from evalkit.store import open_store

    _require_store(args.db)
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        judged = any(s.tier == JUDGE for case in corpus.cases for s in case.scorers)
        judge = judge_client(suite, store) if judged and suite.config.judge else None
        # The sources recorded as a run of this checkout would record them (sealed cases'
        # files only if the run loaded sealed cases), so an unchanged rescore still compares.
        selection = store.manifest(store.resolve_run(args.run)).get("selection") or {}
        sources = scorer_sources(corpus, suite.config.scorers, sealed=bool(selection.get("sealed")))
        result = rescore_run(
            store, corpus, args.run, scorers=args.scorer, judge=judge, scorer_files=sources
        )
    print(
        f"rescored {result.rescored} outputs of {result.run_id} with zero model calls "
        f"→ scoring {result.scoring_id} ({result.carried} scores carried over)"
    )
    for case_id in result.skipped_input_changed:
        print(f"  skipped {case_id}: its input changed since the run (re-run it)")
    return 0


def _cmd_flakes(args: argparse.Namespace) -> int:
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
