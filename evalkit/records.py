"""Typed records that cross module boundaries: what a model returned, and what a scorer said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
