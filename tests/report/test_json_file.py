"""``evalkit compare --json`` writes the report as it is encoded (`evalkit.report.json_file`):
the same bytes as `to_json`, its lists of case ids read from their column a slice at a time,
never the whole document held as one text."""

from __future__ import annotations

import dataclasses
import io

import pytest
from synthetic_runs import seed000_runs

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.report import json_file
from evalkit.report.build import Report, build_report, to_json
from evalkit.report.case_ids import CaseIds


class _Writes(io.StringIO):
    """A text file counting its writes and the longest."""

    def __init__(self) -> None:
        super().__init__()
        self.writes, self.longest = 0, 0

    def write(self, text: str) -> int:
        self.writes += 1
        self.longest = max(self.longest, len(text))
        return super().write(text)


def _report() -> Report:
    base, cand = seed000_runs()
    cmp = compare(base, cand)
    return build_report(cmp, decide(cmp.paired, GatePolicy()))


@pytest.mark.parametrize("batch", [1, 7, 20_000])
def test_the_file_is_to_json_byte_for_byte(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_file, "_BATCH", batch)
    report = _report()
    assert isinstance(report.always_passing, CaseIds) and len(report.always_passing) > 400
    out = io.StringIO()
    json_file.write_json(report, out)
    assert out.getvalue() == to_json(report)


def test_lists_held_as_tuples_empty_or_not_ascii_are_written_as_to_json_writes_them() -> None:
    report = dataclasses.replace(
        _report(), unstable=(), failing_both=("café", 'say "hi"\n', "\x00x"),
        always_passing=CaseIds(),
    )  # fmt: skip
    out = io.StringIO()
    json_file.write_json(report, out)
    assert out.getvalue() == to_json(report)


def test_the_ids_are_written_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 10 ids a slice, no write holds more than 10 ids' text, and the ids are never read
    as one Python list (`CaseIds.__iter__`)."""
    monkeypatch.setattr(json_file, "_BATCH", 10)
    report = _report()
    whole = to_json(report)
    read_whole = []
    monkeypatch.setattr(CaseIds, "__iter__", lambda self: read_whole.append(self) or iter(()))
    out = _Writes()
    json_file.write_json(report, out)
    assert out.getvalue() == whole and read_whole == []
    longest_id = max(len(i) for i in report.always_passing.series.to_list())
    ten_ids = 10 * (longest_id + 8)  # quotes, comma, newline and indent an id
    none = dataclasses.replace(report, unstable=(), failing_both=(), always_passing=())
    rest = _Writes()
    json_file.write_json(none, rest)  # the longest piece the rest of the report writes
    assert out.longest <= max(rest.longest, ten_ids) and rest.longest < len(whole) // 2
    assert out.writes - rest.writes >= len(report.always_passing) // 10
