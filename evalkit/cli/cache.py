"""``evalkit cache stats``, ``evalkit cache prune`` and ``evalkit cache compact``: the response
cache, managed (the local one; ``compact``: the team's shared one)."""

from __future__ import annotations

import argparse

from evalkit.cli.options import db_arg
from evalkit.cli.push_pull import shared_store_of, store_args
from evalkit.errors import EvalkitError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    cache = sub.add_parser("cache", help="the response cache: what it holds, and pruning it")
    cache_sub = cache.add_subparsers(dest="cache_command")
    stats = cache_sub.add_parser("stats", help="entries, size, and hit rate per suite")
    db_arg(stats)
    stats.set_defaults(handler=_cmd_stats)
    prune = cache_sub.add_parser(
        "prune", help="delete cache entries (stored run outputs are never touched)"
    )
    db_arg(prune)
    prune.add_argument(
        "--older-than", metavar="AGE", help="entries older than AGE: 30d, 12h (days if no unit)"
    )
    prune.add_argument(  # its own dest: ``config`` is the suite config's elsewhere
        "--config", dest="config_hash", metavar="HASH", default=None,
        help="entries that answered runs of this config hash (prefix)",
    )  # fmt: skip
    prune.set_defaults(handler=_cmd_prune)
    compact = cache_sub.add_parser(
        "compact",
        help="rewrite the team's shared response cache as one data file (lookups read every "
        "file; a publish compacts it by itself past 64)",
    )
    store_args(compact)
    compact.set_defaults(handler=_cmd_compact)
    cache.set_defaults(handler=lambda args: (cache.print_help(), 2)[1])


def parse_age(text: str) -> float:
    """An age in days from ``30d``, ``12h`` or a bare number of days.

    Examples:
        >>> parse_age("30d"), parse_age("12h"), parse_age("7")
        (30.0, 0.5, 7.0)
    """
    unit = {"d": 1.0, "h": 1 / 24}.get(text[-1:].lower())
    number = text[:-1] if unit is not None else text
    try:
        value = float(number)
    except ValueError:
        raise EvalkitError(f"--older-than {text!r}: give an age like 30d or 12h") from None
    if value < 0:
        raise EvalkitError(f"--older-than {text!r}: an age is not negative")
    return value * (unit or 1.0)


def _cmd_stats(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        stats = store.cache_stats()
        hits = store.cache_hits_by_suite()
    span = (
        f", {str(stats['oldest'])[:19]} to {str(stats['newest'])[:19]}" if stats["entries"] else ""
    )
    print(f"{stats['entries']} cache entries, {stats['bytes'] / 2**20:.1f} MiB{span}")
    for row in hits.iter_rows(named=True):
        print(
            f"  suite {row['suite']}: {row['from_cache']} of {row['outputs']} stored outputs "
            f"served from the cache ({row['hit_rate']:.1%})"
        )
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    if args.older_than is None and args.config_hash is None:
        raise EvalkitError("cache prune: say what to prune: --older-than 30d and/or --config HASH")
    days = parse_age(args.older_than) if args.older_than is not None else None
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        deleted = store.cache_prune(days, args.config_hash)
        left = store.cache_stats()["entries"]
    print(f"pruned {deleted} cache entries ({left} left); stored run outputs are untouched")
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    shared = shared_store_of(args)
    print(shared.compact_cache().render(shared.uri.shown))
    return 0
