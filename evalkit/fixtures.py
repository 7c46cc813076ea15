"""Tool-fixture replay: serve an agent's tool calls from the case's frozen fixtures.

A fixture is keyed by tool name and, optionally, normalized arguments::

    fixtures:
      tools:
        lookup_order: {order_id: "8812", status: delivered}     # plain: answers any arguments
        issue_refund:                                           # keyed: a list of args/response
          - {args: {order_id: "8812"}, response: {refund_id: R-1, status: issued}}

A call no fixture covers raises :class:`FixtureMiss` ("unexpected tool call name(args)"): the
case fails with that reason and nothing ever reaches a live service.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from evalkit.records import canonical_json

_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")


class FixtureMiss(Exception):
    """The model called a tool (or arguments) the case's fixtures do not cover."""

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        self.name = name
        self.arguments = arguments
        super().__init__(f"unexpected tool call {name}({_render_args(arguments)})")


@dataclass(frozen=True, slots=True)
class ServedCall:
    name: str
    arguments: dict[str, Any]
    response: Any


def normalize_args(arguments: dict[str, Any]) -> str:
    """Canonical form of arguments: key order, whitespace and 1 vs 1.0 do not matter."""
    return canonical_json(_strip(arguments))


def _strip(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        # "8812" and 8812 name the same order: models are inconsistent about quoting ids.
        if _NUMBER.fullmatch(text):
            return float(text) if any(c in text for c in ".eE") else int(text)
        return text
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def is_keyed(fixture: Any) -> bool:
    return (
        isinstance(fixture, list)
        and all(isinstance(e, dict) and set(e) == {"args", "response"} for e in fixture)
        and bool(fixture)
    )


def serve_tool_call(fixtures: dict[str, Any], name: str, raw_arguments: str) -> ServedCall:
    """The fixture response for one tool call, or :class:`FixtureMiss`.

    Examples:
        >>> fixtures = {"lookup_order": {"status": "delivered"}}
        >>> serve_tool_call(fixtures, "lookup_order", '{"order_id": "1"}').response
        {'status': 'delivered'}
    """
    try:
        arguments = json.loads(raw_arguments) if raw_arguments else {}
    except json.JSONDecodeError:
        arguments = {"_unparsed": raw_arguments}
    if not isinstance(arguments, dict):
        arguments = {"_value": arguments}
    if name not in fixtures:
        raise FixtureMiss(name, arguments)
    fixture = fixtures[name]
    if not is_keyed(fixture):
        return ServedCall(name, arguments, fixture)
    wanted = normalize_args(arguments)
    for entry in fixture:
        if normalize_args(entry["args"]) == wanted:
            return ServedCall(name, arguments, entry["response"])
    raise FixtureMiss(name, arguments)


#: The heading of the documents block (``{{documents}}`` renders the block without it).
DOCUMENTS_HEADING = "Reference documents:"
_DOC_TEXT_KEYS = ("text", "content", "passage", "body")
_DOC_NAME_KEYS = ("title", "id", "source", "name")


def render_documents(documents: Any) -> str:
    """A case's ``fixtures.documents`` as numbered passages, as the system under test and the
    judge both see them: ``[1] text``; a mapping shows its title (or id, source, name) in
    parentheses, then its text (``text``, ``content``, ``passage`` or ``body``), else its JSON.

    Examples:
        >>> print(render_documents(["Refunds take 5 days.", {"title": "FAQ", "text": "No fees."}]))
        [1] Refunds take 5 days.
        [2] (FAQ) No fees.
        >>> render_documents([])
        ''
    """
    lines = []
    for number, document in enumerate(documents or (), start=1):
        if isinstance(document, dict):
            name = next((document[k] for k in _DOC_NAME_KEYS if document.get(k)), None)
            text = next((document[k] for k in _DOC_TEXT_KEYS if k in document), None)
            if not isinstance(text, str):
                text = canonical_json(document)
            lines.append(f"[{number}] " + (f"({name}) " if name is not None else "") + text)
        else:
            lines.append(
                f"[{number}] {document if isinstance(document, str) else json.dumps(document)}"
            )
    return "\n".join(lines)


def _render_args(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    return text if len(text) <= 160 else text[:157] + "..."
