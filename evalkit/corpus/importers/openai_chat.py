"""The OpenAI chat format (a ``messages`` array, as fine-tuning files and request logs hold it)
read into a case: the turns up to the last user message ask; the tool calls the assistant made
after it become the case's tool fixtures (with the responses the log holds) and ``tool_called``
checks; its final answer becomes a ``similar`` reference.

Examples:
    >>> call = {"name": "lookup_order", "arguments": '{"order_id": "8812"}'}
    >>> turns = [
    ...     {"role": "system", "content": "You are support."},
    ...     {"role": "user", "content": "Where is order 8812?"},
    ...     {"role": "assistant", "content": None,
    ...      "tool_calls": [{"id": "c1", "type": "function", "function": call}]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
    ...     {"role": "assistant", "content": "It has shipped."}]
    >>> chat = read_chat(turns)
    >>> chat.messages
    [{'role': 'user', 'content': 'Where is order 8812?'}]
    >>> chat.fixtures["tools"]["lookup_order"]
    [{'args': {'order_id': '8812'}, 'response': {'status': 'shipped'}}]
    >>> [e["scorer"] for e in chat.expect], dict(chat.dropped)
    (['tool_called', 'similar'], {'system message': 1})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.corpus.json_input import loads_or_none

#: Why each kind of turn the case cannot hold was left out.
WHY = {
    "system message": "the suite's system.prompt is sent instead; move it there if it matters",
    "earlier tool turn": "case messages hold text turns only; the tool traffic before the last "
    "user message was left out",
    "non-text content": "only text parts of a message are kept (images, audio were left out)",
}


@dataclass(frozen=True)
class ChatCase:
    """What a ``messages`` array gives a case; ``dropped`` counts what it could not hold."""

    messages: list[dict[str, str]]
    fixtures: dict[str, Any]
    expect: list[dict[str, Any]]
    dropped: Counter[str] = field(default_factory=Counter)
    tool_calls: int = 0


def read_chat(turns: Sequence[Any]) -> ChatCase:
    """Split an OpenAI ``messages`` array into the case's turns, tool fixtures and checks.

    Raises:
        ValueError: ``turns`` holds no user message (the caller names the file and line).
    """
    turns = [t for t in turns if isinstance(t, Mapping)]
    users = [i for i, t in enumerate(turns) if t.get("role") == "user"]
    if not users:
        raise ValueError("the messages array has no user message")
    last_user = users[-1]
    dropped: Counter[str] = Counter()
    messages = []
    for turn in turns[: last_user + 1]:
        role = turn.get("role")
        if role in ("system", "developer"):
            dropped["system message"] += 1
            continue
        if role == "tool" or turn.get("tool_calls") or turn.get("function_call"):
            dropped["earlier tool turn"] += 1
            if role == "tool" or not _text(turn.get("content"), dropped):
                continue
        message = {"role": str(role), "content": _text(turn.get("content"), dropped)}
        if turn.get("name"):
            message["name"] = str(turn["name"])
        messages.append(message)
    calls, responses, answer = _after(turns[last_user + 1 :], dropped)
    tools: dict[str, list[dict[str, Any]]] = {}
    expect: list[dict[str, Any]] = []
    for call_id, name, args in calls:
        entry = {"args": args, "response": responses.get(call_id)}
        if entry not in tools.setdefault(name, []):
            tools[name].append(entry)
        check = {"scorer": "tool_called", "args": {"name": name, "args": args}}
        if check not in expect:
            expect.append(check)
    if answer:
        expect.append({"scorer": "similar", "args": {"reference": answer}})
    fixtures = {"tools": tools} if tools else {}
    return ChatCase(messages, fixtures, expect, dropped, len(calls))


def _after(
    turns: Sequence[Mapping[str, Any]], dropped: Counter[str]
) -> tuple[list[tuple[str, str, dict[str, Any]]], dict[str, Any], str]:
    """The calls made after the last user turn, the responses by call id, the final answer."""
    calls: list[tuple[str, str, dict[str, Any]]] = []
    responses: dict[str, Any] = {}
    answer = ""
    for turn in turns:
        if turn.get("role") == "tool":
            responses[str(turn.get("tool_call_id"))] = _decoded(_text(turn.get("content"), dropped))
            continue
        for n, call in enumerate(turn.get("tool_calls") or ()):
            function = call.get("function") or {}
            if isinstance(function, str):  # Inspect's ToolCall: {id, function: NAME, arguments}
                function = {"name": function, "arguments": call.get("arguments")}
            call_id = str(call.get("id") or f"call-{len(calls)}-{n}")
            calls.append(
                (call_id, str(function.get("name")), _arguments(function.get("arguments")))
            )
        if turn.get("role") == "assistant" and not turn.get("tool_calls"):
            answer = _text(turn.get("content"), dropped) or answer
    return calls, responses, answer


def _text(content: Any, dropped: Counter[str]) -> str:
    """A message's text: the string itself, or the text parts of a content-parts list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                dropped["non-text content"] += 1
        return "\n".join(parts)
    return str(content)


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        if not value.strip():
            return {}
        decoded = loads_or_none(value)
        if decoded is None:
            return {"arguments": value}
        value = decoded
    return dict(value) if isinstance(value, Mapping) else {"arguments": value}


def _decoded(text: str) -> Any:
    decoded = loads_or_none(text)
    return text if decoded is None and text.strip() != "null" else decoded
