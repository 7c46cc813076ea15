"""The run summary: counted by the writer for a fresh run, read back from the store for a
resumed one (so it counts every stored output, earlier sessions' too).

Counters of this process (requests, retries, cache hits, wall time, and what each replica of
``system.base_urls`` served and failed) describe the session that just ran; everything else
(verdict counts, tokens, cost, latency, error causes) covers the whole run. Cost is split into
what was spent now and what was served from the response cache (outputs that came from cache
keep the latency, tokens and cost they had when first produced).

A run's **pass rate** is per case, as the gate and ``evalkit history`` count it: each case's
replays collapse to one verdict under the suite's replay pass rule (``replays: {pass_rule:
...}``, pinned in the run's manifest: majority by default, ties fail; a case decides only when
more than half of its replays were decided), and the rate is passed cases over decided ones
(`evalkit.store.history_queries.case_counts`). With replays, a per-output rate would differ
(a case passing 2 of 3 replays is one pass, not two thirds), so every place that shows a run's
pass rate shows this one and says so (:func:`rate_basis`). The output counts stay beside it.

Examples:
    >>> ErrorCause("HTTP 400: Invalid model name", 35).render()
    '35 × HTTP 400: Invalid model name'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from evalkit.run.rate_basis import rate_basis
from evalkit.run.replicas import ReplicaCounts
from evalkit.store import Store, initial_scoring_id
from evalkit.store.history_queries import CaseCounts, case_counts

if TYPE_CHECKING:
    from evalkit.run.writer import WrittenCounts

#: How many distinct error causes a summary lists.
TOP_CAUSES = 5


@dataclass(frozen=True)
class ErrorCause:
    """One cause of errored outputs and how many outputs it took."""

    cause: str
    count: int

    def render(self, width: int = 160) -> str:
        text = " ".join(self.cause.split())
        return f"{self.count} × {text if len(text) <= width else text[: width - 1] + '…'}"


@dataclass(frozen=True, kw_only=True)
class SessionCounts:
    """What this process did (a resumed run's earlier sessions are not in it)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    resumed_skipped: int = 0
    retried_errors: int = 0
    wall_s: float = 0.0
    replicas: tuple[ReplicaCounts, ...] = ()  # per replica: attempts sent, failed, breaker trips


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    run_id: str
    label: str
    config_hash: str
    cases: int
    outputs: int
    passed: int
    failed: int
    errored: int
    cache_hits: int
    requests: int
    retries: int
    resumed_skipped: int
    wall_s: float
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  # spent + served from cache
    mean_latency_ms: float
    expected_outputs: int = 0  # selected cases × replays
    cached_outputs: int = 0  # outputs served entirely from the response cache
    cost_spent_usd: float = 0.0
    cost_cached_usd: float = 0.0
    retried_errors: int = 0  # stored errors asked again (--retry-errors)
    error_causes: tuple[ErrorCause, ...] = ()
    warnings: tuple[str, ...] = ()
    replicas: tuple[ReplicaCounts, ...] = ()  # this session, when system.base_urls names them
    replays: int = 1  # per case, as configured
    # The cases as `evalkit history` counts them (`with_case_counts`): the run's pass rate.
    case_counts: CaseCounts | None = None

    @property
    def pass_rate(self) -> float | None:
        """Passed cases over decided ones, each case's replays under the run's pass rule
        (majority by default; see the module docstring); None when no case was decided or
        the cases were not counted."""
        return self.case_counts.rate if self.case_counts is not None else None

    @property
    def all_errored(self) -> bool:
        """Every stored output errored: the run verified nothing."""
        return self.outputs > 0 and self.errored == self.outputs

    @property
    def complete(self) -> bool:
        return self.outputs >= self.expected_outputs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    store: Store,
    run_id: str,
    label: str,
    config_hash: str,
    *,
    expected_outputs: int,
    session: SessionCounts,
    warnings: tuple[str, ...] = (),
) -> RunSummary:
    """The whole run's figures from the store, with this session's counters."""
    scoring_id = initial_scoring_id(run_id)
    (totals,) = store.records(
        "WITH s AS (SELECT case_id, replay, bool_or(error) AS serr, bool_and(passed) AS ok "
        "  FROM scores WHERE run_id = ? AND scoring_id = ? GROUP BY case_id, replay), "
        "o AS (SELECT o.*, o.error IS NOT NULL OR coalesce(s.serr, false) AS errored, "
        "  o.fail_reason IS NULL AND coalesce(s.ok, true) AS ok "
        "  FROM outputs o LEFT JOIN s USING (case_id, replay) WHERE o.run_id = ?) "
        "SELECT count(*) AS n, count(DISTINCT case_id) AS cases, "
        "count(*) FILTER (WHERE errored) AS errored, "
        "count(*) FILTER (WHERE NOT errored AND ok) AS passed, "
        "count(*) FILTER (WHERE cached) AS cached, "
        "coalesce(sum(prompt_tokens), 0) AS pin, coalesce(sum(completion_tokens), 0) AS pout, "
        "coalesce(sum(cost_usd), 0) AS cost, "
        "coalesce(sum(cost_usd) FILTER (WHERE cached), 0) AS cost_cached, "
        "coalesce(avg(latency_ms), 0) AS lat FROM o",
        [run_id, scoring_id, run_id],
    )
    outputs, errored, passed = int(totals["n"]), int(totals["errored"]), int(totals["passed"])
    cost, cost_cached = float(totals["cost"]), float(totals["cost_cached"])
    return RunSummary(
        run_id=run_id,
        label=label,
        config_hash=config_hash,
        cases=int(totals["cases"]),
        outputs=outputs,
        passed=passed,
        failed=outputs - errored - passed,
        errored=errored,
        cache_hits=session.cache_hits,
        requests=session.requests,
        retries=session.retries,
        resumed_skipped=session.resumed_skipped,
        wall_s=round(session.wall_s, 3),
        prompt_tokens=int(totals["pin"]),
        completion_tokens=int(totals["pout"]),
        cost_usd=cost,
        mean_latency_ms=round(float(totals["lat"] or 0.0), 2),
        expected_outputs=expected_outputs,
        cached_outputs=int(totals["cached"]),
        cost_spent_usd=cost - cost_cached,
        cost_cached_usd=cost_cached,
        retried_errors=session.retried_errors,
        error_causes=error_causes(store, run_id),
        warnings=warnings,
        replicas=session.replicas,
    )


