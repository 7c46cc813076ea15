"""Do the candidate's gains transfer? Its paired gain on the live cases against its gain on
the sealed (held-out) cases, the overfitting detector of the seeds: a prompt tuned until the
live corpus passes gains there and not on cases nobody iterated on.

Each side's gain is the mean per-case difference, cand − base, over the cases decided in both
runs (pass/fail: −1, 0 or +1), a *paired* difference within its slice. The two slices are
different cases, so their gap (live gain − sealed gain) is an *unpaired* difference of two
paired differences:

* its interval is MOVER (Newcombe's square-and-add; Zou & Donner 2008) over each slice's Tango
  score interval for its paired gain (`evalkit.stats.paired_diff_interval`, method "tango"):
  unlike a bootstrap, a sealed slice with no flips still gets an interval of honest width;
* "gains do not transfer" also needs the exact conditional test of "both slices share one
  truth" (the live and sealed cases' changes exchangeable): given the pooled counts of +1, 0
  and −1, the sealed slice's sum is multivariate hypergeometric, and the one-sided p is
  P(sealed sum <= observed). Exact at every (live, sealed) size, so under a shared truth "does
  not transfer" fires at most (1 − level) / 2 of the time (2.5 % at 95 %; checked by a seeded
  simulation in the tests and ``bench/bench_transfer.py``).

The gains do not transfer when the live gain is positive, the gap's interval lies above zero
and the exact test agrees; they transfer when the interval lies below the live gain (the sealed
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

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from evalkit import stats
from evalkit.compare.decision import Finding, Severity

#: Fewer decided cases than this on either side: no interval, no verdict.
MIN_CASES = 2


@dataclass(frozen=True)
class Transfer:
    """The two gains, their gap, its interval and the exact test's one-sided p (None below
    `MIN_CASES` on a side). ``iters`` and ``seed`` are kept for callers; nothing resamples."""

    live_n: int
    sealed_n: int
    live_gain: float | None
    sealed_gain: float | None
    lo: float | None
    hi: float | None
    level: float
    iters: int
    seed: int
    p_value: float | None = None

    @property
    def gap(self) -> float | None:
        """live gain − sealed gain."""
        if self.live_gain is None or self.sealed_gain is None:
            return None
        return self.live_gain - self.sealed_gain

    @property
    def verdict(self) -> Literal["transfer", "no transfer", "inconclusive", "untested"]:
        """``no transfer``: the live gain is positive, the gap's interval lies above zero and
        the exact test's p is at most (1 - level) / 2;
        ``transfer``: the gap's interval lies below the live gain (the sealed cases keep some
        of it, beyond the noise); ``inconclusive``: neither (a sealed slice too small to tell);
        ``untested``: fewer than `MIN_CASES` decided cases on a side."""
        if self.lo is None or self.hi is None or self.live_gain is None:
            return "untested"
        side = (1 - self.level) / 2
        if self.live_gain > 0 and self.lo > 0 and (self.p_value or 1.0) <= side:
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
            f"{lead} (live {_pts(self.live_gain)}, sealed {_pts(self.sealed_gain)}, unpaired "
            f"gap {_pts(self.gap)}, {self.level:.0%} CI [{100 * (self.lo or 0):+.1f}, "
            f"{100 * (self.hi or 0):+.1f}] pts, exact one-sided p = {self.p_value or 1.0:.2g}; "
            f"{self.live_n} live, {self.sealed_n} sealed cases)"
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


def _gain_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    """Tango's score interval for a slice's paired gain (fixed - broken) / n."""
    broken, fixed = int((d < 0).sum()), int((d > 0).sum())
    r = stats.paired_diff_interval(broken, fixed, len(d), level, method="tango")
    return r.lo, r.hi


def _mover(
    g1: float, i1: tuple[float, float], g2: float, i2: tuple[float, float]
) -> tuple[float, float]:
    """MOVER interval for g1 - g2 from the two independent intervals (Zou & Donner 2008)."""
    gap = g1 - g2
    lo = gap - math.sqrt((g1 - i1[0]) ** 2 + (i2[1] - g2) ** 2)
    hi = gap + math.sqrt((i1[1] - g1) ** 2 + (g2 - i2[0]) ** 2)
    return max(-2.0, lo), min(2.0, hi)


def exchangeable_p(live: np.ndarray, sealed: np.ndarray) -> float:
    """Exact one-sided p that the live gain exceeds the sealed gain when both slices share one
    truth: P(sealed sum <= observed) with the sealed cases a random draw, without replacement,
    of the pooled changes (multivariate hypergeometric over the counts of +1 and -1).

    Examples:
        >>> live = np.array([1] * 12 + [0] * 88); sealed = np.array([0] * 20)
        >>> round(exchangeable_p(live, sealed), 4)   # scipy.stats.hypergeom.cdf(0, 120, 12, 20)
        0.0996
    """
    from scipy.special import gammaln  # here: only the gate's transfer check needs it

    pooled = np.concatenate([live, sealed])
    big_f, big_b, n_s = int((pooled > 0).sum()), int((pooled < 0).sum()), len(sealed)
    big_u, big_n = len(pooled) - big_f - big_b, len(pooled)
    t_obs = int(sealed.sum())
    f = np.arange(min(big_f, n_s) + 1)[:, None]
    b = np.arange(min(big_b, n_s) + 1)[None, :]
    u = n_s - f - b
    ok = (u >= 0) & (u <= big_u)

    def lc(n: Any, k: Any) -> Any:  # log C(n, k), elementwise
        return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)

    with np.errstate(invalid="ignore"):
        logp = lc(big_f, f) + lc(big_b, b) + lc(big_u, np.clip(u, 0, big_u)) - lc(big_n, n_s)
    prob = np.where(ok, np.exp(logp), 0.0)
    return float(min(1.0, prob[(f - b) <= t_obs].sum()))


def transfer(
    paired: pl.DataFrame, iters: int = 10_000, level: float = 0.95, seed: int = 0
) -> Transfer:
    """Compare the paired gain on live cases with the gain on sealed cases.

    ``paired`` is a comparison's paired frame (``sealed, base, cand``; null where a side
    errored), both runs having run the sealed cases (``evalkit run --sealed``).
    """
    live, held = _diffs(paired, False), _diffs(paired, True)
    gains = [float(d.mean()) if len(d) else None for d in (live, held)]
    lo = hi = p = None
    if min(len(live), len(held)) >= MIN_CASES:
        lo, hi, p = gap_test(live, held, level)
    return Transfer(len(live), len(held), gains[0], gains[1], lo, hi, level, iters, seed, p)


def gap_test(live: np.ndarray, held: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """``(lo, hi, p)`` for the gap live gain − sealed gain of two slices' per-case changes
    (−1, 0, +1): the MOVER interval over the two Tango intervals, and `exchangeable_p`.

    Examples:
        >>> lo, hi, p = gap_test(np.array([1] * 12 + [0] * 88), np.array([-1] * 2 + [0] * 38))
        >>> round(lo, 3), round(hi, 3), p < 0.025
        (0.065, 0.309, True)
    """
    g_l, g_s = float(live.mean()), float(held.mean())
    lo, hi = _mover(g_l, _gain_interval(live, level), g_s, _gain_interval(held, level))
    return lo, hi, exchangeable_p(live, held)


def transfer_finding(result: Transfer) -> Finding | None:
    """The gate's finding: warn when the gains do not transfer, info otherwise; None when the
    runs hold too few sealed cases to test it (nothing to say beyond the sealed table)."""
    if result.verdict == "untested":
        return None
    stat = {
        "live_gain": result.live_gain, "sealed_gain": result.sealed_gain, "gap": result.gap,
        "lo": result.lo, "hi": result.hi, "live_n": result.live_n, "sealed_n": result.sealed_n,
        "level": result.level, "p_value": result.p_value,
    }  # fmt: skip
    severity: Severity = "warn" if result.verdict == "no transfer" else "info"
    return Finding(3, "sealed", (), stat, result.message(), severity, "transfer")
