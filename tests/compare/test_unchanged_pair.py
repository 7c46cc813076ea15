"""A pair of runs holding the same cases (the usual gate: issue 48, item 4) pairs and accounts
for its corpus delta without joining frames over its case ids: the verdicts' columns side by
side, and nothing edited, added or removed found without a join. A counter of the rows each
join of the comparison took shows it; the decision, every frame and the report are the same
as those of the joins, on the seeded pair of the bounded gate and on a pair with an edit."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from test_bounded_gate import _decided, _write_pair

from evalkit.compare import analysis, paired, verdicts


def _joined_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows (both sides') of every eager join while a comparison is built (`compare`)."""
    rows: list[int] = []
    counting = [False]
    join, compare = pl.DataFrame.join, analysis.compare

    def counted(self, other, *args, **kwargs):  # type: ignore[no-untyped-def]
        if counting[0]:
            rows.append(self.height + other.height)
        return join(self, other, *args, **kwargs)

    def counted_compare(*args, **kwargs):  # type: ignore[no-untyped-def]
        counting[0] = True
        try:
            return compare(*args, **kwargs)
        finally:
            counting[0] = False

    monkeypatch.setattr(pl.DataFrame, "join", counted)
    monkeypatch.setattr(analysis, "compare", counted_compare)
    return rows


def _with_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison as it was built before: every pair joined by case id."""
    monkeypatch.setattr(paired, "same_cases", lambda *_: False)
    monkeypatch.setattr(analysis, "same_cases", lambda *_: False)
    monkeypatch.setattr(paired, "_aligned", lambda *_: False)


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    (cmp_a, decision_a, report_a), (cmp_b, decision_b, report_b) = a, b
    assert decision_a.to_dict() == decision_b.to_dict()
    for name in ("base_verdicts", "cand_verdicts", "paired", "changes", "delta"):
        assert getattr(cmp_a, name).equals(getattr(cmp_b, name)), name
        assert getattr(cmp_a, name).schema == getattr(cmp_b, name).schema, name
    assert report_a == report_b


def test_an_unchanged_pair_is_compared_without_a_join_over_its_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)  # verdicts by ranges of case ids
    rows = _joined_rows(monkeypatch)
    fast = _decided(db, config)
    assert fast[0].paired.height == 240 and fast[0].changes.is_empty()
    assert max(rows, default=0) == 0  # no join held a case of the pair

    _with_joins(monkeypatch)
    rows.clear()
    joined = _decided(db, config)
    assert max(rows) >= 2 * 240  # the joins the unchanged pair no longer makes
    assert fast[1].status in ("BLOCKED", "UNVERIFIED")  # something to decide
    _same(fast, joined)


def test_a_pair_with_an_edited_case_is_joined_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path)
    import duckdb

    con = duckdb.connect(str(db))
    con.execute("UPDATE cases SET case_hash = 'edited' WHERE run_id = 'cand-run' AND "
                "case_id = 'billing-003'")  # fmt: skip
    con.close()
    rows = _joined_rows(monkeypatch)
    edited = _decided(db, config)
    assert edited[0].changes["case_id"].to_list() == ["billing-003"]
    assert edited[0].paired.height == 239 and max(rows) >= 2 * 240  # paired by a join
    _with_joins(monkeypatch)
    _same(edited, _decided(db, config))
