"""A fresh run's history counts tallied as its answers come in equal what the query counts from
the stored rows (``history_sql.TAG_COUNTS``), on generated runs: errors, fail reasons, scores
without a verdict, unscored replays, cases never answered, duplicated tags, a tag named ALL,
and default, per-tag and per-case pass rules. And a run's finish records the tallied rows only
when they are of its latest scoring."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pytest

from evalkit.replay_rules import PassRules
from evalkit.store.history_sql import record_history
from evalkit.store.history_tally import (
    MAX_CASES,
    ReplayTally,
    TalliedHistory,
    pinned_rules,
    replay_verdict,
    tag_rows,
)
from evalkit.store.schema import DDL, HISTORY_DDL

RULES = ["majority", "all", "any", "k_of_n: 2/3", "k_of_n: 1/2"]
TAGS = ["billing", "tone", "ALL", "refunds"]


def _random_run(rng: random.Random) -> dict[str, Any]:
    """Cases with tags, each replay an output and its scores, and the pass rules pinned."""
    n_cases, replays = rng.randint(1, 12), rng.randint(1, 4)
    cases = []
    for i in range(n_cases):
        tags = [rng.choice(TAGS) for _ in range(rng.randint(0, 3))]  # duplicates on purpose
        cases.append((f"case-{i}", tags))
    outputs, scores = [], []
    for case_id, _ in cases:
        if rng.random() < 0.1:
            continue  # never answered (the run counts it undecided)
        for replay in range(replays):
            error = "HTTP 500" if rng.random() < 0.1 else None
            fail_reason = "unexpected tool call" if rng.random() < 0.1 else None
            outputs.append((case_id, replay, error, fail_reason))
            for index in range(rng.choice([0, 1, 1, 2, 3])):
                passed = rng.choice([True, True, True, False, None])
                scores.append((case_id, replay, index, passed, rng.random() < 0.1))
    policy: dict[str, Any] = {"pass_rule": rng.choice(RULES)}
    if rng.random() < 0.5:
        policy["tags"] = {t: rng.choice(RULES) for t in rng.sample(TAGS, 2)}
    if rng.random() < 0.3:
        policy["cases"] = {cases[0][0]: rng.choice(RULES)}
    return {"cases": cases, "outputs": outputs, "scores": scores, "policy": policy}


def _store(path: Path, run: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    """The run's rows in a store of the real schema, as a run writes them."""
    con = duckdb.connect(str(path))
    con.execute(DDL + HISTORY_DDL)
    manifest = json.dumps({"gate_policy": {"pass_rules": run["policy"]}})
    con.execute(
        "INSERT INTO runs (run_id, status, manifest) VALUES ('r', 'complete', ?)", [manifest]
    )
    con.execute("INSERT INTO scorings (scoring_id, run_id, note) VALUES ('r/s0', 'r', 'run')")
    for case_id, tags in run["cases"]:
        con.execute("INSERT INTO cases (run_id, case_id, tags) VALUES ('r', ?, ?)", [case_id, tags])
    for case_id, replay, error, fail_reason in run["outputs"]:
        con.execute(
            "INSERT INTO outputs (run_id, case_id, replay, error, fail_reason) "
            "VALUES ('r', ?, ?, ?, ?)",
            [case_id, replay, error, fail_reason],
        )
    for case_id, replay, index, passed, error in run["scores"]:
        con.execute(
            "INSERT INTO scores (run_id, scoring_id, case_id, replay, scorer_index, passed, error) "
            "VALUES ('r', 'r/s0', ?, ?, ?, ?, ?)",
            [case_id, replay, index, passed, error],
        )
    return con


def _tally(run: dict[str, Any]) -> TalliedHistory:
    """What a run's writer tallies from the same answers, as the runner hands it over."""
    tally = ReplayTally()
    for case_id, replay, error, fail_reason in run["outputs"]:
        given = [(p, e) for c, r, _, p, e in run["scores"] if (c, r) == (case_id, replay)]
        tally.add(case_id, replay_verdict(error, fail_reason, given))
    assert tally.cases is not None
    rules = pinned_rules({"pass_rules": run["policy"]})
    return TalliedHistory("r/s0", rules, tuple(tag_rows(run["cases"], tally.cases, rules)))


def _recorded(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.execute(
        "SELECT scoring_id, tag, cases, decided, passed, errored, unstable FROM history_counts "
        "ORDER BY tag"
    ).fetchall()


@pytest.mark.parametrize("seed", range(40))
def test_the_tallied_counts_equal_the_querys(seed: int, tmp_path: Path) -> None:
    run = _random_run(random.Random(seed))
    con = _store(tmp_path / "e.duckdb", run)
    queried = record_history(con, "r", "r/s0")
    by_query = _recorded(con)
    tallied = _tally(run)
    assert queried is not None and tallied.rules == queried.pass_rules
    counted = record_history(con, "r", "r/s0", tallied=tallied, tables=True)
    assert _recorded(con) == by_query  # replaced, not added to
    assert counted == queried
    assert [("r/s0", *row) for row in tallied.rows] == by_query


def test_a_generated_run_has_every_kind_of_replay() -> None:
    """The generator reaches every branch the two must agree on (else the test above could
    pass on runs that never differ)."""
    seen = set()
    for seed in range(40):
        run = _random_run(random.Random(seed))
        for case_id, replay, error, fail_reason in run["outputs"]:
            given = [(p, e) for c, r, _, p, e in run["scores"] if (c, r) == (case_id, replay)]
            seen.add(replay_verdict(error, fail_reason, given))
            seen.add("unscored" if not given else "scored")
        if "tags" in run["policy"]:
            seen.add("tag rule")
        if "cases" in run["policy"]:
            seen.add("case rule")
    assert seen == {True, False, None, "unscored", "scored", "tag rule", "case rule"}


def test_a_finish_records_the_tally_only_for_the_latest_scoring(tmp_path: Path) -> None:
    """Rows tallied for a scoring that is no longer the run's latest are counted again."""
    from evalkit.store import open_store

    db = tmp_path / "e.duckdb"
    run = {
        "cases": [("a", ["x"]), ("b", [])],
        "outputs": [("a", 0, None, None), ("b", 0, None, None)],
        "scores": [("a", 0, 0, True, False), ("b", 0, 0, False, False)],
        "policy": {"pass_rule": "majority"},
    }
    _store(db, run).close()
    wrong = TalliedHistory("r/s0", PassRules(), (("ALL", 999, 0, 0, 999, 0),))
    with open_store(db, write=True) as store:
        store.finish_run("r", "complete", {}, tallied=wrong)  # r/s0 is the latest: used
        assert store.query("SELECT cases FROM history_counts WHERE tag = 'ALL'").item() == 999
        store._con.execute(
            "INSERT INTO scorings (scoring_id, run_id, created_at, note) "
            "VALUES ('r/s1', 'r', now(), 'rescore')"
        )
        store.finish_run("r", "complete", {}, tallied=wrong)  # r/s1 is: counted from rows
        counted = store.query("SELECT cases FROM history_counts WHERE tag = 'ALL'").item()
    assert counted == 2


def test_a_tally_stops_past_its_case_limit() -> None:
    tally = ReplayTally()
    for i in range(MAX_CASES):
        tally.add(f"c{i}", True)
    assert tally.cases is not None and len(tally.cases) == MAX_CASES
    tally.add("c0", False)  # a case it follows: still counted
    assert tally.cases is not None and tally.cases["c0"] == [1, 1, 2]
    tally.add("one-more", True)
    assert tally.cases is None
