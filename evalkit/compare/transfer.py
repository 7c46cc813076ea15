"""Do the candidate's gains transfer? Its paired gain on the live cases against its gain on
the sealed (held-out) cases, the overfitting detector of the seeds: a prompt tuned until the
live corpus passes gains there and not on cases nobody iterated on.

Each side's gain is the mean per-case difference, cand − base, over the cases decided in both
runs (pass/fail: −1, 0 or +1). The two slices are different cases, so the interval on the gap
(live gain − sealed gain) resamples each slice's cases on its own, as multinomial counts of the
three differences (vectorized, seeded). The gains do not transfer when that interval lies above
zero while the live gain is positive; they transfer when it lies below the live gain (the sealed
cases keep part of it beyond the noise); otherwise the sealed slice is too small to tell.

Examples:
    >>> import polars as pl
    >>> live = [(False, True)] * 12 + [(True, True)] * 88
    >>> sealed = [(True, True)] * 20 + [(True, False)] * 2
    >>> rows = [(f"l{i}", False, b, c) for i, (b, c) in enumerate(live)]
    >>> rows += [(f"s{i}", True, b, c) for i, (b, c) in enumerate(sealed)]
    >>> paired = pl.DataFrame(rows, schema=["case_id", "sealed", "base", "cand"], orient="row")
    >>> transfer(paired).message()[:56]
    'gains do not transfer (live +12.0 pts, sealed -9.1 pts, '
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from evalkit.compare.decision import Finding

#: Fewer decided cases than this on either side: no interval, no verdict.
MIN_CASES = 2


@dataclass(frozen=True)
class Transfer:
    """The two gains, their gap and its interval (None below `MIN_CASES` on a side)."""

    live_n: int
    sealed_n: int
    live_gain: float | None
    sealed_gain: float | None
    lo: float | None
    hi: float | None
    level: float
    iters: int
    seed: int

    @property
    def gap(self) -> float | None:
        """live gain − sealed gain."""
        if self.live_gain is None or self.sealed_gain is None:
            return None
        return self.live_gain - self.sealed_gain

    @property
    def verdict(self) -> Literal["transfer", "no transfer", "inconclusive", "untested"]:
        """``no transfer``: the live gain is positive and the gap's interval lies above zero;
        ``transfer``: the gap's interval lies below the live gain (the sealed cases keep some
        of it, beyond the noise); ``inconclusive``: neither (a sealed slice too small to tell);
        ``untested``: fewer than `MIN_CASES` decided cases on a side."""
        if self.lo is None or self.hi is None or self.live_gain is None:
            return "untested"
        if self.live_gain > 0 and self.lo > 0:
            return "no transfer"
        return "transfer" if self.hi < self.live_gain else "inconclusive"

    @property
    def transfers(self) -> bool | None:
        """True or False when the data say so; None when inconclusive or untested."""
        return {"transfer": True, "no transfer": False}.get(self.verdict)

    def message(self) -> str:
        """One line: "gains transfer (…)", "gains do not transfer (…)" or why it cannot tell."""
        if self.verdict == "untested":
            return (
                f"transfer not tested: {self.sealed_n} sealed and {self.live_n} live case(s) "
                f"decided in both runs (needs ≥ {MIN_CASES} each); run both with `evalkit run "
                "--sealed`"
            )
        lead = {
            "transfer": "gains transfer",
            "no transfer": "gains do not transfer",
            "inconclusive": "gains not shown to transfer: too few sealed cases to tell",
        }[self.verdict]
        return (
            f"{lead} (live {_pts(self.live_gain)}, sealed {_pts(self.sealed_gain)}, paired "
            f"difference {_pts(self.gap)}, {self.level:.0%} CI [{100 * (self.lo or 0):+.1f}, "
            f"{100 * (self.hi or 0):+.1f}] pts; {self.live_n} live, {self.sealed_n} sealed cases)"
        )


def _pts(x: float | None) -> str:
    if x is None:
        return "–"
    v = round(100 * x, 1)
    return f"{v:+.1f} pt" + ("" if abs(v) == 1 else "s")


def _diffs(paired: pl.DataFrame, sealed: bool) -> np.ndarray:
    held = pl.col("sealed").fill_null(False)
    rows = paired.filter((held if sealed else ~held) & pl.col("base").is_not_null())
    rows = rows.filter(pl.col("cand").is_not_null())
    if "origin" in rows.columns:  # rebaselined cases pair other runs: not this comparison
        rows = rows.filter(pl.col("origin").fill_null("paired") == "paired")
    return (rows["cand"].cast(pl.Int8) - rows["base"].cast(pl.Int8)).to_numpy()


def _resampled_means(d: np.ndarray, iters: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``iters`` bootstrap resamples of ``d`` (values −1, 0, +1) as multinomial counts."""
    values = np.array([-1, 0, 1])
    p = np.array([(d == v).mean() for v in values])
    counts = rng.multinomial(len(d), p, size=iters)
    return counts @ values / len(d)


def transfer(
    paired: pl.DataFrame, iters: int = 10_000, level: float = 0.95, seed: int = 0
) -> Transfer:
    """Compare the paired gain on live cases with the gain on sealed cases.

    ``paired`` is a comparison's paired frame (``sealed, base, cand``; null where a side
    errored), both runs having run the sealed cases (``evalkit run --sealed``).
    """
    live, held = _diffs(paired, False), _diffs(paired, True)
    gains = [float(d.mean()) if len(d) else None for d in (live, held)]
    lo = hi = None
    if min(len(live), len(held)) >= MIN_CASES:
        rng = np.random.default_rng(seed)
        gaps = _resampled_means(live, iters, rng) - _resampled_means(held, iters, rng)
        tail = (1 - level) / 2
        lo, hi = (float(q) for q in np.quantile(gaps, [tail, 1 - tail]))
    return Transfer(len(live), len(held), gains[0], gains[1], lo, hi, level, iters, seed)


def transfer_finding(result: Transfer) -> Finding | None:
    """The gate's finding: warn when the gains do not transfer, info otherwise; None when the
    runs hold too few sealed cases to test it (nothing to say beyond the sealed table)."""
    if result.verdict == "untested":
        return None
    stat = {
        "live_gain": result.live_gain, "sealed_gain": result.sealed_gain, "gap": result.gap,
        "lo": result.lo, "hi": result.hi, "live_n": result.live_n, "sealed_n": result.sealed_n,
        "level": result.level, "iters": result.iters, "seed": result.seed,
    }  # fmt: skip
    severity = "warn" if result.verdict == "no transfer" else "info"
    return Finding(3, "sealed", (), stat, result.message(), severity, "transfer")
