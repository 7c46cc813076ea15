"""The gate's operating characteristics: how often the real ``gate.decide`` blocks a critical tag.

Each simulated corpus has four critical tags of ``n`` cases each (normal criticality, so only the
critical tier can block). A case's true verdict passes with probability ``--pass-rate``; each run
observes it through a measured flake rate f: two runs of an unchanged system disagree on a case
with probability f (each run flips the true verdict with probability e, 2 e (1 - e) = f).

(a) No true change: the per-tag false-block rate at each n and flake rate (must be <= alpha within
    Monte-Carlo error: the exact McNemar test is valid at any n, and the small-n interval never
    blocks where it sees no evidence), and the family-wise rate with 1-4 critical tags (the
    seed's "four tags at 0.05 is near 0.19" is the bound 1 - 0.95^4; at low flake the measured
    rate is far lower because the exact test is conservative, but not at high flake: at 20-30 %
    run-to-run disagreement the 4-tag rate measured 0.12-0.15).
(b) True regressions of ``--drops`` points (that share of the tag's cases turns from pass to
    fail in the candidate): the per-tag power at each n.

Usage:
    .venv/bin/python bench/bench_gate_oc.py
    .venv/bin/python bench/bench_gate_oc.py --n 8 100 --flake 0.05 --reps 300 --json f.json
    .venv/bin/python bench/bench_gate_oc.py --n 100 --flake 0.2 --critical-adjust holm
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalkit.compare.policy import GatePolicy  # noqa: E402
from evalkit.compare.power import operating_characteristics  # noqa: E402

TAGS = ("tag-a", "tag-b", "tag-c", "tag-d")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """`operating_characteristics` of four equal critical tags at each ``--n``."""
    policy = GatePolicy(critical_adjust=args.critical_adjust, mid_p=args.mid_p)
    figures = operating_characteristics(
        [dict.fromkeys(TAGS, n) for n in args.n], args.flake, args.drops, args.reps,
        args.power_reps, args.power_flake, args.pass_rate, args.seed, policy,
    )  # fmt: skip
    return {"settings": {k: v for k, v in vars(args).items() if k != "json"}, **figures}


def _print(f: dict[str, Any]) -> None:
    s = f["settings"]
    print(f"gate OC: alpha {f['alpha']}, tolerance {f['tolerance']}, pass rate "
          f"{s['pass_rate']}, seed {s['seed']}; {s['reps']} corpora x 4 tags per cell")  # fmt: skip
    print("(a) no true change: false-block rate per critical tag, and family-wise with 1-4 tags")
    print("| flake | n | per tag (± MC s.e. of the estimate) | s.e. at alpha | 1 tag | 2 tags | "
          "3 tags | 4 tags |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in f["null"]:
        fw = " | ".join(f"{r['fwer'][str(t)]:.3f}" for t in range(1, 5))
        print(f"| {r['flake']:.0%} | {r['n']} | {r['per_tag']:.4f} ± {r['mc_se']:.4f} | "
              f"{r['se_at_alpha']:.4f} | {fw} |")  # fmt: skip
    print(f"(b) power per critical tag (flake {s['power_flake']:.0%}, {s['power_reps']} corpora)")
    drops = sorted({r["drop"] for r in f["power"]})
    print("| n | " + " | ".join(f"drop {100 * d:.0f} pts" for d in drops) + " |")
    print("|---|" + "---|" * len(drops))
    for n in sorted({r["n"] for r in f["power"]}):
        cells = {r["drop"]: r["power"] for r in f["power"] if r["n"] == n}
        print(f"| {n} | " + " | ".join(f"{cells[d]:.3f}" for d in drops) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulation and print its tables (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[8, 13, 30, 100, 300])
    parser.add_argument("--flake", type=float, nargs="+", default=[0.0, 0.02, 0.05])
    parser.add_argument("--drops", type=float, nargs="+", default=[0.05, 0.10, 0.20])
    parser.add_argument("--reps", type=int, default=1000, help="corpora per null cell")
    parser.add_argument("--power-reps", type=int, default=250, help="corpora per power cell")
    parser.add_argument("--power-flake", type=float, default=0.02)
    parser.add_argument("--pass-rate", type=float, default=0.85)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--critical-adjust", choices=("none", "holm"), default="none",
                        help="gate.critical_adjust: Holm across the critical tags")  # fmt: skip
    parser.add_argument("--mid-p", action="store_true", help="gate.mid_p: the exact mid-p")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args)
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
