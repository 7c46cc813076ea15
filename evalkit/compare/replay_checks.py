"""What the gate says about the replays behind its verdicts: a judge deciding a critical tag on
fewer than `MIN_JUDGE_REPLAYS` replays (seed 003: one judge verdict per case is noisy), and a
``k_of_n`` rule whose n is not the runs' replay count.

Examples:
    >>> p = pl.DataFrame({"case_id": ["a", "b"], "tags": [["billing"], ["x"]],
    ...     "cand_judge_level": [4.0, None]})
    >>> [f.message[:63] for f in replay_findings(p, GatePolicy(critical_tags=("billing",)), 1)]
    ["a judge decides critical tag 'billing' (1 case) on 1 replay per"]
"""

from __future__ import annotations

import polars as pl

from evalkit.compare.decision import Finding
from evalkit.compare.pass_rules import PassRule
from evalkit.compare.policy import GatePolicy

# Replays per case below which a judge's verdict on a critical tag is warned about (seed 003),
# the same figure `evalkit run` warns at.
from evalkit.run.caveats import MIN_JUDGE_REPLAYS

_JUDGED = ("base_judge_level", "cand_judge_level")


def replay_findings(paired: pl.DataFrame, policy: GatePolicy, replays: int) -> list[Finding]:
    """Warnings about the replays behind the paired verdicts; ``replays`` is the smaller replay
    count of the two runs. A case counts as judge-decided when a judge allowed to gate scored
    it on either side (its ``base_judge_level``/``cand_judge_level``, `evalkit.compare.analysis
    .compare`): an uncalibrated judge is reported, not gated, and decides nothing.
    """
    out = []
    judged = [pl.col(c).is_not_null() for c in _JUDGED if c in paired.columns]
    if judged and replays < MIN_JUDGE_REPLAYS:
        live = (
            paired.filter(~pl.col("sealed").fill_null(False))
            if "sealed" in paired.columns
            else paired
        )
        decided = live.filter(pl.any_horizontal(judged))
        for tag in policy.critical_tags:
            ids = decided.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
            if not ids:
                continue
            n = len(ids)
            msg = (
                f"a judge decides critical tag {tag!r} ({n} case{'s' * (n != 1)}) on {replays} "
                f"replay{'s' * (replays != 1)} per case (< {MIN_JUDGE_REPLAYS}): one judge "
                f"verdict per case is noisy; run both sides with replays: {MIN_JUDGE_REPLAYS} "
                "(`evalkit.stats.required_n_replays` sizes cases × replays)"
            )
            stat = {"replays": replays, "min_replays": MIN_JUDGE_REPLAYS, "judged": n}
            out.append(Finding(2, tag, (), stat, msg, severity="warn", kind="few-judge-replays"))
    for scope, rule in _k_of_n_rules(policy):
        if rule.den != replays:
            need = -(-rule.num * replays // rule.den)  # ceil: passes needed of `replays`
            msg = (
                f"pass rule {rule.name} ({scope}) on {replays} replay{'s' * (replays != 1)}: a "
                f"case passes with {need} of {replays} decided replays (at least {rule.num}/"
                f"{rule.den} of them); run {rule.den} replays for the rule as written"
            )
            stat = {"replays": replays, "num": rule.num, "den": rule.den, "needed": need}
            out.append(
                Finding(0, "replays", (), stat, msg, severity="info", kind="pass-rule-replays")
            )
    return out


def _k_of_n_rules(policy: GatePolicy) -> list[tuple[str, PassRule]]:
    rules = policy.pass_rules
    found = [("default", rules.default)]
    found += [(f"tag {t}", r) for t, r in rules.tags]
    found += [(f"case {c}", r) for c, r in rules.cases]
    return [(scope, r) for scope, r in found if r.name.startswith("k_of_n")]
