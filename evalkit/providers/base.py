"""What every provider speaks: a chat request in, a completion out, failures as ProviderError.

Retries live here, not in each provider: exponential backoff with full jitter on 429, 5xx,
timeouts and connection errors, honouring ``Retry-After``. After the last retry the runner
stores the output as an *error* with its cause; errors are never scored as a pass or a fail.

A cause is stored and printed, so it is scrubbed first (:func:`redact_secrets`): providers may
echo request headers or the key itself in an error body.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call as the model asked for it (arguments still a JSON string)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    sampling: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    text: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [[c.id, c.name, c.arguments] for c in self.tool_calls],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": self.model,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Completion:
        return cls(
            text=data["text"],
            tool_calls=tuple(ToolCallRequest(*c) for c in data["tool_calls"]),
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            model=data["model"],
            finish_reason=data["finish_reason"],
        )


_VALUE = r"[^\s\"',;&}]+"  # a header or query-string value, up to its delimiter
_SECRET_PATTERNS = (
    # "Authorization: Bearer x", "'authorization': 'Basic x'", "x-api-key: x", "api_key=x"
    re.compile(
        r"(?i)((?:authorization|api[-_]?key)[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?" + _VALUE
    ),
    re.compile(r"(?i)\b(bearer\s+)" + _VALUE),
    re.compile(r"\b(sk-)[A-Za-z0-9*._-]{6,}"),  # OpenAI-style keys, masked ones included
)
_KNOWN_SECRETS: set[str] = set()


def register_secret(value: str) -> None:
    """Remember an API key so :func:`redact_secrets` removes it wherever it shows up."""
    if value and len(value) >= 8:
        _KNOWN_SECRETS.add(value)


def redact_secrets(text: str) -> str:
    """``text`` without API keys or Authorization values.

    Examples:
        >>> redact_secrets("HTTP 401: bad key sk-proj-abc123xyz in Authorization: Bearer tok9")
        'HTTP 401: bad key sk-[redacted] in Authorization: [redacted]'
    """
    for secret in _KNOWN_SECRETS:
        text = text.replace(secret, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1[redacted]", text)
    return text


class ProviderError(Exception):
    """A provider call failed. ``retryable`` errors are retried with backoff.

    ``cause`` (what the runner stores and prints) has secrets removed.
    """

    def __init__(self, cause: str, *, retryable: bool, retry_after: float | None = None) -> None:
        cause = redact_secrets(cause)
        super().__init__(cause)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after


class Provider(Protocol):
    name: str

    async def complete(self, request: ChatRequest) -> Completion: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay_s: float = 0.25
    max_delay_s: float = 20.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Full-jitter exponential backoff; ``Retry-After`` is a floor, not a suggestion."""
        backoff = rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))
        return max(backoff, retry_after or 0.0)


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
    """Call ``call`` until it succeeds, a non-retryable error occurs, or retries run out."""
    attempt = 0
    while True:
        stats.attempts += 1
        try:
            return await call()
        except ProviderError as exc:
            if not exc.retryable or attempt >= policy.max_retries:
                if attempt:
                    raise ProviderError(
                        f"{exc.cause} (after {attempt + 1} attempts)", retryable=False
                    ) from None
                raise
            await asyncio.sleep(policy.delay(attempt, exc.retry_after, rng))
            attempt += 1
            stats.retries += 1
