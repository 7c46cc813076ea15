"""What the candidate changed against the pin, as gate findings: the pull request's corpus
delta and how much of each critical tag the comparison accounts for, a policy looser than the
pinned one, the candidate configuration's sibling runs, and the pull request's own additive
exam (its added and edited cases can add blocks, never remove one; issue 42, rule 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from evalkit.compare.decision import (
    Finding,
    PairContext,
    Severity,
)
from evalkit.compare.evidence import named_ids
from evalkit.compare.policy import GatePolicy
from evalkit.compare.slices import slices
from evalkit.compare.tiers import any_broken_findings, critical_findings


def corpus_accounting(
    policy: GatePolicy, paired: pl.DataFrame, delta: pl.DataFrame | None
) -> list[dict[str, Any]]:
    """Per critical tag, what the pull request changed in its cases and how much of it the
    comparison accounts for: ``unaccounted`` = removed + edited/added cases not rebaselined,
    ``share`` = unaccounted over the tag's cases (the larger side).

    Examples:
        >>> d = pl.DataFrame({"case_id": ["a"], "change": ["edited"], "tags": [["billing"]],
        ...     "rebaselined": [False]})
        >>> p = pl.DataFrame({"case_id": ["b", "c"], "tags": [["billing"]] * 2})
        >>> corpus_accounting(GatePolicy(critical_tags=("billing",)), p, d)[0]["share"]
        0.3333333333333333
    """
    if delta is None:
        delta = pl.DataFrame(
            schema={"case_id": pl.String(), "change": pl.String(), "tags": pl.List(pl.String),
                    "rebaselined": pl.Boolean()}
        )  # fmt: skip
    out = []
    for tag in policy.critical_tags:
        sub = delta.filter(pl.col("tags").list.contains(tag))
        count = {
            c: sub.filter(pl.col("change") == c).height for c in ("edited", "added", "removed")
        }
        rebaselined = sub.filter(pl.col("rebaselined")).height
        unaccounted = sub.height - rebaselined
        changed = pl.col("case_id").is_in(sub["case_id"].implode())
        paired_n = paired.filter(pl.col("tags").list.contains(tag) & ~changed).height
        size = max(paired_n + count["edited"] + count["added"], paired_n + count["removed"], 1)
        out.append({"tag": tag, **count, "rebaselined": rebaselined, "unaccounted": unaccounted,
                    "share": unaccounted / size})  # fmt: skip
    return out


def corpus_findings(
    policy: GatePolicy,
    paired: pl.DataFrame,
    delta: pl.DataFrame | None,
    accounting: Sequence[Mapping[str, Any]],
    context: PairContext,
) -> list[Finding]:
    """Tier 0: a critical tag whose changed cases the comparison cannot account for is
    UNVERIFIED (never "underpowered" and passed); an edited case that was failing is flagged."""
    out = []
    verify = (
        f"`evalkit gate {context.base_run_id} {context.cand_run_id} --rebaseline` (runs the "
        "baseline configuration on the added and edited cases, cached)"
    )
    if context.rebaseline_blocker:
        verify = (
            f"a baseline run of this corpus: run the baseline configuration on it and promote "
            f"it (`evalkit baseline promote RUN --who NAME --reason TEXT`); --rebaseline cannot: "
            f"{context.rebaseline_blocker}"
        )
    for row in accounting:
        tag, left = row["tag"], row["unaccounted"]
        if not left:
            continue
        evidence = paired.filter(
            pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
        ).height
        too_many = row["share"] > policy.max_changed_share
        if not (too_many or evidence < policy.min_cases()):
            continue
        what = ", ".join(f"{row[c]} {c}" for c in ("edited", "added", "removed") if row[c])
        why = (
            f"{row['share']:.0%} > gate.max_changed_share {policy.max_changed_share:.0%}"
            if too_many
            else f"{evidence} paired cases with evidence, < {policy.min_cases()}"
        )
        unrebased = pl.col("tags").list.contains(tag) & ~pl.col("rebaselined")
        ids = () if delta is None else tuple(delta.filter(unrebased)["case_id"])
        msg = (
            f"critical tag {tag!r}: {left} of its cases changed in this pull request ({what}) and "
            f"were not compared with the baseline configuration ({why}): unverified; verify "
            f"with {verify}"
        )
        stat = {k: row[k] for k in ("edited", "added", "removed", "rebaselined", "share")}
        out.append(Finding(0, tag, ids, stat, msg, "unverified", "corpus-delta"))
    if delta is not None:
        was = delta.filter((pl.col("change") == "edited") & (pl.col("old") == False))  # noqa: E712
        for r in was.iter_rows(named=True):
            msg = (
                f"case {r['case_id']} was edited in this pull request while it failed in the "
                "baseline: never edit a case because it failed — review the edit"
            )
            out.append(Finding(0, "corpus", (r["case_id"],), {}, msg, "warn", "edited-failing"))
    return out


def pin_findings(policy: GatePolicy, context: PairContext) -> list[Finding]:
    """Tier 0: a policy the pull request loosened, and the candidate's sibling runs."""
    out = []
    if context.policy_changes:
        source = f" ({context.policy_source})" if context.policy_source else ""
        msg = (
            "the pull request's gate policy is looser than the pinned one: "
            f"{'; '.join(context.policy_changes)}. Decided under the pinned policy{source}; "
            "unverified until a person promotes the new policy: `evalkit baseline promote "
            f"{context.base_run_id} --policy --who NAME --reason TEXT`"
        )
        stat: dict[str, Any] = {"changes": list(context.policy_changes)}
        out.append(Finding(0, "policy", (), stat, msg, "unverified", "loosened"))
    if context.siblings:
        counts = Counter(status for _, status in context.siblings)
        listed = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        stopped = [r for r, s in context.siblings if s in ("BLOCKED", "UNVERIFIED")]
        blocked = [r for r, s in context.siblings if s == "BLOCKED"]  # a regression, not a gap
        block = policy.siblings == "block" and bool(blocked)
        stopped = blocked if block else stopped
        msg = (
            f"{len(context.siblings)} other run(s) of this configuration (any corpus): "
            f"{listed} ({named_ids([f'{r} {s}' for r, s in context.siblings])})"
            + ("; gate.siblings: block" if block else "")
        )
        stat = {"siblings": [list(x) for x in context.siblings]}
        severity: Severity = "block" if block else ("warn" if stopped else "info")
        out.append(Finding(0, "siblings", tuple(stopped), stat, msg, severity, "siblings"))
    return out


