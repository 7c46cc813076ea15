"""The demo simulator's agent turn: the triage assistant calling tools through the OpenAI protocol.

A chat request to ``demo-support-1`` that carries ``tools`` is answered here (dispatched from
:func:`evalkit.demo.model.complete`). Like the rest of the simulator it is rule-based and
driven by directives in the system prompt (``DIRECTIVES`` in :mod:`evalkit.demo.model`):

* without ``use_tools`` ("use the tools") it answers in text, as a model may decline to call;
* with it, refund and order-lookup tickets are worked through the offered tools, one call per
  turn: the assistant message has ``content: null`` and ``tool_calls: [{id, type: "function",
  function: {name, arguments: "<json>"}}]``; the next request carries the ``role: tool``
  results, which this module reads to decide the next step;
* ``verify_customer`` ("before any refund, always call lookup_customer") adds a
  ``lookup_customer`` call before every ``issue_refund``.

The procedure, a pure function of the conversation (no noise, so fixture replay gives the same
trajectory every time; tool-call ids are hashes of the conversation):

1. Triage the ticket as the text persona does. Only ``order_status``/``ask_order`` and refund
   topics use tools; injection, security, fraud, legal, human hand-off and the like are answered
   at once, without a call.
2. No order number but an email address in the ticket: ``lookup_customer(email)``, then take the
   account's most recent order (``orders[0]``).
3. ``lookup_order(order_id)``. An ``error`` in the result answers "couldn't find that order".
4. No refund asked: answer with the order's ``status`` (and ``carrier``/``tracking``).
5. Refund in play, read off the record: an existing ``refund`` -> already on its way; captured
   ``charges`` exceeding ``total`` (two equal charges: ``duplicate_charge``, else
   ``overcharge``) on a ``refundable`` order -> ``issue_refund(order_id, amount=<excess>,
   reason)``; excess but ``refundable: false`` -> a billing specialist reviews (escalate); a
   reported charge problem the record does not show -> nothing to refund; a plain refund
   request past ``days_since_delivery`` > the prompt's window -> declined; otherwise escalated.
6. The final answer is the usual JSON triage (category, priority, order_id, refund, escalate,
   reply); ``refund`` is true only when ``issue_refund`` succeeded, and ``order_id`` is the order
   the agent worked on.

Examples:
    >>> system = "Respond only with a JSON object. Use the tools to look up orders."
    >>> tools = [{"type": "function", "function": {"name": "lookup_order"}}]
    >>> messages = [{"role": "system", "content": system},
    ...             {"role": "user", "content": "Where is my order 58120?"}]
    >>> turn = respond(messages, tools)
    >>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
    ('lookup_order', '{"order_id": "58120"}')
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalkit.demo.directives import Flags, parse_directives
from evalkit.demo.protocol import InvalidRequestError
from evalkit.demo.replies import render_decision
from evalkit.demo.triage import Triage, triage

__all__ = ["TOOL_TOPICS", "AgentTurn", "ToolCallOut", "respond"]

#: Triage topics the agent works through tools; every other ticket is answered without a call.
TOOL_TOPICS = frozenset(
    {"order_status", "ask_order", "refund_granted", "refund_review", "refund_window"}
)
_REFUND_TOPICS = frozenset({"refund_granted", "refund_review", "refund_window"})
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_CAPTURED = frozenset({"captured", "settled", "paid"})

Message = Mapping[str, Any]


@dataclass(frozen=True)
class ToolCallOut:
    """One tool call the assistant makes: ``arguments`` is the JSON string the protocol sends."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The ``tool_calls`` entry of an OpenAI assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class AgentTurn:
    """The assistant's turn: tool calls (``text`` is what tokens are counted on) or the answer."""

    text: str
    tool_calls: tuple[ToolCallOut, ...] = ()

    def message(self) -> dict[str, Any]:
        """The OpenAI assistant message: ``content: null`` beside ``tool_calls``, else the text."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.text, "refusal": None}
        calls = [c.to_openai() for c in self.tool_calls]
        return {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}


@dataclass(frozen=True)
class _Call:
    """The next step is a tool call."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class _Answer:
    """The next step is the final answer; ``core`` replaces the topic's template sentence."""

    decision: Triage
    core: str | None = None


@dataclass(frozen=True)
class _Done:
    """A tool call made earlier in the conversation, with the result the client sent back."""

    name: str
    arguments: dict[str, Any]
    result: Any


