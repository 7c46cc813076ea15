"""``evalkit push / pull``: publish runs to and bring baselines from the team's shared store.

The shared store is ``--store URI`` when given, else ``store: {shared: URI}`` of the suite
config; its credentials come from the environment (``PGPASSWORD``, ``AWS_*``) or the storage
library's own files, never from either.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from evalkit.cli.options import DEFAULT_CONFIG, db_arg
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.store.shared import SharedStore

_STORE_HELP = (
    "the shared store: sqlite:///PATH/catalog.db[?warehouse=DIR] or "
    "postgresql://HOST/DB?warehouse=s3://BUCKET/PATH (default: store.shared of --config)"
)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    push = sub.add_parser("push", help="publish a complete run to the team's shared store")
    push.add_argument("run", help="run id, or a label naming one run (label@latest)")
    _common(push)
    push.set_defaults(handler=_cmd_push)
    pull = sub.add_parser(
        "pull", help="bring a suite's promoted baseline, or a run, from the shared store"
    )
    pull.add_argument(
        "ref",
        metavar="BASELINE|RUN",
        help="a suite name (its promoted baseline and promotion history), `baseline` (that of "
        "--config's suite), or a published run id or label",
    )
    pull.add_argument("--tier", help="with a suite: the baseline of this tier (e.g. smoke)")
    _common(pull)
    pull.set_defaults(handler=_cmd_pull)


def _common(parser: argparse.ArgumentParser) -> None:
    db_arg(parser)
    store_args(parser)


def store_args(parser: argparse.ArgumentParser) -> None:
    """``--store URI`` and ``--config`` naming the shared store (:func:`shared_store_of`)."""
    parser.add_argument("--store", help=_STORE_HELP)
    parser.add_argument("--config", default=None, help="suite config naming store.shared")


def _cmd_push(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    shared = shared_store_of(args)
    _require_store(args.db)
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        pushed = shared.push_run(store, args.run, cache=False)
        from evalkit.run.shared_cache import publish_stored_cache

        # keyed by what the endpoint serves, with this host as publisher (cache_provenance)
        published = publish_stored_cache(store, shared.uri.full, pushed.run_id, source="push")
    if published is not None and published.added:
        pushed = replace(pushed, added={**pushed.added, "response_cache": published.added})
    if pushed.rows:
        print(f"pushed run {pushed.run_id} to {shared.uri.shown}: {_counts(pushed.added)}")
    else:
        print(f"run {pushed.run_id} is already in {shared.uri.shown}: nothing added")
    if pushed.conflicts:
        print(f"  {pushed.conflicts} commits met another writer's and were retried")
    from evalkit.provenance import current_writer
    from evalkit.store.shared.trust_rows import untrusted_push

    if (why := untrusted_push(current_writer())) is not None:
        print(f"  no promotion, exam, flake list or override published: {why}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    shared = shared_store_of(args)
    ref = _suite_of(args.config) if args.ref == "baseline" else args.ref
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        pulled = shared.pull(store, ref, tier=args.tier)
    what = f"baseline of suite {pulled.baseline_of!r}: run " if pulled.baseline_of else "run "
    if pulled.rows:
        print(f"pulled {what}{pulled.run_id} into {args.db}: {_counts(pulled.added)}")
    else:
        print(f"{what}{pulled.run_id} is already in {args.db}: nothing added")
    return 0


def shared_store_of(args: argparse.Namespace) -> SharedStore:
    """The shared store of ``--store``, else of the suite config's ``store.shared``
    (``args.store``, ``args.config``: :func:`store_args`)."""
    from evalkit.store.shared import open_shared_store

    if args.store:
        return open_shared_store(args.store, source="--store")
    config = args.config or DEFAULT_CONFIG
    if Path(config).is_file():
        from evalkit.corpus.suite import load_suite

        uri = load_suite(config).config.store.get("shared")
        if uri:
            return open_shared_store(uri, source=f"{config}: store.shared")
    raise ConfigError(
        f"no shared store: pass --store URI, or set store: {{shared: URI}} in {config}"
    )


def _suite_of(config: str | None) -> str:
    from evalkit.corpus.suite import load_suite

    path = config or DEFAULT_CONFIG
    if not Path(path).is_file():
        raise ConfigError(f"{path}: suite config not found; pull a suite by name instead")
    return load_suite(path).config.suite


def _require_store(db: str) -> None:
    if not Path(db).exists():
        raise ConfigError(f"{db}: no evalkit store here (run `evalkit run --db {db}` first)")


#: How a count of a table's rows reads: (one, many), where the table's name does not say it.
_ROW_NAMES = {
    "response_cache": ("response-cache entry", "response-cache entries"),
    "exam_files": ("exam file", "exam files"),
    "human_labels": ("human label", "human labels"),
    "scoring_cases": ("scored case", "scored cases"),
    "gates": ("gate decision", "gate decisions"),
    "baselines": ("promotion", "promotions"),
}


def _counts(added: dict[str, int]) -> str:
    """Rows added per table, as a line reads them.

    Examples:
        >>> _counts({"cases": 91, "runs": 1, "flakes": 0, "gates": 1, "response_cache": 2})
        '91 cases, 1 run, 1 gate decision, 2 response-cache entries'
    """
    parts = []
    for table, n in added.items():
        if n:
            one, many = _ROW_NAMES.get(table, (table.removesuffix("s"), table))
            parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)
