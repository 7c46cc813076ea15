"""``evalkit cases coverage``: saturated cases other cases cover, as retirement candidates.

A case is **saturated** when it passed (every scorer, every replay) in each of the suite's last
``k`` complete runs. It is **covered** when another case of the corpus has the same tags and the
same scorers: retiring it loses no slice and no kind of check. In a group of such cases where
all are saturated, one stays (the first by id); must_pass cases never retire this way (a frozen
incident must keep passing, however long it has).

Examples:
    >>> from evalkit.corpus.cases import Case
    >>> a = Case("a", ("billing",), "normal", {}, None, {}, {}, (), "h", "c:1")
    >>> coverage_groups([a, Case("b", ("billing",), "normal", {}, None, {}, {}, (), "h", "c:2")])
    {(('billing',), ()): ['a', 'b']}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from evalkit.corpus.cases import Case
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.store import Store


@dataclass(frozen=True)
class Candidate:
    """A saturated case and the cases that cover it (same tags and scorers)."""

    case_id: str
    covered_by: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Coverage:
    """The candidates, the runs looked at, and how many cases were saturated."""

    candidates: tuple[Candidate, ...]
    runs: tuple[str, ...]
    saturated: int


def coverage_groups(cases: Sequence[Case]) -> dict[tuple[tuple[str, ...], tuple[str, ...]], list]:
    """Case ids by (sorted tags, sorted scorer names), unsealed cases only."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for case in cases:
        if not case.sealed:
            key = (tuple(sorted(case.tags)), tuple(sorted({s.name for s in case.scorers})))
            groups.setdefault(key, []).append(case.id)
    return {k: sorted(v) for k, v in groups.items()}


def last_runs(store: Store, suite: str, k: int) -> list[str]:
    """The suite's ``k`` newest complete runs (rebaseline runs left out).

    Raises:
        EvalkitError: fewer than ``k`` such runs.
    """
    runs = store.runs().filter(
        (pl.col("status") == "complete") & ~pl.col("label").str.starts_with("rebaseline:")
    )
    found = []
    for row in runs.sort("created_at", descending=True).iter_rows(named=True):
        if store.manifest(row["run_id"]).get("suite") == suite:
            found.append(row["run_id"])
        if len(found) == k:
            return found
    raise EvalkitError(
        f"{len(found)} complete runs of suite {suite!r} in the store; coverage needs {k} "
        "(`evalkit run` more, or ask for fewer with --runs)"
    )


def saturated_cases(store: Store, runs: Sequence[str], cases: Sequence[Case]) -> set[str]:
    """Ids of ``cases`` that passed every score in each of ``runs`` with their current hash."""
    hashes = {c.id: c.hash for c in cases}
    passing: set[str] | None = None
    for run_id in runs:
        stored = store.cases(run_id).select("case_id", "case_hash")
        same = {r["case_id"] for r in stored.iter_rows(named=True)
                if hashes.get(r["case_id"]) == r["case_hash"]}  # fmt: skip
        scores = store.scores(run_id, ordered=False)
        per_case = scores.group_by("case_id").agg(
            (pl.col("passed").fill_null(False) & ~pl.col("error").fill_null(False)).all()
        )
        passed = {r["case_id"] for r in per_case.iter_rows(named=True) if r["passed"]} & same
        passing = passed if passing is None else passing & passed
    return passing or set()


def find_coverage(store: Store, suite: str, cases: Sequence[Case], k: int = 5) -> Coverage:
    """The retirement candidates of ``cases`` over the suite's last ``k`` runs."""
    runs = last_runs(store, suite, k)
    saturated = saturated_cases(store, runs, cases)
    must_pass = {c.id for c in cases if c.must_pass}
    candidates: list[Candidate] = []
    for (tags, _), ids in sorted(coverage_groups(cases).items()):
        if len(ids) < 2:
            continue
        done = [i for i in ids if i in saturated and i not in must_pass]
        if len(done) == len(ids):
            done = done[1:]  # all saturated: one stays to cover the rest
        stays = tuple(i for i in ids if i not in done)
        candidates.extend(Candidate(case_id, stays, tags) for case_id in done)
    return Coverage(tuple(candidates), tuple(runs), len(saturated))
