"""The report reads back the failing cases' score rows a share of them at a time (issue 48,
item 4): the reasons are those of one read, in the same order, and each read asks for no more
than a share's cases."""

from __future__ import annotations

import polars as pl
import pytest
from synthetic_runs import seed000_runs

from evalkit.compare import analysis
from evalkit.report import case_details


def test_reasons_read_a_share_of_cases_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    _, cand = seed000_runs()
    failing = cand.outputs.filter(pl.col("fail_reason").is_not_null())["case_id"].to_list()
    scored = cand.scores.filter(~pl.col("passed"))["case_id"].unique().to_list()
    ids = sorted({*failing, *scored})
    assert len(ids) > 10
    once = case_details.failure_reasons(cand, ids)
    asked: list[int] = []
    details = analysis.score_details

    def counted(run, case_ids):  # type: ignore[no-untyped-def]
        asked.append(len(case_ids))
        return details(run, case_ids)

    monkeypatch.setattr(analysis, "score_details", counted)
    monkeypatch.setattr(case_details, "_REASON_CASES", 4)
    shared = case_details.failure_reasons(cand, ids)
    assert max(asked) == 4 and sum(asked) == len(ids)
    assert list(shared.items()) == list(once.items()) and once
