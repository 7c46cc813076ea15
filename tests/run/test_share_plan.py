"""A shard plans its share from integer keys of the digests (evalkit.run.share_plan): the order
is the strings' order, whatever the digests, and the strings themselves are sorted only when
the keys cannot stand for them (two share a key, or a digest is not lowercase hex)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.run.shards import Shard, order_units, shard_units
from evalkit.run.share_plan import digest_order, pairs_digest, plan_shares
from evalkit.store.schema import corpus_digest


@pytest.fixture
def string_sorts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a string column was sorted (``Series.arg_sort`` on strings)."""
    sorts: list[int] = []
    arg_sort = pl.Series.arg_sort

    def counted(self: pl.Series, *args: Any, **kwargs: Any) -> pl.Series:
        if self.dtype == pl.String:
            sorts.append(len(self))
        return arg_sort(self, *args, **kwargs)

    monkeypatch.setattr(pl.Series, "arg_sort", counted)
    return sorts


def _digests(ids: list[str]) -> pl.Series:
    return pl.Series([hashlib.sha256(i.encode()).hexdigest() for i in ids])


def test_sha256_digests_are_ordered_by_their_keys_never_as_strings(
    string_sorts: list[int],
) -> None:
    digests = _digests([f"case-{i}" for i in range(5_000)])
    assert digest_order(digests).to_list() == digests.arg_sort().to_list()
    assert string_sorts == [5_000]  # the reference's sort alone: the plan sorted no string


@pytest.mark.parametrize(
    "digests",
    [
        ["0" * 15 + "b" + "0" * 48, "0" * 15 + "a" + "0" * 48, "f" * 64],  # a key shared
        ["A" + "0" * 63, "a" + "0" * 63, "b" + "0" * 63],  # not lowercase: 'A' < 'a' < 'b'
        ["d2", "d10", "d1"],  # too short to have a key
    ],
    ids=["shared-key", "uppercase", "short"],
)
def test_digests_the_keys_cannot_stand_for_are_sorted_as_strings(
    string_sorts: list[int], digests: list[str]
) -> None:
    series = pl.Series(digests)
    assert digest_order(series).to_list() == sorted(range(3), key=digests.__getitem__)
    assert string_sorts == [3]  # the strings sorted: the keys would have ordered them wrongly


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=60, unique=True),
    st.integers(1, 3),
    st.integers(1, 7),
)
def test_a_plan_has_the_units_and_shares_of_order_units(
    ids: list[str], replays: int, count: int
) -> None:
    pairs = pl.DataFrame(
        {"case_id": ids, "hash": [f"h{i}" for i in range(len(ids))], "digest": _digests(ids)}
    )
    hashes = dict(zip(ids, pairs.get_column("hash").to_list(), strict=True))
    units = order_units(ids, replays)
    for k in range(1, count + 1):
        plan = plan_shares(pairs, replays, Shard(k, count))
        mine = shard_units(units, Shard(k, count))
        assert plan.units == mine
        assert plan.rows.to_list() == sorted({ids.index(u.case_id) for u in mine})
        for n, share in enumerate(shard_units(units, Shard(j, count)) for j in range(1, count + 1)):
            own = dict.fromkeys(u.case_id for u in share)
            assert plan.shares["n_cases"][n] == len(own)
            assert plan.shares["hashes"][n] == corpus_digest((i, hashes[i]) for i in own)


def test_a_shares_lines_are_hashed_as_the_corpus_digest_hashes_them() -> None:
    rng = random.Random(7)
    ids = [f"c-{rng.random()}-é" for _ in range(50_000)]  # more than a batch, not ASCII
    frame = pl.DataFrame({"case_id": ids, "hash": [str(len(i)) for i in ids]})
    expected = corpus_digest(zip(ids, frame.get_column("hash").to_list(), strict=True))
    assert pairs_digest(frame) == expected
    assert pairs_digest(frame.slice(7, 30_000)) == corpus_digest(
        zip(ids[7:30_007], frame.get_column("hash").to_list()[7:30_007], strict=True)
    )
    assert pairs_digest(frame.clear()) == corpus_digest(())
