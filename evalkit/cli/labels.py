"""``evalkit labels export`` (a blind labelling sheet) and ``labels import`` (people's labels,
what ``evalkit judges calibrate`` measures a judge against)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.cli.options import db_arg, find_config


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
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
    labels.set_defaults(handler=lambda _args: labels.print_help() or 2)


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
