"""How often the transfer check says "gains do not transfer" when live and sealed cases share one
truth, at each (live, sealed) size: it must be at most (1 - level) / 2 = 2.5 % everywhere.

Under a shared truth every case, live or sealed, is fixed with probability ``f`` and broken with
probability ``b`` (the rest unchanged); the check (`evalkit.compare.transfer.gap_test`: MOVER over
two Tango intervals, and the exact exchangeability test) runs on each simulated pair of slices.
The bootstrap it replaces fired 14.5 % at (200, 20). Seeded.

Usage:
    .venv/bin/python bench/bench_transfer.py
    .venv/bin/python bench/bench_transfer.py --live 200 --sealed 20 --reps 4000
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalkit.compare.transfer import gap_test  # noqa: E402


def false_rate(
    n_live: int, n_sealed: int, fixed: float, broken: float, reps: int, rng: np.random.Generator
) -> float:
    """Share of ``reps`` simulated pairs of slices where "gains do not transfer" fires."""
    values = np.array([1, -1, 0])
    probs = [fixed, broken, 1 - fixed - broken]
    fired = 0
    for _ in range(reps):
        live = rng.choice(values, n_live, p=probs)
        held = rng.choice(values, n_sealed, p=probs)
        lo, _, p = gap_test(live, held)
        fired += live.mean() > 0 and lo > 0 and p <= 0.025
    return fired / reps


def main(argv: Sequence[str] | None = None) -> int:
    """Print the false "does not transfer" rate per (live, sealed) size and truth."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, nargs="+", default=[20, 50, 200, 1000])
    parser.add_argument("--sealed", type=int, nargs="+", default=[2, 5, 10, 20, 50, 200])
    parser.add_argument("--truth", type=float, nargs=2, action="append", metavar=("F", "B"),
                        help="P(fixed) P(broken) of the shared truth (repeatable)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    truths = args.truth or [(0.10, 0.02), (0.05, 0.0), (0.30, 0.10)]
    rng = np.random.default_rng(args.seed)
    se = math.sqrt(0.025 * 0.975 / args.reps)
    print(f"false 'does not transfer' rate, {args.reps} pairs per cell, seed {args.seed} "
          f"(target <= 0.025; MC s.e. of a rate at 0.025: {se:.4f})")  # fmt: skip
    print("| P(fixed), P(broken) | live | " + " | ".join(f"sealed {s}" for s in args.sealed) + " |")
    print("|---|---|" + "---|" * len(args.sealed))
    worst = 0.0
    for f, b in truths:
        for n_live in args.live:
            rates = [false_rate(n_live, s, f, b, args.reps, rng) for s in args.sealed]
            worst = max(worst, *rates)
            print(f"| {f:g}, {b:g} | {n_live} | " + " | ".join(f"{r:.4f}" for r in rates) + " |")
    print(f"worst cell: {worst:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
