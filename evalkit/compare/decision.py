"""What the gate decides: findings (each with a key an override can name), the critical tags'
states, overrides, and the decision with its four states — PASSED, BLOCKED, UNVERIFIED and
PASSED WITH OVERRIDE."""

from __future__ import annotations

from dataclasses import KW_ONLY, asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from evalkit.compare.policy import GatePolicy

Severity = Literal["block", "unverified", "warn", "info"]
#: Severities that stop the gate (unless an override accepts the finding).
STOPPING: frozenset[str] = frozenset({"block", "unverified"})
State = Literal[
    "regressed", "no evidence of regression", "underpowered", "unverified", "not in this selection"
]


class GateBlocked(Exception):
    """Raised by the last cell of ``notebooks/gate.ipynb`` when the gate blocks."""


@dataclass(frozen=True)
class Finding:
    """One thing the gate found: ``tier`` 1-4 (0 = about the evidence itself)."""

    tier: int
    slice: str | None
    case_ids: tuple[str, ...]
    statistic: dict[str, Any]
    message: str
    _: KW_ONLY
    severity: Severity
    #: What was found, and on which metric ("failed", "errored", "regressed",
    #: "budget:mean_latency_ms" ...): part of the key, so an override written for one kind of
    #: finding (an outage's errored case) never accepts another (the same case failing).
    kind: str = ""

    @property
    def key(self) -> str:
        """The finding's identity, what an override names: tier, slice, kind and the cases.

        Examples:
            >>> failed = Finding(1, "must_pass", ("inc-7",), {}, "fails", severity="block",
            ...     kind="failed")
            >>> failed.key
            'tier1/must_pass/failed/inc-7'
            >>> over = Finding(4, None, (), {}, "over", severity="block",
            ...     kind="budget:mean_latency_ms")
            >>> over.key
            'tier4/-/budget:mean_latency_ms'
        """
        ids = ",".join(sorted(self.case_ids))
        head = f"tier{self.tier}/{self.slice or '-'}" + (f"/{self.kind}" if self.kind else "")
        return head + (f"/{ids}" if ids else "")


@dataclass(frozen=True, kw_only=True)
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
class UnreadTree:
    """A Python candidate whose repository tree could not be read (``why``), so its identity
    does not cover what it reads, and the cases it was served from the response cache: those
    answers are not evidence of what ran (issue 42, rule 3)."""

    why: str
    cached: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class PairContext:
    """What the gate knows about a pair beyond its paired frame: the corpus delta, the
    baseline's own errors, how the policy was pinned, and sibling runs of the candidate."""

    base_run_id: str = "BASELINE"
    cand_run_id: str = "CANDIDATE"
    # `evalkit.compare.paired.corpus_delta`: edited/added/removed cases with their evidence.
    delta: Any = None
    # The baseline's outputs (``case_id, error``), missing ones counted as errored.
    base_errors: Any = None
    # Why the baseline configuration cannot be run on the delta, when it cannot.
    rebaseline_blocker: str | None = None
    # Each way the pull request's policy is looser than the pinned one (then the pinned applies).
    policy_changes: tuple[str, ...] = ()
    policy_source: str | None = None
    # Other runs of the candidate's configuration on the same corpus: (run_id, status).
    siblings: tuple[tuple[str, str], ...] = ()
    # The models the provider served each run (`evalkit.compare.served.ServedModels`).
    served: Any = None
    # Judged on a pinned exam (issue 42): its `evalkit.compare.exam.ExamSummary`, and the pull
    # request's additive exam (added and edited cases, `evalkit.compare.exam.additive_exam`).
    exam: Any = None
    additions: Any = None
    # Set when the candidate's answers are not evidence of what ran: `UnreadTree`.
    unread_tree: UnreadTree | None = None
    # The baseline's cases the candidate holds no case and no evidence for, split into not
    # run and removed against the checked-out corpus (`evalkit.compare.not_run.NotRun`).
    not_run: Any = None


@dataclass(frozen=True, kw_only=True)
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
    # Per critical tag, what the pull request changed in its cases: tag, edited, added,
    # removed, rebaselined, unaccounted, share.
    corpus_delta: tuple[dict[str, Any], ...] = ()
    n_verified: int = 0  # paired cases with evidence on both sides
    # "judged on the exam promoted <when> by <who>; this PR adds N cases, edits M, removes K"
    # (the first screen of every report), None without a pinned exam.
    exam_line: str | None = None

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
            >>> GateDecision(blocked=False, findings=()).summary()
            'gate PASSED'
        """
        reasons = "; ".join(f.message for f in self.blocking())
        return f"gate {self.status}" + (f": {reasons}" if reasons else "")

    def _repr_html_(self) -> str:
        """Jupyter shows the decision as a formatted table: status first, then each finding."""
        from evalkit.renderers import html_for

        return html_for(self)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(status=self.status, would_block=self.would_block, exit_code=self.exit_code)
        for finding, row in zip(self.findings, out["findings"], strict=True):
            row["key"] = finding.key
        out["policy"]["budgets"] = [b.model_dump() for b in self.policy.budgets]
        out["policy"]["pass_rules"] = self.policy.pass_rules.to_config()  # as in evalkit.yaml
        for o in out["overrides"]:
            o["created_at"] = o["created_at"].isoformat() if o["created_at"] else None
        return out
