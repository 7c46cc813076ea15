"""Stable partitioning (evalkit.run.shards): shards cover all work, never overlap, are balanced
and are the same in every process; the shared rate budget and replica routing, without Ray."""

from __future__ import annotations

import asyncio
import doctest
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.errors import ConfigError, ProviderError
from evalkit.records import ChatRequest, Completion
from evalkit.run import replicas, shards
from evalkit.run.engines import budget
from evalkit.run.engines.budget import BudgetedProvider, BudgetLimiter, LocalBudget, RateBudget
from evalkit.run.replicas import ReplicaRouter
from evalkit.run.shards import Shard, make_chunks, order_units, parse_shard, remaining, shard_units

case_ids = st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=80, unique=True)


@settings(max_examples=150, deadline=None)
@given(ids=case_ids, replays=st.integers(1, 4), count=st.integers(1, 9), size=st.integers(1, 17))
def test_shards_cover_all_work_without_overlap_and_balanced(
    ids: list[str], replays: int, count: int, size: int
) -> None:
    units = order_units(ids, replays)
    slices = [shard_units(units, Shard(k, count)) for k in range(1, count + 1)]
    keys = [u.key for part in slices for u in part]
    assert sorted(keys) == sorted((c, r) for c in ids for r in range(replays))  # all the work
    assert len(keys) == len(set(keys))  # no overlap
    sizes = [len(part) for part in slices]
    assert max(sizes) - min(sizes) <= 1  # balanced
    # chunks inside a shard: the same units, named by their key range, never shared
    chunks = [c for part in slices for c in make_chunks(part, size)]
    assert [u for c in chunks for u in c.units] == [u for part in slices for u in part]
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    assert all(len(c.units) <= size for c in chunks)


@settings(max_examples=100, deadline=None)
@given(ids=case_ids, replays=st.integers(1, 4))
def test_the_order_is_the_units_own_order(ids: list[str], replays: int) -> None:
    """Sorted as tuples for speed, the units come out as sorting the units themselves would."""
    from evalkit.run.shards import Unit, case_digest

    units = [Unit(case_digest(c), r, c) for c in ids for r in range(replays)]
    assert order_units(ids, replays) == sorted(units)


@settings(max_examples=60, deadline=None)
@given(ids=case_ids, replays=st.integers(1, 3), data=st.data())
def test_the_order_ignores_input_order_and_a_resume_keeps_chunk_ids(
    ids: list[str], replays: int, data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(ids))
    assert order_units(shuffled, replays) == order_units(ids, replays)
    chunks = make_chunks(order_units(ids, replays), 5)
    every = [u for c in chunks for u in c.units]
    done = {u.key for u in data.draw(st.lists(st.sampled_from(every)))} if every else set()
    left = remaining(chunks, done)
    by_id = {c.chunk_id: c for c in chunks}
    for chunk in left:  # same names as before the resume, only the units not yet done
        assert chunk.chunk_id in by_id
        assert set(chunk.units) == {u for u in by_id[chunk.chunk_id].units if u.key not in done}
    assert sum(len(c.units) for c in left) == len(order_units(ids, replays)) - len(done)


_SCRIPT = """
import json, sys
from evalkit.run.shards import Shard, make_chunks, order_units, shard_units
out = []
for ids, replays, count in json.loads(sys.stdin.read()):
    units = order_units(ids, replays)
    out.append([[c.chunk_id for c in make_chunks(shard_units(units, Shard(k, count)), 3)]
                for k in range(1, count + 1)])
print(json.dumps(out))
"""


def test_shards_are_identical_across_processes() -> None:
    """Other processes with other hash seeds cut exactly the same shards and chunks."""
    import random

    rng = random.Random(7)
    inputs = [
        ([f"case-{rng.randrange(10**6)}-{i}" for i in range(rng.randrange(1, 60))],
         rng.randrange(1, 4), rng.randrange(1, 6))
        for _ in range(40)
    ]  # fmt: skip
    results = []
    for seed in ("1", "98765"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT], input=json.dumps(inputs), env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        results.append(json.loads(done.stdout))
    here = [
        [[c.chunk_id for c in make_chunks(shard_units(order_units(ids, r), Shard(k, n)), 3)]
         for k in range(1, n + 1)]
        for ids, r, n in inputs
    ]  # fmt: skip
    assert results[0] == results[1] == here


def test_shard_syntax() -> None:
    assert parse_shard(" 3/4 ") == Shard(3, 4)
    for bad in ("0/4", "5/4", "1", "a/b", "1/0"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)


