"""The gate reads the candidate's cases a column at a time beside the baseline's (issue 48, item
4): no read holds more than the ids and one column, each column equal to the baseline's is the
baseline's own, and the frame, the decision and the report are those of the whole read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import MANIFEST, make_run, write_store
from test_bounded_gate import _decided, _seeded_pair, _write_pair

from evalkit.compare.analysis import compact_strings
from evalkit.compare.case_columns import cases_like, read_cases
from evalkit.store import Store, open_store


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The columns of each frame `Store.cases` returns, as they are read."""
    widths: list[list[str]] = []
    whole = Store.cases

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        frame = whole(self, *args, **kwargs)
        widths.append(frame.columns)
        return frame

    monkeypatch.setattr(Store, "cases", counted)
    return widths


def test_the_gate_reads_the_candidate_s_cases_a_column_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path)
    reads = _reads(monkeypatch)
    cmp, decision, report = _decided(db, config)
    # the baseline's read whole, then the candidate's ids and one column per read
    whole = reads[0]
    assert len(whole) > 2 and "case_hash" in whole
    by_column = reads[1 : len(whole) + 1]
    assert [r[-1] for r in by_column] == ["case_id", *[c for c in whole if c != "case_id"]]
    assert max(len(r) for r in by_column) == 2
    monkeypatch.undo()

    def whole_read(store, run_id, *, without, scoring_id, like, compact):  # type: ignore[no-untyped-def]
        frame = store.cases(run_id, without=without, scoring_id=scoring_id)
        return frame if compact is None else compact(frame)

    monkeypatch.setattr("evalkit.compare.analysis.read_cases", whole_read)
    old_cmp, old, old_report = _decided(db, config)
    assert cmp.cand.cases.equals(old_cmp.cand.cases)
    assert cmp.cand.cases.schema == old_cmp.cand.cases.schema
    assert decision.to_dict() == old.to_dict()
    assert cmp.paired.equals(old_cmp.paired)
    assert report == old_report


def test_an_edited_case_s_column_is_read_as_stored(tmp_path: Path) -> None:
    base_cases, cand_cases = _seeded_pair()
    cand_cases[5] = dataclasses.replace(cand_cases[5], hash="edited", tags=["billing"])
    one = {**MANIFEST, "replays": 1}
    runs = [make_run(r, cs, one, r) for r, cs in (("b", base_cases), ("c", cand_cases))]
    write_store(tmp_path / "s.duckdb", runs)
    with open_store(tmp_path / "s.duckdb", read_only=True) as store:
        like = compact_strings(store.cases("b"))
        got = read_cases(store, "c", without=(), scoring_id=store.latest_scoring("c"),
                         like=like, compact=compact_strings)  # fmt: skip
        assert got.equals(compact_strings(store.cases("c")))
    edited = got.row(by_predicate=pl.col("case_id") == cand_cases[5].id, named=True)
    assert edited["case_hash"] == "edited" and edited["tags"] == ["billing"]
    assert got["run_id"].cast(pl.String).unique().to_list() == ["c"]


def test_other_cases_are_read_whole() -> None:
    frame = pl.DataFrame({"run_id": ["c", "c"], "case_id": ["a", "b"], "case_hash": ["h", "i"]})
    reads: list[str] = []

    def read(column: str) -> pl.DataFrame:
        reads.append(column)
        return frame.select(list(dict.fromkeys(["case_id", column])))

    other = frame.with_columns(case_id=pl.Series(["a", "z"]))
    assert cases_like(read, frame.columns, other) is None
    assert reads == ["case_id"]  # the ids alone: nothing more read before the whole frame
    assert cases_like(read, frame.columns, frame.head(1)) is None
