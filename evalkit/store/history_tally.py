"""A fresh run's history counts tallied as its answers are handed to the writer: the rows
:data:`~evalkit.store.history_sql.TAG_COUNTS` makes of the stored outputs and scores, without
running it at the run's finish (on a short run that one query was a visible share of the whole
run's CPU, most of it DuckDB planning it).

The same decisions, in the same order as the query's steps: a replay is undecided when its
output or one of its scores errored (or a score has no verdict), failed when the output has a
``fail_reason`` or a score failed, undecided when nothing scored it, else passed; a case is
decided when more than half its replays were, and passes under its pass rule
(:meth:`~evalkit.replay_rules.PassRules.for_case`); each row counts the cases of one tag (a tag
a case lists twice counts it twice, as ``UNNEST`` does) and ``ALL`` every case.
tests/store/test_history_tally.py holds the two equal on generated runs.

The tally keeps three numbers per case, so it stops (:attr:`ReplayTally.cases` None) past
:data:`MAX_CASES` cases: a large run's finish counts with the query, whose cost is then a small
share of the run, and its memory stays flat in the corpus size.

Examples:
    >>> tally = ReplayTally()
    >>> tally.add("a", replay_verdict(None, None, [(True, False)]))
    >>> tally.add("b", replay_verdict(None, None, [(False, False)]))
    >>> tag_rows([("a", ("x",)), ("b", ("x", "y"))], tally.cases or {}, PassRules())
    [('ALL', 2, 2, 1, 0, 0), ('x', 2, 2, 1, 0, 0), ('y', 1, 1, 0, 0, 0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.replay_rules import PassRules

#: Cases a tally follows before it stops (then the finish runs the query).
MAX_CASES = 10_000
#: The slice every case belongs to (as `evalkit.compare.slices` names it; ``history_sql.ALL``).
ALL = "ALL"

#: One row of ``history_counts`` after its run and scoring: tag, cases, decided, passed,
#: errored, unstable.
TagRow = tuple[str, int, int, int, int, int]


def replay_verdict(
    error: str | None, fail_reason: str | None, scores: Iterable[tuple[bool | None, bool]]
) -> bool | None:
    """One replay's verdict from its output's ``error`` and ``fail_reason`` and its scores'
    ``(passed, error)``: None undecided, as the query's ``replays`` step decides it.

    Examples:
        >>> replay_verdict(None, None, [(True, False), (False, False)])
        False
        >>> replay_verdict(None, "bad tool call", [(True, False), (None, False)]) is None
        True
        >>> replay_verdict(None, None, []) is None
        True
    """
    n_scores = n_err = n_fail = 0
    for passed, errored in scores:
        n_scores += 1
        if errored or passed is None:
            n_err += 1
        elif not passed:
            n_fail += 1
    if error is not None or n_err:
        return None
    if fail_reason is not None or n_fail:
        return False
    return None if n_scores == 0 else True


class ReplayTally:
    """Per case, ``[passed, failed, replays]`` of the replays added; :attr:`cases` is None
    once more than :data:`MAX_CASES` cases were added (or after :meth:`stop`)."""

    def __init__(self) -> None:
        self._cases: dict[str, list[int]] | None = {}

    def add(self, case_id: str, verdict: bool | None) -> None:
        cases = self._cases
        if cases is None:
            return
        counts = cases.get(case_id)
        if counts is None:
            if len(cases) >= MAX_CASES:
                self._cases = None
                return
            counts = cases[case_id] = [0, 0, 0]
        counts[0] += verdict is True
        counts[1] += verdict is False
        counts[2] += 1

    def stop(self) -> None:
        """Follow no more (the run's rows are not all this tally's: a resume)."""
        self._cases = None

    @property
    def cases(self) -> Mapping[str, Sequence[int]] | None:
        return self._cases


def tag_rows(
    cases: Iterable[tuple[str, Sequence[str]]],
    tally: Mapping[str, Sequence[int]],
    rules: PassRules,
) -> list[TagRow]:
    """The ``history_counts`` rows of a run whose ``cases`` (id, tags) are its stored cases
    and whose replays ``tally`` counted (a case with none counts as undecided), sorted by tag
    as the query orders them."""
    rows: dict[str, list[int]] = {}
    for case_id, tags in cases:
        n_pass, n_fail, n_replays = tally.get(case_id, (0, 0, 0))
        decided = (n_pass + n_fail) * 2 > n_replays
        passes = bool(rules.for_case(case_id, tags).passes(n_pass, n_fail))
        unstable = n_pass > 0 and n_fail > 0
        for tag in (ALL, *tags):
            row = rows.get(tag)
            if row is None:
                row = rows[tag] = [0, 0, 0, 0, 0]
            row[0] += 1
            row[1] += decided
            row[2] += decided and passes
            row[3] += not decided
            row[4] += unstable
    return [(tag, *row) for tag, row in sorted(rows.items())]  # type: ignore[misc]


def pinned_rules(gate_policy: Mapping[str, Any] | None) -> PassRules:
    """The pass rules a run's manifest pinned (``gate_policy.pass_rules``; majority where it
    has none or they do not parse), as ``history_sql.manifest_rules`` reads them stored.

    Examples:
        >>> pinned_rules({"pass_rules": {"pass_rule": "all"}}).describe()
        'all'
        >>> pinned_rules({"pass_rules": "nonsense"}).describe()
        'majority'
    """
    from evalkit.errors import ConfigError

    try:
        return PassRules.from_config((gate_policy or {}).get("pass_rules"))
    except (ValueError, AttributeError, ConfigError):  # not a mapping, not a rule
        return PassRules()


@dataclass(frozen=True)
class TalliedHistory:
    """What a fresh run's finish records as its history counts instead of querying them: the
    scoring they are of (the store checks it is the run's latest), the pass rules the run's
    manifest pinned, and the rows."""

    scoring_id: str
    rules: PassRules
    rows: tuple[TagRow, ...]
