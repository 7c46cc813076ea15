"""The simulator's OpenAI-shaped surface: a chat-completion request body in, a response dict out.

The model id picks the persona: the triage assistant ``demo-support-1`` (rules in
:mod:`evalkit.demo.triage`, tool-calling turns in :mod:`evalkit.demo.agent`) or the simulated
judge ``demo-judge-1`` (:mod:`evalkit.demo.judge`). It is a simulator, not a language model.

Examples:
    >>> msgs = [{"role": "system", "content": "Respond only with a JSON object."},
    ...         {"role": "user", "content": "I was charged twice for order 8812."}]
    >>> json.loads(simulate(msgs))["category"]
    'billing'
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from evalkit.demo.agent import respond
from evalkit.demo.directives import parse_directives
from evalkit.demo.judge import judge
from evalkit.demo.protocol import (
    MODEL_ID,
    InvalidRequestError,
    Message,
    UnknownModelError,
    count_tokens,
    request_sha256,
    seeded_draw,
)
from evalkit.demo.replies import render
from evalkit.demo.triage import (
    NOISE_FLIP_P,
    Triage,
    decide_ticket,
    read_ticket,
    system_prompt,
    text_of,
)

__all__ = ["complete", "simulate"]


def simulate(
    messages: Sequence[Message],
    *,
    seed: int = 0,
    noise: bool = False,
    occurrence: int = 0,
    request_sha: str | None = None,
) -> str:
    """The assistant message content for a conversation (system prompt included).

    With ``noise`` on, a borderline ticket flips to its runner-up category when
    ``seeded_draw(seed, "noise", request_sha, occurrence) < NOISE_FLIP_P``. ``request_sha``
    defaults to ``request_sha256(messages)`` (the server passes the sha of the whole request
    body); ``occurrence`` counts how many times that exact content was seen before.
    """
    key = _conversation_key(messages)
    decision, content = _decide(key, False)
    if noise and decision.runner_up is not None:
        sha = request_sha or request_sha256(list(messages))
        if seeded_draw(seed, "noise", sha, occurrence) < NOISE_FLIP_P:
            content = _decide(key, True)[1]
    return content


def _conversation_key(messages: Sequence[Message]) -> str:
    return json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)


@lru_cache(maxsize=4096)
def _decide(key: str, flip: bool) -> tuple[Triage, str]:
    """(decision, rendered content) for a conversation; cached because replays repeat content."""
    messages = json.loads(key)
    flags = parse_directives(system_prompt(messages))
    ticket = read_ticket(messages)
    decision, manipulations = decide_ticket(ticket, flags, flip)
    return decision, render(decision, flags, manipulations)


def _truncate(content: str, max_tokens: int | None) -> tuple[str, str]:
    """Cut the content to about ``max_tokens`` tokens: (content, finish_reason)."""
    if max_tokens is None or count_tokens(content) <= max_tokens:
        return content, "stop"
    keep = int(max_tokens / 1.3)
    ends = [m.end() for m in re.finditer(r"\S+", content)]
    return (content[: ends[keep - 1]] if keep > 0 else ""), "length"


def _validated(body: Mapping[str, Any]) -> tuple[list[Message], int | None]:
    """The messages and the token limit of a request body, or InvalidRequestError."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidRequestError(f"messages[{i}] must be an object with a 'role'")
    if body.get("stream"):
        raise InvalidRequestError("the evalkit simulator does not stream; send stream=false")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InvalidRequestError(f"max_tokens must be a positive integer, not {limit!r}")
    return messages, limit


def _triage_persona(messages: Sequence[Message], **noise: Any) -> str:
    return simulate(messages, **noise)


def _judge_persona(messages: Sequence[Message], **noise: Any) -> str:
    return judge(messages, **noise)


#: Personas by model id: the triage assistant, and a simulated model judge (``demo-judge-1``,
#: see :mod:`evalkit.demo.judge`).
_PERSONAS: dict[str, Callable[..., str]] = {
    MODEL_ID: _triage_persona,
    "demo-judge-1": _judge_persona,
}


def _agent_turn(
    messages: Sequence[Message], tools: Any, limit: int | None
) -> tuple[dict[str, Any], str, str]:
    """(assistant message, finish_reason, text the tokens are counted on) of a tool request."""
    turn = respond(messages, tools)
    if turn.tool_calls:
        return turn.message(), "tool_calls", turn.text
    content, finish_reason = _truncate(turn.text, limit)
    return {"role": "assistant", "content": content, "refusal": None}, finish_reason, content


def complete(
    body: Mapping[str, Any],
    *,
    seed: int = 0,
    noise: bool = False,
    occurrence: int = 0,
    request_sha: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """Answer an OpenAI chat-completion request body with a ``chat.completion`` response dict.

    Dispatches on the request shape. The model id picks the persona (``_PERSONAS``: the triage
    assistant ``demo-support-1`` or the simulated judge ``demo-judge-1``). A triage request
    carrying ``tools`` goes to the agent logic (:func:`evalkit.demo.agent.respond`):
    its turn is either ``tool_calls`` (``content: null``, ``finish_reason: "tool_calls"``) or the
    final JSON answer; agent turns are deterministic (no noise).

    Raises:
        InvalidRequestError: malformed body (the server answers 400).
        UnknownModelError: a model the simulator does not serve (the server answers 404).
    """
    messages, limit = _validated(body)
    model = body.get("model")
    persona = _PERSONAS.get(str(model))
    if persona is None:
        raise UnknownModelError(
            f"model {model!r} is not served by the evalkit simulator "
            f"(available: {', '.join(_PERSONAS)})"
        )
    sha = request_sha or request_sha256(body)
    if body.get("tools") is not None and persona is _triage_persona:
        message, finish_reason, completion_text = _agent_turn(messages, body["tools"], limit)
    else:
        content = persona(messages, seed=seed, noise=noise, occurrence=occurrence, request_sha=sha)
        content, finish_reason = _truncate(content, limit)
        message = {"role": "assistant", "content": content, "refusal": None}
        completion_text = content
    prompt_tokens = sum(count_tokens(text_of(m)) for m in messages)
    completion_tokens = count_tokens(completion_text)
    return {
        "id": f"chatcmpl-sim-{sha[:16]}-{occurrence}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": str(model),
        "system_fingerprint": "evalkit-simulator",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