@pytest.mark.parametrize("module", [shards, budget, replicas])
def test_docstring_examples(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


# -- the rate budget (the logic the Ray actor runs) ---------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_spaces_requests_and_never_bursts() -> None:
    clock = _Clock()
    budget_ = RateBudget(requests_per_minute=120, clock=clock)  # one per 0.5 s
    grants = []
    while clock.now < 1010.0:
        lease, wait = budget_.acquire()
        if lease is None:
            clock.now += wait
        else:
            grants.append(clock.now)
            budget_.release(lease)
    assert len(grants) == 20
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(grants))


def test_budget_tokens_and_in_flight_cap_and_lease_expiry() -> None:
    clock = _Clock()
    budget_ = RateBudget(tokens_per_minute=600, max_in_flight=2, lease_s=5.0, clock=clock)
    first, _ = budget_.acquire(15)  # the bucket holds 10 tokens: 5 in debt after this
    assert first is not None
    assert budget_.acquire(1) == (None, pytest.approx(0.5))  # 5 tokens at 10/s
    clock.now += 0.5
    second, _ = budget_.acquire(0)
    assert second is not None
    assert budget_.acquire(0) == (None, budget.SLOT_POLL_S)  # two in flight: the cap
    budget_.release(second)
    third, _ = budget_.acquire(0)
    assert third is not None
    clock.now += 5.0  # the first lease's holder died: it expires
    assert budget_.acquire(0)[0] is not None


def test_budget_pauses_everyone_after_a_429() -> None:
    clock = _Clock()
    budget_ = RateBudget(clock=clock)
    assert budget_.backoff(2.0) == 2.0
    assert budget_.acquire()[0] is None
    clock.now += 2.0
    lease, _ = budget_.acquire()
    assert lease is not None
    budget_.release(lease)  # a success ends the streak
    assert [budget_.backoff(None) for _ in range(3)] == [0.5, 1.0, 2.0]  # in a row: doubling
    budget_.release(None)
    assert budget_.backoff(None) == 0.5


class _Answering:
    name = "fake"

    def __init__(self, delay: float = 0.01, fail: str | None = None) -> None:
        self.delay = delay
        self.fail = fail
        self.busy = 0
        self.peak = 0
        self.calls = 0

    async def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        self.busy += 1
        self.peak = max(self.peak, self.busy)
        try:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise ProviderError(self.fail, retryable=True, retry_after=0.0)
            return Completion(text="ok")
        finally:
            self.busy -= 1

    async def aclose(self) -> None:
        return None


_REQUEST = ChatRequest("m", [{"role": "user", "content": "hi"}], {})


def test_budgeted_provider_holds_a_lease_per_attempt_and_reports_429s() -> None:
    shared = RateBudget(max_in_flight=3)
    handle = LocalBudget(shared)
    inner = _Answering(delay=0.02)
    provider, limiter = BudgetedProvider(inner, handle), BudgetLimiter(handle)

    async def one() -> None:
        await limiter.acquire(5)
        await provider.complete(_REQUEST)

    async def many() -> None:
        await asyncio.gather(*(one() for _ in range(12)))

    asyncio.run(many())
    assert inner.peak == 3 and shared.stats() == {"granted": 12, "in_flight": 0, "backoffs": 0}
    throttled = BudgetedProvider(_Answering(fail="HTTP 429: slow down"), handle)
    with pytest.raises(ProviderError):
        asyncio.run(throttled.complete(_REQUEST))
    assert shared.stats()["backoffs"] == 1 and shared.stats()["in_flight"] == 0


# -- replicas: fewest in flight first, each under its own cap ------------------------------------


def test_replicas_route_to_the_fewest_in_flight_within_caps() -> None:
    a, b, c = _Answering(0.03), _Answering(0.03), _Answering(0.01)
    router = ReplicaRouter([("a", a, 2), ("b", b, 2), ("c", c, None)])

    async def many() -> None:
        await asyncio.gather(*(router.complete(_REQUEST) for _ in range(30)))

    asyncio.run(many())
    assert a.peak <= 2 and b.peak <= 2
    assert sum(router.served) == 30 and min(router.served) > 0
    assert router.served_by["c"] > router.served_by["a"]  # the fast replica frees up first
    assert router.in_flight == {"a": 0, "b": 0, "c": 0}


def test_replicas_wait_when_every_replica_is_at_its_cap() -> None:
    a, b = _Answering(0.02), _Answering(0.02)
    router = ReplicaRouter([("a", a, 1), ("b", b, 1)])

    async def many() -> None:
        await asyncio.gather(*(router.complete(_REQUEST) for _ in range(10)))

    asyncio.run(many())
    assert a.peak == 1 and b.peak == 1 and a.calls + b.calls == 10
