"""Statistics at scale: ``paired_bootstrap`` with 10,000 resamples over 100k cases.

Three kinds of per-case scores, drawn from a seeded generator with a known true difference:

``passfail``
    pass/fail per case (the gate's case): differences take 3 values, so each resample is drawn as
    multinomial counts over them (O(values) per resample, not O(cases)).
``judge``
    1-5 judge levels: 9 distinct differences, the same multinomial path.
``continuous``
    similarity-style scores in [0, 1]: every difference is distinct, so cases are resampled by
    index, ``chunk`` resamples at a time (memory O(chunk x cases), not O(iters x cases)).

For each kind: the wall time of ``paired_bootstrap`` (median of ``--repeats``), then its peak
memory (numpy allocations traced by ``tracemalloc``) at several ``--mem-iters`` (the index path:
``--mem-iters-index``, 100 times fewer: it draws ``cases`` indices per resample), which stays
flat as iters grows because resamples are drawn in bounded chunks. The interval is checked to
bracket the true difference of the generator.

Usage:
    .venv/bin/python bench/bench_bootstrap.py
    .venv/bin/python bench/bench_bootstrap.py --cases 1000 --mem-iters 100 1000 --json f.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.stats import paired_bootstrap  # noqa: E402

KINDS = ("passfail", "judge", "continuous")


def draw(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(base, cand, true mean difference) for ``n`` cases of ``kind``."""
    rng = np.random.default_rng(seed)
    if kind == "passfail":  # the candidate passes 2 points less often
        base = (rng.random(n) < 0.90).astype(float)
        cand = np.where(rng.random(n) < 0.05, 1 - base, base)  # 5% of cases flip...
        flips_up = (base == 0) & (cand == 1)
        cand[flips_up & (rng.random(n) < 0.9)] = 0  # ...mostly downwards
        p_down, p_up = 0.90 * 0.05, 0.10 * 0.05 * 0.1
        return base, cand, p_up - p_down
    if kind == "judge":  # 1-5 levels; 10% of candidate answers are any level (9 differences)
        base = rng.integers(1, 6, n).astype(float)
        step = rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.35, 0.55, 0.10])
        cand = np.where(rng.random(n) < 0.1, rng.integers(1, 6, n), np.clip(base + step, 1, 5))
        levels = np.arange(1, 6, dtype=float)
        moved = np.clip(levels[:, None] + np.array([-1.0, 0.0, 1.0]), 1, 5) - levels[:, None]
        stepped = float((moved @ np.array([0.35, 0.55, 0.10])).mean())
        return base, cand.astype(float), 0.9 * stepped  # a random level moves 0 on average
    base = rng.beta(8, 2, n)  # similarity scores, mean 0.8
    cand = np.clip(base + rng.normal(-0.01, 0.05, n), 0, 1)
    true = float(np.mean(np.clip(rng.beta(8, 2, 2_000_000) + rng.normal(-0.01, 0.05, 2_000_000),
                                 0, 1)) - 0.8)  # fmt: skip
    return base, cand, true


def _peak_bytes(base: np.ndarray, cand: np.ndarray, iters: int) -> int:
    """Peak bytes numpy allocated during one ``paired_bootstrap`` call."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    paired_bootstrap(base, cand, iters=iters, seed=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def measure(
    kind: str, n: int, iters: int, repeats: int, mem_iters: Sequence[int]
) -> dict[str, Any]:
    """Time, peak memory and the interval of one kind."""
    base, cand, true = draw(kind, n, seed=7)
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = paired_bootstrap(base, cand, iters=iters, seed=1)
        times.append(time.perf_counter() - started)
    assert result is not None
    memory = {str(m): _peak_bytes(base, cand, m) / 2**20 for m in mem_iters}
    speed = n * iters / statistics.median(times) if kind == "continuous" else None
    return {
        "distinct_differences": int(np.unique(cand - base).size),
        "seconds": statistics.median(times),
        "all_seconds": times,
        "peak_mib_by_iters": memory,
        "input_mib": (base.nbytes + cand.nbytes) / 2**20,
        "draws_per_s": speed,
        "diff": result.diff,
        "lo": result.lo,
        "hi": result.hi,
        "true_diff": true,
        "brackets_true": result.lo <= true <= result.hi,
        "brackets_diff": result.lo <= result.diff <= result.hi,
    }


def _print(figures: dict[str, Any]) -> None:
    s = figures["settings"]
    print(f"cores: {figures['cores']}")
    print(f"paired_bootstrap: {s['cases']} cases, {s['iters']} resamples, level 0.95")
    for kind, f in figures["kinds"].items():
        mem = ", ".join(f"{k}: {v:.1f}" for k, v in f["peak_mib_by_iters"].items())
        print(
            f"  {kind:10} {f['distinct_differences']:>6} distinct diffs  {f['seconds']:.3f} s  "
            f"diff {f['diff']:+.4f} [{f['lo']:+.4f}, {f['hi']:+.4f}] true {f['true_diff']:+.4f} "
            f"bracketed {f['brackets_true']}"
        )
        print(f"  {'':10} peak MiB by iters ({mem}); inputs {f['input_mib']:.1f} MiB")
        if f["draws_per_s"]:
            print(f"  {'':10} index resampling: {f['draws_per_s'] / 1e6:.0f} M case draws/s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per kind (median)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--mem-iters", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--mem-iters-index", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = {
        "cores": os.cpu_count(),
        "settings": {"cases": args.cases, "iters": args.iters},
        "kinds": {
            k: measure(
                k,
                args.cases,
                args.iters,
                args.repeats,
                args.mem_iters_index if k == "continuous" else args.mem_iters,
            )
            for k in args.kinds
        },
    }
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
