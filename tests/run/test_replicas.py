"""Replica routing around failures (evalkit.run.replicas): the circuit breaker on a fake clock,
retries sent to another replica, and no stall when every replica is down."""

from __future__ import annotations

import asyncio
import random

import pytest

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion
from evalkit.retries import CallStats, RetryPolicy, complete_with_retries, current_attempt
from evalkit.run.replicas import COOL_DOWN_S, FAILURES_TO_OPEN, ReplicaCounts, ReplicaRouter

_REQUEST = ChatRequest("m", [{"role": "user", "content": "hi"}], {})
_NO_WAIT = RetryPolicy(max_retries=2, base_delay_s=0.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Replica:
    """Answers, or fails with ``error`` (retryable unless it is a 4xx); counts its calls."""

    name = "fake"

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.calls = 0
        self.hold: asyncio.Event | None = None  # set: each call waits for it

    async def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.error:
            retryable = not self.error.startswith("HTTP 4") or self.error.startswith("HTTP 429")
            raise ProviderError(self.error, retryable=retryable)
        return Completion(text="ok")

    async def aclose(self) -> None:
        return None


def _router(*replicas: _Replica, clock: _Clock, **options: float) -> ReplicaRouter:
    return ReplicaRouter(
        [(f"http://r{i}/v1", r, None) for i, r in enumerate(replicas)], clock=clock, **options
    )


async def _outcome(router: ReplicaRouter) -> str:
    try:
        await router.complete(_REQUEST)
    except ProviderError:
        return "error"
    return "ok"


def test_the_breaker_skips_a_failing_replica_then_lets_one_probe_through() -> None:
    dead, alive, clock = _Replica("connection error: refused"), _Replica(), _Clock()
    router = _router(dead, alive, clock=clock)  # one at a time: ties go to the dead one, first

    async def scenario() -> None:
        assert [await _outcome(router) for _ in range(FAILURES_TO_OPEN)] == ["error"] * 3
        assert [await _outcome(router) for _ in range(20)] == ["ok"] * 20  # skipped
        assert dead.calls == FAILURES_TO_OPEN
        clock.now += COOL_DOWN_S - 0.001
        await _outcome(router)
        assert dead.calls == FAILURES_TO_OPEN  # still cooling down
        clock.now += 0.001
        assert await _outcome(router) == "error"  # the one probe, failed: open again
        assert [await _outcome(router) for _ in range(5)] == ["ok"] * 5
        assert dead.calls == FAILURES_TO_OPEN + 1
        dead.error = None  # it recovers
        clock.now += COOL_DOWN_S
        assert [await _outcome(router) for _ in range(3)] == ["ok"] * 3  # probe, then closed
        assert dead.calls == FAILURES_TO_OPEN + 4

    asyncio.run(scenario())
    assert router.counts() == (
        ReplicaCounts("http://r0/v1", FAILURES_TO_OPEN + 4, FAILURES_TO_OPEN + 1, 2),
        ReplicaCounts("http://r1/v1", 20 + 1 + 5, 0, 0),
    )


def test_only_one_probe_is_in_flight_and_a_cancelled_one_frees_the_next() -> None:
    dead, alive, clock = _Replica("HTTP 503: down"), _Replica(), _Clock()
    router = _router(dead, alive, clock=clock)

    async def scenario() -> None:
        for _ in range(FAILURES_TO_OPEN):
            await _outcome(router)
        clock.now += COOL_DOWN_S
        dead.hold = asyncio.Event()
        probe = asyncio.create_task(_outcome(router))
        await asyncio.sleep(0)
        assert dead.calls == FAILURES_TO_OPEN + 1
        assert [await _outcome(router) for _ in range(4)] == ["ok"] * 4  # not a second probe
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)
        dead.hold = None
        assert await _outcome(router) == "error"  # the next probe goes
        assert dead.calls == FAILURES_TO_OPEN + 2

    asyncio.run(scenario())


@pytest.mark.parametrize("answer", ["HTTP 429: slow down", "HTTP 400: bad request"])
def test_an_answer_from_the_replica_never_opens_its_breaker(answer: str) -> None:
    """A 429 is a healthy replica pacing us, a 400 an answer: neither is the replica failing."""
    pacing, clock = _Replica(answer), _Clock()
    router = _router(pacing, _Replica(), clock=clock)

    async def scenario() -> None:
        for _ in range(5 * FAILURES_TO_OPEN):
            await _outcome(router)

    asyncio.run(scenario())
    assert pacing.calls == 5 * FAILURES_TO_OPEN and router.counts()[0].opened == 0


def test_a_retry_goes_to_another_replica_than_the_one_that_failed() -> None:
    """With the breaker out of the way, every first attempt goes to the dead replica (a tie,
    listed first) and every retry to the live one: no call errors."""
    dead, alive, clock = _Replica("connection error: refused"), _Replica(), _Clock()
    router = _router(dead, alive, clock=clock, failures_to_open=10**6)
    seen: list[int] = []

    async def attempt() -> Completion:
        state = current_attempt()
        assert state is not None
        seen.append(state.number)
        return await router.complete(_REQUEST)

    async def scenario() -> list[Completion]:
        stats, rng = CallStats(), random.Random(0)
        return [await complete_with_retries(attempt, _NO_WAIT, stats, rng) for _ in range(50)]

    assert [c.text for c in asyncio.run(scenario())] == ["ok"] * 50
    assert (dead.calls, alive.calls) == (50, 50) and seen == [0, 1] * 50
    assert current_attempt() is None  # the call's state ends with it


def test_every_replica_down_still_sends_and_errors_without_a_stall() -> None:
    one, two, clock = _Replica("connection error: a"), _Replica("timeout after 1s"), _Clock()
    router = _router(one, two, clock=clock)

    async def scenario() -> list[str]:
        calls = (
            complete_with_retries(
                lambda: router.complete(_REQUEST), _NO_WAIT, CallStats(), random.Random(0)
            )
            for _ in range(20)
        )
        done = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)
        return [str(d) for d in done]

    outcomes = asyncio.run(scenario())
    assert len(outcomes) == 20 and all("(after 3 attempts)" in o for o in outcomes)
    assert one.calls + two.calls == 60  # both open: each attempt still went out
    assert router.in_flight == {"http://r0/v1": 0, "http://r1/v1": 0}


def test_replica_urls_are_shown_without_their_userinfo() -> None:
    router = ReplicaRouter([("http://u:pw-9f2c@a:1/v1", _Replica(), None)])
    assert router.counts() == (ReplicaCounts("http://a:1/v1", 0, 0, 0),)
    assert "pw-9f2c" not in repr(router.in_flight) + repr(router.served_by)