def respond(messages: Sequence[Message], tools: Any) -> AgentTurn:
    """The triage assistant's next turn for a conversation that offers ``tools``.

    Raises:
        InvalidRequestError: ``tools`` is not a list of function tools, or a ``role: tool``
            message does not answer an earlier tool call (or one is left unanswered).
    """
    offered = _offered(tools)
    done = _history(messages)
    plain = [m for m in messages if m.get("role") != "tool" and not m.get("tool_calls")]
    flags = parse_directives(_system_text(messages))
    base = triage(plain)
    if not flags.use_tools or base.mode != "none" or base.topic not in TOOL_TOPICS:
        return AgentTurn(render_decision(base, flags))
    step = _next_step(base, flags, plain, done, offered)
    if isinstance(step, _Call):
        return _call(messages, step.name, step.arguments)
    return AgentTurn(render_decision(step.decision, flags, step.core))


_Step = _Call | _Answer


def _next_step(
    base: Triage,
    flags: Flags,
    plain: Sequence[Message],
    done: Sequence[_Done],
    offered: frozenset[str],
) -> _Step:
    """The next tool call, or the final answer (steps 2-4 of the procedure above)."""
    order_id = base.order_id
    email = _ticket_email(plain)
    customer = _result(done, "lookup_customer")
    if order_id is None:
        if customer is None and email and "lookup_customer" in offered:
            return _Call("lookup_customer", {"email": email})
        orders = customer.get("orders") if isinstance(customer, dict) else None
        if not orders or not isinstance(orders, list):
            return _Answer(base)
        order_id = str(orders[0])
    order = _result(done, "lookup_order", order_id=order_id)
    if order is None:
        if "lookup_order" not in offered:
            return _Answer(base)
        return _Call("lookup_order", {"order_id": order_id})
    base = replace(base, order_id=order_id)
    mention = _order_text(order_id, flags)
    if _failed(order):
        core = f"I couldn't find {mention} in our system; could you double-check the number"
        return _Answer(_final(base, "order_not_found"), core + " on your confirmation email?")
    if base.topic not in _REFUND_TOPICS:
        return _Answer(_final(base, "order_status"), _status_core(order, mention))
    return _refund_step(base, flags, order, customer, email, done, offered, mention)


def _refund_step(
    base: Triage,
    flags: Flags,
    order: dict[str, Any],
    customer: Any,
    email: str | None,
    done: Sequence[_Done],
    offered: frozenset[str],
    mention: str,
) -> _Step:
    """Step 5 of the procedure above: refund, verify first, or answer without a refund."""
    existing = order.get("refund")
    if isinstance(existing, dict) and existing:
        shown = _money(existing.get("amount"))
        status = str(existing.get("status", "processing")).replace("_", " ")
        core = f"A refund{f' of {shown}' if shown else ''} for {mention} is already {status};"
        core += " it usually reaches your card within 5-7 business days of being issued."
        return _Answer(_final(base, "refund_in_progress"), core)
    excess = _excess(order)
    if excess is None:
        if base.topic == "refund_granted":  # the customer reported a charge problem
            total = _money(order.get("total"))
            core = f"I checked {mention} and the charges match the order total"
            core += f" of {total}" if total else ""
            core += ", so there is nothing to refund; a second line on a statement is usually"
            core += " a card hold that drops off within a few days."
            return _Answer(_final(base, "charge_checked"), core)
        days = order.get("days_since_delivery")
        window = flags.refund_window
        if window and isinstance(days, int | float) and days > window:
            return _Answer(_final(base, "refund_window"))
        return _Answer(_final(base, "refund_review", escalate=True))
    if order.get("refundable") is False or "issue_refund" not in offered:
        return _Answer(_final(base, "refund_review", escalate=True))
    if flags.verify_customer:
        if customer is None:
            account = order.get("customer_email") or email
            if not account or "lookup_customer" not in offered:
                return _Answer(_final(base, "refund_review", escalate=True))
            return _Call("lookup_customer", {"email": str(account)})
        if _failed(customer) or customer.get("verified") is False:
            core = f"I couldn't verify the account on {mention}, so I haven't issued a refund;"
            core += " our billing team will confirm your details by email."
            return _Answer(_final(base, "verify_failed", escalate=True), core)
    amount, reason = excess
    refund = _result(done, "issue_refund")
    if refund is None:
        return _Call(
            "issue_refund", {"order_id": base.order_id, "amount": amount, "reason": reason}
        )
    if _failed(refund):
        core = f"I couldn't issue the refund on {mention} automatically, so I've passed it to a"
        return _Answer(_final(base, "refund_failed", escalate=True), core + " billing specialist.")
    what = "duplicate charge" if reason == "duplicate_charge" else "overcharge"
    ref = refund.get("refund_id")
    core = f"I've confirmed the {what} of {_money(amount)} on {mention} and issued a refund"
    core += f"{f' ({ref})' if ref else ''}; it usually reaches your card within 5-7 business days."
    return _Answer(_final(base, "refund_issued", refund=True), core)


