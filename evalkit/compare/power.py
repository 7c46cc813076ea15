"""What each slice can detect: the exact power of the gate's one-sided McNemar test and the
paired sizing it uses, per slice (``notebooks/power.ipynb`` charts it)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from evalkit import stats
from evalkit.compare.policy import GatePolicy


def min_detectable_collapse(n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Smallest drop (in steps of 1 point, every flip a break) that the gate's exact one-sided
    McNemar test detects with ``power`` on ``n`` cases; None when even 100 points is not enough.

    Examples:
        >>> min_detectable_collapse(13), min_detectable_collapse(6), min_detectable_collapse(4)
        (0.47, 0.87, None)
    """
    for drop in np.arange(1, 101) / 100:
        if n and stats.exact_power_paired(n, drop, drop, alpha) >= power:
            return float(drop)
    return None


def power_table(
    counts: Mapping[str, int], drop: float = 0.05, psi: float = 0.10,
    policy: GatePolicy | None = None,
) -> pl.DataFrame:  # fmt: skip
    """What each slice can detect, with the paired (McNemar) sizing the gate uses.

    Per slice: ``can_gate`` (n ≥ `GatePolicy.min_cases`); ``min_detectable_drop``, the drift a
    slice detects at flip fraction ``psi`` (Connor, one-sided; null when even a drop of psi,
    every flip a break, needs more cases); ``min_detectable_collapse`` (exact, every flip a
    break); ``required_n`` for a net ``drop`` at flip fraction max(psi, drop); and ``power``,
    the exact power for that drop at the slice's n. At the policy's alpha and power.

    Examples:
        >>> t = power_table({"billing": 100, "negation": 6}, drop=0.05, psi=0.10)
        >>> t.select("slice", "required_n", "can_gate", "min_detectable_collapse").rows()
        [('billing', 246, True, 0.07), ('negation', 246, False, 0.87)]
    """
    pol, psi_d = policy or GatePolicy(), max(psi, drop)
    need = stats.required_n_paired(psi_d, drop, pol.alpha, pol.power, "one-sided")
    rows = []
    for tag, n in sorted(counts.items()):
        mdd = (
            stats.min_detectable_drop_paired(n, psi, pol.alpha, pol.power, "one-sided")
            if n
            else None
        )
        rows.append({
            "slice": tag, "n": n, "can_gate": n >= pol.min_cases(),
            "min_detectable_drop": None if mdd is None or np.isnan(mdd) else mdd,
            "min_detectable_collapse": min_detectable_collapse(n, pol.alpha, pol.power),
            "required_n": need, "power": stats.exact_power_paired(n, psi_d, drop, pol.alpha),
        })  # fmt: skip
    schema = {"slice": pl.String, "n": pl.Int64, "can_gate": pl.Boolean,
              "min_detectable_drop": pl.Float64, "min_detectable_collapse": pl.Float64,
              "required_n": pl.Int64, "power": pl.Float64}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
