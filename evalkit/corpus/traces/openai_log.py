"""Plain OpenAI-format request/response logs (JSON Lines) as traces.

Each line is one chat completion as an application logged it: ``{"request": {model, messages,
tools?}, "response": {choices: [{message}]}}`` (extra top-level keys, e.g. ``metadata``, are
attributes to slice by), or the request's keys at the top with the response beside them
(``{"model", "messages", "response"}`` or ``{"model", "messages", "choices"}``). Messages are in
the chat format: ``content`` a string or ``[{type: text, text}]``, an assistant's
``tool_calls: [{id, function: {name, arguments}}]``, and ``role: tool`` answers with their
``tool_call_id``.

Examples:
    >>> line = {"request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ...         "response": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]},
    ...         "metadata": {"intent": "greeting"}}
    >>> trace = trace_from_line(line, "app.jsonl:1")
    >>> trace.output, trace.attributes["metadata.intent"], trace.attributes["gen_ai.request.model"]
    ('hello', 'greeting', 'm')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.corpus.json_input import json_lines
from evalkit.corpus.traces.records import (
    ToolCall,
    Trace,
    conversation_turns,
    parse_arguments,
    parse_response,
)
from evalkit.errors import CorpusError


def read_openai_log(path: str | Path) -> tuple[list[Trace], int]:
    """The traces of an OpenAI-format JSONL log, and how many lines held no user turn. Lines
    with the same user turns are one conversation: the last of them stands for it.

    Raises:
        CorpusError: a line that is not a JSON object with ``messages`` (``file:line``).
    """
    path = Path(path)
    traces: list[Trace] = []
    latest: dict[tuple[str, ...], int] = {}
    skipped = 0
    for number, line in json_lines(path, invalid="not JSON"):
        if not isinstance(line, dict):
            raise CorpusError("expected a JSON object per line", path=path, line=number)
        trace = trace_from_line(line, f"{path.name}:{number}")
        if trace is None:
            skipped += 1
            continue
        # An agent's successive calls are logged one per line, each repeating the turns
        # before it: the conversation is one trace, its last (fullest) call.
        key = trace.user_texts()
        if key in latest:
            traces[latest[key]] = trace
        else:
            latest[key] = len(traces)
            traces.append(trace)
    return traces, skipped


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
        )
    return "" if content is None else str(content)


def trace_from_line(line: dict[str, Any], source: str) -> Trace | None:
    """One logged completion as a trace (None: no user turn to ask with).

    Raises:
        CorpusError: no ``messages`` list where the request should be.
    """
    request = line["request"] if isinstance(line.get("request"), dict) else line
    response = line["response"] if isinstance(line.get("response"), dict) else line
    messages = request.get("messages")
    if not isinstance(messages, list):
        path, _, number = source.rpartition(":")
        raise CorpusError(
            "no messages: expected {request: {messages: [...]}, response: {...}} or "
            "{messages: [...], choices: [...]}",
            path=path,
            line=int(number) if number.isdigit() else None,
        )
    messages = [m for m in messages if isinstance(m, dict)]
    turns = conversation_turns(messages, _content)
    if turns is None:
        return None
    choices = response.get("choices") or []
    answer = (choices[0] or {}).get("message") or {} if choices else {}
    calls: dict[str, dict[str, Any]] = {}
    for message in [*messages, answer]:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            calls.setdefault(str(call.get("id") or len(calls)), {}).update(
                name=function.get("name"), args=function.get("arguments")
            )
        if message.get("role") == "tool" and message.get("tool_call_id"):
            calls.setdefault(str(message["tool_call_id"]), {})["response"] = _content(message)
    tool_calls = tuple(
        ToolCall(str(e["name"]), parse_arguments(e.get("args")),
                 parse_response(e.get("response")), call_id)
        for call_id, e in calls.items()
        if e.get("name")
    )  # fmt: skip
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": request.get("model"),
        "gen_ai.response.model": response.get("model"),
    }
    for key, value in line.items():
        if key in ("request", "response", "messages", "choices", "tools"):
            continue
        if isinstance(value, dict):
            attributes.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            attributes[key] = value
    return Trace(source, turns, _content(answer) or None, tool_calls, attributes)
