"""``evalkit sealed rotate``: a reproducible share of live cases moves to sealed/ and back;
``evalkit compare --transfer`` prints whether the gains transfer (`print_transfer`)."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING

from evalkit.cli.options import find_config
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add this group's subcommands to ``evalkit``."""
    sealed = sub.add_parser("sealed", help="the held-out sealed slice: rotate it by seed")
    sealed_sub = sealed.add_subparsers(dest="sealed_command")
    rotate = sealed_sub.add_parser(
        "rotate",
        help="seal a reproducible share of the cases (moving case YAML to sealed/ and back)",
    )
    rotate.add_argument("--config", default=None, help="suite config (default: found as for run)")
    rotate.add_argument("--share", required=True, help="share of the cases to seal: 10%% or 0.1")
    rotate.add_argument(
        "--seed", type=int, required=True, help="which sample: same seed, same cases"
    )
    rotate.add_argument("--dry-run", action="store_true", help="print the moves, move nothing")
    rotate.set_defaults(handler=_cmd_rotate)
    sealed.set_defaults(handler=lambda args: (sealed.print_help(), 2)[1])


def _cmd_rotate(args: argparse.Namespace) -> int:
    from evalkit.compare.policy import check_policy
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.sealed import apply_rotation, parse_share, plan_rotation
    from evalkit.corpus.suite import load_suite

    share = parse_share(args.share)
    suite = load_suite(args.config or find_config())
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    rotation = plan_rotation(suite.root, corpus.cases, share, args.seed)
    # The live corpus after the move must still carry the gate's critical tags (≥ min cases).
    sealed = set(rotation.sealed)
    counts = Counter(t for c in corpus.cases if c.id not in sealed for t in c.tags)
    try:
        check_policy(suite.config, counts, source=str(suite.path))
    except ConfigError as exc:
        raise ConfigError(
            f"--share {args.share} --seed {args.seed} would leave the live corpus failing the "
            f"gate policy ({exc}): seal a smaller share or add cases"
        ) from None
    print(rotation.summary())
    for move in rotation.moves:
        print(f"  {move.case_id}: {move.source} → {move.target}")
    if args.dry_run:
        print("dry run: nothing moved")
        return 0
    apply_rotation(suite.root, rotation)
    if rotation.moves:
        print(
            "the moved cases keep their text and hashes; runs made before the rotation pair them "
            "as before, and `evalkit run --sealed` runs the new sealed slice"
        )
    return 0


def print_transfer(comparison: Comparison, decision: GateDecision) -> None:
    """Print `evalkit.compare.transfer.transfer` of the pair under the decision's policy.

    Raises:
        ConfigError: the runs hold too few sealed cases decided in both (run with --sealed).
    """
    from evalkit.compare.transfer import transfer

    policy = decision.policy
    result = transfer(
        comparison.paired, policy.bootstrap_iters, policy.level, policy.bootstrap_seed
    )
    if result.verdict == "untested":
        raise ConfigError(result.message())
    print(result.message())
