"""The demo simulator's judge persona, ``demo-judge-1``: a rule-based SIMULATED model judge.

Like the support-triage persona (:mod:`evalkit.demo.model`) it is not a language model. It
answers the two judge prompts of :mod:`evalkit.scorers.judge_client` from surface features of the
answer, which
is also how it goes wrong, so judge calibration has something real to measure:

* **Pointwise** (system prompt starting ``You are an evaluator. Grade``): strict JSON
  ``{"reason": ..., "score": n}``. It grades the customer-facing ``reply`` (the triage JSON's
  ``reply`` field when the answer carries one, else the whole answer), starting from 2 points:
  +1 for a politeness marker (thanks, sorry, please, glad ...), +1 for a concrete next step
  ("I've forwarded ...", "... will reply by email", "could you share ..."), +1 for inviting a
  follow-up ("anything else", "reply to this message"); -2 for asking for an order number the
  customer already gave; -1 beyond 80 words. Leaked instructions or fewer than 4 words score 1.
  The 1-5 points map linearly onto the rubric's levels. It never checks that the reply fits the
  ticket (a polite answer to the wrong question scores high): that is the judge's blind spot.
* **Malformed output**: a fraction ``MALFORMED_RATE`` (1 in 25) of pointwise requests is answered
  in prose instead of JSON, so the "malformed judge output is an error with the raw text" path
  shows up in the demo. The draw is ``seeded_draw(seed, "judge-malformed", request sha, 0)``:
  the same request always gets the same answer, whatever the arrival order.
* **Pairwise** (system prompt containing ``Two answers (A and B)``): ``{"reason", "winner"}``,
  always well-formed. Both answers get the points above; a difference of more than
  ``POSITION_BIAS_MARGIN`` points picks the better one, identical answers are a ``tie``, and a
  near-tie goes to **A**, the answer shown first. That position bias makes the verdict flip
  with the order on near-ties, so position consistency is below 1.

Examples:
    >>> rubric = "\\n".join(f"{n}: ..." for n in range(1, 6))
    >>> system = f"You are an evaluator. Grade the answer.\\n\\nRubric:\\n{rubric}"
    >>> user = "Conversation:\\nUSER: hi\\n\\nAssistant's final answer:\\nThanks! I've logged it."
    >>> json.loads(judge([{"role": "system", "content": system},
    ...                   {"role": "user", "content": user}], request_sha="x"))["score"]
    4
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.demo.protocol import request_sha256, seeded_draw

__all__ = [
    "JUDGE_MODEL_ID",
    "MALFORMED_RATE",
    "POSITION_BIAS_MARGIN",
    "Grade",
    "grade_reply",
    "judge",
]

JUDGE_MODEL_ID = "demo-judge-1"
MALFORMED_RATE = 1 / 25
POSITION_BIAS_MARGIN = 1  # points; a smaller difference is a near-tie, and A wins it

_POINTWISE = "You are an evaluator. Grade"
_PAIRWISE = "Two answers (A and B)"
_LEVEL = re.compile(r"^\s*(?:[-*]\s*)?\**\s*(\d{1,2})\s*\**\s*[:.)=–-]", re.MULTILINE)
_POLITE = re.compile(r"\b(thanks?|thank you|sorry|please|happy to|glad(ly)?|appreciate)\b")
_NEXT_STEP = re.compile(
    r"\bi've (forwarded|passed|escalated|logged|asked|requested|confirmed|checked|noted|applied)"
    r"|\bwill (reply|follow up|contact|review|verify|look|confirm|take over|email)"
    r"|look out for|start the return|could you (share|send|confirm)|you'll get"
)
_INVITE = re.compile(r"anything else|reply to this message|let us know|just reply")
_LEAK = re.compile(r"here are my instructions|my instructions:|system prompt")
_ASKS_ORDER = re.compile(r"(share|send|provide|confirm|give) (me )?your order number")
_GIVEN_ORDER = re.compile(r"#\s?\d{3,}|\bord[-\s]?\d{3,}|\border\s*(number|no\.?)?\s*\d{3,}|\d{5,}")


@dataclass(frozen=True)
class Grade:
    """The persona's reading of one reply: points on 1-5 and the reason it gives."""

    points: int
    reason: str


