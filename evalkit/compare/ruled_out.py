"""What a passing critical tag rules out, and what it could detect before any run.

"No evidence of regression" on a small tag leaves a reader believing more than the data say:
8 cases with no flips cannot exclude a 32-point drop. So for every critical tag the gate
states, on the first screen:

* **rules out**: the drop the data exclude at the gate's level, −(lower bound of the tag's
  paired-difference interval at `GatePolicy.interval_level`: one-sided (1 + level) / 2, 97.5 %
  at the default 95 %). A drop larger than that is excluded; a smaller one is not;
* **minimum detectable drop**: the smallest drop, every flip a break, that the one-sided exact
  McNemar test at ``alpha`` detects with ``power`` at the tag's size
  (`evalkit.stats.gate_power.min_detectable_collapse`) — known before any run (``evalkit plan``);
  None when even 100 points is not enough (the tag cannot block).

Examples:
    >>> from evalkit.compare.decision import SliceState
    >>> s = SliceState(tag="negation", state="no evidence of regression", n=8, n_error=0,
    ...     broken=0, fixed=0, p_value=1.0, diff=0.0, lo=-0.3123, hi=0.3123, psi=0.02,
    ...     psi_assumed=True, required_n=335, power=0.0)
    >>> ruled_out_findings([s], GatePolicy(critical_tags=("negation",)))[0].message
    "critical tag 'negation' shows no evidence of regression, which is not evidence of none: ..."
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from evalkit import stats
from evalkit.compare.decision import Finding, SliceState
from evalkit.compare.policy import GatePolicy

#: States whose tags were gated and did not regress: what did the data rule out?
_PASSING = ("no evidence of regression", "underpowered")


def ruled_out_drop(lower_bound: float | None) -> float | None:
    """The drop the data rule out (a positive share), from the interval's lower bound on
    cand − base; 0.0 when the bound is at or above 0 (any drop is excluded); None without one.

    Examples:
        >>> ruled_out_drop(-0.3123), ruled_out_drop(0.01), ruled_out_drop(None)
        (0.3123, 0.0, None)
    """
    if lower_bound is None:
        return None
    return max(0.0, -lower_bound)


def ruled_out_findings(states: Sequence[SliceState], policy: GatePolicy) -> list[Finding]:
    """One info finding per gated critical tag that did not regress: the drop its data rule out
    and the drop its size can detect (module docstring)."""
    level = policy.interval_level()
    one_sided = (1 + level) / 2
    out = []
    for s in states:
        if s.state not in _PASSING:
            continue
        drop = ruled_out_drop(s.lo)
        mdd = stats.min_detectable_collapse(s.n, policy.alpha, policy.power)
        if drop is None:
            continue
        can = (
            f"at {s.n} cases it detects a drop of {100 * mdd:.0f} points or more (every flip a "
            f"break) with {policy.power:.0%} power"
            if mdd is not None
            else f"at {s.n} cases no drop reaches {policy.power:.0%} power: it can barely block"
        )
        msg = (
            f"critical tag {s.tag!r} shows no evidence of regression, which is not evidence of "
            f"none: its data "
            f"rule out a drop of more than {100 * drop:.0f} points (one-sided {one_sided:.1%} "
            f"bound), not a smaller one; {can}"
        )
        stat = {"n": s.n, "ruled_out_drop": drop, "min_detectable_drop": mdd,
                "one_sided_level": one_sided, "lo": s.lo}  # fmt: skip
        out.append(Finding(2, s.tag, (), stat, msg, severity="info", kind="rules-out"))
    return out


def critical_options(table: pl.DataFrame, policy: GatePolicy) -> pl.DataFrame:
    """The slice table as the critical tier reads it under the policy's options (unchanged by
    default): ``gate.mid_p`` replaces each slice's one-sided exact p by its mid-p;
    ``gate.critical_adjust: holm`` replaces the critical tags' p by Holm-adjusted values across
    the critical tags gated, and lets an interval block only where that adjusted p does (the
    upper bound is raised to 0 elsewhere, as Tango-exact does for the exact test).

    Examples:
        >>> t = pl.DataFrame({"slice": ["a", "b"], "n": [20, 20], "broken": [6, 6],
        ...     "fixed": [0, 0], "p_value": [0.015625, 0.015625], "diff_hi": [-0.05, -0.05]})
        >>> p = GatePolicy(critical_tags=("a", "b"), critical_adjust="holm")
        >>> critical_options(t, p)["p_value"].to_list()
        [0.03125, 0.03125]
    """
    if policy.mid_p:
        table = table.with_columns(
            p_value=pl.struct("broken", "fixed").map_elements(
                lambda r: stats.mcnemar_exact(r["broken"], r["fixed"], mid_p=True), pl.Float64
            )
        )
    if policy.critical_adjust != "holm":
        return table
    crit = table.filter(pl.col("slice").is_in(list(policy.critical_tags)) & (pl.col("n") > 0))
    if crit.is_empty():
        return table
    adjusted = dict(zip(crit["slice"], stats.holm(crit["p_value"].to_numpy()), strict=True))
    p_adj = pl.col("slice").replace_strict(adjusted, default=pl.col("p_value"))
    return table.with_columns(p_value=p_adj).with_columns(
        diff_hi=pl.when(pl.col("p_value") > policy.alpha)
        .then(pl.max_horizontal("diff_hi", pl.lit(0.0)))
        .otherwise("diff_hi")
    )
