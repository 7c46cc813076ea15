"""A report's lists of every unstable, failing-in-both and always-passing case are held as one
column each (`evalkit.report.case_ids.CaseIds`), not as a tuple of Python strings (at a million
cases, 800,000 of them), read as the tuples they replace by every renderer and by a pickle's
reader."""

from __future__ import annotations

import json
import pickle

import polars as pl
from synthetic_runs import C, make_run, seed000_runs

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.report.build import build_report, to_dict, to_text
from evalkit.report.case_ids import CaseIds, ids_where


def test_the_report_holds_its_case_lists_as_columns() -> None:
    base, cand = seed000_runs()
    cmp = compare(base, cand)
    report = build_report(cmp, decide(cmp.paired, GatePolicy()))
    lists = (report.unstable, report.failing_both, report.always_passing)
    assert all(isinstance(ids, CaseIds) for ids in lists)
    saturated = set(report.always_passing.series.to_list())
    assert len(saturated) > 400  # seed 000: most cases pass in both
    held = [ids.series for ids in lists]  # a column each: no Python string per case
    assert [s.dtype for s in held] == [pl.String] * 3 and held[2].len() == len(saturated)
    assert report.always_passing == tuple(sorted(saturated))  # read as the tuple it was
    assert to_dict(report)["always_passing"] == sorted(saturated)
    assert f"Always passing (saturated) ({len(saturated)})" in to_text(report)
    again = pickle.loads(pickle.dumps(report))  # the gate notebook's handover
    assert again.always_passing == report.always_passing
    assert json.dumps(to_dict(again), default=str) == json.dumps(to_dict(report), default=str)


def test_case_ids_read_as_a_tuple() -> None:
    ids = CaseIds(pl.Series(["a", "b", "c", "d"]))
    assert (len(ids), ids[-1], ids[1:3], ids[::2], list(ids)) == (
        4, "d", ("b", "c"), ("a", "c"), ["a", "b", "c", "d"]
    )  # fmt: skip
    assert "c" in ids and "z" not in ids and 3 not in ids
    assert ids == ["a", "b", "c", "d"] and ids != ("a",) and ids == CaseIds(list("abcd"))
    assert not CaseIds() and CaseIds() == ()
    one = make_run("b", [C("x", "p")])
    cmp = compare(one, make_run("c", [C("x", "p")]))
    assert build_report(cmp).always_passing == ("x",)


def test_ids_where_keeps_the_ids_of_the_rows_kept() -> None:
    """The report's id lists filter the ids alone (not a copy of every column of the rows
    kept): the same ids, in the same order, as the filtered frame's."""
    keep = [i % 3 == 0 for i in range(9)]
    frame = pl.DataFrame({"case_id": [f"c{i}" for i in range(9)], "keep": keep, "x": range(9)})
    got = ids_where(frame, pl.col("keep"))
    assert list(got) == frame.filter(pl.col("keep"))["case_id"].to_list() == ["c0", "c3", "c6"]