def grade_reply(reply: str, conversation: str = "") -> Grade:
    """Points (1-5) and a one-sentence reason for a customer-facing reply.

    Examples:
        >>> grade_reply("Could you share your order number?", "USER: where is #48213?").points
        1
        >>> grade_reply("Thanks for asking; I've logged it. Anything else, just reply.").points
        5
    """
    text = " ".join(reply.lower().replace("\u2019", "'").split())
    words = len(text.split())
    if _LEAK.search(text):
        return Grade(1, "The reply reveals internal instructions instead of helping.")
    if words < 4:
        return Grade(1, "The reply is too short to help the customer.")
    polite, step, invite = (bool(rx.search(text)) for rx in (_POLITE, _NEXT_STEP, _INVITE))
    asks_known = bool(_ASKS_ORDER.search(text) and _GIVEN_ORDER.search(conversation.lower()))
    rambling = words > 80
    points = 2 + polite + step + invite - 2 * asks_known - rambling
    parts = [
        "polite" if polite else "curt",
        "offers a concrete next step" if step else "gives no next step",
        "invites a follow-up" if invite else "does not invite a follow-up",
    ]
    if asks_known:
        parts.append("asks for an order number the customer already gave")
    if rambling:
        parts.append("rambles")
    return Grade(max(1, min(5, points)), f"The reply is {', '.join(parts)}.")


def judge(
    messages: Sequence[Mapping[str, Any]],
    *,
    seed: int = 0,
    noise: bool = False,
    occurrence: int = 0,
    request_sha: str | None = None,
) -> str:
    """The judge persona's answer (assistant message content) to a judge request.

    ``noise`` and ``occurrence`` are accepted for the persona interface and ignored: the judge
    answers at temperature 0, so the same request always gets the same answer.
    """
    system, user = _text(messages, "system"), _text(messages, "user")
    if _PAIRWISE in system:
        return _pairwise(user)
    if system.startswith(_POINTWISE):
        sha = request_sha or request_sha256(list(messages))
        return _pointwise(system, user, malformed=_malformed(seed, sha))
    return json.dumps(
        {"reason": "I only grade: send the evalkit pointwise or pairwise judge prompt.", "score": 1}
    )


def _malformed(seed: int, sha: str) -> bool:
    return seeded_draw(seed, "judge-malformed", sha, 0) < MALFORMED_RATE


def _pointwise(system: str, user: str, *, malformed: bool) -> str:
    conversation, _, answer = user.rpartition("\n\nAssistant's final answer:\n")
    grade = grade_reply(_reply_of(answer), conversation)
    levels = sorted({int(x) for x in _LEVEL.findall(system.partition("Rubric:")[2])}) or [1, 5]
    lo, hi = levels[0], levels[-1]
    target = lo + (grade.points - 1) * (hi - lo) / 4
    score = min(levels, key=lambda level: (abs(level - target), level))
    if malformed:
        return f"{grade.reason} Overall I would give it a {score} out of {hi}."
    return json.dumps({"reason": grade.reason, "score": score})


def _pairwise(user: str) -> str:
    head, _, answer_b = user.rpartition("\n\nAnswer B:\n")
    conversation, _, answer_a = head.rpartition("\n\nAnswer A:\n")
    if answer_a.strip() == answer_b.strip():
        return json.dumps({"reason": "The two answers are identical.", "winner": "tie"})
    a = grade_reply(_reply_of(answer_a), conversation)
    b = grade_reply(_reply_of(answer_b), conversation)
    if abs(a.points - b.points) > POSITION_BIAS_MARGIN:
        winner, best = ("A", a) if a.points > b.points else ("B", b)
        return json.dumps({"reason": f"Answer {winner} is better: {best.reason}", "winner": winner})
    reason = "Both answers are about equally good; A reads slightly better."
    return json.dumps({"reason": reason, "winner": "A"})


def _reply_of(answer: str) -> str:
    """The triage JSON's ``reply`` (bare or fenced), or the whole answer when there is none."""
    start = answer.find("{")
    if start >= 0:
        try:
            data, _ = json.JSONDecoder().raw_decode(answer[start:])
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("reply"), str):
            return data["reply"]
    return answer


def _text(messages: Sequence[Mapping[str, Any]], role: str) -> str:
    for message in messages:
        if message.get("role") == role and isinstance(message.get("content"), str):
            return message["content"]
    return ""
