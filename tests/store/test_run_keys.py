"""A part's case ids are looked up among the run's by binary search over the run's ids, sorted
once per merge (a join per part hashed every case id of the run again for every part: at a
million cases and thousands of parts, most of a merge). The lookup must refuse exactly what a
set membership would: checked here against a Python set on seeded random ids."""

from __future__ import annotations

import random
import string

import polars as pl
import pytest

from evalkit.store.part_checks import RunKeys


def _ids(rng: random.Random, n: int) -> list[str]:
    """Ids of varied length and alphabet: prefixes of each other, digits, unicode, empty."""
    alphabet = string.ascii_letters + string.digits + "-_é☃"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("as_series", [False, True])
def test_unknown_ids_are_exactly_those_a_set_does_not_hold(as_series: bool) -> None:
    rng = random.Random(48)
    run = sorted(set(_ids(rng, 3_000)))
    others = [i for i in _ids(rng, 2_000) if i not in set(run)]
    # a run's own ids' neighbours: one more character, one fewer (their sort positions)
    others += [i + "0" for i in run[:50] if i + "0" not in set(run)]
    others += [i[:-1] for i in run[:50] if i and i[:-1] not in set(run)]
    given = pl.Series(run, dtype=pl.String) if as_series else frozenset(run)
    keys = RunKeys("r1", given, replays=1)
    known = set(run)
    for _ in range(200):  # parts of every size, from the run's ids, others and nulls
        pool = [*rng.sample(run, 40), *rng.sample(others, rng.randint(0, 5)), None]
        part = [rng.choice(pool) for _ in range(rng.randint(0, 60))]
        found = keys.unknown(pl.Series("case_id", part, dtype=pl.String)).to_list()
        assert found == [i for i in part if i is None or i not in known]


def test_a_part_of_ghost_ids_is_refused_naming_them_in_order() -> None:
    keys = RunKeys("r1", pl.Series([f"case-{i:05d}" for i in range(10_000)]), replays=2)
    rows = pl.DataFrame(
        {
            "run_id": ["r1"] * 5,
            "case_id": ["case-00003", "case-99999", "case-0000", "aaa", "case-99999"],
            "replay": [0, 1, 1, 0, 0],
        }
    )
    assert keys.refusal("outputs", rows) == (
        "rows of case ids run r1 does not have: case-99999, case-0000, aaa"
    )
    assert keys.refusal("outputs", rows.head(1)) is None
    # a run with no case at all refuses every row
    assert RunKeys("r1", frozenset(), replays=1).unknown(rows["case_id"]).len() == 5
