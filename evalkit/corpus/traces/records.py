"""One observed conversation, whatever it was read from: the turns that asked, the answer the
model gave, the tool calls it made (with the responses it got), and the attributes a sampler
may slice by.

Examples:
    >>> call = ToolCall("lookup_order", {"order_id": "8812"}, {"status": "delivered"})
    >>> trace = Trace("t.jsonl:1", ({"role": "user", "content": "Where is 8812?"},),
    ...               "It was delivered.", (call,), {"gen_ai.request.model": "m"})
    >>> trace.user_texts()
    ('where is 8812?',)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.corpus.json_input import loads_or_none


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made: its name, arguments, and the response it was given (None:
    the trace holds no response for it)."""

    name: str
    args: dict[str, Any]
    response: Any = None
    call_id: str | None = None


@dataclass(frozen=True)
class Trace:
    """One conversation as a draft case needs it.

    ``messages`` are the turns before the model's work began (system, user and earlier
    assistant turns; no tool traffic), ``output`` the final answer's text, ``attributes`` the
    flat ``gen_ai.*`` (and other) attributes of the span or log line, for ``--by``.
    """

    source: str  # "file:line" or "file: trace T span S", for the provenance
    messages: tuple[dict[str, str], ...]
    output: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def user_texts(self) -> tuple[str, ...]:
        """The user turns, casefolded and with whitespace collapsed: what dedupe compares."""
        return tuple(normalize_text(m["content"]) for m in self.messages if m.get("role") == "user")


def normalize_text(text: str) -> str:
    """Casefolded, whitespace collapsed: ``"  Hi\\n there "`` and ``"hi there"`` are one text."""
    return " ".join(str(text).split()).casefold()


def parse_arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as a mapping: OpenAI sends a JSON string, OTel an object or a string
    (text that is not a JSON object, e.g. cut short by an attribute limit, is kept whole).

    Examples:
        >>> parse_arguments('{"order_id": "8812"}')
        {'order_id': '8812'}
        >>> parse_arguments(None), parse_arguments('{"cut')
        ({}, {'arguments': '{"cut'})
    """
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        value = _decoded(value)
    if not isinstance(value, dict):
        return {"arguments": value}
    return value


def parse_response(value: Any) -> Any:
    """A tool's response: JSON text decoded when it is JSON, else the text itself."""
    return _decoded(value) if isinstance(value, str) else value


def _decoded(text: str) -> Any:
    """JSON text decoded, else the text itself (too deep to be data: the text too)."""
    decoded = loads_or_none(text)
    return text if decoded is None and text.strip() != "null" else decoded


def conversation_turns(
    messages: Sequence[dict[str, Any]], text_of: Callable[[dict[str, Any]], str]
) -> tuple[dict[str, str], ...] | None:
    """The user and assistant turns up to the last user message, as case input (``text_of``
    reads a message's text in its source's spelling); ``None`` without a user message.

    Examples:
        >>> conversation_turns([{"role": "system", "content": "s"}, {"role": "user",
        ...     "content": "hi"}, {"role": "assistant", "content": "yo"}], lambda m: m["content"])
        ({'role': 'user', 'content': 'hi'},)
    """
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    if last_user < 0:
        return None
    return tuple(
        {"role": str(m["role"]), "content": text}
        for m in messages[: last_user + 1]
        if m.get("role") in ("user", "assistant") and (text := text_of(m))
    )
