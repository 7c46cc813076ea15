"""evalkit.replay_rules: a rule's SQL (what a run's own pass rate counts in DuckDB) decides
every case as its Polars expression (what the gate's verdicts use) does, tag and case
overrides included; and says what it counts."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest

from evalkit.replay_rules import PassRules, parse_rule

CONFIGS = [
    None,
    {"pass_rule": "all"},
    {"pass_rule": "any"},
    {"pass_rule": "k_of_n: 4/5"},
    {"pass_rule": "2/3", "tags": {"tone": "all", "it's": "1/5"}},
    {"pass_rule": "majority", "tags": {"tone": "3/5", "x": "all"}, "cases": {"c7": "any"}},
]


@pytest.mark.parametrize("config", CONFIGS)
def test_the_sql_verdict_is_the_polars_verdict(config: dict[str, object] | None) -> None:
    rng = np.random.default_rng(len(str(config)))
    n = 400
    n_pass = rng.integers(0, 6, n)
    tag_sets = (["tone"], ["x"], ["tone", "x"], [], ["it's"], ["it's", "tone"])
    frame = pl.DataFrame({
        "case_id": [f"c{i}" for i in range(n)],
        "tags": [list(tag_sets[i % len(tag_sets)]) for i in range(n)],
        "n_pass": n_pass,
        "n_fail": rng.integers(0, 6, n) * (rng.random(n) < 0.8),
    })  # fmt: skip
    rules = PassRules.from_config(config)
    expected = frame.select(
        rules.verdict_expr(pl.col("tags"), pl.col("case_id")).fill_null(False).alias("v")
    )["v"].to_list()
    con = duckdb.connect()
    con.register("frame", frame.to_arrow())
    got = [r[0] for r in con.execute(
        f"SELECT {rules.sql('tags', 'case_id')} FROM frame").fetchall()]  # fmt: skip
    assert got == expected and any(got) and not all(got)


def test_the_basis_names_the_rule_and_the_replays() -> None:
    assert PassRules().basis(3) == "majority of 3 replays"
    assert PassRules.from_config({"pass_rule": "all"}).basis(5) == "all of 5 replays"
    assert parse_rule("k_of_n: 4/5").basis(5) == "4 of 5 replays"
    tagged = PassRules.from_config({"pass_rule": "all", "tags": {"tone": "3/5"}})
    assert tagged.basis(5) == "all (tag tone: k_of_n 3/5) of 5 replays"
