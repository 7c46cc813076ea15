"""The shared rate budget's holders (evalkit.run.engines.budget, no Ray): a budget outlives
the first run that leaves it, enforces the strictest limits of the runs holding it and says
so, forgets a run that stopped heartbeating, and costs one call per request without an
in-flight cap. The same on a real cluster: tests/run/test_ray_engine.py."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion
from evalkit.run.engines.budget import (
    BudgetedProvider,
    BudgetLimiter,
    BudgetLimits,
    LocalBudget,
    RateBudget,
)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_lives_while_any_holder_does_and_the_last_one_ends_it() -> None:
    clock = _Clock()
    budget = RateBudget(requests_per_minute=600, clock=clock)
    budget.join("run-a", requests_per_minute=600)
    budget.join("run-b", requests_per_minute=600)
    assert budget.leave("run-a") == 1  # run-b still uses it: it must live on
    assert budget.holders() == ["run-b"]
    assert budget.acquire()[0] is not None
    assert budget.leave("run-b") == 0


def test_a_holder_that_stops_heartbeating_expires() -> None:
    clock = _Clock()
    budget = RateBudget(clock=clock)
    budget.join("killed-driver", requests_per_minute=60, ttl_s=10)
    budget.join("live-driver", requests_per_minute=600, ttl_s=10)
    clock.now += 8
    budget.join("live-driver", requests_per_minute=600, ttl_s=10)  # its heartbeat
    clock.now += 5  # the killed driver's hold is 13 s old, the live one's 5 s
    assert budget.holders() == ["live-driver"]
    assert budget.limits.requests_per_minute == 600  # the dead run's stricter limit is gone


def test_the_strictest_limits_of_every_holder_are_enforced_and_reported() -> None:
    clock = _Clock()
    budget = RateBudget(requests_per_minute=600, clock=clock)
    assert budget.join("a", 600, None, 8) == BudgetLimits(600, None, 8)
    enforced = budget.join("b", 120, 6000, None)
    assert enforced == BudgetLimits(120, 6000, 8)  # each limit: the lowest anyone asked
    assert budget.acquire()[0] is not None
    lease, wait = budget.acquire()
    assert lease is None and abs(wait - 0.5) < 1e-9  # paced at 120/min, not a's 600
    assert budget.leave("b") == 1
    assert budget.limits == BudgetLimits(600, None, 8)  # b's limits end with b


def test_without_an_in_flight_cap_a_request_costs_one_budget_call() -> None:
    calls: list[str] = []

    class Counting(LocalBudget):
        async def acquire(self, tokens: int) -> int:
            calls.append("acquire")
            return await super().acquire(tokens)

        async def release(self, lease: int | None, throttled: bool = False) -> None:
            calls.append("release")
            await super().release(lease, throttled)

    class Answering:
        name = "answering"

        def __init__(self) -> None:
            self.fail = False

        async def complete(self, request: ChatRequest) -> Completion:
            if self.fail:
                raise ProviderError("HTTP 429: slow down", retryable=True)
            return Completion(text="ok")

        async def aclose(self) -> None:
            pass

    shared = RateBudget()
    handle = Counting(shared)
    inner = Answering()
    provider, limiter = BudgetedProvider(inner, handle), BudgetLimiter(handle)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])

    async def attempts(n: int) -> None:
        for _ in range(n):
            await limiter.acquire(0)
            await provider.complete(request)

    asyncio.run(attempts(5))
    assert calls == ["acquire"] * 5 and shared.granted == 5
    inner.fail = True  # a 429 is reported at once (it pauses everyone)
    with pytest.raises(ProviderError):
        asyncio.run(attempts(1))
    assert calls[-1] == "release" and shared.backoffs == 1
