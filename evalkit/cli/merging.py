"""``evalkit merge RUN``: a run's Parquet parts into the store, by its single writer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evalkit.cli.options import db_arg
from evalkit.cli.running import print_run_summary
from evalkit.cli.sharding import DEFAULT_PARTS


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
    merge.set_defaults(handler=_cmd_merge)


def _cmd_merge(args: argparse.Namespace) -> int:
    from evalkit.run.merging import merge_run
    from evalkit.store import open_store
    from evalkit.store.parts import PartsRoot

    root = PartsRoot(args.parts)
    with open_store(args.db, wait_s=args.wait) as store:
        merged = merge_run(store, root, args.run)
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
