"""What every provider speaks: a chat request in, a completion out, failures as ProviderError.

Retries live here, not in each provider: exponential backoff with full jitter on 429, 5xx,
timeouts and connection errors, honouring ``Retry-After``. After the last retry the runner
stores the output as an *error* with its cause; errors are never scored as a pass or a fail.
"""

from __future__ import annotations

import asyncio
import random
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


class ProviderError(Exception):
    """A provider call failed. ``retryable`` errors are retried with backoff."""

    def __init__(self, cause: str, *, retryable: bool, retry_after: float | None = None) -> None:
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
    """A token bucket over requests and (estimated) tokens per minute."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self._rpm = requests_per_minute
        self._tpm = tokens_per_minute
        self._req_allow = requests_per_minute or 0.0
        self._tok_allow = tokens_per_minute or 0.0
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, tokens: int = 0) -> None:
        if self._rpm is None and self._tpm is None:
            return
        async with self._lock:
            while True:
                now = time.monotonic()
                elapsed, self._stamp = now - self._stamp, now
                if self._rpm:
                    self._req_allow = min(self._rpm, self._req_allow + elapsed * self._rpm / 60)
                if self._tpm:
                    self._tok_allow = min(self._tpm, self._tok_allow + elapsed * self._tpm / 60)
                need_req = 0.0 if not self._rpm or self._req_allow >= 1 else (1 - self._req_allow)
                want_tok = min(tokens, self._tpm or 0)
                need_tok = (
                    0.0
                    if not self._tpm or self._tok_allow >= want_tok
                    else want_tok - self._tok_allow
                )
                if need_req == 0 and need_tok == 0:
                    if self._rpm:
                        self._req_allow -= 1
                    if self._tpm:
                        self._tok_allow -= want_tok
                    return
                wait = max(
                    need_req * 60 / self._rpm if self._rpm else 0.0,
                    need_tok * 60 / self._tpm if self._tpm else 0.0,
                )
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
