"""``evalkit run``: the corpus through the system under test, into the store."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def _cmd_run(args: argparse.Namespace) -> int:
    from evalkit.cli import start_up_imports

    with start_up_imports():  # the collector off while they load: a short run's fixed cost
        from evalkit.compare.policy import check_policy  # noqa: F401  (the corpus step's)
        from evalkit.corpus.manifest import prefetch_host_facts
        from evalkit.project.planning import plan_run
        from evalkit.run.providers import prefetch_transport
        from evalkit.run.runner import RunOptions, RunStart, run_suite
        from evalkit.run.shared_cache import as_store, publish_new_cache, with_shared_cache
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
        require_store(args.db)
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            resumed = store.manifest(store.resolve_run(args.resume)).selection

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
    # git and the package versions the manifest records, read while the store opens (after the
    # corpus load: a thread alive during it would keep a sharded scan to one process)
    prefetch_host_facts(suite.root)
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
    from evalkit.corpus.cases import Corpus

    assert isinstance(corpus, Corpus)  # without --shard or Ray, load_run_corpus loads cases
    try:
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            mark("store")
            cache_store = with_shared_cache(store, suite)
            summary = publish_new_cache(
                cache_store, run_suite(suite, corpus, as_store(cache_store), options)
            )
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
        from evalkit.cli.report_files import write_report

        write_report(args.json, json.dumps(summary.to_dict(), indent=2), "summary")
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


def require_store(db: str) -> None:
    """Refuse a command that reads stored runs when ``db`` holds no store (never create one)."""
    if not Path(db).is_file():
        raise EvalkitError(f"{db}: no evalkit store here (run `evalkit run --db {db}` first)")


def print_run_summary(summary: RunSummary, db: str, *, asked_here: bool = True) -> None:
    """The run's summary on stdout: plain lines, bold/yellow/red only on a colour terminal
    (printed without Rich, whose import is about 20 ms of a short run's start-up); the lines
    are `evalkit.run.summary.summary_lines`, what a notebook's run result shows."""
    from evalkit.run.summary import summary_lines

    lines = summary_lines(summary, db, _painter(sys.stdout), asked_here=asked_here)
    print("\n".join(lines), flush=True)


def _painter(stream: Any) -> Callable[[str, str], str]:
    """``paint(text, sgr)``: ``text`` in that ANSI style on a colour terminal, else as it is
    (piped, ``NO_COLOR`` set or ``TERM=dumb``: what Rich would print there)."""
    import os

    colour = stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    if not colour:
        return lambda text, _sgr: text
    return lambda text, sgr: f"\033[{sgr}m{text}\033[0m"
