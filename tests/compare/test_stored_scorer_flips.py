"""The gate counts scorer flips in the store a range of case ids at a time, each range's query
given that range's ids alone (issue 48, item 4): no query scans a million ids to keep a
fifty-thousandth of them; the counts are those of the score frames."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from test_bounded_gate import _write_pair

from evalkit.compare import verdicts
from evalkit.compare.scorer_flips import scorer_flips, stored_scorer_flips
from evalkit.store import Store, open_store


def test_each_range_is_given_its_own_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = _write_pair(tmp_path)
    given: list[int] = []
    events: list[str] = []
    threads: list[bool] = []
    query_with, release = Store.query_with, Store.release

    def counted(self, sql, params=(), **frames):  # type: ignore[no-untyped-def]
        given.append(frames["_flip_ids"].height)
        threads.append(frames["one_thread"])
        events.append("query")
        return query_with(self, sql, params, **frames)

    def released(self):  # type: ignore[no-untyped-def]
        events.append("release")
        return release(self)

    with open_store(db, read_only=True) as store:
        ids = store.cases("base-run")["case_id"]
        whole = stored_scorer_flips(store, "base-run", "cand-run", ids)
        monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
        monkeypatch.setattr(Store, "query_with", counted)
        monkeypatch.setattr(Store, "release", released)
        ranged = stored_scorer_flips(store, "base-run", "cand-run", ids.reverse())
        expected = scorer_flips(store.scores("base-run"), store.scores("cand-run"), ids)
    assert given == [17] * 14 + [240 - 17 * 14]  # 240 cases: each range its own ids
    # what DuckDB read for a range (its blocks) is let go before the next range's query
    assert events == ["query", "release"] * 15
    assert threads == [True] * 15  # each thread's partial groups are not held side by side
    assert ranged.sort("scorer").equals(whole.sort("scorer"))
    columns = ["scorer", "n", "broken", "fixed"]
    assert ranged.sort("scorer").select(columns).equals(expected.sort("scorer").select(columns))
    assert pl.Series(given).sum() == ids.len()


def test_a_query_on_one_thread_leaves_the_setting_as_it_was(tmp_path: Path) -> None:
    db, _ = _write_pair(tmp_path)
    ask = "SELECT current_setting('threads') AS threads, count(*) AS n FROM ids"
    ids = pl.DataFrame({"case_id": ["a", "b", "c"]})
    with open_store(db, read_only=True) as store:
        before = store.query("SELECT current_setting('threads') AS threads")["threads"][0]
        during = store.query_with(ask, one_thread=True, ids=ids)
        after = store.query("SELECT current_setting('threads') AS threads")["threads"][0]
    assert during["threads"][0] == 1 and during["n"][0] == 3
    assert after == before
