"""A rate budget shared by every worker of one endpoint: requests/min, tokens/min, a cap on
requests in flight, and a pause for everyone after a 429.

:class:`RateBudget` is plain Python: on the Ray engine it runs as one named actor per endpoint
(base URL + key fingerprint, :func:`budget_name`), so every worker on every node draws from
the same budget; :class:`LocalBudget` is the same thing for one process (tests, one machine).

Requests are spaced ``60 / rpm`` seconds apart with no initial burst, so no window of ``w``
seconds ever holds more than ``w * rpm / 60 + 1`` grants. Tokens use a bucket holding one
second's worth, paid when granted (a call larger than the bucket still goes; the next ones
wait off the debt). A grant is a lease on one in-flight slot; it is released when the request
ends, and expires after ``lease_s`` (a worker that died holding it gives it back that way).

The worker side is two small pieces the runner already has seams for: :class:`BudgetLimiter`
replaces the runner's rate limiter (it acquires before each attempt, outside the latency
clock) and :class:`BudgetedProvider` wraps the provider (it releases the lease when the
attempt ends and reports a 429, which pauses every worker: the Retry-After, or an exponential
backoff on repeated 429s). Without ``max_in_flight`` there is no slot to give back: a grant is
lease ``0`` and a request costs one call to the budget (a success is reported with the next
``acquire``), not two.

A budget outlives the run that made it while any other run uses it: each run *joins* it
(:meth:`RateBudget.join`, again every few seconds as a heartbeat) and *leaves* it when done;
the last to leave removes it. A holder that stops heartbeating (its driver was killed) expires
after its ``ttl_s``. Holders may ask for different limits: the budget enforces the strictest of
each (requests/min, tokens/min, in flight) and :meth:`join` returns what it enforces, so no
run's own limit is ever dropped in silence.

Examples:
    >>> budget = RateBudget(requests_per_minute=60, clock=lambda: 100.0)
    >>> lease, wait = budget.acquire()
    >>> lease is not None, wait
    (True, 0.0)
    >>> budget.acquire()      # the next request may go one second later
    (None, 1.0)
    >>> budget.join("run-b", requests_per_minute=30)   # a second run asks for less
    BudgetLimits(requests_per_minute=30, tokens_per_minute=None, max_in_flight=None)
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion, Provider

#: How long a worker waits before asking again when every in-flight slot is taken.
SLOT_POLL_S = 0.02
#: Longest pause one 429 imposes when it names no Retry-After.
MAX_BACKOFF_S = 30.0
#: How long a holder of a budget counts without a heartbeat (a killed driver's share ends).
HOLDER_TTL_S = 60.0


@dataclass(frozen=True)
class BudgetLimits:
    """One run's limits for an endpoint (``None``: no limit of that kind)."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    max_in_flight: int | None = None

    @staticmethod
    def strictest(limits: Iterable[BudgetLimits]) -> BudgetLimits:
        """The lowest of each limit any of ``limits`` sets.

        Examples:
            >>> BudgetLimits.strictest([BudgetLimits(600, None, 4), BudgetLimits(300)])
            BudgetLimits(requests_per_minute=300, tokens_per_minute=None, max_in_flight=4)
        """
        every = list(limits)

        def low(values: list[Any]) -> Any:
            present = [v for v in values if v is not None]
            return min(present) if present else None

        return BudgetLimits(
            low([x.requests_per_minute for x in every]),
            low([x.tokens_per_minute for x in every]),
            low([x.max_in_flight for x in every]),
        )


def budget_name(base_url: str | None, api_key: str) -> str:
    """The actor name of an endpoint's budget: base URL + a fingerprint of the key (never the
    key itself).

    Examples:
        >>> budget_name("http://127.0.0.1:8000/v1", "sk-1")[:15]
        'evalkit-budget-'
    """
    fingerprint = hashlib.sha256(api_key.encode()).hexdigest()[:12]
    endpoint = hashlib.sha256(f"{base_url or ''}\0{fingerprint}".encode()).hexdigest()[:16]
    return f"evalkit-budget-{endpoint}"


