"""``evalkit judges calibrate`` (judge-human agreement) and ``judges pairs`` (position bias)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.cli.options import DEFAULT_CONFIG, db_arg
from evalkit.errors import EvalkitError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    judges = sub.add_parser("judges", help="model judges: their agreement with people, their bias")
    judges_sub = judges.add_subparsers(dest="judges_command")
    judges.set_defaults(handler=lambda _args: judges.print_help() or 2)
    calibrate = judges_sub.add_parser(
        "calibrate", help="judge-human agreement of a run's judge; stores a calibration record"
    )
    db_arg(calibrate)
    calibrate.add_argument("--run", required=True, help="run id or label")
    calibrate.add_argument("--scorer", default="judge", help="the judge scorer (default: judge)")
    calibrate.add_argument("--rubric", help="rubric file (needed if the run used several)")
    calibrate.add_argument("--level", type=float, default=0.95, help="interval level")
    calibrate.add_argument(
        "--binary", action="store_true", help="compare pass/fail instead of score levels"
    )
    calibrate.set_defaults(handler=_cmd_calibrate)

    pairs = judges_sub.add_parser(
        "pairs", help="judge each paired case of two runs in both orders (position bias)"
    )
    db_arg(pairs)
    pairs.add_argument("baseline", help="baseline run id or label")
    pairs.add_argument("candidate", help="candidate run id or label")
    pairs.add_argument("--rubric", required=True, help="rubric file (or relative to the corpus)")
    pairs.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (its judge:)")
    pairs.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    pairs.add_argument("--no-cache", action="store_true", help="ask the judge again")
    pairs.set_defaults(handler=_cmd_judge_pairs)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from evalkit.judges.calibration import calibrate
    from evalkit.store import open_store

    if not 0 < args.level < 1:
        raise EvalkitError(f"--level {args.level}: expected a fraction such as 0.95")
    rubric = Path(args.rubric) if args.rubric else None
    if rubric is not None and not rubric.is_file():
        raise EvalkitError(f"--rubric {rubric}: no such file")
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        result = calibrate(
            store, args.run, scorer=args.scorer, rubric=rubric, binary=args.binary, level=args.level
        )
    Console(highlight=False, soft_wrap=True).print(result)
    print(f"calibration record stored in {args.db}")
    return 0


def _cmd_judge_pairs(args: argparse.Namespace) -> int:
    from rich.console import Console

    from evalkit.corpus.suite import load_suite
    from evalkit.judges.pairwise import judge_pairs
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides)
    with open_store(args.db, wait_s=args.wait, write=True) as store:
        result = judge_pairs(
            store, suite, args.baseline, args.candidate, args.rubric, use_cache=not args.no_cache
        )
    Console(highlight=False, soft_wrap=True).print(result)
    return 0
