"""A run's verdicts decided by ranges of cases attach the cases' columns (hashes, tags) once,
after the ranges are stacked (issue 48, item 4): no range's verdicts hold them, so they are
neither held range by range nor copied into the stack; the verdicts are those of one pass."""

from __future__ import annotations

import polars as pl
import pytest
from synthetic_runs import make_run
from test_bounded_gate import _seeded_pair

from evalkit.compare import verdicts


def _stacks(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The columns of each range's verdicts as `verdicts._stacked` receives them."""
    seen: list[list[str]] = []
    stacked = verdicts._stacked

    def counted(parts: list[pl.DataFrame]) -> pl.DataFrame:
        seen.extend(part.columns for part in parts)
        return stacked(parts)

    monkeypatch.setattr(verdicts, "_stacked", counted)
    return seen


def test_ranges_of_one_run_hold_no_case_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run("cand-run", _seeded_pair()[1])
    cases = run.cases.sort("case_id")  # as the store reads them
    whole = verdicts.verdicts(run.outputs, run.scores, cases)  # 240 cases: one pass
    seen = _stacks(monkeypatch)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
    ranged = verdicts.verdicts(run.outputs, run.scores, cases)
    assert len(seen) == 15  # 240 cases, 17 a range
    assert all(not set(verdicts.CASE_META) & set(columns) for columns in seen)
    assert ranged.equals(whole) and ranged.schema == whole.schema


def test_cases_out_of_order_are_decided_with_their_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = make_run("cand-run", _seeded_pair()[1])
    # not in order: the ranges' own case columns are stacked
    cases = run.cases.sort("case_id").reverse()
    whole = verdicts.verdicts(run.outputs, run.scores, cases)
    seen = _stacks(monkeypatch)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
    ranged = verdicts.verdicts(run.outputs, run.scores, cases)
    assert seen and all(set(verdicts.CASE_META) <= set(columns) for columns in seen)
    assert ranged.equals(whole)