def exam_findings(
    policy: GatePolicy,
    paired: pl.DataFrame,
    context: PairContext,
    counts: Mapping[str, int],
    pinned: Sequence[Finding] = (),
) -> list[Finding]:
    """The pull request's additive exam: its added and edited cases (``context.additions``)
    can add blocks, never remove one — a must_pass case of its version failing, a critical tag
    regressing with its versions in place of the pinned ones, a broken case in a
    ``block_on_any_broken`` tag — and an edit that loosens a case is shown as such."""
    extra = context.additions
    if context.exam is None or extra is None or extra.is_empty():
        return []
    out = []
    for r in extra.filter(pl.col("criticality") == "must_pass").iter_rows(named=True):
        if r["cand_error"]:
            msg = (
                f"must_pass case {r['case_id']} ({r['change']} in this pull request) errored in "
                "the candidate: its version is unverified"
            )
            out.append(Finding(1, "must_pass", (r["case_id"],), {"change": r["change"]}, msg,
                               "unverified", "pr-exam-errored"))  # fmt: skip
        elif r["cand"] is False:
            msg = (
                f"must_pass case {r['case_id']} fails in the candidate in this pull request's "
                f"version ({r['change']}): must_pass means must pass"
            )
            out.append(Finding(1, "must_pass", (r["case_id"],), {"change": r["change"]}, msg,
                               "block", "pr-exam-failed"))  # fmt: skip
    rebased = extra.filter(pl.col("rebaselined"))
    if rebased.height:
        mine = rebased.select(
            "case_id", "tags", "criticality", "base", "cand", "base_error", "cand_error"
        )
        kept = paired.filter(~pl.col("case_id").is_in(rebased["case_id"].implode()))
        swapped = pl.concat([kept, mine], how="diagonal_relaxed")
        table = slices(swapped, policy.bootstrap_iters, policy.bootstrap_seed,
                       policy.interval_level())  # fmt: skip
        _, found = critical_findings(table, policy, swapped, counts)
        seen = {(f.slice, f.case_ids) for f in pinned if f.severity == "block"}
        for f in found + any_broken_findings(mine, policy):
            if (f.slice, f.case_ids) in seen:  # the pinned exam blocks on exactly this already
                continue
            if f.severity == "block" and f.kind in ("regressed", "any-broken"):
                msg = (
                    f"with this pull request's versions of its edited and added cases: {f.message}"
                )
                out.append(replace(f, message=msg, kind=f"pr-exam-{f.kind}"))
    loosened = tuple(context.exam.loosened)
    if loosened:
        msg = (
            f"this pull request edits the expectations of {len(loosened)} case(s) the candidate "
            f"passes in their new version: under the pinned expectations the candidate breaks "
            f"these {len(loosened)} cases ({named_ids(list(loosened))})"
        )
        out.append(
            Finding(
                0, "corpus", loosened, {"n": len(loosened)}, msg, "warn", "loosened-expectations"
            )
        )
    return out
