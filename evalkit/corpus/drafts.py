"""What gating asks of a case beyond its content: drafts never gate, and the suite's
``policy.require_provenance`` wants a named reviewer and a date on the cases that block.

A draft (``review: draft``: imported, sampled from traces) has not been read by a person, so
``evalkit cases lint`` and ``evalkit run`` refuse it in a gated selection: every unsealed case of
a suite that is not ``kind: live`` (sealed cases and live runs only ever report). The fix is
one command, ``evalkit cases review ID --who NAME`` (:mod:`evalkit.corpus.review`).

Examples:
    >>> from evalkit.corpus.cases import Case
    >>> draft = Case("t-1", (), "normal", {}, None, {"q": 1}, {}, (), "h", "cases/t.yaml:3",
    ...              review="draft")
    >>> error = draft_errors([draft])[0]
    >>> error.path, error.line, error.case_id
    ('cases/t.yaml', 3, 't-1')
    >>> error.message.rpartition(": ")[2]
    'evalkit cases review t-1 --who NAME'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, Protocol, TypeVar

from evalkit.corpus.cases import Case
from evalkit.corpus.fact_rows import FactRows
from evalkit.errors import CorpusError

#: The kinds of case ``policy.require_provenance`` can name.
PROVENANCE_KINDS = ("must_pass", "critical")


class CaseSummary(Protocol):
    """What the draft check and tag counts read of a case: a loaded
    :class:`~evalkit.corpus.cases.Case` and a :class:`~evalkit.corpus.case_index.CaseFacts`
    read the same (read-only properties, so a frozen record's tuple of tags fits)."""

    @property
    def id(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def review(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def sealed(self) -> bool: ...


CaseT = TypeVar("CaseT", bound=CaseSummary)


def _error(case: CaseSummary, message: str) -> CorpusError:
    path, _, line = case.source.rpartition(":")
    return CorpusError(message, path=path, line=int(line), case_id=case.id)


def gated(cases: Iterable[CaseT], kind: str = "fixtures") -> list[CaseT]:
    """The cases a gate may judge: none in a ``kind: live`` suite, else the unsealed ones."""
    return [] if kind == "live" else [c for c in cases if not c.sealed]


def draft_errors(cases: Iterable[CaseSummary], kind: str = "fixtures") -> list[CorpusError]:
    """One error per draft among the gated ``cases``, each saying how to review it."""
    if isinstance(cases, FactRows):  # columns: only the drafts made into facts
        cases = [] if kind == "live" else cases.where_review("draft", sealed=False)
    return [
        _error(
            case,
            "is a draft (review: draft) and never gates; after reading it, mark it reviewed: "
            f"evalkit cases review {case.id} --who NAME",
        )
        for case in gated(cases, kind)
        if case.review == "draft"
    ]


def refuse_drafts(cases: Sequence[CaseSummary], kind: str = "fixtures") -> None:
    """Raise the first draft's error (with how many more there are) if a gated case is a draft.

    Raises:
        CorpusError: ``file:line: case ID: is a draft ...; evalkit cases review ID --who NAME``.
    """
    errors = draft_errors(cases, kind)
    if not errors:
        return
    first = errors[0]
    more = (
        f" ({len(errors) - 1} more drafts: `evalkit cases lint` lists them)"
        if len(errors) > 1
        else ""
    )
    raise CorpusError(first.message + more, path=first.path, line=first.line, case_id=first.case_id)


def provenance_errors(
    cases: Iterable[Case],
    require: Sequence[Literal["must_pass", "critical"]],
    critical_tags: Sequence[str] = (),
) -> list[CorpusError]:
    """Cases ``require`` names (``must_pass``: criticality must_pass; ``critical``: carrying a
    critical tag) whose provenance lacks a reviewer or a date.

    Examples:
        >>> from evalkit.corpus.cases import Case
        >>> case = Case("r-1", ("billing",), "normal", {"date": "2026-07-01"}, None, {}, {}, (),
        ...             "h", "cases/r.yaml:1")
        >>> provenance_errors([case], ["critical"], ["billing"])[0].message[:31]
        "carries critical tag 'billing' "
        >>> provenance_errors([case], ["must_pass"], ["billing"])
        []
    """
    wanted, critical = set(require), set(critical_tags)
    out = []
    for case in cases:
        if "must_pass" in wanted and case.must_pass:
            why = "is must_pass"
        elif "critical" in wanted and critical & set(case.tags):
            why = f"carries critical tag {sorted(critical & set(case.tags))[0]!r}"
        else:
            continue
        provenance = case.provenance or {}
        if str(provenance.get("reviewer") or "").strip() and provenance.get("date"):
            continue
        out.append(
            _error(
                case,
                f"{why} and policy.require_provenance asks for a named reviewer and a date: "
                "add provenance: {reviewer: NAME, date: YYYY-MM-DD} "
                f"(evalkit cases review {case.id} --who NAME)",
            )
        )
    return out
