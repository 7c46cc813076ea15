"""Typed records that cross module boundaries: what a provider was asked and answered, what the
system under test returned, and what a scorer said; plus the canonical JSON every hash uses.

``Provider`` is the one interface every system under test speaks (``complete(ChatRequest)``); it
lives here, on the ground floor, because the runner, the judge scorer and the demo all use it.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model made, with the fixture response it was served."""

    name: str
    arguments: dict[str, Any]
    response: Any = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Output:
    """The system under test's answer to one (case, replay).

    ``text`` is the last assistant message; ``tool_calls`` the whole trajectory in order.
    ``error`` is set (and ``text`` is None) when the provider failed after its retries: an
    errored output is never scored as a pass or a fail.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    steps: int = 1
    error: str | None = None
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None  # the model id the endpoint says it served
    cached: bool = False
    fail_reason: str | None = None  # e.g. "unexpected tool call name(args)": a real failure

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Score:
    """One scorer's judgement of one output: a score in [0, 1], a pass flag and a reason.

    ``error`` marks a scorer that could not decide (e.g. a judge returning malformed JSON);
    such a score counts neither as pass nor as fail.

    Examples:
        >>> Score("contains", 1.0, True, "found 'refund'").passed
        True
    """

    scorer: str
    score: float
    passed: bool
    reason: str
    error: bool = False
    details: dict[str, Any] = field(default_factory=dict)


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
    # the case's fixtures.documents, for a python system's ``documents`` context (an HTTP
    # endpoint sees them in ``messages`` only: a template's {{documents}} or the default block)
    documents: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Completion:
    text: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None
    finish_reason: str | None = None
    # the server's identity where the API gives one (OpenAI's ``system_fingerprint``)
    system_fingerprint: str | None = None

    def to_json(self) -> dict[str, Any]:
        found = {
            "text": self.text,
            "tool_calls": [[c.id, c.name, c.arguments] for c in self.tool_calls],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": self.model,
            "finish_reason": self.finish_reason,
        }
        if self.system_fingerprint is not None:
            found["system_fingerprint"] = self.system_fingerprint
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Completion:
        return cls(
            text=data["text"],
            tool_calls=tuple(ToolCallRequest(*c) for c in data["tool_calls"]),
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            model=data["model"],
            finish_reason=data["finish_reason"],
            system_fingerprint=data.get("system_fingerprint"),
        )


class Provider(Protocol):
    name: str

    async def complete(self, request: ChatRequest) -> Completion: ...

    async def aclose(self) -> None: ...


def canonical_json(value: Any) -> str:
    """Canonical serialization: sorted keys, no whitespace, dates and numbers normalized.

    Examples:
        >>> canonical_json({"b": 1.0, "a": [True, None]})
        '{"a":[true,null],"b":1}'
    """
    return json.dumps(_normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int | float):
        return value
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)
