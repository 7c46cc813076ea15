"""``evalkit runs list|show|rescore|merge``: the runs in the store, one run in full, its outputs
scored again with zero model calls, and a sharded run's Parquet parts merged into the store.

``merge`` is the single writer of a sharded run. Once the run is complete, its response-cache
entries the team's shared store lacks are published to it: a shard matrix's shards publish
their own entries when they end, so the merge job usually adds nothing (one read of the run's
keys). What it can hold unpublished: the entries of a shard that could not reach the shared
store, or whose publish failed (warned in that shard's log); those are in its parts, merged
here, and published once by the merge that completes the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.cli.options import DEFAULT_CONFIG, db_arg, suite_args
from evalkit.cli.run import print_run_summary, require_store
from evalkit.cli.shard import DEFAULT_PARTS
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.run_manifest import RunManifest
    from evalkit.store.history_queries import CaseCounts


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    runs = sub.add_parser("runs", help="the stored runs: list, show one, rescore, merge parts")
    runs_sub = runs.add_subparsers(dest="runs_command")
    runs.set_defaults(handler=lambda _args: runs.print_help() or 2)
    listing = runs_sub.add_parser("list", help="list stored runs")
    db_arg(listing)
    listing.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    listing.set_defaults(handler=_cmd_list)

    show = runs_sub.add_parser(
        "show", help="one run: label, status, suite, model, corpus, outcome and its manifest"
    )
    db_arg(show)
    show.add_argument("run", metavar="RUN", help="run id, label or label@latest")
    show.add_argument("--json", action="store_true", help="print the run and its manifest as JSON")
    show.set_defaults(handler=_cmd_show)

    rescore = runs_sub.add_parser("rescore", help="re-apply current scorers to stored outputs")
    suite_args(rescore)
    db_arg(rescore)
    rescore.add_argument("run", help="run id or label")
    rescore.add_argument(
        "--scorer", action="append", default=[], help="recompute only this scorer (repeatable)"
    )
    rescore.set_defaults(handler=_cmd_rescore)

    merge = runs_sub.add_parser(
        "merge", help="merge a run's Parquet parts into the store (idempotent; the one writer)"
    )
    merge.add_argument("run", metavar="RUN", help="the run id the shards shared (--run-id)")
    merge.add_argument(
        "--parts", default=DEFAULT_PARTS, help="parts root: a directory or s3://bucket/prefix"
    )
    db_arg(merge)
    merge.add_argument("--json", metavar="FILE", help="write the run summary as JSON")
    merge.add_argument(
        "--store", help="the shared store to publish the run's unpublished cache entries to "
        "(default: store.shared of --config, when it names one)",
    )  # fmt: skip
    merge.add_argument(
        "--config",
        default=None,
        help=f"suite config naming store.shared (default: {DEFAULT_CONFIG})",
    )
    merge.set_defaults(handler=_cmd_merge)


def _cmd_merge(args: argparse.Namespace) -> int:
    from evalkit.run.merging import merge_run
    from evalkit.store import open_store
    from evalkit.store.parts import PartsRoot

    root = PartsRoot(args.parts)
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        merged = merge_run(store, root, args.run)
        uri, source = _shared_uri(args)
        if uri is not None and merged.result.complete:
            from evalkit.run.shared_cache import publish_stored_cache

            # what a shard that lost the store could not publish; the rest is there: skipped
            publish_stored_cache(store, uri, merged.result.run_id, source=source)
    result = merged.result
    print(
        f"merged {result.parts_merged} parts of run {result.run_id}"
        + (" (run recorded from its parts)" if result.run_created else "")
        + f": {result.outputs_added} outputs and {result.scores_added} scores added, "
        f"{result.duplicates} duplicates skipped (first completion kept), "
        f"{result.cache_added} cache entries; {result.stored} of {result.expected} outputs stored",
        file=sys.stderr,
        flush=True,
    )
    print_run_summary(merged.summary, args.db, asked_here=False)
    if args.json:
        from evalkit.cli.report_files import write_report

        write_report(args.json, json.dumps(merged.summary.to_dict(), indent=2), "summary")
    return 0


def _shared_uri(args: argparse.Namespace) -> tuple[str | None, str]:
    """The shared store to publish to: ``--store``, else ``store.shared`` of ``--config`` (the
    default config when there is one), else none (and where it came from, for messages)."""
    if args.store:
        return args.store, "--store"
    config = args.config or DEFAULT_CONFIG
    if config == DEFAULT_CONFIG and not Path(config).is_file():  # none named, none here
        return None, ""
    from evalkit.corpus.suite import load_suite

    suite = load_suite(config)
    uri = suite.config.store.get("shared") if suite.config.cache else None
    return uri, f"{config}: store.shared"


def _cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.store import open_store
    from evalkit.store.history_queries import case_counts

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        runs = store.runs()
        counted = case_counts(store, runs["run_id"].to_list())
    if args.json:
        from evalkit.run.summary import rate_basis

        rows = []
        for row in runs.to_dicts():
            counts, replays = counted.get(row["run_id"]), _replays(row["manifest"])
            rows.append(row | {"pass_rate": counts.rate if counts else None,
                               "pass_rate_basis": rate_basis(
                                   replays, counts.pass_rules if counts else None)})  # fmt: skip
        print(json.dumps(rows, indent=2, default=str))
        return 0

    if not sys.stdout.isatty():  # piped: one full row per line, nothing clipped
        for row in runs.iter_rows(named=True):
            print(
                "\t".join(
                    str(row[k]) for k in ("run_id", "label", "created_at", "status", "config_hash")
                )
            )
        return 0
    table = Table("run_id", "label", "suite", "status", "pass rate (per case)", "age", "config")
    now = dt.datetime.now(dt.UTC)
    for row in runs.iter_rows(named=True):
        table.add_row(
            row["run_id"],
            row["label"],
            _suite(row["manifest"]),
            row["status"],
            _pass_rate(counted.get(row["run_id"]), row["manifest"]),
            _age(now, row["created_at"]),
            row["config_hash"][:12],
        )
    Console().print(table)
    return 0


def _suite(manifest: str | None) -> str:
    """The suite a run belongs to (runs of two suites do not pair); blank when its manifest
    cannot be read (a newer evalkit's: the commands that read it say so)."""
    from evalkit.errors import StoreError
    from evalkit.run_manifest import RunManifest

    try:
        return RunManifest.from_stored(json.loads(manifest or "{}")).suite or ""
    except (ValueError, StoreError):
        return ""


def _replays(manifest: str | None) -> int:
    """The replays per case a run's manifest records (1 when it records none or cannot be
    read)."""
    from evalkit.errors import StoreError
    from evalkit.run_manifest import RunManifest

    try:
        return RunManifest.from_stored(json.loads(manifest or "{}")).replays
    except (ValueError, StoreError):
        return 1


def _pass_rate(counts: CaseCounts | None, manifest: str | None) -> str:
    """A run's pass rate per case (`evalkit.run.summary`: each case's verdict over its replays
    under the run's pass rule, majority by default, as ``evalkit run`` and ``evalkit history``
    state it), the rule and replays, and the cases without a verdict.

    Examples:
        >>> from evalkit.store.history_queries import CaseCounts
        >>> counts = dict(run_id="r", cases=13, decided=12, passed=9, errored=1, unstable=0)
        >>> _pass_rate(CaseCounts(**counts), '{"replays": 3}')
        '75.0% (majority of 3 replays; +1 errored)'
        >>> all_decided = {**counts, "cases": 12, "errored": 0}
        >>> _pass_rate(CaseCounts(**all_decided), '{}'), _pass_rate(None, None)
        ('75.0%', '–')
    """
    if counts is None:
        return "–"
    replays = _replays(manifest)
    notes = [counts.pass_rules.basis(replays)] if replays > 1 else []
    notes += [f"+{counts.errored} errored"] if counts.errored else []
    rate = "–" if counts.rate is None else f"{counts.rate:.1%}"
    return rate + (f" ({'; '.join(notes)})" if notes else "")


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

    require_store(args.db)
    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        judged = any(s.tier == JUDGE for case in corpus.cases for s in case.scorers)
        judge = judge_client(suite, store) if judged and suite.config.judge else None
        # The sources recorded as a run of this checkout would record them (sealed cases'
        # files only if the run loaded sealed cases), so an unchanged rescore still compares.
        selection = store.manifest(store.resolve_run(args.run)).selection
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


def _cmd_show(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    require_store(args.db)
    from evalkit.store.history_queries import case_counts

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        run_id = store.resolve_run(args.run)
        rows = store.runs().filter(run_id=run_id).to_dicts()
        counts = case_counts(store, [run_id]).get(run_id)
    if not rows:  # resolved a moment ago: only a store changed underneath gets here
        raise EvalkitError(f"{args.db}: no run {args.run!r}")
    row = rows[0]
    manifest = _json_or_empty(row["manifest"])
    if args.json:
        row["manifest"], row["summary"] = manifest, _json_or_empty(row["summary"])
        row["pass_rate"] = counts.rate if counts else None
        print(json.dumps(row, indent=2, default=str))
        return 0
    from evalkit.run_manifest import RunManifest

    record = RunManifest.from_stored(manifest, source=f"run {row['run_id']}")
    for line in show_lines(row, record, _pass_rate(counts, row["manifest"])):
        print(line)
    return 0


def show_lines(row: dict[str, Any], manifest: RunManifest, pass_rate: str) -> list[str]:
    """What ``evalkit runs show`` prints of one stored run: the facts a reader looks for
    first (which configuration, which corpus, how it went), each on its own line.

    Examples:
        >>> from evalkit.run_manifest import RunManifest
        >>> manifest = RunManifest.from_stored(
        ...     {"suite": "s", "model": {"id": "m"}, "prompt": {"version": "v2"},
        ...      "corpus": {"hash": "ab" * 8, "n_cases": 3}, "selection": {"tier": "smoke"}})
        >>> row = {"run_id": "r1", "label": "base", "status": "complete", "created_at": "t0",
        ...        "finished_at": "t1", "config_hash": "cd" * 8}
        >>> for line in show_lines(row, manifest, "66.7%"):
        ...     print(line)
        run r1 (base): complete
          suite: s, tier smoke
          model: m
          prompt: v2
          corpus: 3 cases, hash abababababab
          config: cdcdcdcdcdcd
          created: t0, finished: t1
          pass rate (per case): 66.7%
    """
    model_id = manifest.model.id if manifest.model else None
    snapshot = manifest.model.snapshot if manifest.model else None
    version = (manifest.prompt or {}).get("version")
    corpus = manifest.corpus
    tier = manifest.selection.get("tier")
    served = f" (snapshot {snapshot})" if snapshot and snapshot != model_id else ""
    return [
        f"run {row['run_id']} ({row['label']}): {row['status']}",
        f"  suite: {manifest.suite or '–'}" + (f", tier {tier}" if tier else ""),
        f"  model: {model_id or '–'}{served}",
        *([f"  prompt: {version}"] if version else []),
        f"  corpus: {corpus.n_cases} cases, hash {(corpus.hash or '')[:12]}",
        f"  config: {str(row['config_hash'])[:12]}",
        f"  created: {_when(row['created_at'])}, finished: {_when(row['finished_at'])}",
        f"  pass rate (per case): {pass_rate}",
    ]


def _when(value: Any) -> str:
    """A stored time to the second, in UTC (``–`` for none).

    Examples:
        >>> _when(dt.datetime(2026, 12, 7, 8, 24, 7, 703373, tzinfo=dt.UTC)), _when(None)
        ('2026-12-07 08:24:07 UTC', '–')
    """
    if value is None:
        return "–"
    if isinstance(value, dt.datetime):
        value = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def _json_or_empty(text: str | None) -> dict[str, Any]:
    """A stored JSON object, or ``{}`` for none or one that does not read as an object."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