class RateBudget:
    """The shared state of one endpoint's budget (one Ray actor, or :class:`LocalBudget`)."""

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        max_in_flight: int | None = None,
        *,
        lease_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rpm = requests_per_minute
        self._tpm = tokens_per_minute
        self._cap = max_in_flight
        self._lease_s = lease_s
        self._clock = clock
        self._next_at = clock()  # the earliest time the next request may be granted
        self._tok_capacity = tokens_per_minute / 60 if tokens_per_minute else 0.0
        self._tok_allow = self._tok_capacity
        self._tok_stamp = clock()
        self._paused_until = 0.0
        self._strikes = 0  # 429s in a row
        self._leases: dict[int, float] = {}  # lease id -> expiry
        self._counter = 0
        self._holders: dict[str, tuple[BudgetLimits, float]] = {}  # holder -> (limits, expiry)
        self._holders_checked = clock()
        self.granted = 0
        self.backoffs = 0

    @property
    def limits(self) -> BudgetLimits:
        """What the budget enforces now."""
        return BudgetLimits(self._rpm, self._tpm, self._cap)

    def join(
        self,
        holder: str,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        max_in_flight: int | None = None,
        ttl_s: float = HOLDER_TTL_S,
    ) -> BudgetLimits:
        """``holder`` (a run) uses the budget for ``ttl_s`` more seconds with these limits
        (joining again renews it: the heartbeat); returns the limits enforced from now on,
        the strictest of every live holder's."""
        now = self._clock()
        wanted = BudgetLimits(requests_per_minute, tokens_per_minute, max_in_flight)
        self._holders[holder] = (wanted, now + ttl_s)
        self._expire_holders(now)
        return self._apply()

    def leave(self, holder: str) -> int:
        """``holder`` is done with the budget; returns how many holders still use it."""
        self._holders.pop(holder, None)
        self._expire_holders(self._clock())
        if self._holders:
            self._apply()
        return len(self._holders)

    def _expire_holders(self, now: float) -> None:
        """Forget holders past their ttl; the limits of the others apply from now on."""
        gone = [holder for holder, (_, expiry) in self._holders.items() if expiry <= now]
        for holder in gone:
            del self._holders[holder]
        if gone and self._holders:
            self._apply()

    def _apply(self) -> BudgetLimits:
        """Enforce the strictest limits of the live holders (none left: keep what is)."""
        if self._holders:
            limits = BudgetLimits.strictest(wanted for wanted, _ in self._holders.values())
            if limits.tokens_per_minute != self._tpm:
                self._tok_capacity = (limits.tokens_per_minute or 0.0) / 60
                self._tok_allow = min(self._tok_allow, self._tok_capacity)
            self._rpm, self._tpm = limits.requests_per_minute, limits.tokens_per_minute
            self._cap = limits.max_in_flight
        return self.limits

    def acquire(self, tokens: int = 0, succeeded: bool = False) -> tuple[int | None, float]:
        """``(lease, 0.0)`` when one more request fits now, else ``(None, seconds to wait)``.
        Without an in-flight cap the lease is ``0``: nothing to release. ``succeeded``: the
        asker's last request ended without a 429 (ends a streak of 429s, as ``release``)."""
        if succeeded:
            self._strikes = 0
        now = self._clock()
        if self._holders and now >= self._holders_checked + 1.0:  # a killed run's limits end
            self._holders_checked = now
            self._expire_holders(now)
        for lease, expiry in list(self._leases.items()):
            if expiry <= now:
                del self._leases[lease]
        wait = max(0.0, self._paused_until - now)
        if self._rpm:
            wait = max(wait, self._next_at - now)
        if self._tpm:
            self._tok_allow = min(
                self._tok_capacity, self._tok_allow + (now - self._tok_stamp) * self._tpm / 60
            )
            self._tok_stamp = now
            wait = max(wait, -self._tok_allow * 60 / self._tpm)
        if self._cap is not None and len(self._leases) >= self._cap:
            wait = max(wait, SLOT_POLL_S)
        if wait > 1e-9:
            return None, wait
        if self._rpm:
            self._next_at = now + 60 / self._rpm
        self._tok_allow -= tokens
        self.granted += 1
        if self._cap is None:  # no slot to hold: no lease to release (one call per request)
            return 0, 0.0
        self._counter += 1
        self._leases[self._counter] = now + self._lease_s
        return self._counter, 0.0

    def release(self, lease: int | None, throttled: bool = False) -> None:
        """End a lease; ``throttled``: the request got a 429 (see :meth:`backoff`)."""
        if lease is not None:
            self._leases.pop(lease, None)
        if not throttled:
            self._strikes = 0

    def backoff(self, retry_after_s: float | None = None) -> float:
        """A 429: pause every worker for ``retry_after_s``, else 0.5 s doubling per 429 in a
        row (at most ``MAX_BACKOFF_S``); returns the pause."""
        self._strikes += 1
        self.backoffs += 1
        pause = (
            retry_after_s
            if retry_after_s is not None and retry_after_s > 0
            else min(MAX_BACKOFF_S, 0.5 * 2 ** (self._strikes - 1))
        )
        self._paused_until = max(self._paused_until, self._clock() + pause)
        return pause

    def stats(self) -> dict[str, Any]:
        return {"granted": self.granted, "in_flight": len(self._leases), "backoffs": self.backoffs}

    def holders(self) -> list[str]:
        """The runs using the budget now (expired holders dropped)."""
        self._expire_holders(self._clock())
        return sorted(self._holders)