def _final(base: Triage, topic: str, *, escalate: bool = False, refund: bool = False) -> Triage:
    """The answer's decision; ``topic`` names the demo template used when no core is given."""
    return replace(base, topic=topic, refund=refund, escalate=escalate)


def _excess(order: Mapping[str, Any]) -> tuple[float, str] | None:
    """(amount charged beyond the order total, reason) from the record's captured charges."""
    charges = order.get("charges")
    if not isinstance(charges, list):
        return None
    captured: list[float] = []
    for charge in charges:
        if isinstance(charge, dict):
            if str(charge.get("status", "captured")) not in _CAPTURED:
                continue
            charge = charge.get("amount")
        if isinstance(charge, int | float) and not isinstance(charge, bool):
            captured.append(round(float(charge), 2))
    duplicate = len(captured) != len(set(captured))
    total = order.get("total")
    if isinstance(total, int | float) and not isinstance(total, bool):
        excess = round(sum(captured) - float(total), 2)
    elif duplicate:
        excess = max(a for a in captured if captured.count(a) > 1)
    else:
        return None
    if excess <= 0:
        return None
    return excess, "duplicate_charge" if duplicate else "overcharge"


def _status_core(order: Mapping[str, Any], mention: str) -> str:
    status = str(order.get("status", "being processed")).replace("_", " ")
    carrier, tracking = order.get("carrier"), order.get("tracking")
    via = f" with {carrier}" if carrier else ""
    via += f" (tracking {tracking})" if tracking else ""
    core = f"I've checked {mention}: it is {status}{via}."
    return core + " You'll get an email as soon as the carrier updates it."


def _offered(tools: Any) -> frozenset[str]:
    if not isinstance(tools, list):
        raise InvalidRequestError("'tools' must be a list of tool objects")
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidRequestError(f"tools[{i}] must be {{type: function, function: {{name}}}}")
        names.append(function["name"])
    return frozenset(names)


def _history(messages: Sequence[Message]) -> list[_Done]:
    """Earlier tool calls paired with their results, in call order (validated like the API)."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: dict[str, Any] = {}
    order: list[str] = []
    for i, message in enumerate(messages):
        asked = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in asked or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
                raise InvalidRequestError(f"messages[{i}].tool_calls: malformed tool call")
            calls[call["id"]] = (str(function.get("name")), _loads(function.get("arguments")))
            order.append(call["id"])
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in calls:
                raise InvalidRequestError(
                    f"messages[{i}]: role 'tool' must answer a preceding tool_calls id, "
                    f"got tool_call_id {call_id!r}"
                )
            results[call_id] = _loads(message.get("content"))
    missing = [c for c in order if c not in results]
    if missing:
        raise InvalidRequestError(f"tool_calls without a role 'tool' response: {missing}")
    return [_Done(*calls[c], results[c]) for c in order]


def _result(done: Sequence[_Done], name: str, **arguments: Any) -> Any:
    """The latest result of ``name`` called with (at least) ``arguments``; None if never called."""
    for call in reversed(done):
        wanted = all(str(call.arguments.get(k)) == str(v) for k, v in arguments.items())
        if call.name == name and wanted:
            return call.result if isinstance(call.result, dict) else {"result": call.result}
    return None


def _failed(result: Any) -> bool:
    return not isinstance(result, dict) or "error" in result


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text if text is not None else {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _call(messages: Sequence[Message], name: str, arguments: dict[str, Any]) -> AgentTurn:
    encoded = json.dumps(arguments)
    key = json.dumps([list(messages), name, encoded], sort_keys=True, default=str)
    call_id = "call_" + hashlib.sha256(key.encode()).hexdigest()[:24]
    return AgentTurn(f"{name} {encoded}", (ToolCallOut(call_id, name, encoded),))


def _system_text(messages: Sequence[Message]) -> str:
    return "\n".join(
        str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer")
    )


def _ticket_email(plain: Sequence[Message]) -> str | None:
    users = [m.get("content") for m in plain if m.get("role") == "user"]
    found = [m.group(0) for text in users if isinstance(text, str) for m in _EMAIL.finditer(text)]
    return found[-1].lower() if found else None


def _order_text(order_id: str | None, flags: Flags) -> str:
    return f"order {order_id}" if flags.no_markdown else f"**order {order_id}**"


def _money(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"${value:,.2f}"
    return ""
