"""Tiers 1 to 3 of the gate, each fixed before anyone looks at the results: must_pass cases
(absolute), critical tags (exact McNemar and an interval with nominal coverage, sized by the
exact test at the tags' case-group design effect, and a calibrated judge's own scale), the tags
of ``gate.block_on_any_broken``, and the other slices (Holm-adjusted warnings).
:func:`evalkit.compare.gate.decide` applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl

from evalkit import stats
from evalkit.compare.decision import (
    Finding,
    Severity,
    SliceState,
    State,
)
from evalkit.compare.evidence import causes_text, named_ids, top_causes
from evalkit.compare.policy import GatePolicy
from evalkit.compare.slices import CLUSTERED_METHOD, interval_name


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def must_pass_findings(
    paired: pl.DataFrame,
    flakes: Mapping[str, float],
    causes: Mapping[str, str],
    delta: pl.DataFrame | None = None,
) -> list[Finding]:
    """Tier 1: must_pass is absolute. Every must_pass case of the candidate's corpus must pass,
    paired or not (``delta``: added and edited cases the baseline never ran); one the baseline
    had and the candidate did not run stops the gate until accepted or promoted away."""
    mp = paired.filter(pl.col("criticality") == "must_pass")
    out = []
    errored = mp.filter(pl.col("cand_error"))["case_id"].to_list()
    fresh = pl.DataFrame(schema={"case_id": pl.String, "change": pl.String, "cand": pl.Boolean,
                                 "cand_error": pl.Boolean})  # fmt: skip
    removed: list[str] = []
    if delta is not None and delta.height:
        dm = delta.filter((pl.col("criticality") == "must_pass") & ~pl.col("rebaselined"))
        removed = dm.filter(pl.col("change") == "removed")["case_id"].to_list()
        fresh = dm.filter(pl.col("change") != "removed").select(fresh.columns)
        errored += fresh.filter(pl.col("cand_error"))["case_id"].to_list()
    if errored:
        why = top_causes([causes.get(c) for c in errored])
        msg = (
            f"{len(errored)} must_pass case(s) errored in the candidate ({named_ids(errored)}): "
            "unverified" + (f"; causes: {causes_text(why)}" if why else "")
        )
        out.append(Finding(1, "must_pass", tuple(errored), {"n_error": len(errored)}, msg,
                           "unverified", "errored"))  # fmt: skip
    for r in mp.filter(pl.col("cand") == False).iter_rows(named=True):  # noqa: E712
        case, rate = r["case_id"], flakes.get(r["case_id"], 0.0)
        before = {True: "passed", False: "also failed", None: "errored"}[r["base"]]
        before = f"baseline {before}"
        if r.get("origin") == "rebaselined":
            before = "its new version, rebaselined: the baseline configuration " + before[9:]
        msg = f"must_pass case {case} fails in the candidate ({before})"
        if rate > 0:
            msg += f", but it is on the measured flake list (flake rate {rate:.0%})"
        stat = {"flake_rate": rate}
        out.append(Finding(1, "must_pass", (case,), stat, msg, _sev(rate == 0), "failed"))
    for r in fresh.filter(~pl.col("cand_error") & (pl.col("cand") == False)).iter_rows(named=True):  # noqa: E712
        case = r["case_id"]
        msg = (
            f"must_pass case {case} ({r['change']} in this pull request, not run on the baseline "
            "configuration) fails in the candidate: must_pass means must pass"
        )
        out.append(Finding(1, "must_pass", (case,), {"change": r["change"]}, msg, "block",
                           "failed"))  # fmt: skip
    for case in removed:
        msg = (
            f"must_pass case {case} ran in the baseline but not in the candidate (removed from "
            "the corpus): accept it with `evalkit override`, or promote a baseline whose corpus "
            "no longer has it"
        )
        out.append(Finding(1, "must_pass", (case,), {"change": "removed"}, msg, "unverified",
                           "removed"))  # fmt: skip
    return out


def _sev(block: bool) -> Severity:
    return "block" if block else "warn"


def sizing(
    n: int, broken: int, fixed: int, policy: GatePolicy, deff: float = 1.0
) -> tuple[float, bool, int, float]:
    """``(psi, psi_assumed, required_n, power)`` for detecting a drop of ``policy.tolerance``
    with the test the gate runs: the one-sided exact McNemar test (`stats.required_n_exact`,
    `stats.exact_power_gate`), on verdicts as observed (replays already collapsed), at the
    design effect ``deff`` of the tag's case groups (`_group_design`).

    ``psi`` is the observed flip fraction, floored at the tolerance (a drop of Δ needs at least
    Δ of the cases to flip; with no flips we assume exactly that, every flip a break), so
    ``required_n`` is a lower bound then. ``power`` is the exact power at n; ``required_n`` the
    smallest n from which the exact power stays at or above ``policy.power``.

    Examples:
        >>> sizing(50, 0, 0, GatePolicy())[:3]
        (0.02, True, 335)
        >>> sizing(400, 0, 0, GatePolicy(), deff=3.45)[2]
        1156
    """
    observed, tol = (broken + fixed) / n if n else 0.0, policy.tolerance
    psi = max(observed, tol)
    grid = math.ceil(psi * 200 - 1e-9) / 200  # sized at psi rounded up to 0.5 pt: reused
    need = stats.required_n_exact(min(1.0, max(grid, tol)), tol, policy.alpha, policy.power,
                                  deff=deff)  # fmt: skip
    power = stats.exact_power_gate(n, psi, tol, policy.alpha, deff=deff)
    return psi, observed < tol, need, power


def _group_design(paired: pl.DataFrame, tag: str, policy: GatePolicy) -> tuple[float, str]:
    """The design effect of a critical tag's case groups and how it was found: the
    intra-group correlation of its cases' paired changes when its groups can estimate it
    (`stats.icc_oneway`, floored at 0), else ``gate.assumed_icc``, stated as assumed.
    ``(1.0, "")`` when no case of the tag carries a group."""
    if "case_group" not in paired.columns:
        return 1.0, ""
    sub = paired.filter(
        pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
    )
    if sub.is_empty() or sub["case_group"].is_null().all():
        return 1.0, ""
    cluster = pl.coalesce(pl.lit("g:") + pl.col("case_group"), pl.lit("c:") + pl.col("case_id"))
    sub = sub.with_columns(
        _c=cluster, _d=pl.col("cand").cast(pl.Int8) - pl.col("base").cast(pl.Int8)
    )
    sizes = sub.group_by("_c").len()["len"].to_numpy()
    icc = stats.icc_oneway(sub["_d"].to_numpy(), sub["_c"].to_numpy())
    if icc != icc or not (sub["_d"] != 0).any():  # nan, or no change to estimate it from
        icc, how = policy.assumed_icc, "assumed (gate.assumed_icc)"
    else:
        how = "estimated from this comparison's paired changes"
    deff = stats.design_effect(sizes, icc)
    return deff, (
        f"; {sizes.size} case groups, intra-group correlation {icc:.2f} {how}: design effect "
        f"{deff:.2f}, ≈{int(sub.height / deff)} effective cases"
    )


def critical_findings(
    table: pl.DataFrame, policy: GatePolicy, paired: pl.DataFrame, counts: Mapping[str, int]
) -> tuple[list[SliceState], list[Finding]]:
    states: list[SliceState] = []
    findings: list[Finding] = []
    rows = {r["slice"]: r for r in table.iter_rows(named=True)}
    empty = dict.fromkeys(table.columns) | {"n": 0, "n_error": 0, "broken": 0, "fixed": 0}
    for tag in policy.critical_tags:
        if counts.get(tag, 0) < policy.min_cases():  # only a partial selection gets here
            n_sel = counts.get(tag, 0)
            msg = (
                f"critical tag {tag!r} is not in this selection ({n_sel} of its cases ran, "
                f"≥ {policy.min_cases()} are needed to gate): not gated here; the full suite "
                "gates it"
            )
            findings.append(Finding(2, tag, (), {"n": n_sel}, msg, "info", "not-selected"))
            states.append(SliceState(tag, "not in this selection", n_sel, 0, 0, 0, None, None,
                                     None, None, 0.0, False, None, None))  # fmt: skip
            continue
        r, a, tol = rows.get(tag, empty), policy.alpha, policy.tolerance
        n, broken, fixed, p, hi = r["n"], r["broken"], r["fixed"], r["p_value"], r["diff_hi"]
        sub = paired.filter(pl.col("tags").list.contains(tag) & pl.col("base") & ~pl.col("cand"))
        ids, stat = tuple(sub["case_id"]), {k: r[k] for k in ("n", "broken", "fixed", "p_value")}
        stat |= {"diff": r["diff"], "lo": r["diff_lo"], "hi": hi}
        deff, groups_note = _group_design(paired, tag, policy)
        psi, assumed, need, power = sizing(n, broken, fixed, policy, deff)
        by_p, by_ci = broken > fixed and p is not None and p <= a, hi is not None and hi < -tol
        head = f"critical tag {tag!r}"
        judged = _judge_level_drop(tag, paired, policy)  # a calibrated judge, on its own scale
        findings += [judged] if judged is not None else []
        if judged is not None and not (by_p or by_ci):
            state: State = "regressed"
        elif by_p or by_ci:
            state = "regressed"
            test = "exact McNemar" + (" mid-p" if policy.mid_p else "")
            if policy.critical_adjust == "holm":  # gate.critical_adjust (`critical_options`)
                test += ", Holm-adjusted across the critical tags,"
            if r.get("interval_method") == CLUSTERED_METHOD:  # cases in groups: the larger p
                test = f"exact McNemar and clustered t over {r['n_groups']} case groups"
            why = [f"one-sided {test} p = {p:.4g} ≤ {a:g}"] if by_p else []
            method = interval_name(r.get("interval_method"))
            why += [f"upper bound {_pts(hi)} < {_pts(-tol)} ({method})"] if by_ci else []
            msg = f"{head} regressed: {broken} broken, {fixed} fixed of {n} ({_pts(r['diff'])})"
            findings.append(
                Finding(2, tag, ids, stat, f"{msg}; {' and '.join(why)}", "block", "regressed")
            )
        elif paired.filter(
            pl.col("tags").list.contains(tag) & (pl.col("cand_error") | pl.col("base_error"))
        ).height:
            state = "unverified"  # its errored cases are a tier-0 finding: no evidence either way
        elif n < need:
            state = "underpowered"
            msg = (
                f"{head} is underpowered: {n} cases detect a {100 * tol:.1f}-point drop with power "
                f"{power:.0%}; it needs ≈{need} cases (paired, flip rate ψ = {psi:.3g}"
                f"{', assumed: no flips seen' if assumed else ''}; one-sided exact McNemar"
                f"{groups_note})"
            )
            stat |= {"required_n": need}
            findings.append(Finding(2, tag, ids, stat, msg, "warn", "underpowered"))
        else:
            state = "no evidence of regression"
        states.append(SliceState(tag, state, n, r["n_error"], broken, fixed, p, r["diff"],
                                 r["diff_lo"], hi, psi, assumed, need, power))  # fmt: skip
    return states, findings


def _judge_level_drop(tag: str, paired: pl.DataFrame, policy: GatePolicy) -> Finding | None:
    """A block when a calibrated judge's levels drop on a critical tag's cases, on its own scale.

    Fixed before looking: on the tag's cases a gating judge decided in both runs (at least
    `GatePolicy.min_cases`), the BCa upper bound (level `GatePolicy.interval_level`, so each
    tail is at most alpha) of mean(cand_judge_level - base_judge_level) is below
    ``-judge_tolerance_levels``, *and* the one-sided exact sign test on the cases whose level
    changed (drops vs rises, `stats.mcnemar_exact`) has p <= alpha. The sign test is exact at
    any n, so the rule never blocks where it sees no evidence (BCa alone is anti-conservative on
    a handful of cases); all-equal levels leave BCa undefined: no block.
    """
    tol = policy.judge_tolerance_levels
    if tol is None or "cand_judge_level" not in paired.columns:
        return None
    sub = paired.filter(
        pl.col("tags").list.contains(tag) & ~pl.col("base_error") & ~pl.col("cand_error")
    ).drop_nulls(["base_judge_level", "cand_judge_level"])
    if sub.height < policy.min_cases():
        return None
    base, cand = sub["base_judge_level"].to_numpy(), sub["cand_judge_level"].to_numpy()
    drops, rises = int((cand < base).sum()), int((cand > base).sum())
    p = stats.mcnemar_exact(drops, rises, "greater")
    if drops <= rises or p > policy.alpha:
        return None
    boot = stats.paired_bootstrap(
        base, cand, policy.bootstrap_iters, policy.interval_level(), policy.bootstrap_seed,
        method="bca",
    )  # fmt: skip
    if not boot.hi < -tol:  # nan (undefined) never blocks
        return None
    ids = tuple(sub.filter(pl.col("cand_judge_level") < pl.col("base_judge_level"))["case_id"])
    stat = {"n": sub.height, "drops": drops, "rises": rises, "p_value": p, "diff": boot.diff,
            "lo": boot.lo, "hi": boot.hi, "method": "bca", "tolerance_levels": tol}  # fmt: skip
    msg = (
        f"critical tag {tag!r} regressed on the judge's scale: mean level {boot.diff:+.2f} over "
        f"{sub.height} judged cases ({drops} lower, {rises} higher), {policy.interval_level():.0%}"
        f" BCa upper bound {boot.hi:+.2f} < {-tol:+.2f} levels and one-sided exact sign test "
        f"p = {p:.4g} ≤ {policy.alpha:g}"
    )
    return Finding(2, f"{tag}:judge-levels", ids, stat, msg, "block", "regressed")


def other_findings(table: pl.DataFrame, paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    table = table.filter(~pl.col("slice").is_in(list(policy.critical_tags)) & (pl.col("n") > 0))
    adj: list[float] = stats.holm(table["p_value"].to_numpy()).tolist() if table.height else []
    out = []
    for r, p_adj in zip(table.iter_rows(named=True), adj, strict=True):
        by_p = r["broken"] > r["fixed"] and p_adj <= policy.alpha
        if by_p or r["diff_hi"] < -policy.tolerance:
            name = "the aggregate" if r["slice"] == "ALL" else f"slice {r['slice']!r}"
            why = (
                f"Holm-adjusted p = {p_adj:.3g} ≤ {policy.alpha:g}"
                if by_p  # else the interval rule raised it, unadjusted across slices: say so
                else f"upper bound {_pts(r['diff_hi'])} < {_pts(-policy.tolerance)}, an interval "
                "not adjusted across slices"
            )
            msg = (
                f"{name} regressed: {r['broken']} broken, {r['fixed']} fixed of {r['n']} "
                f"({_pts(r['diff'])}, {why})"
            )
            stat = {**r, "p_holm": float(p_adj)}
            out.append(Finding(3, r["slice"], (), stat, msg, "warn", "regressed"))
    return out


def any_broken_findings(paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    """Per tag of ``gate.block_on_any_broken``: its broken cases (pass → fail, both sides with
    evidence) block, one finding per tag, stated as the policy choice it is."""
    found = []
    broken = paired.filter(
        (pl.col("base") == True) & (pl.col("cand") == False)  # noqa: E712
        & ~pl.col("base_error") & ~pl.col("cand_error")
    )  # fmt: skip
    for tag in policy.block_on_any_broken:
        ids = tuple(sorted(broken.filter(pl.col("tags").list.contains(tag))["case_id"]))
        if ids:
            message = (
                f"{len(ids)} broken case(s) in {tag!r} ({named_ids(ids)}): "
                "gate.block_on_any_broken lists the tag, so any pass → fail blocks (a policy "
                "choice, stricter than the statistics)"
            )
            found.append(Finding(2, tag, ids, {"broken": len(ids)}, message, "block", "any-broken"))
    return found
