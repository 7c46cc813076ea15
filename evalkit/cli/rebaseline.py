"""``--rebaseline`` for ``evalkit gate`` and ``compare``: before the pair is compared, the
baseline's configuration runs on the cases the candidate added or edited (cached), so they pair
(:mod:`evalkit.run.rebaseline`)."""

from __future__ import annotations

import argparse
import sys

from evalkit.cli.options import find_config, set_arg
from evalkit.errors import EvalkitError


def add_rebaseline_args(parser: argparse.ArgumentParser) -> None:
    """``--rebaseline`` and ``--set KEY=VALUE`` (the endpoint and key variable it runs with)."""
    parser.add_argument(
        "--rebaseline",
        action="store_true",
        help="first run the baseline's configuration (from its manifest) on the cases the "
        "candidate added or edited, cached, so they pair",
    )
    set_arg(
        parser,
        "with --rebaseline: override a value of the suite config (e.g. system.base_url, "
        "system.api_key_env); the baseline's prompt, model and sampling always win",
    )


def maybe_rebaseline(args: argparse.Namespace, base_run_id: str, cand_run_id: str) -> None:
    """With ``--rebaseline``: rebaseline the pair's corpus delta and say what happened on
    stderr. Never fails the gate itself: a delta that cannot be rebaselined is a line, and the
    gate accounts for those cases; only usage errors (a bad ``--config`` or ``--set``) raise."""
    if not getattr(args, "rebaseline", False):
        return
    from evalkit.corpus.suite import load_suite
    from evalkit.errors import ConfigError
    from evalkit.run.rebaseline import NOTHING_CHANGED, rebaseline
    from evalkit.store import open_store

    suite = load_suite(args.config or find_config(), overrides=args.overrides)
    _answer_pinned(args, suite, base_run_id, cand_run_id)
    try:
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            result = rebaseline(store, suite, base_run_id, cand_run_id)
    except ConfigError:
        raise
    except EvalkitError as exc:
        _say(f"cannot rebaseline: {' '.join(str(exc).split())}{_UNACCOUNTED}")
        return
    if result.reason == NOTHING_CHANGED:
        _say(f"nothing to rebaseline: {cand_run_id} added or edited no case of {base_run_id}")
        return
    if result.run_id is None:
        _say(f"cannot rebaseline: {result.reason}{_UNACCOUNTED}")
        return
    what = f"{result.cases} added/edited case(s) on the baseline configuration of {base_run_id}"
    if result.reused:
        line = f"rebaselined {what}: reused run {result.run_id}"
    else:
        cost = f"{result.requests} requests, {result.cache_hits} cache hits"
        line = f"rebaselined {what}: run {result.run_id} ({cost})"
    _say(line + (f"; {result.reason}" if result.reason else ""))


_UNACCOUNTED = " — the gate treats those cases as unaccounted"


def _answer_pinned(args: argparse.Namespace, suite, base_run_id: str, cand_run_id: str) -> None:
    """The candidate's configuration answers the pinned cases it has no answer to (their pinned
    version, `evalkit.run.exam_run`), cached; said on stderr, never failing the gate itself."""
    from evalkit.errors import ConfigError
    from evalkit.run.exam_run import answer_pinned
    from evalkit.store import open_store

    try:
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            result = answer_pinned(store, suite, base_run_id, cand_run_id)
    except ConfigError:
        raise
    except EvalkitError as exc:
        _say(f"cannot answer the pinned exam: {' '.join(str(exc).split())}{_MISSING}")
        return
    if result.run_id is None:
        if result.reason and "no exam" not in result.reason and "every pinned" not in result.reason:
            _say(f"cannot answer the pinned exam: {result.reason}{_MISSING}")
        return
    what = f"{result.cases} pinned case(s) in their pinned version on the candidate configuration"
    if result.reused:
        _say(f"answered {what}: reused run {result.run_id}")
    else:
        cost = f"{result.requests} requests, {result.cache_hits} cache hits"
        _say(f"answered {what}: run {result.run_id} ({cost})")


_MISSING = " — the gate treats those cases as missing evidence"


def _say(line: str) -> None:
    print(f"evalkit: {line}", file=sys.stderr, flush=True)
