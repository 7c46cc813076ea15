"""Retries, backoff and rate limits shared by every provider.

Retries live here, not in each provider: exponential backoff with full jitter on 429, 5xx,
timeouts and connection errors, honouring ``Retry-After``. After the last retry the runner
stores the output as an *error* with its cause; errors are never scored as a pass or a fail.

A cause is stored and printed, so it is scrubbed first (:func:`redact_secrets`): providers may
echo request headers or the key itself in an error body.

A provider that routes (:class:`evalkit.run.replicas.ReplicaRouter`) learns that a call is a
retry, and where the attempt before failed, from :func:`current_attempt`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from evalkit.errors import ProviderError
from evalkit.records import Completion


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. ``Retry-After`` is honoured up to
    ``max_retry_after_s``; a server asking for longer gets no retry: the case stores an error
    saying what the server asked for, instead of holding a concurrency slot for an hour."""

    max_retries: int = 4
    base_delay_s: float = 0.25
    max_delay_s: float = 20.0
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Full-jitter exponential backoff; ``Retry-After`` is a floor, not a suggestion."""
        backoff = rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        return max(backoff, retry_after or 0.0)


@dataclass
class Attempt:
    """The attempt :func:`complete_with_retries` is making: its number (0: the first) and the
    replica the attempt before failed on, noted by the router that sent it there."""

    number: int = 0
    failed_on: str | None = None


# Why a context variable: the runner's attempt is ``provider.complete(request)`` and a
# Provider takes nothing else, so the retry loop and a router inside the provider never meet.
# Each case's call runs in its own task, whose context holds its own Attempt (tasks it starts
# copy the context and share the object), so concurrent calls never see each other's.
_ATTEMPT: ContextVar[Attempt | None] = ContextVar("evalkit_attempt", default=None)


def current_attempt() -> Attempt | None:
    """The attempt of the :func:`complete_with_retries` call running in this task, if any.

    Examples:
        >>> current_attempt() is None  # outside a retried call
        True
    """
    return _ATTEMPT.get()


@dataclass
class CallStats:
    """Counts kept by :func:`complete_with_retries` for the run summary."""

    attempts: int = 0
    retries: int = 0


class RateLimiter:
    """Paces calls to ``requests_per_minute`` and (estimated) ``tokens_per_minute``.

    Requests are spaced evenly, ``60 / rpm`` seconds apart with no initial burst, so no window of
    60 seconds ever holds more than ``rpm + 1`` of them. Tokens use a bucket holding one second's
    worth, paid after the fact: a call may start once the bucket is out of debt, then takes its
    tokens (so one call larger than the bucket still goes, and the next ones wait it off).
    Every attempt acquires, retries included.
    """

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self._rpm = requests_per_minute
        self._tpm = tokens_per_minute
        self._req_allow = 1.0
        self._tok_capacity = tokens_per_minute / 60 if tokens_per_minute else 0.0
        self._tok_allow = self._tok_capacity
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, tokens: int = 0) -> None:
        """Wait until one more call (of about ``tokens`` tokens) fits the limits, then take it."""
        if self._rpm is None and self._tpm is None:
            return
        async with self._lock:
            while True:
                now = time.monotonic()
                elapsed, self._stamp = now - self._stamp, now
                wait = 0.0
                if self._rpm:
                    self._req_allow = min(1.0, self._req_allow + elapsed * self._rpm / 60)
                    wait = max(wait, (1.0 - self._req_allow) * 60 / self._rpm)
                if self._tpm:
                    self._tok_allow = min(
                        self._tok_capacity, self._tok_allow + elapsed * self._tpm / 60
                    )
                    wait = max(wait, -self._tok_allow * 60 / self._tpm)
                if wait <= 1e-6:
                    self._req_allow -= 1.0
                    self._tok_allow -= tokens
                    return
                await asyncio.sleep(wait)


async def complete_with_retries(
    call: Callable[[], Awaitable[Completion]],
    policy: RetryPolicy,
    stats: CallStats,
    rng: random.Random,
) -> Completion:
    """Call ``call`` until it succeeds, a non-retryable error occurs, or retries run out.

    :func:`current_attempt` tells ``call`` (and a router inside it) which attempt it is."""
    state = Attempt()
    token = _ATTEMPT.set(state)
    try:
        return await _retry(call, policy, stats, rng, state)
    finally:
        _ATTEMPT.reset(token)


async def _retry(
    call: Callable[[], Awaitable[Completion]],
    policy: RetryPolicy,
    stats: CallStats,
    rng: random.Random,
    state: Attempt,
) -> Completion:
    attempt = 0
    while True:
        stats.attempts += 1
        state.number = attempt
        try:
            return await call()
        except ProviderError as exc:
            wait = exc.retry_after
            if exc.retryable and wait is not None and wait > policy.max_retry_after_s:
                raise ProviderError(
                    f"{exc.cause} (the server asked to wait {wait:.0f}s, more than "
                    f"max_retry_after_s = {policy.max_retry_after_s:g}s; not retried)",
                    retryable=False,
                ) from None
            if not exc.retryable or attempt >= policy.max_retries:
                if attempt:
                    raise ProviderError(
                        f"{exc.cause} (after {attempt + 1} attempts)", retryable=False
                    ) from None
                raise
            await asyncio.sleep(policy.delay(attempt, exc.retry_after, rng))
            attempt += 1
            stats.retries += 1
