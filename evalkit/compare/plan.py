"""What the gate can see before any run: per critical tag, its cases, whether it can block at
all, the smallest drop it detects with the policy's power, and the cases it would need for a
drop of the tolerance, all on the test the gate runs (one-sided exact McNemar on majority
verdicts; `evalkit.stats.gate_power`). No model call: counts and the policy only.
``evalkit plan`` prints it, with each tag's judges and their calibration state.

Examples:
    >>> from evalkit.compare.policy import GatePolicy
    >>> rows = plan_tags({"billing": 13, "negation": 6}, GatePolicy(critical_tags=("billing",
    ...     "negation")))
    >>> [(r.tag, r.cases, r.can_block, r.min_detectable_collapse) for r in rows]
    [('billing', 13, True, 0.47), ('negation', 6, False, 0.87)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalkit import stats
from evalkit.compare.policy import GatePolicy
from evalkit.compare.power import min_detectable_collapse


@dataclass(frozen=True)
class JudgeState:
    """A judge check used by a tag's cases and its calibration state, before any run."""

    scorer: str
    rubric: str
    judge_model: str | None
    state: str  # "calibrated: may gate", "no calibration record: reports, never blocks", ...


@dataclass(frozen=True, kw_only=True)
class TagPlan:
    """One critical tag before any run (see the module docstring). ``min_detectable_collapse``:
    the smallest drop, every flip a break, detected with the policy's power (None: none is);
    ``min_detectable_drift``: the same for a drop among flips both ways at flip fraction
    ``psi`` (None: none is); ``required_n``: cases for a drop of the tolerance at ``psi``."""

    tag: str
    cases: int
    can_block: bool
    min_detectable_collapse: float | None
    min_detectable_drift: float | None
    psi: float
    required_n: int
    power_at_tolerance: float
    replays: int
    judges: tuple[JudgeState, ...] = ()


def min_detectable_drift(
    n: int, psi: float, alpha: float = 0.05, power: float = 0.8, replays: int = 1,
    flake: float = 0.0,
) -> float | None:  # fmt: skip
    """Smallest net drop (1-point steps, up to ``psi``) that the exact test detects with
    ``power`` on ``n`` cases at flip fraction ``psi``; None when even a drop of psi does not.

    Examples:
        >>> min_detectable_drift(300, 0.10), min_detectable_drift(30, 0.10)
        (0.05, None)
    """
    for drop in np.arange(1, round(100 * psi) + 1) / 100:
        p = stats.exact_power_gate(n, psi, float(drop), alpha, replays=replays, flake=flake)
        if n and p >= power:
            return float(drop)
    return None


def plan_tags(
    counts: Mapping[str, int],
    policy: GatePolicy,
    psi: float = 0.10,
    replays: int = 1,
    judges: Mapping[str, Sequence[JudgeState]] | None = None,
) -> list[TagPlan]:
    """A `TagPlan` per critical tag of ``policy`` (``counts``: cases per tag in the corpus)."""
    tol, rows = policy.tolerance, []
    psi_t = max(psi, tol)
    for tag in policy.critical_tags:
        n = counts.get(tag, 0)
        need = (
            stats.required_n_exact(psi_t, tol, policy.alpha, policy.power, replays=replays)
            if tol > 0
            else 0
        )
        power = stats.exact_power_gate(n, psi_t, tol, policy.alpha) if n and tol > 0 else 0.0
        rows.append(
            TagPlan(
                tag=tag,
                cases=n,
                can_block=n >= policy.min_cases(),
                min_detectable_collapse=min_detectable_collapse(n, policy.alpha, policy.power),
                min_detectable_drift=min_detectable_drift(
                    n, psi, policy.alpha, policy.power, replays
                ),
                psi=psi,
                required_n=need,
                power_at_tolerance=power,
                replays=replays,
                judges=tuple((judges or {}).get(tag, ())),
            )
        )
    return rows


def render_plan(rows: Sequence[TagPlan], policy: GatePolicy) -> str:
    """The plan as text: a line per critical tag, then its judges.

    Examples:
        >>> print(render_plan(plan_tags({"billing": 13}, GatePolicy(critical_tags=("billing",))),
        ...                   GatePolicy(critical_tags=("billing",))))  # doctest: +ELLIPSIS
        plan: one-sided exact McNemar at alpha 0.05, power 80%, ...
        billing: 13 cases, can block; MDE 47 pts (every flip a break), ...
    """
    head = (
        f"plan: one-sided exact McNemar at alpha {policy.alpha:g}, power {policy.power:.0%}, "
        f"tolerance {100 * policy.tolerance:g} pts; no model call"
    )
    lines = [head]
    for r in rows:
        mde = (
            f"MDE {100 * r.min_detectable_collapse:.0f} pts (every flip a break)"
            if r.min_detectable_collapse is not None
            else "no drop reaches the power (MDE none)"
        )
        drift = (
            f"{100 * r.min_detectable_drift:.0f} pts among {100 * r.psi:.0f}% flips"
            if r.min_detectable_drift is not None
            else f"no drift within {100 * r.psi:.0f}% flips"
        )
        block = "can block" if r.can_block else f"cannot block (< {policy.min_cases()} cases)"
        lines.append(
            f"{r.tag}: {r.cases} cases, {block}; {mde}, {drift}; a "
            f"{100 * policy.tolerance:g}-pt drop needs ≈{r.required_n} cases at "
            f"{100 * max(r.psi, policy.tolerance):g}% flips (power now {r.power_at_tolerance:.0%})"
        )
        lines += [f"  judge {j.scorer} ({j.rubric}, {j.judge_model or '?'}): {j.state}"
                  for j in r.judges] or ["  judges: none (deterministic checks only)"]  # fmt: skip
    return "\n".join(lines)
