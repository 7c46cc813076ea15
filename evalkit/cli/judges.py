"""``evalkit labels export``, ``labels import``, ``calibrate`` and ``judge-pairs``."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.cli.options import DEFAULT_CONFIG, db_arg, find_config
from evalkit.errors import EvalkitError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    labels = sub.add_parser("labels", help="human labels for judge calibration")
    labels_sub = labels.add_subparsers(dest="labels_command")
    imp = labels_sub.add_parser(
        "import",
        help="import a CSV/JSONL of human labels (case_id or output_hash, rater, label, scorer)",
    )
    db_arg(imp)
    imp.add_argument("file", help="a .csv or .jsonl label file")
    imp.add_argument("--run", help="pin case-level labels to this run's outputs (replay 0)")
    imp.set_defaults(handler=_cmd_labels_import)
    export = labels_sub.add_parser(
        "export",
        help="write a blind labelling sheet: a stratified sample of a run's judged outputs "
        "(no judge scores in it)",
    )
    db_arg(export)
    export.add_argument("run", help="run id or label")
    export.add_argument("--out", required=True, help="the sheet to write: .csv or .jsonl")
    export.add_argument(  # 120 is labelling.DEFAULT_SAMPLE, not imported: parsing loads no Polars
        "--sample", type=int, default=120, help="outputs to label (default 120: calibration "
        "wants 100 or more)",
    )  # fmt: skip
    export.add_argument(
        "--stratify", choices=("tag", "criticality", "none"), default="tag",
        help="strata sampled in proportion, each at least once (tag: a case's first tag)",
    )  # fmt: skip
    export.add_argument("--scorer", default="judge", help="the judge scorer (default: judge)")
    export.add_argument("--seed", type=int, default=0, help="the same seed, the same sample")
    export.add_argument("--rubric", help="rubric file (default: the one the judge scores name)")
    export.add_argument("--rater", help="fill the sheet's rater column with this name")
    export.add_argument(
        "--config", default=None, help="suite config: the judge's rubric path is relative to "
        "its folder (default: ./evalkit.yaml, else corpus/evalkit.yaml)",
    )  # fmt: skip
    export.set_defaults(handler=_cmd_labels_export)

    calibrate = sub.add_parser(
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

    pairs = sub.add_parser(
        "judge-pairs", help="judge each paired case of two runs in both orders (position bias)"
    )
    db_arg(pairs)
    pairs.add_argument("baseline", help="baseline run id or label")
    pairs.add_argument("candidate", help="candidate run id or label")
    pairs.add_argument("--rubric", required=True, help="rubric file (or relative to the corpus)")
    pairs.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (its judge:)")
    pairs.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    pairs.add_argument("--no-cache", action="store_true", help="ask the judge again")
    pairs.set_defaults(handler=_cmd_judge_pairs)


def _cmd_labels_import(args: argparse.Namespace) -> int:
    from evalkit.judges.labels import import_labels
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait, write=True) as store:
        result = import_labels(store, args.file, run=args.run)
    pinned = f", pinned to run {result.run_id}" if result.run_id else ""
    print(
        f"imported {result.labels} labels from {result.source} ({len(result.raters)} raters, "
        f"{result.items} items, scorer {', '.join(result.scorers)}{pinned}): {result.new} new, "
        f"{result.replaced} replaced"
    )
    return 0


def _cmd_labels_export(args: argparse.Namespace) -> int:
    from evalkit.judges.labelling import sample_outputs, write_sheet
    from evalkit.store import open_store

    roots = [Path.cwd(), Path(args.config or find_config()).resolve().parent]
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        sample = sample_outputs(
            store, args.run, sample=args.sample, stratify=args.stratify, scorer=args.scorer,
            seed=args.seed, rubric=args.rubric, roots=roots,
        )  # fmt: skip
    out = write_sheet(sample, args.out, rater=args.rater)
    strata = ", ".join(f"{s.name} {s.sampled}/{s.available}" for s in sample.strata)
    print(
        f"wrote {len(sample.items)} of {sample.population} judged outputs of run "
        f"{sample.run_id} to {out} (by {sample.stratify}: {strata}; seed {sample.seed}); "
        f"the judge's scores are not in it"
    )
    if len(sample.items) < 100:
        print(f"note: {len(sample.items)} items; calibration wants 100 or more labels")
    who = "" if args.rater else "rater and "
    print(f"fill in {who}label, then: evalkit labels import {out} --run {sample.run_id}")
    return 0


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