def top_causes(causes: Counter[str]) -> tuple[ErrorCause, ...]:
    """The :data:`TOP_CAUSES` most frequent causes, as :func:`error_causes` orders them."""
    top = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_CAUSES]
    return tuple(ErrorCause(cause, n) for cause, n in top)


def summarize_written(
    counts: WrittenCounts,
    run_id: str,
    label: str,
    config_hash: str,
    *,
    expected_outputs: int,
    session: SessionCounts,
    warnings: tuple[str, ...] = (),
) -> RunSummary:
    """:func:`summarize` of a run whose every output went through one writer (a fresh run):
    the same figures from what the writer counted as it wrote them, without a query."""
    outputs = counts.outputs
    return RunSummary(
        run_id=run_id,
        label=label,
        config_hash=config_hash,
        cases=counts.first_replays,
        outputs=outputs,
        passed=counts.passed,
        failed=outputs - counts.errored - counts.passed,
        errored=counts.errored,
        cache_hits=session.cache_hits,
        requests=session.requests,
        retries=session.retries,
        resumed_skipped=session.resumed_skipped,
        wall_s=round(session.wall_s, 3),
        prompt_tokens=counts.prompt_tokens,
        completion_tokens=counts.completion_tokens,
        cost_usd=counts.cost_usd,
        mean_latency_ms=round(counts.latency_ms / outputs, 2) if outputs else 0.0,
        expected_outputs=expected_outputs,
        cached_outputs=counts.cached,
        cost_spent_usd=counts.cost_usd - counts.cost_cached_usd,
        cost_cached_usd=counts.cost_cached_usd,
        retried_errors=session.retried_errors,
        error_causes=top_causes(counts.error_causes),
        warnings=warnings,
        replicas=session.replicas,
    )


def error_causes(store: Store, run_id: str, top: int = TOP_CAUSES) -> tuple[ErrorCause, ...]:
    """The most frequent causes of errored outputs: the system's errors, then scorer errors."""
    rows = store.records(
        "SELECT cause, count(*) AS n FROM ("
        "  SELECT error AS cause FROM outputs WHERE run_id = ? AND error IS NOT NULL "
        "  UNION ALL SELECT 'scorer ' || scorer || ': ' || coalesce(reason, '') FROM scores "
        "  WHERE run_id = ? AND scoring_id = ? AND error) "
        "GROUP BY cause ORDER BY n DESC, cause LIMIT ?",
        [run_id, run_id, initial_scoring_id(run_id), top],
    )
    return tuple(ErrorCause(r["cause"], int(r["n"])) for r in rows)