class BudgetHandle(Protocol):
    """An async view of a :class:`RateBudget`, local or behind a Ray actor."""

    async def acquire(self, tokens: int) -> int: ...

    async def release(self, lease: int | None, throttled: bool = False) -> None: ...

    async def backoff(self, retry_after_s: float | None) -> None: ...

    def succeeded(self) -> None:
        """A request without a lease ended well: say so with the next ``acquire``."""


class LocalBudget:
    """A :class:`RateBudget` in this process, behind the async handle workers use."""

    def __init__(self, budget: RateBudget) -> None:
        self.budget = budget
        self._succeeded = False

    async def acquire(self, tokens: int) -> int:
        succeeded, self._succeeded = self._succeeded, False
        while True:
            lease, wait = self.budget.acquire(tokens, succeeded)
            if lease is not None:
                return lease
            await asyncio.sleep(wait)

    def succeeded(self) -> None:
        self._succeeded = True

    async def release(self, lease: int | None, throttled: bool = False) -> None:
        self.budget.release(lease, throttled)

    async def backoff(self, retry_after_s: float | None) -> None:
        self.budget.backoff(retry_after_s)


async def acquire_remote(call: Callable[[], Awaitable[tuple[int | None, float]]]) -> int:
    """Ask ``call`` (one ``acquire`` round trip) until it grants, sleeping what it says."""
    while True:
        lease, wait = await call()
        if lease is not None:
            return lease
        await asyncio.sleep(wait)


#: The lease the limiter took for the attempt the provider is about to make (same task).
_LEASE: contextvars.ContextVar[int | None] = contextvars.ContextVar("evalkit_lease", default=None)


class BudgetLimiter:
    """Stands in for the runner's :class:`evalkit.retries.RateLimiter`: every attempt takes a
    lease from the shared budget before it starts (outside the latency clock)."""

    def __init__(self, handle: BudgetHandle) -> None:
        self.handle = handle

    async def acquire(self, tokens: int = 0) -> None:
        _LEASE.set(await self.handle.acquire(tokens))


class BudgetedProvider:
    """A provider whose attempts hold a budget lease: released when the attempt ends, a 429
    reported to the budget (which then pauses every worker)."""

    def __init__(self, inner: Provider, handle: BudgetHandle) -> None:
        self.inner = inner
        self.handle = handle
        self.name = getattr(inner, "name", "budgeted")

    async def complete(self, request: ChatRequest) -> Completion:
        lease = _LEASE.get()
        _LEASE.set(None)
        if lease is None:  # not through the limiter (a judge): take one here
            lease = await self.handle.acquire(0)
        throttled = False
        try:
            return await self.inner.complete(request)
        except ProviderError as exc:
            throttled = str(exc).startswith("HTTP 429")
            if throttled:
                await self.handle.backoff(exc.retry_after)
            raise
        finally:
            if lease or throttled:  # a held slot (or a 429 streak) the budget must hear of now
                await self.handle.release(lease, throttled)
            else:  # lease 0: no slot held; the success rides on the next acquire
                self.handle.succeeded()

    async def aclose(self) -> None:
        await self.inner.aclose()
