"""``evalkit baseline promote`` and ``evalkit baseline show``: a person names the baseline."""

from __future__ import annotations

import argparse

from evalkit.cli.options import db_arg


def add_parsers(sub: argparse._SubParsersAction) -> None:
    baseline = sub.add_parser("baseline", help="promote or show the baseline a suite gates against")
    baseline_sub = baseline.add_subparsers(dest="baseline_command", required=True)
    promote = baseline_sub.add_parser(
        "promote", help="make a complete run its suite's baseline (recorded with who and why)"
    )
    db_arg(promote)
    promote.add_argument("run", help="run id, or a label naming one run (label@latest)")
    promote.add_argument("--who", required=True, help="who promotes it")
    promote.add_argument("--reason", required=True, help="why this run is the new reference")
    promote.set_defaults(handler=_cmd_promote)
    show = baseline_sub.add_parser("show", help="the promoted baseline of each suite, and history")
    db_arg(show)
    show.add_argument("--suite", help="only this suite")
    show.set_defaults(handler=_cmd_show)


def _cmd_promote(args: argparse.Namespace) -> int:
    from evalkit.compare.pairing import require_complete, run_tier
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait) as store:
        run_id = store.resolve_run(args.run)
        require_complete(store, run_id, "promoted", db=args.db)
        suite, tier = store.manifest(run_id).get("suite") or "", run_tier(store, run_id)
        previous = store.current_baseline(suite, tier)
        store.promote_baseline(suite, run_id, args.who, args.reason, tier)
    was = f" (was {previous})" if previous else ""
    which = f"suite {suite!r}" + (f" tier {tier!r}" if tier else "")
    print(f"baseline of {which} is now {run_id}{was}")
    print(f"  promoted by {args.who}: {args.reason}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        history = store.baselines(args.suite)
    if history.is_empty():
        print("no baseline promoted yet: `evalkit baseline promote RUN --who NAME --reason TEXT`")
        return 0
    table = Table("suite", "tier", "run", "promoted at", "who", "reason", "current")
    seen: set[tuple[str, str | None]] = set()
    for row in history.iter_rows(named=True):
        key = (row["suite"], row["tier"])
        current = key not in seen
        seen.add(key)
        when = str(row["promoted_at"])[:19]
        table.add_row(row["suite"], row["tier"] or "(full)", row["run_id"], when, row["who"],
                      row["reason"], "yes" if current else "")  # fmt: skip
    Console(width=160).print(table)
    return 0
