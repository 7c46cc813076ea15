"""The gate reads each run's cases a column at a time, the candidate's beside the baseline's
(issue 48, item 4): no read holds more than the ids and one column, each column equal to the
baseline's is the baseline's own, and the frames, the decision and the report are those of the
whole read."""

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


def test_the_gate_reads_each_run_s_cases_a_column_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path)
    with open_store(db, read_only=True) as store:
        names = [c for c in store.cases("cand-run").columns if c not in ("input", "provenance")]
    names.remove("source")
    reads = _reads(monkeypatch)
    cmp, decision, report = _decided(db, config)
    # each run's ids, then the ids and one column per read: the baseline's, then the candidate's
    one_run = ["case_id", *[c for c in names if c != "case_id"]]
    assert [r[-1] for r in reads[: 2 * len(one_run)]] == one_run * 2
    assert max(len(r) for r in reads[: 2 * len(one_run)]) == 2
    monkeypatch.undo()

    def whole_read(store, run_id, *, without, scoring_id, like, compact):  # type: ignore[no-untyped-def]
        frame = store.cases(run_id, without=without, scoring_id=scoring_id)
        return frame if compact is None else compact(frame)

    monkeypatch.setattr("evalkit.compare.analysis.read_cases", whole_read)
    old_cmp, old, old_report = _decided(db, config)
    for run, old_run in ((cmp.base, old_cmp.base), (cmp.cand, old_cmp.cand)):
        assert run.cases.equals(old_run.cases)
        assert run.cases.schema == old_run.cases.schema
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


def test_a_run_s_own_cases_read_a_column_at_a_time_are_the_whole_read() -> None:
    frame = pl.DataFrame({"run_id": ["c"] * 3, "case_id": ["a", "b", "c"],
                          "tags": [["x"], [], None]})  # fmt: skip
    reads: list[str] = []

    def read(column: str) -> pl.DataFrame:
        reads.append(column)
        return frame.select(list(dict.fromkeys(["case_id", column])))

    assert cases_like(read, frame.columns, None).equals(frame)
    assert reads == ["case_id", "run_id", "tags"]
    reads.clear()
    unsorted = frame.reverse()
    assert cases_like(lambda c: unsorted.select(list(dict.fromkeys(["case_id", c]))),
                      frame.columns, None) is None  # fmt: skip
