"""``evalkit merge RUN``: a run's Parquet parts into the store, by its single writer; once the run
is complete, its response-cache entries the team's shared store lacks are published to it.

A shard matrix's shards publish their own entries when they end, so the merge job usually adds
nothing (one read of the run's keys). What it can hold unpublished: the entries of a shard that
could not reach the shared store, or whose publish failed (warned in that shard's log); those
are in its parts, merged here, and published once by the merge that completes the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evalkit.cli.options import DEFAULT_CONFIG, db_arg
from evalkit.cli.run import print_run_summary
from evalkit.cli.shard import DEFAULT_PARTS


def add_parsers(sub: argparse._SubParsersAction) -> None:
    merge = sub.add_parser(
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
    print_run_summary(merged.summary, args.db)
    if args.json:
        Path(args.json).write_text(json.dumps(merged.summary.to_dict(), indent=2))
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