#: ANSI styles `summary_lines` asks its painter for: bold, yellow, red.
BOLD, YELLOW, RED = "1", "33", "31"


def with_case_counts(store: Store, summary: RunSummary) -> RunSummary:
    """``summary`` with its run's :class:`CaseCounts` (recorded by ``finish_run`` for a
    complete run, else counted): call it once the run's finish is recorded."""
    from dataclasses import replace

    return replace(summary, case_counts=case_counts(store, [summary.run_id]).get(summary.run_id))


def rate_text(counts: CaseCounts | None, replays: int | None) -> str:
    """A run's pass rate with its basis and what it counts, the one wording of it.

    Examples:
        >>> counts = CaseCounts(run_id="r", cases=16, decided=16, passed=10, errored=0, unstable=2)
        >>> rate_text(counts, 3)
        'pass rate 62.5% (per case, majority of 3 replays): 10 of 16 cases passed, 2 unstable'
        >>> rate_text(None, 1)
        'pass rate n/a (per case)'
    """
    basis = rate_basis(replays, counts.pass_rules if counts is not None else None)
    if counts is None or counts.rate is None:
        return f"pass rate n/a ({basis})" + (
            f": none of {counts.cases} cases decided" if counts is not None else ""
        )
    text = f"pass rate {counts.rate:.1%} ({basis}): "
    text += f"{counts.passed} of {counts.decided} cases passed"
    if counts.errored:
        text += f", {counts.errored} without a verdict (errored)"
    return text + (f", {counts.unstable} unstable" if counts.unstable else "")


def summary_lines(
    summary: RunSummary,
    db: str,
    paint: Callable[[str, str], str] = lambda text, _style: text,
    *,
    asked_here: bool = True,
) -> list[str]:
    """The run summary as ``evalkit run`` prints it, line by line (``paint(text, style)``
    colours a word on a terminal; by default the text as it is). ``asked_here`` False: this
    process asked the model nothing (``evalkit runs merge``), so no session line of zeros
    reads as if the run made no requests."""
    # an unlabelled run (label "run") or a merged run (label = id) reads "run ID", not "run run ID"
    named = "" if summary.label in ("run", summary.run_id, "") else f"{paint(summary.label, BOLD)} "
    lines = [
        f"{named}run {summary.run_id}: {summary.cases} cases, "
        f"{summary.outputs} outputs — outputs passed {summary.passed}, failed "
        f"{summary.failed}, errors {summary.errored}",
        f"  {rate_text(summary.case_counts, summary.replays)}",
        (
            f"  this session: requests {summary.requests} (retries {summary.retries}), cache "
            f"hits {summary.cache_hits}, resumed-skipped {summary.resumed_skipped}"
            + (f", errors asked again {summary.retried_errors}" if summary.retried_errors else "")
            + f"; wall {summary.wall_s:.2f}s"
            if asked_here
            else "  merged from its parts: the requests are counted in each shard's own summary"
        ),
        f"  {summary.cached_outputs} of {summary.outputs} outputs from cache; "
        f"mean latency {summary.mean_latency_ms:.0f} ms, tokens {summary.prompt_tokens}+"
        f"{summary.completion_tokens}, cost spent ${summary.cost_spent_usd:.4f} "
        f"+ served from cache ${summary.cost_cached_usd:.4f}",
    ]
    lines += [f"  replica {replica.render()}" for replica in summary.replicas]
    if summary.error_causes:
        lines.append("  top error causes:")
        lines += [f"    {cause.render(width=600)}" for cause in summary.error_causes]
    lines += [f"  {paint('warning', YELLOW)}: {warning}" for warning in summary.warnings]
    if summary.all_errored:
        lines.append(
            f"  {paint('every output errored', RED)}: this run verified nothing; fix the "
            "causes above and run again (if they were passing, e.g. an outage: "
            f"`evalkit run --resume {summary.run_id} --retry-errors`)"
        )
    lines.append(f"  stored in {db} (config {summary.config_hash[:12]})")
    return lines
