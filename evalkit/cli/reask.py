"""``--reask-flakes K`` for ``evalkit gate`` and ``compare``: before the pair is decided, the
candidate's configuration is asked again, uncached, on the failing must_pass cases a trusted
flake list would excuse (:mod:`evalkit.compare.reask`): a flake list excuses a case only when
those re-asks fail it no more often than the list says."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from evalkit.cli.options import find_config
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.store import Store


def add_reask_args(parser: argparse.ArgumentParser) -> None:
    from evalkit.compare.reask_rule import REASKS  # the rule alone: --help loads no frames

    parser.add_argument(
        "--reask-flakes", type=int, default=REASKS, metavar="K",
        help="re-ask the candidate K times (uncached) on each failing must_pass case a trusted "
        f"flake list would excuse; fewer than {REASKS} re-asks excuse nothing (0: do not re-ask)",
    )  # fmt: skip


def maybe_reask(args: argparse.Namespace, base_run_id: str, cand_run_id: str) -> None:
    """Re-ask what a flake list would excuse and say so on stderr; never fails the gate
    itself (without the re-asks the flake list excuses nothing, and the report says why)."""
    k = getattr(args, "reask_flakes", 0)
    if not k:
        return
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.flakes import excusing_flakes
    from evalkit.compare.reask import reask_flakes
    from evalkit.compare.trust import Trust, trusted_pinned_policy
    from evalkit.corpus.suite import load_suite
    from evalkit.provenance import trusted_rules
    from evalkit.store import open_store

    try:
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            if not _measured_flaky(store, base_run_id):
                return  # nothing could excuse a failure: no need to read the runs
            pin = trusted_pinned_policy(store, base_run_id)
            trust = Trust.here(trusted_rules(pin.policy))
            comparison = load_comparison(store, base_run_id, cand_run_id, args.allow_diff)
            rates = excusing_flakes(store, comparison.base, comparison.cand, trust.why_not)
    except EvalkitError:  # a pair that cannot be compared: the gate says why, once
        return
    if not rates.height or not (rates["flake_rate"] > 0).any():
        return
    try:
        suite = load_suite(args.config or find_config(), overrides=getattr(args, "overrides", []))
        with open_store(args.db, wait_s=args.wait, write=True) as store:
            cases, why = reask_flakes(store, suite, comparison, rates, k)
    except EvalkitError as exc:
        _say(f"cannot re-ask the flaky cases: {' '.join(str(exc).split())}")
        return
    if why:
        _say(f"cannot re-ask the flaky cases: {why}; their flake list excuses nothing")
    elif cases:
        _say(f"re-asked {len(cases)} failing must_pass case(s) a flake list excuses, {k} times "
             f"each, uncached: {', '.join(cases)}")  # fmt: skip


def _measured_flaky(store: Store, base_run_id: str) -> bool:
    """Whether any flake measurement of the baseline's configuration has a rate above 0: only
    those may excuse a failure (`evalkit.compare.flakes.excusing_flakes`), so without one the
    pair's runs are not read twice (the gate reads them once more to decide)."""
    config_hash = store.manifest(base_run_id).config_hash
    if not config_hash or not store.has_table("flakes"):
        return False
    return bool((store.flake_measurements([config_hash])["flake_rate"] > 0).any())


def _say(line: str) -> None:
    print(f"evalkit: {line}", file=sys.stderr, flush=True)
