"""Cases the candidate did not run: an incomplete candidate is UNVERIFIED, never a removal.

A case the baseline ran (a pinned case, under a pinned exam) that the candidate holds no case
for was either removed by the pull request or simply not run: a ``--tier`` or ``--tag`` run, a
shard never merged (``--allow-incomplete``), a case file the pull request's job skipped, a
run made from another checkout. Only the first is the pull request's change. The gate tells
them apart against the corpus checked out where it runs (`checked_out_cases`): the cases of
``cases/`` (and ``sealed/`` when selected) under the baseline's pinned selection, drafts left
out (a run refuses them), read through the case index (`evalkit.corpus.case_facts.scan_corpus`,
``index_only``: no case is built). A case still there that the candidate has no evidence for
(no exam run answered it either) was not run, and the gate is UNVERIFIED naming it
(`not_run_finding`). A case no longer there was removed, and is accounted for as before.

Without a checked-out corpus (a notebook on a store alone) no removal can be told from a case
not run: every such case counts as not run, and the finding says why.

Removals the gate does account for are bounded too (`removed_share_finding`): ordinary cases
decide budgets (means over every paired case) and ``gate.block_on_any_broken`` tags, so a pull
request that removes more than ``gate.max_changed_share`` of the baseline's cases without
evidence leaves the gate UNVERIFIED, as a critical tag's changed share does.

Examples:
    >>> ref = CaseReference(where="the corpus checked out at /suite", case_ids=frozenset({"a"}))
    >>> ref.holds("a"), ref.holds("b")
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.decision import Finding
from evalkit.compare.evidence import named_ids

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.policy import GatePolicy

__all__ = [
    "CaseReference",
    "NotRun",
    "checked_out_cases",
    "find_not_run",
    "not_run_finding",
    "relabel_changes",
    "removed_share_finding",
    "shown_as_not_run",
]


@dataclass(frozen=True, kw_only=True)
class CaseReference:
    """The cases the candidate should have run: ``case_ids`` of the corpus checked out where
    the gate runs, under the baseline's selection; None when no corpus is checked out there
    (then no removal can be told from a case not run). ``where`` says which, for messages."""

    where: str
    case_ids: frozenset[str] | None
    selection: str = "the full suite"

    def holds(self, case_id: str) -> bool:
        """Whether ``case_id`` should have run (always, without a checked-out corpus)."""
        return self.case_ids is None or case_id in self.case_ids


@dataclass(frozen=True, kw_only=True)
class NotRun:
    """What the gate found about the baseline's cases the candidate holds no case for:
    ``not_run`` (still in the reference, no evidence: the candidate is incomplete),
    ``answered`` (still in the reference, answered in their pinned version by an exam run:
    evidence, but not the pull request's removal either) and ``removed`` (gone from the
    reference, no evidence: the pull request's removal, accounted as before)."""

    not_run: tuple[str, ...]
    removed: tuple[str, ...]
    reference: CaseReference
    considered: int  # the baseline's gated (unsealed) cases: what ``removed`` is a share of
    answered: tuple[str, ...] = ()
    # The candidate run's status: "complete" (it selected fewer cases) or not (stopped early,
    # shards not merged), for the command that fixes it.
    cand_status: str = "complete"


def _selection_text(selection: Mapping[str, Any] | None) -> str:
    """The selection as a reader knows it.

    Examples:
        >>> _selection_text({"tier": "smoke", "tags": ["smoke"]})
        'tier smoke'
        >>> _selection_text({"tags": ["billing"], "exclude_tags": ["agent"]})
        '--tag billing --exclude-tag agent'
        >>> _selection_text(None)
        'the full suite'
    """
    selection = selection or {}
    if selection.get("tier"):
        return f"tier {selection['tier']}"
    flags = [f"--tag {t}" for t in selection.get("tags") or ()]
    flags += [f"--exclude-tag {t}" for t in selection.get("exclude_tags") or ()]
    return " ".join(flags) or "the full suite"


def checked_out_cases(
    config_path: str | Path | None, selection: Mapping[str, Any] | None
) -> CaseReference:
    """The case ids the corpus beside ``config_path`` (the suite config the gate was given)
    selects under ``selection`` (the baseline's manifest's: the pinned one), drafts left out;
    without a config, a reference holding every case (`CaseReference.holds`).

    Read through the case index (`evalkit.corpus.case_facts.scan_corpus` with
    ``index_only``): facts only, no case built, an index entry used only for its file's exact
    bytes. The selection is applied as `evalkit run` applies it (`Selection.apply`).

    Raises:
        CorpusError: the checked-out corpus cannot be read (as ``evalkit run`` would say).
    """
    from evalkit.corpus.case_facts import scan_corpus
    from evalkit.corpus.config_files import resolve_config
    from evalkit.corpus.selection import Selection

    chosen = _selection_text(selection)
    if config_path is None:
        return CaseReference(
            where="no corpus checked out where the gate ran (no suite config given)",
            case_ids=None,
            selection=chosen,
        )
    picked = Selection.from_manifest(selection or {})
    root = resolve_config(config_path).resolve().parent
    facts = picked.apply(scan_corpus(root, sealed=picked.sealed, index_only=True))
    kept = {case.id for case in facts.cases if case.review != "draft"}
    return CaseReference(
        where=f"the corpus checked out at {root}", case_ids=frozenset(kept), selection=chosen
    )


def find_not_run(
    comparison: Comparison,
    reference: Callable[[], CaseReference],
    cand_status: str = "complete",
) -> NotRun | None:
    """The baseline's unsealed cases the candidate's run holds no case for, split by
    ``reference()`` and by evidence (an exam run's answer counts) into not run, answered and
    removed (`NotRun`); None, and nothing read, when the candidate holds every case."""
    base = comparison.base.cases
    sealed = pl.col("sealed").fill_null(False) if "sealed" in base.columns else pl.lit(False)
    removed = comparison.changes.filter(pl.col("change") == "removed")["case_id"]
    if removed.is_empty():  # the common case: no corpus to read, no set of a million ids
        return None
    live = base.filter(~sealed)["case_id"]
    present = set(live.filter(live.is_in(removed.implode(), nulls_equal=True)).to_list())
    lacking = sorted(c for c in removed.to_list() if c in present)
    if not lacking:
        return None
    checked = reference()
    exam = comparison.exam
    # without a pinned exam nothing answers a case the candidate lacks
    without = set(exam.missing) if exam is not None else set(lacking)
    here = [c for c in lacking if checked.holds(c)]
    return NotRun(
        not_run=tuple(c for c in here if c in without),
        removed=tuple(c for c in lacking if not checked.holds(c) and c in without),
        reference=checked,
        considered=live.n_unique(),
        answered=tuple(c for c in here if c not in without),
        cand_status=cand_status,
    )


def shown_as_not_run(comparison: Comparison, found: NotRun | None) -> Comparison:
    """``comparison`` with the cases the candidate did not run told apart from removals: its
    ``changes`` say ``not run`` (`relabel_changes`), its exam summary lists them, and its
    corpus delta leaves them out — they are not the pull request's change, so neither a
    critical tag's changed share nor a must_pass "removed" finding counts them; the
    `not_run_finding` alone accounts for them."""
    from dataclasses import replace

    if found is None or not (found.not_run or found.answered):
        return comparison
    exam, delta = comparison.exam, comparison.delta
    if exam is not None:
        exam = replace(exam, not_run=found.not_run, not_run_answered=found.answered)
    if delta is not None:
        delta = delta.filter(~pl.col("case_id").is_in(list(found.not_run)))
    changes = relabel_changes(comparison.changes, found)
    return replace(comparison, exam=exam, delta=delta, changes=changes)


def relabel_changes(changes: pl.DataFrame, found: NotRun) -> pl.DataFrame:
    """``changes`` (`evalkit.compare.paired.case_changes`) with the cases the candidate did
    not run, though still in the corpus, as ``not run`` rather than ``removed``.

    Examples:
        >>> ref = CaseReference(where="here", case_ids=frozenset({"a"}))
        >>> found = NotRun(not_run=("a",), removed=("b",), reference=ref, considered=3)
        >>> frame = pl.DataFrame({"case_id": ["a", "b"], "change": ["removed", "removed"]})
        >>> relabel_changes(frame, found)["change"].to_list()
        ['not run', 'removed']
    """
    ids = [*found.not_run, *found.answered]
    if not ids:
        return changes
    here = pl.col("case_id").is_in(ids) & (pl.col("change") == "removed")
    return changes.with_columns(
        change=pl.when(here).then(pl.lit("not run")).otherwise(pl.col("change"))
    )


def _fix(found: NotRun, base_run_id: str, cand_run_id: str, exam: bool) -> str:
    if found.cand_status != "complete":
        run = (
            f"finish the candidate (`evalkit run --resume {cand_run_id}`; a sharded run: run its "
            f"missing shards, then `evalkit runs merge {cand_run_id}`)"
        )
    else:
        run = "run the candidate again from this checkout and gate that run"
    if not exam:
        return run
    return (
        f"{run}, or have its configuration answer them in their pinned version: `evalkit gate "
        f"{base_run_id} {cand_run_id} --rebaseline`"
    )


def not_run_finding(found: NotRun, base_run_id: str, cand_run_id: str, exam: bool) -> list[Finding]:
    """Tier 0, unverified: the candidate did not run cases that are still in the reference.

    Examples:
        >>> ref = CaseReference(where="the corpus checked out at /s",
        ...     case_ids=frozenset({"a", "b"}))
        >>> found = NotRun(not_run=("a", "b"), removed=(), reference=ref, considered=9)
        >>> print(not_run_finding(found, "B", "C", exam=False)[0].message[:89])
        the candidate did not run 2 of the baseline's cases still in the corpus checked out at /s
    """
    ids = found.not_run
    if not ids:
        return []
    ref = found.reference
    if ref.case_ids is not None:
        where = f"still in {ref.where} (selection: {ref.selection})"
    else:  # nothing to tell a removal by: every case the baseline ran must have evidence
        where = f"({ref.where}: none can be told removed by the pull request)"
    message = (
        f"the candidate did not run {len(ids)} of the baseline's cases {where}: "
        f"{named_ids(list(ids))}. An incomplete candidate is unverified, not a removal: "
        + _fix(found, base_run_id, cand_run_id, exam)
    )
    stat = {"not_run": len(ids), "checked_out": found.reference.case_ids is not None}
    return [Finding(0, "evidence", ids, stat, message, severity="unverified", kind="not-run")]


def removed_share_finding(found: NotRun, policy: GatePolicy, exam: bool) -> list[Finding]:
    """Tier 0, unverified: the pull request removed more than ``gate.max_changed_share`` of
    the baseline's cases with no evidence of their pinned version (budgets and
    ``block_on_any_broken`` tags are judged on every case, so removing ordinary cases can
    hide a block too)."""
    n, of = len(found.removed), max(found.considered, 1)
    if not n or n / of <= policy.max_changed_share:
        return []
    message = (
        f"this pull request removes {n} of the baseline's {found.considered} cases "
        f"({n / of:.0%} > gate.max_changed_share {policy.max_changed_share:.0%}) with no "
        f"evidence of them: {named_ids(list(found.removed))}; "
        + ("`evalkit gate … --rebaseline` has the candidate's configuration answer them in "
           "their pinned version, or " if exam else "")
        + "a person promotes a baseline of the smaller corpus"
    )  # fmt: skip
    stat = {"removed": n, "cases": found.considered, "share": n / of}
    return [
        Finding(0, "ALL", found.removed, stat, message, severity="unverified", kind="removed-share")
    ]
