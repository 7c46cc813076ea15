"""The tiered gate: a decision rule fixed before anyone looks at the results.

0. **evidence**: a candidate output that errored is not evidence of anything. Errored must_pass
   cases, errored cases in a critical tag, more errored outputs than ``gate.max_error_rate``, or
   nothing paired at all make the gate **UNVERIFIED**: it never passes what it did not see.
1. **must_pass**: a must_pass case failing in the candidate blocks, unless it is on the measured
   flake list (then it warns).
2. **critical tags** (at most 4, each with at least 8 cases): a tag *regressed*, and blocks, when
   broken > fixed with one-sided exact McNemar p <= alpha, or when the paired bootstrap upper
   bound of the pass-rate difference is below -tolerance. Otherwise it is *underpowered* (fewer
   cases than Connor's paired sample size for a drop of ``tolerance``: a warning naming the n
   needed) or shows *no evidence of regression*.
3. everything else warns (non-critical slices use Holm-adjusted p-values) or is reported.
4. budgets: candidate means over a declared limit block or warn, as configured.

An override (who, a written reason, when) accepts the blocking findings it was recorded for, by
their :attr:`Finding.key`; a blocking finding no override names still blocks.

Examples:
    >>> policy = GatePolicy.from_suite(["billing"], {"alpha": 0.05}, {})
    >>> policy.tolerance, policy.critical_tags
    (0.02, ('billing',))
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalkit import stats
from evalkit.compare.analysis import slices, usage_means
from evalkit.corpus.cases import MIN_CRITICAL_CASES
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.store import Store

MAX_CRITICAL_TAGS = 4
Severity = Literal["block", "unverified", "warn", "info"]
#: Severities that stop the gate (unless an override accepts the finding).
STOPPING: frozenset[str] = frozenset({"block", "unverified"})
State = Literal["regressed", "no evidence of regression", "underpowered", "not in this selection"]


class GateBlocked(Exception):
    """Raised by the last cell of ``notebooks/gate.ipynb`` when the gate blocks."""


class _Gate(BaseModel):  # the ``gate:`` section of evalkit.yaml
    model_config = ConfigDict(extra="forbid", strict=True)
    alpha: float = Field(0.05, gt=0, lt=1)
    tolerance: float = Field(0.02, ge=0, lt=1)
    power: float = Field(0.8, gt=0, lt=1)
    bootstrap_iters: int = Field(10_000, ge=100)
    bootstrap_seed: int = Field(0, ge=0)
    level: float = Field(0.95, gt=0, lt=1)
    # A judge-scored check may block only when its judge model + rubric has a calibration
    # record with kappa at or above this (see evalkit.judges.gating).
    judge_kappa_min: float = Field(0.6, ge=-1, le=1)
    # ... and only after at least this many labelled items (the kappa CI's lower bound must
    # clear judge_kappa_min, which a handful of labels never does honestly).
    judge_min_labels: int = Field(100, ge=1)
    # Errored candidate outputs tolerated before the gate says UNVERIFIED (a fraction).
    max_error_rate: float = Field(0.0, ge=0, le=1)


class Budget(BaseModel):
    """A limit on a candidate mean (see `evalkit.compare.analysis.BUDGET_METRICS`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: Literal["mean_latency_ms", "mean_total_tokens", "mean_cost_usd"]
    limit: float = Field(ge=0)
    action: Literal["block", "warn"] = "block"


def _validated(model: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join([where, *map(str, err["loc"])])
        what = "unknown key" if err["type"] == "extra_forbidden" else f"invalid ({err['msg']})"
        raise ConfigError(f"{key}: {what}") from None


@dataclass(frozen=True)
class GatePolicy:
    """The gate's parameters, validated; build it with `from_suite` from ``evalkit.yaml``."""

    critical_tags: tuple[str, ...] = ()
    alpha: float = 0.05
    tolerance: float = 0.02
    power: float = 0.8
    bootstrap_iters: int = 10_000
    bootstrap_seed: int = 0
    level: float = 0.95
    budgets: tuple[Budget, ...] = ()
    judge_kappa_min: float = 0.6
    judge_min_labels: int = 100
    max_error_rate: float = 0.0

    @classmethod
    def from_suite(
        cls,
        critical_tags: Sequence[str],
        gate: Mapping[str, Any] | None = None,
        budgets: Mapping[str, Any] | None = None,
        source: str = "evalkit.yaml",
    ) -> GatePolicy:
        """Validate the suite's ``critical_tags``, ``gate:`` and ``budgets:`` sections.

        Raises:
            ConfigError: one line naming ``source``, the key and what to do.

        Examples:
            >>> GatePolicy.from_suite(["a", "b", "c", "d", "e"])
            Traceback (most recent call last):
            evalkit.errors.ConfigError: evalkit.yaml: critical_tags lists 5 tags; at most 4 ...
        """
        tags = tuple(critical_tags)
        if len(tags) > MAX_CRITICAL_TAGS:
            raise ConfigError(
                f"{source}: critical_tags lists {len(tags)} tags; at most {MAX_CRITICAL_TAGS} are "
                "allowed (4 tags tested at 0.05 already give a family-wise error rate near 0.19)"
                f" — drop {len(tags) - MAX_CRITICAL_TAGS} or leave them to the report"
            )
        if len(set(tags)) < len(tags):
            raise ConfigError(f"{source}: critical_tags lists a tag twice: {list(tags)}")
        params = _validated(_Gate, dict(gate or {}), f"{source}: gate").model_dump()
        specs = [
            _validated(Budget, {"metric": m, **(v if isinstance(v, Mapping) else {"limit": v})},
                       f"{source}: budgets")
            for m, v in (budgets or {}).items()
        ]  # fmt: skip
        return cls(critical_tags=tags, budgets=tuple(specs), **params)

    def min_cases(self) -> int:
        """Cases a critical tag needs: 8, or more when alpha needs more one-way flips."""
        return max(MIN_CRITICAL_CASES, stats.exact_min_flips(self.alpha))

    def validate_against(
        self,
        cases: pl.DataFrame | Mapping[str, int],
        selection: Mapping[str, Any] | None = None,
    ) -> None:
        """Refuse a critical tag with too few cases (a frame with ``tags``, or tag counts).

        With a partial ``selection`` (a run manifest's ``selection`` naming a tier or tags) a
        critical tag with too few selected cases is no error: the gate reports it as not gated
        in this selection, and the full suite gates it.

        Examples:
            >>> GatePolicy(critical_tags=("negation",)).validate_against({"negation": 6})
            Traceback (most recent call last):
            evalkit.errors.ConfigError: critical tag 'negation' has 6 cases; a one-sided ...
        """
        counts = cases if isinstance(cases, Mapping) else tag_counts(cases)
        if is_partial(selection):
            return
        for tag in self.critical_tags:
            # No case at all: the run's selection (a tier, --tag) left the tag out. The gate
            # reports it as not in this selection; `cases lint` and `run` catch unknown tags.
            if 0 < (n := counts.get(tag, 0)) < self.min_cases():
                raise ConfigError(
                    f"critical tag {tag!r} has {n} cases; a one-sided exact McNemar test needs "
                    f"{stats.exact_min_flips(self.alpha)} one-way flips to reach p ≤ "
                    f"{self.alpha:g}, so a critical tag needs ≥ {self.min_cases()} cases — add "
                    "cases or drop it from critical_tags"
                )


def is_partial(selection: Mapping[str, Any] | None) -> bool:
    """Whether a run manifest's ``selection`` ran only part of the suite (a tier or tags).

    Examples:
        >>> is_partial({"tier": "smoke", "tags": ["smoke"]}), is_partial({"tags": []})
        (True, False)
    """
    return bool(selection) and any(selection.get(k) for k in ("tier", "tags", "exclude_tags"))


def tag_counts(frame: pl.DataFrame) -> dict[str, int]:
    """Cases per tag in a frame with a ``tags`` list column (sealed cases left out)."""
    if "sealed" in frame.columns:
        frame = frame.filter(~pl.col("sealed").fill_null(False))
    counts = frame.select(pl.col("tags").explode()).drop_nulls().group_by("tags").len()
    return dict(counts.iter_rows())


def load_policy(config_path: str | None) -> GatePolicy:
    """The gate policy of a suite config file; no config -> the default policy."""
    if not config_path:
        return GatePolicy()
    from evalkit.corpus.suite import load_suite

    cfg = load_suite(config_path).config
    return GatePolicy.from_suite(cfg.critical_tags, cfg.gate, cfg.budgets, str(config_path))


@dataclass(frozen=True)
class Finding:
    """One thing the gate found: ``tier`` 1-4 (0 = about the evidence itself)."""

    tier: int
    slice: str | None
    case_ids: tuple[str, ...]
    statistic: dict[str, Any]
    message: str
    severity: Severity

    @property
    def key(self) -> str:
        """The finding's identity, what an override names: tier, slice and the cases involved.

        Examples:
            >>> Finding(1, "must_pass", ("inc-7",), {}, "fails", "block").key
            'tier1/must_pass/inc-7'
        """
        ids = ",".join(sorted(self.case_ids))
        return f"tier{self.tier}/{self.slice or '-'}" + (f"/{ids}" if ids else "")


@dataclass(frozen=True)
class SliceState:
    """A critical tag's outcome. ``psi`` is the flip fraction used for sizing: the observed one,
    floored at ``tolerance`` (all flips one way) when fewer flips were seen, so ``required_n`` is
    the fewest cases that could detect a drop of ``tolerance`` (``psi_assumed`` marks the floor)."""

    tag: str
    state: State
    n: int
    n_error: int
    broken: int
    fixed: int
    p_value: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    psi: float
    psi_assumed: bool
    required_n: int | None
    power: float | None  # exact one-sided power at n for a drop of tolerance


@dataclass(frozen=True)
class Override:
    """A recorded decision to ship despite a block: who, why, when, and the keys of the blocking
    findings it accepts (:attr:`Finding.key`); it covers nothing else."""

    who: str
    reason: str
    created_at: datetime | None = None
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict: ``blocked`` (after overrides), every finding, each critical state."""

    blocked: bool  # the gate does not pass: BLOCKED or UNVERIFIED
    findings: tuple[Finding, ...]
    overridden: bool = False
    overrides: tuple[Override, ...] = ()
    critical: tuple[SliceState, ...] = ()
    n_paired: int = 0
    policy: GatePolicy = field(default_factory=GatePolicy)
    unverified: bool = False  # stopped by missing evidence, not by a regression
    uncovered: tuple[str, ...] = ()  # keys of stopping findings no override accepts

    @property
    def would_block(self) -> bool:
        """Whether the gate would stop without overrides."""
        return any(f.severity in STOPPING for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.blocked else 0

    @property
    def status(self) -> str:
        """PASSED, BLOCKED, UNVERIFIED or PASSED WITH OVERRIDE."""
        if self.blocked:
            return "UNVERIFIED" if self.unverified else "BLOCKED"
        return "PASSED WITH OVERRIDE" if self.overridden else "PASSED"

    def blocking(self) -> tuple[Finding, ...]:
        """The findings that stop the gate (blocks and missing evidence)."""
        return tuple(f for f in self.findings if f.severity in STOPPING)

    def summary(self) -> str:
        """One line: status and the stopping findings.

        Examples:
            >>> GateDecision(False, ()).summary()
            'gate PASSED'
        """
        reasons = "; ".join(f.message for f in self.blocking())
        return f"gate {self.status}" + (f": {reasons}" if reasons else "")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(status=self.status, would_block=self.would_block, exit_code=self.exit_code)
        for finding, row in zip(self.findings, out["findings"], strict=True):
            row["key"] = finding.key
        out["policy"]["budgets"] = [b.model_dump() for b in self.policy.budgets]
        for o in out["overrides"]:
            o["created_at"] = o["created_at"].isoformat() if o["created_at"] else None
        return out


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def _must_pass(
    paired: pl.DataFrame, flakes: Mapping[str, float], causes: Mapping[str, str]
) -> list[Finding]:
    mp = paired.filter(pl.col("criticality") == "must_pass")
    out = []
    for case in mp.filter(pl.col("cand_error"))["case_id"]:
        cause = f" ({causes[case]})" if case in causes else ""
        msg = f"must_pass case {case} errored in the candidate{cause}: unverified"
        out.append(Finding(1, "must_pass", (case,), {}, msg, "unverified"))
    for r in mp.filter(pl.col("cand") == False).iter_rows(named=True):  # noqa: E712
        case, rate = r["case_id"], flakes.get(r["case_id"], 0.0)
        before = {True: "passed", False: "also failed", None: "errored"}[r["base"]]
        msg = f"must_pass case {case} fails in the candidate (baseline {before})"
        if rate > 0:
            msg += f", but it is on the measured flake list (flake rate {rate:.0%})"
        out.append(Finding(1, "must_pass", (case,), {"flake_rate": rate}, msg, _sev(rate == 0)))
    return out


def _sev(block: bool) -> Severity:
    return "block" if block else "warn"


def _sizing(n: int, broken: int, fixed: int, policy: GatePolicy) -> tuple[float, bool, int, float]:
    """``(psi, psi_assumed, required_n, power)`` for detecting a drop of ``policy.tolerance``.

    ``psi`` is the observed flip fraction, floored at the tolerance (a drop of Δ needs at least
    Δ of the cases to flip; with no flips we assume exactly that, every flip a break), so
    ``required_n`` (Connor, one-sided) is a lower bound then. ``power`` is the exact power at n.

    Examples:
        >>> _sizing(50, 0, 0, GatePolicy())[:3]
        (0.02, True, 308)
    """
    observed, tol = (broken + fixed) / n if n else 0.0, policy.tolerance
    psi = max(observed, tol)
    need = stats.required_n_paired(psi, tol, policy.alpha, policy.power, "one-sided")
    return psi, observed < tol, need, stats.exact_power_paired(n, psi, tol, policy.alpha)


def _critical(
    table: pl.DataFrame, policy: GatePolicy, paired: pl.DataFrame, counts: Mapping[str, int]
) -> tuple[list, list]:
    states, findings = [], []
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
            findings.append(Finding(2, tag, (), {"n": n_sel}, msg, "info"))
            states.append(SliceState(tag, "not in this selection", n_sel, 0, 0, 0, None, None,
                                     None, None, 0.0, False, None, None))  # fmt: skip
            continue
        r, a, tol = rows.get(tag, empty), policy.alpha, policy.tolerance
        n, broken, fixed, p, hi = r["n"], r["broken"], r["fixed"], r["p_value"], r["diff_hi"]
        sub = paired.filter(pl.col("tags").list.contains(tag) & pl.col("base") & ~pl.col("cand"))
        ids, stat = tuple(sub["case_id"]), {k: r[k] for k in ("n", "broken", "fixed", "p_value")}
        stat |= {"diff": r["diff"], "lo": r["diff_lo"], "hi": hi}
        psi, assumed, need, power = _sizing(n, broken, fixed, policy)
        by_p, by_ci = broken > fixed and p is not None and p <= a, hi is not None and hi < -tol
        head = f"critical tag {tag!r}"
        if by_p or by_ci:
            state: State = "regressed"
            why = [f"one-sided exact McNemar p = {p:.4g} ≤ {a:g}"] if by_p else []
            why += [f"paired bootstrap upper bound {_pts(hi)} < {_pts(-tol)}"] if by_ci else []
            msg = f"{head} regressed: {broken} broken, {fixed} fixed of {n} ({_pts(r['diff'])})"
            findings.append(Finding(2, tag, ids, stat, f"{msg}; {' and '.join(why)}", "block"))
        elif n < need:
            state = "underpowered"
            msg = (
                f"{head} is underpowered: {n} cases detect a {100 * tol:.1f}-point drop with power "
                f"{power:.0%}; it needs ≈{need} cases (paired, flip rate ψ = {psi:.3g}"
                f"{', assumed: no flips seen' if assumed else ''})"
            )
            findings.append(Finding(2, tag, ids, stat | {"required_n": need}, msg, "warn"))
        else:
            state = "no evidence of regression"
        states.append(SliceState(tag, state, n, r["n_error"], broken, fixed, p, r["diff"],
                                 r["diff_lo"], hi, psi, assumed, need, power))  # fmt: skip
    return states, findings


def _others(table: pl.DataFrame, paired: pl.DataFrame, policy: GatePolicy) -> list[Finding]:
    table = table.filter(~pl.col("slice").is_in(list(policy.critical_tags)) & (pl.col("n") > 0))
    adj = stats.holm(table["p_value"].to_numpy()) if table.height else []
    out = []
    for r, p_adj in zip(table.iter_rows(named=True), adj, strict=True):
        if (r["broken"] > r["fixed"] and p_adj <= policy.alpha) or r["diff_hi"] < -policy.tolerance:
            name = "the aggregate" if r["slice"] == "ALL" else f"slice {r['slice']!r}"
            msg = (
                f"{name} regressed: {r['broken']} broken, {r['fixed']} fixed of {r['n']} "
                f"({_pts(r['diff'])}, Holm-adjusted p = {p_adj:.3g})"
            )
            out.append(Finding(3, r["slice"], (), {**r, "p_holm": float(p_adj)}, msg, "warn"))
    return out


_ATTEMPTS = re.compile(r"\s*\(after \d+ attempts\)$")


def top_causes(errors: Sequence[str | None], k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` most common error causes with their counts (retry counts folded together).

    Examples:
        >>> top_causes(["HTTP 400: bad model (after 5 attempts)", "HTTP 400: bad model", None])
        [('HTTP 400: bad model', 2)]
    """
    shown = [_ATTEMPTS.sub("", e.strip())[:160] for e in errors if e]
    return Counter(shown).most_common(k)


def _causes_text(causes: Sequence[tuple[str, int]]) -> str:
    return "; ".join(f"{n} × {cause}" for cause, n in causes)


def _named(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _evidence(
    paired: pl.DataFrame, policy: GatePolicy, errors: pl.DataFrame | None
) -> list[Finding]:
    """Tier 0: what the gate could not see. Errored candidate cases in a critical tag, more
    errored outputs than ``max_error_rate``, or no paired case at all make it UNVERIFIED."""
    if paired.height == 0:
        msg = "no case is paired between the runs (nothing ran, or every case was edited)"
        return [Finding(0, None, (), {"n": 0}, f"{msg}: nothing was verified", "unverified")]
    errored = paired.filter(pl.col("cand_error"))
    if errors is not None and errors.height:
        failed = errors.filter(pl.col("error").is_not_null())
        n_outputs, n_errored = errors.height, failed.height
        causes = top_causes(failed["error"].to_list())
        by_case = dict(failed.group_by("case_id", maintain_order=True).first()
                       .select("case_id", "error").iter_rows())  # fmt: skip
    else:
        n_outputs, n_errored, causes, by_case = paired.height, errored.height, [], {}
    out = []
    for tag in policy.critical_tags:
        ids = errored.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
        if ids:
            why = top_causes([by_case.get(i) for i in ids])
            msg = (
                f"critical tag {tag!r}: {len(ids)} case(s) errored in the candidate "
                f"({_named(ids)}), so the tag is unverified"
                + (f"; causes: {_causes_text(why)}" if why else "")
            )
            out.append(Finding(0, tag, tuple(ids), {"n_error": len(ids)}, msg, "unverified"))
    rate = n_errored / n_outputs if n_outputs else 0.0
    if n_errored and rate > policy.max_error_rate:
        ids = errored["case_id"].to_list()
        msg = (
            f"{n_errored} of {n_outputs} candidate outputs errored ({rate:.0%}, more than "
            f"gate.max_error_rate {policy.max_error_rate:.0%})"
            + (f"; top causes: {_causes_text(causes)}" if causes else "")
            + (f"; cases with no verdict: {_named(ids)}" if ids else "")
        )
        stat = {"n_outputs": n_outputs, "n_errored": n_errored, "error_rate": rate}
        stat["top_causes"] = [[c, n] for c, n in causes]
        out.append(Finding(0, "errors", tuple(ids), stat, msg, "unverified"))
    return out


def _budget_findings(policy: GatePolicy, observed: Mapping[str, float | None]) -> list[Finding]:
    out = []
    for b in policy.budgets:
        value = observed.get(b.metric)
        if value is None:
            out.append(
                Finding(4, None, (), {"limit": b.limit}, f"{b.metric}: not measured", "warn")
            )
        elif value > b.limit:
            stat = {"observed": value, "limit": b.limit}
            msg = f"{b.metric} {value:.4g} is over the budget of {b.limit:g}"
            out.append(Finding(4, None, (), stat, msg, b.action))
    return out


def _as_overrides(overrides: pl.DataFrame | Sequence[Override] | None) -> tuple[Override, ...]:
    if overrides is None:
        return ()
    if isinstance(overrides, pl.DataFrame):
        rows = overrides.iter_rows(named=True)
        overrides = [
            Override(r["who"], r["reason"], r.get("created_at"), tuple(r.get("findings") or ()))
            for r in rows
        ]
    return tuple(o for o in overrides if o.reason and o.reason.strip())


def _override_notes(
    stopping: Sequence[Finding], accepted: Sequence[Override]
) -> tuple[list[Finding], list[str]]:
    """Which override accepts which stopping finding, and the keys none accepts."""
    notes, uncovered = [], []
    for finding in stopping:
        by = [o for o in accepted if finding.key in o.findings]
        if by:
            who = ", ".join(f"{o.who} ({o.reason})" for o in by)
            msg = f"accepted by the override of {who}: {finding.message}"
            stat = {"key": finding.key}
            notes.append(Finding(finding.tier, finding.slice, finding.case_ids, stat, msg, "info"))
        else:
            uncovered.append(finding.key)
    if accepted and uncovered:
        msg = f"no override accepts {len(uncovered)} stopping finding(s): {', '.join(uncovered)}"
        notes.append(Finding(0, "overrides", (), {"uncovered": uncovered}, msg, "info"))
    return notes, uncovered


def decide(
    paired: pl.DataFrame,
    policy: GatePolicy,
    flakes: pl.DataFrame | Mapping[str, float] | None = None,
    budgets_observed: Mapping[str, float | None] | None = None,
    overrides: pl.DataFrame | Sequence[Override] | None = None,
    corpus: pl.DataFrame | Mapping[str, int] | None = None,
    errors: pl.DataFrame | None = None,
    selection: Mapping[str, Any] | None = None,
) -> GateDecision:
    """Apply the tiers to the paired frame (sealed cases are left out: they only report).

    ``flakes`` maps case id -> measured flake rate (or a frame with ``case_id, flake_rate``);
    ``budgets_observed`` maps budget metric -> candidate mean (default: from the paired frame);
    ``corpus`` (the candidate's cases frame, or tag counts) is what critical tags are sized
    against, default the paired frame: edited cases then make a slice underpowered, not invalid.
    ``errors`` (the candidate's outputs: ``case_id, error``) counts errored outputs and names
    their causes; without it errors are counted per paired case. ``selection`` is the
    candidate manifest's: in a partial one (a tier) a critical tag with too few selected cases
    is reported as not in this selection instead of refused.

    Raises:
        ConfigError: a critical tag has fewer than `GatePolicy.min_cases` cases.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a"], "tags": [["x"]], "criticality": ["must_pass"],
        ...     "base": [True], "cand": [False], "base_error": [False], "cand_error": [False]})
        >>> decide(p, GatePolicy()).summary()
        'gate BLOCKED: must_pass case a fails in the candidate (baseline passed)'
    """
    paired = paired.with_columns(
        pl.col("tags").cast(pl.List(pl.String)), pl.col("base", "cand").cast(pl.Boolean)
    )
    if "sealed" in paired.columns:
        paired = paired.filter(~pl.col("sealed").fill_null(False))
    counts_from = paired if corpus is None else corpus
    counts = counts_from if isinstance(counts_from, Mapping) else tag_counts(counts_from)
    policy.validate_against(counts, selection)
    if isinstance(flakes, pl.DataFrame):
        flakes = dict(flakes.select("case_id", "flake_rate").iter_rows())
    if budgets_observed is None:
        cols = {c.removeprefix("cand_"): pl.col(c) for c in paired.columns if c.startswith("cand_")}
        budgets_observed = usage_means(paired.select(**cols)) if cols else {}
    table = slices(paired, policy.bootstrap_iters, policy.bootstrap_seed, policy.level)
    states, critical = _critical(table, policy, paired, counts)
    causes: dict[str, str] = {}
    if errors is not None and errors.height:
        failed = errors.filter(pl.col("error").is_not_null())
        causes = dict(failed.group_by("case_id", maintain_order=True).first()
                      .select("case_id", "error").iter_rows())  # fmt: skip
    findings = [
        *_evidence(paired, policy, errors),
        *_must_pass(paired, flakes or {}, causes),
        *critical,
        *_others(table, paired, policy),
        *_budget_findings(policy, budgets_observed),
    ]
    accepted = _as_overrides(overrides)
    stopping = [f for f in findings if f.severity in STOPPING]
    notes, uncovered = _override_notes(stopping, accepted)
    findings += notes
    order = {"block": 0, "unverified": 1, "warn": 2, "info": 3}
    findings.sort(key=lambda f: (order[f.severity], f.tier))
    open_findings = [f for f in stopping if f.key in uncovered]
    blocked = bool(open_findings)
    unverified = blocked and all(f.severity == "unverified" for f in open_findings)
    overridden = bool(stopping) and not blocked
    return GateDecision(
        blocked, tuple(findings), overridden, accepted, tuple(states), paired.height, policy,
        unverified, tuple(uncovered),
    )  # fmt: skip


def gate_comparison(store: Store, comparison: Comparison, policy: GatePolicy) -> GateDecision:
    """`decide` with the store's flake lists (of both configurations) and recorded overrides."""
    hashes = {r.config_hash for r in (comparison.base, comparison.cand) if r.config_hash}
    frames = [store.latest_flakes(h).select("case_id", "flake_rate") for h in sorted(hashes)]
    rates = pl.concat(frames).group_by("case_id").max() if frames else None
    observed = usage_means(comparison.cand_verdicts)
    overrides = store.overrides(comparison.base.run_id, comparison.cand.run_id)
    errors = _candidate_errors(comparison)
    selection = comparison.cand.manifest.get("selection")
    decision = decide(
        comparison.paired, policy, rates, observed, overrides, comparison.cand.cases, errors,
        selection,
    )  # fmt: skip
    # Uncalibrated judges were left out of the verdicts; say so where the decision is read,
    # with the flips they would have caused.
    notes = [Finding(3, "judge", (), {}, note, "info") for note in comparison.judge_notes]
    notes += ungated_judge_flips(comparison.judge_paired, policy)
    # Warnings from the runs and the comparison reach the person with the decision.
    notes += [Finding(0, "warnings", (), {}, w, "warn") for w in comparison.warnings]
    return replace(decision, findings=decision.findings + tuple(notes))


#: How ungated judge results are labelled wherever they are shown.
NOT_GATED = "judge not calibrated — reported, not gated"


def ungated_judge_flips(judge_paired: pl.DataFrame | None, policy: GatePolicy) -> list[Finding]:
    """Per tag (critical tags first) and per case, the flips of judge checks that may not gate.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a"], "tags": [["tone"]], "base": [True],
        ...     "cand": [False], "base_error": [False], "cand_error": [False]})
        >>> ungated_judge_flips(p, GatePolicy())[0].message[:57]
        "tag 'tone': 1 case(s) broken, 0 fixed by the judge (judge"
    """
    if judge_paired is None or judge_paired.is_empty():
        return []
    decided = judge_paired.filter(~pl.col("base_error") & ~pl.col("cand_error"))
    broken = decided.filter(pl.col("base") & ~pl.col("cand"))
    fixed = decided.filter(~pl.col("base") & pl.col("cand"))
    tags = {t for frame in (broken, fixed) for t in frame["tags"].explode().drop_nulls()}
    out = []
    for tag in sorted(tags, key=lambda tag: (tag not in policy.critical_tags, tag)):
        ids = broken.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
        n_fixed = fixed.filter(pl.col("tags").list.contains(tag)).height
        critical = " (critical)" if tag in policy.critical_tags else ""
        msg = (
            f"tag {tag!r}{critical}: {len(ids)} case(s) broken, {n_fixed} fixed by the judge "
            f"({NOT_GATED})" + (f": {_named(ids)}" if ids else "")
        )
        stat = {"broken": len(ids), "fixed": n_fixed, "gated": False}
        out.append(Finding(3, tag, tuple(ids), stat, msg, "warn" if ids else "info"))
    for case in broken["case_id"]:
        msg = (
            f"case {case} fails the judge in the candidate, passed it in the baseline ({NOT_GATED})"
        )
        out.append(Finding(3, "judge-flip", (case,), {"gated": False}, msg, "info"))
    return out


def _candidate_errors(comparison: Comparison) -> pl.DataFrame:
    """The candidate's outputs of paired, unsealed cases (``case_id, error``); a missing output
    (an incomplete run compared with ``--allow-incomplete``) counts as an errored one."""
    paired = comparison.paired.filter(~pl.col("sealed").fill_null(False))["case_id"]
    outputs = comparison.cand.outputs
    cols = [pl.col("case_id"), (pl.col("error") if "error" in outputs.columns
                                else pl.lit(None, pl.String)).alias("error")]  # fmt: skip
    present = outputs.select(cols).filter(pl.col("case_id").is_in(paired.implode()))
    replays = int(comparison.cand.manifest.get("replays") or 1)
    seen = present.group_by("case_id").len()
    missing = (
        pl.DataFrame({"case_id": paired}).join(seen, on="case_id", how="left")
        .with_columns(pl.col("len").fill_null(0))
        .filter(pl.col("len") < replays)
    )  # fmt: skip
    filler = [
        {"case_id": r["case_id"], "error": "no output stored (the run is incomplete)"}
        for r in missing.iter_rows(named=True)
        for _ in range(replays - r["len"])
    ]
    if filler:
        present = pl.concat([present, pl.DataFrame(filler, schema=present.schema)])
    return present


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
