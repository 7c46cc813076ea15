"""The usual pair's cases are held once (issue 48, item 4): the candidate's cases frame takes the
baseline's own columns where they are equal, and a run's outputs the ids of its cases where
they are the same rows. A counter of the columns shared shows it; the comparison, the decision
and the report are those of the frames held twice, and a column that differs (an edited case's
hash) stays the run's own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store
from test_bounded_gate import _decided, _seeded_pair, _write_pair

from evalkit.compare import analysis
from evalkit.compare.shared_cases import SHARED_CASE_COLUMNS, share_cases
from evalkit.store.arrow_stream import rechunked


def _counted(monkeypatch: pytest.MonkeyPatch, share: bool = True) -> list[int]:
    """The columns each comparison's `share_cases` shared (``share`` False: none, the frames
    held twice as before)."""
    counts: list[int] = []

    def counted(base, cand):  # type: ignore[no-untyped-def]
        base, cand, n = share_cases(base, cand) if share else (base, cand, 0)
        counts.append(n)
        return base, cand, n

    monkeypatch.setattr(analysis, "share_cases", counted)
    return counts


def test_the_usual_pair_holds_its_cases_once_and_decides_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path)
    counts = _counted(monkeypatch)
    cmp, decision, report = _decided(db, config)
    assert counts == [len(SHARED_CASE_COLUMNS)]  # 3 replays: the outputs' ids are not the cases'
    for column in SHARED_CASE_COLUMNS:
        assert cmp.cand.cases[column].equals(cmp.base.cases[column])
    assert cmp.cand.cases["run_id"].cast(pl.String).unique().to_list() == ["cand-run"]
    monkeypatch.undo()

    twice = _counted(monkeypatch, share=False)
    old_cmp, old, old_report = _decided(db, config)
    assert twice == [0]
    assert decision.to_dict() == old.to_dict()
    assert cmp.paired.equals(old_cmp.paired)
    assert cmp.cand_verdicts.equals(old_cmp.cand_verdicts)
    assert cmp.cand.cases.equals(old_cmp.cand.cases)
    assert report == old_report


def test_a_column_that_differs_stays_the_run_s_own(tmp_path: Path) -> None:
    base_cases, cand_cases = _seeded_pair()
    cand_cases[5] = dataclasses.replace(cand_cases[5], hash="edited", tags=["billing"])
    one = {**MANIFEST, "replays": 1}
    base = make_run("b", [dataclasses.replace(c, replays=c.replays[0]) for c in base_cases], one)
    cand = make_run("c", [dataclasses.replace(c, replays=c.replays[0]) for c in cand_cases], one)
    before = cand.cases
    base, cand, shared = share_cases(base, cand)
    # case_id, criticality, sealed shared; the hash and tags of one case differ; the runs'
    # synthetic cases have no group column; each run's one replay: its outputs' ids shared
    assert shared == 3 + 2
    assert cand.cases.equals(before)
    assert cand.cases["case_hash"][5] == "edited"
    assert cand.outputs["case_id"].equals(cand.cases["case_id"])


def test_runs_of_other_cases_share_their_equal_columns_alone(tmp_path: Path) -> None:
    base = make_run("b", [C("a", "p", hash="1"), C("b", "p", hash="2")])
    cand = make_run("c", [C("a", "p", hash="1"), C("z", "p", hash="3")])
    write_store(tmp_path / "s.duckdb", [base, cand])  # a store of them is a valid one
    _, cand2, shared = share_cases(base, cand)
    # tags, criticality, sealed alike (the ids and hashes differ); each run's outputs' ids
    assert shared == 3 + 2
    assert cand2.cases.equals(cand.cases)
    assert cand2.cases["case_id"].to_list() == ["a", "z"]


def test_a_read_is_copied_a_column_at_a_time() -> None:
    parts = pl.concat(
        [pl.DataFrame({"a": [i], "b": [str(i)], "c": [[i]]}) for i in range(3)], rechunk=False
    )
    assert parts.n_chunks("all") == [3, 3, 3]
    frame = rechunked(parts)
    assert frame.n_chunks("all") == [1, 1, 1]
    assert frame.equals(parts)
    one = pl.DataFrame({"a": [1]})
    assert rechunked(one) is one  # nothing to copy


def test_a_string_column_of_nulls_alone_is_read_as_nulls_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import duckdb

    made: list[tuple[int, object]] = []
    repeat = pl.repeat

    def counted(value, n, **kwargs):  # type: ignore[no-untyped-def]
        made.append((n, kwargs.get("dtype")))
        return repeat(value, n, **kwargs)

    monkeypatch.setattr(pl, "repeat", counted)
    read = pl.DataFrame(
        duckdb.connect().sql(
            "SELECT NULL::VARCHAR AS error, CASE WHEN i = 3 THEN 'x' END AS fail_reason, "
            "NULL::DOUBLE AS cost, i FROM range(5000) t(i)"
        )
    )
    frame = rechunked(read)
    assert frame.equals(read) and frame.schema == read.schema
    assert made == [(5000, pl.String)]  # the error column alone: no view of a null is held
    assert frame.n_chunks("all") == [1, 1, 1, 1]
    empty = read.head(0)
    assert rechunked(empty).equals(empty) and made == [(5000, pl.String)]
