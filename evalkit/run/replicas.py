"""Several replicas of one self-hosted model (``system.base_urls``): least-in-flight routing
around replicas that fail.

Each request goes to the replica with the fewest requests in flight among those below their
own cap (``max_in_flight``); when every replica is at its cap the request waits for the first
one to free up. Ties go to the replica listed first. On the Ray engine each worker process
routes its own requests this way; the shared budget caps requests in flight across workers.

Fewest-in-flight alone keeps choosing a dead replica: a refused connection fails at once, so
that replica is never busy. Two things route around it:

* a retry (:func:`evalkit.retries.current_attempt`) goes to another replica than the one the
  attempt before failed on, whenever another can take it;
* a circuit breaker per replica: after :data:`FAILURES_TO_OPEN` failures in a row (connection
  errors, timeouts, 5xx) a replica is skipped for :data:`COOL_DOWN_S`, then one probe request
  is let through: an answer closes the breaker, a failure opens it for another cool-down. When
  every replica is open, requests go out anyway (skipping all would stall the run; they fail
  fast and are retried or stored as errors).

What each replica served and how often it failed is in the run summary (:meth:`counts`).

Examples:
    >>> from evalkit.run.providers.python_callable import PythonProvider
    >>> a, b = PythonProvider("json:dumps"), PythonProvider("json:dumps")
    >>> router = ReplicaRouter([("http://u:pw@a/v1", a, 4), ("http://b/v1", b, None)])
    >>> router.in_flight
    {'http://a/v1': 0, 'http://b/v1': 0}
    >>> router.counts()[0].render()
    'http://a/v1: 0 requests, 0 errors'
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion, Provider
from evalkit.redact import strip_userinfo
from evalkit.retries import current_attempt

#: Failures in a row (connection errors, timeouts, 5xx) that open a replica's breaker.
FAILURES_TO_OPEN = 3
#: Seconds an open breaker skips its replica before letting one probe through.
COOL_DOWN_S = 10.0


@dataclass(frozen=True)
class ReplicaCounts:
    """What one replica did in this session: attempts sent, attempts failed, breaker trips."""

    url: str
    requests: int
    errors: int
    opened: int = 0

    def render(self) -> str:
        trips = f" (skipped {self.opened}× for a cool-down)" if self.opened else ""
        return f"{self.url}: {self.requests} requests, {self.errors} errors{trips}"


class Breaker:
    """One replica's circuit breaker: closed, open until a time on ``clock``, or half-open with
    one probe in flight.

    Examples:
        >>> now = [0.0]
        >>> breaker = Breaker(clock=lambda: now[0])
        >>> for _ in range(FAILURES_TO_OPEN):
        ...     breaker.failed()
        >>> breaker.allows()
        False
        >>> now[0] += COOL_DOWN_S
        >>> breaker.allows(), breaker.picked(), breaker.allows()  # one probe, then none
        (True, True, False)
        >>> breaker.answered()
        >>> breaker.allows()
        True
    """

    def __init__(
        self,
        failures_to_open: int = FAILURES_TO_OPEN,
        cool_down_s: float = COOL_DOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._threshold = failures_to_open
        self._cool_down_s = cool_down_s
        self._clock = clock
        self._failures = 0  # in a row
        self._open_until = 0.0
        self._probing = False
        self.opened = 0  # times it opened

    def allows(self) -> bool:
        """Whether a request may go to the replica now."""
        if self._failures < self._threshold:
            return True
        return not self._probing and self._clock() >= self._open_until

    def picked(self) -> bool:
        """A request is going to the replica; True: it is the one probe (end it with
        :meth:`probed`)."""
        probe = self._failures >= self._threshold
        self._probing = self._probing or probe
        return probe

    def answered(self) -> None:
        """The replica answered (any answer but a failure of the replica itself)."""
        self._failures = 0

    def failed(self) -> None:
        """The replica failed a request: a connection error, a timeout or a 5xx."""
        self._failures += 1
        if self._failures >= self._threshold:
            now = self._clock()
            if now >= self._open_until:  # requests sent before it opened fail without a trip
                self.opened += 1
            self._open_until = now + self._cool_down_s

    def probed(self) -> None:
        """The probe ended, however (a cancelled one said nothing: the next may go)."""
        self._probing = False


class ReplicaRouter:
    """A provider spreading requests over replicas, fewest in flight first, around failing
    ones. ``clock`` (seconds) drives the breakers' cool-downs: a test passes a fake one."""

    name = "replicas"

    def __init__(
        self,
        replicas: Sequence[tuple[str, Provider, int | None]],
        *,
        failures_to_open: int = FAILURES_TO_OPEN,
        cool_down_s: float = COOL_DOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not replicas:
            raise ValueError("ReplicaRouter needs at least one replica")
        self._urls = [strip_userinfo(url) for url, _, _ in replicas]  # shown in the summary
        self._providers = [provider for _, provider, _ in replicas]
        self._caps = [cap for _, _, cap in replicas]
        self._busy = [0] * len(replicas)
        self._breakers = [Breaker(failures_to_open, cool_down_s, clock) for _ in replicas]
        self.served = [0] * len(replicas)  # requests sent to each replica
        self.errors = [0] * len(replicas)  # of which failed (any error)
        self._freed: asyncio.Condition | None = None

    @property
    def in_flight(self) -> dict[str, int]:
        return dict(zip(self._urls, self._busy, strict=True))

    @property
    def served_by(self) -> dict[str, int]:
        return dict(zip(self._urls, self.served, strict=True))

    def counts(self) -> tuple[ReplicaCounts, ...]:
        """Each replica's requests, errors and breaker trips so far."""
        return tuple(
            ReplicaCounts(url, served, errors, breaker.opened)
            for url, served, errors, breaker in zip(
                self._urls, self.served, self.errors, self._breakers, strict=True
            )
        )

    def _pick(self, avoid: int | None) -> int | None:
        """The replica to send to (None: wait for one to free up). Candidates, best first:
        replicas whose breaker allows it other than ``avoid``, then ``avoid`` too, then all."""
        everyone = range(len(self._busy))
        allowed = [i for i in everyone if self._breakers[i].allows()]
        others = [i for i in allowed if i != avoid]
        best = None
        for index in others or allowed or everyone:
            cap = self._caps[index]
            if cap is not None and self._busy[index] >= cap:
                continue
            if best is None or self._busy[index] < self._busy[best]:
                best = index
        return best

    async def complete(self, request: ChatRequest) -> Completion:
        if self._freed is None:
            self._freed = asyncio.Condition()
        attempt = current_attempt()
        failed_on = attempt.failed_on if attempt is not None else None
        avoid = self._urls.index(failed_on) if failed_on in self._urls else None
        async with self._freed:
            while (index := self._pick(avoid)) is None:
                await self._freed.wait()
            self._busy[index] += 1
            self.served[index] += 1
            probe = self._breakers[index].picked()
        breaker = self._breakers[index]
        try:
            completion = await self._providers[index].complete(request)
        except ProviderError as exc:
            self.errors[index] += 1
            if _replica_failed(exc):
                breaker.failed()
            else:
                breaker.answered()
            if attempt is not None:  # its retry goes elsewhere
                attempt.failed_on = self._urls[index]
            raise
        else:
            breaker.answered()
            return completion
        finally:
            if probe:
                breaker.probed()
            async with self._freed:
                self._busy[index] -= 1
                self._freed.notify()

    async def aclose(self) -> None:
        for provider in self._providers:
            await provider.aclose()


def replica_counts(provider: object) -> tuple[ReplicaCounts, ...]:
    """Each replica's counts when ``provider`` is a :class:`ReplicaRouter`, else none."""
    return provider.counts() if isinstance(provider, ReplicaRouter) else ()


def _replica_failed(error: ProviderError) -> bool:
    """Whether an error says the replica itself is unwell: retryable, and not a 429 (a 429 is
    a healthy replica pacing us; a 400 or a malformed body is an answer)."""
    return error.retryable and not error.cause.startswith("HTTP 429")
