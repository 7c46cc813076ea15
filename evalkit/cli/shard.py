"""Beyond one machine: ``evalkit run --shard K/N`` (CI matrices) and ``evalkit run --engine
ray``; ``evalkit runs merge`` (:mod:`evalkit.cli.runs`) then puts the parts into the store.

A shard reads the corpus through its case index (:func:`load_run_corpus`): the facts of every
case as columns from the corpus summary beside the index
(:mod:`evalkit.corpus.case_summary`), and only its own share's cases built, their facts made
as it builds them (a warm index makes a shard of N cost about 1/N of the corpus's building).
The index lives under the corpus root in ``.evalkit/case-index/`` (or
``$EVALKIT_CASE_INDEX``); a cold shard makes the entries it lacks there, each case file once
between the shards started together on that directory, and keeps none of their cases; a CI
matrix keeps it warm by caching that directory between jobs. A directory git tracks a file in
is never read (:mod:`evalkit.corpus.index_trust`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evalkit.errors import EvalkitError
from evalkit.redact import strip_userinfo

if TYPE_CHECKING:
    from evalkit.corpus.case_facts import CorpusFacts
    from evalkit.corpus.cases import Corpus
    from evalkit.corpus.selection import Selection
    from evalkit.corpus.suite import Suite
    from evalkit.run.runner import RunOptions, RunSummary
    from evalkit.store.parts import PartsRoot

DEFAULT_PARTS = "data/parts"


def add_run_args(run: argparse.ArgumentParser) -> None:
    """``evalkit run``'s options for sharded and Ray runs."""
    run.add_argument(
        "--shard", metavar="K/N", help="run only shard K of N into Parquet parts (CI matrix)"
    )
    run.add_argument("--run-id", metavar="ID", help="the run id all shards of one run share")
    run.add_argument(
        "--shard-rate",
        choices=("split", "whole"),
        default="split",
        help="with --shard K/N: each shard paces to 1/N of rate_limit (split, the default: the "
        "shards together keep the endpoint's limit) or to all of it (whole: N times the rate)",
    )
    run.add_argument(
        "--parts",
        default=DEFAULT_PARTS,
        help="where parts go: a directory or s3://bucket/prefix?endpoint_override=...",
    )
    run.add_argument(
        "--engine", choices=("local", "ray"), default="local", help="who runs the chunks"
    )
    run.add_argument(
        "--address", help="with --engine ray: a cluster address (default: start one here)"
    )
    run.add_argument(
        "--chunk-size", type=int, default=None, help="(case, replay) units per chunk (200)"
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether ``evalkit run`` was asked for a shard or the Ray engine."""
    return (
        bool(getattr(args, "shard", None) or getattr(args, "run_id", None))
        or getattr(args, "engine", "local") == "ray"
    )


def load_run_corpus(
    args: argparse.Namespace, suite: Suite, selection: Selection
) -> Corpus | CorpusFacts:
    """The corpus ``evalkit run`` selects from: for ``--shard K/N`` and ``--engine ray`` its
    facts, read through the case index (:func:`~evalkit.corpus.case_facts.scan_corpus`: the
    shard builds only its share, :func:`~evalkit.run.sharded.run_shard`; the Ray driver one
    share at a time, :mod:`evalkit.run.engines.ray_plan`), else every case loaded, its scorers
    built when selected. Either way what is checked before the run (tags, drafts, policy)
    reads the same."""
    from evalkit.corpus.cases import load_corpus

    sealed, template = selection.sealed, suite.config.system.user_template
    if getattr(args, "shard", None) or getattr(args, "engine", "local") == "ray":
        from evalkit.corpus.case_summary import read_run_facts  # a sharded run's reader

        # the corpus summary's columns (made from the index when stale, once between shards
        # started together, a cold index's entries made as they are): no case is kept, this
        # process makes the facts of the share it runs and builds its cases
        return read_run_facts(suite.root, sealed=sealed, user_template=template)
    return load_corpus(suite.root, defer_scorers=True, sealed=sealed, user_template=template)


def run_distributed(
    args: argparse.Namespace,
    suite: Suite,
    corpus: Corpus | CorpusFacts,
    options: RunOptions,
    print_summary: Callable[[RunSummary, str], None],
) -> int:
    """``evalkit run`` with ``--shard`` or ``--engine ray``; ``print_summary`` prints a Ray
    run's summary as a local run's is printed."""
    from evalkit.run.shards import DEFAULT_CHUNK_SIZE
    from evalkit.store.parts import PartsRoot

    chunk_size = args.chunk_size or DEFAULT_CHUNK_SIZE
    root = PartsRoot(args.parts)
    if args.shard:
        return _shard(args, suite, corpus, options, root, chunk_size)
    if args.engine != "ray":
        raise EvalkitError(
            "--run-id names a run whose work is split: use it with --shard K/N or --engine ray"
        )
    if args.run_id and args.resume:
        raise EvalkitError("--run-id names a new run; --resume continues a stored one: not both")
    from evalkit.run.engines.ray_engine import RayOptions, RayUnreachable, SuiteSource, run_on_ray
    from evalkit.store import open_store

    source = SuiteSource(
        str(Path(args.config).resolve()),
        tuple(args.overrides),
        str(Path(args.prompt).resolve()) if args.prompt else None,
    )
    ray_options = RayOptions(address=args.address, chunk_size=chunk_size, run_id=args.run_id)
    try:
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            summary = run_on_ray(suite, corpus, store, options, source, root, ray_options)
    except RayUnreachable:
        from evalkit.cli import skip_teardown

        skip_teardown()  # a connect left behind must not hold the exit (nothing else is open)
        raise
    print_summary(summary, args.db)
    print(f"  parts under {root.run_dir(summary.run_id)}", flush=True)
    if args.json:
        from evalkit.cli.report_files import write_report

        write_report(args.json, json.dumps(summary.to_dict(), indent=2), "summary")
    return run_exit_code(summary)


def run_exit_code(summary: RunSummary) -> int:
    """1 when a finished run verified nothing (every output errored) or did not store every
    output it should have (incomplete), else 0: a CI step never passes on half a run."""
    if not summary.complete:
        print(
            f"evalkit: run {summary.run_id} is incomplete: {summary.outputs} of "
            f"{summary.expected_outputs} outputs stored",
            file=sys.stderr,
            flush=True,
        )
    return 1 if summary.all_errored or not summary.complete else 0


def _shard(
    args: argparse.Namespace,
    suite: Suite,
    corpus: Corpus | CorpusFacts,
    options: RunOptions,
    root: PartsRoot,
    chunk_size: int,
) -> int:
    from evalkit.run.sharded import run_shard
    from evalkit.run.shards import parse_shard

    shard = parse_shard(args.shard)
    if args.engine == "ray":
        raise EvalkitError("--shard runs one shard here; --engine ray shards by itself: not both")
    if args.resume:
        raise EvalkitError(
            "a shard resumes by running it again with the same --run-id (done chunks are "
            "skipped): drop --resume"
        )
    if not args.run_id:
        raise EvalkitError(
            f"--shard {shard} needs --run-id ID: every shard of one run shares it "
            "(e.g. the CI pipeline id)"
        )
    from evalkit.corpus.case_index import IndexMismatch

    try:
        summary = run_shard(
            suite, corpus, options, shard=shard, run_id=args.run_id, root=root,
            chunk_size=chunk_size, split_rate=args.shard_rate == "split",
        )  # fmt: skip
    except IndexMismatch as stale:  # an index entry proved stale: read the corpus again, once
        from evalkit.corpus.case_summary import drop_summary

        print(f"evalkit: {stale}; reading the corpus again", file=sys.stderr, flush=True)
        drop_summary(suite.root)  # made again from the entries, the stale one made again
        corpus = _reselect(args, suite, options)
        summary = run_shard(
            suite, corpus, options, shard=shard, run_id=args.run_id, root=root,
            chunk_size=chunk_size, split_rate=args.shard_rate == "split",
        )  # fmt: skip
    print(
        f"evalkit: shard {summary.shard} of run {summary.run_id}: {summary.units} outputs in "
        f"this shard, {summary.skipped} already in parts, {summary.outputs} written now in "
        f"{summary.chunks} chunks ({summary.requests} requests, {summary.wall_s:.2f}s)",
        flush=True,
    )
    print(
        f"  {summary.cases} of the run's {summary.corpus_cases} cases in this shard's share; "
        f"{summary.built} cases built from their files"
        + (f"; {summary.indexed} read to make the case index" if summary.indexed else ""),
        flush=True,
    )
    if summary.shared_hits:
        print(
            f"  {summary.shared_hits} cache lookups answered by the team's shared cache",
            flush=True,
        )
    if summary.rate_note:
        print(f"  {summary.rate_note}", flush=True)
    print(
        f"  parts under {root.run_dir(summary.run_id)}; when every shard is done: "
        f"evalkit runs merge {summary.run_id} --parts {strip_userinfo(args.parts)} --db {args.db}",
        flush=True,
    )
    return 0


def _reselect(args: argparse.Namespace, suite: Suite, options: RunOptions) -> CorpusFacts:
    """The shard's selected facts read again (after a stale index entry was made again), with
    the draft check made again on them."""
    from evalkit.corpus.case_facts import CorpusFacts
    from evalkit.corpus.drafts import refuse_drafts
    from evalkit.corpus.selection import Selection

    stored = options.selection
    selection = Selection.from_manifest(stored)
    corpus = selection.apply(load_run_corpus(args, suite, selection))
    refuse_drafts(corpus.cases, suite.config.kind)
    assert isinstance(corpus, CorpusFacts)  # a shard's corpus is read through the case index
    return corpus
