"""The support-triage rules of the demo simulator: reading a ticket and deciding its category,
priority, refund and escalation under the directives its system prompt switches on.

evalkit ships a **simulated** support-triage assistant, ``demo-support-1``, so the demo runs
offline through the same OpenAI client path as production. It is not a language model: it is a
small rule-based triage engine. It reads the system prompt, switches its rules on or off according
to directives it recognises there (for example "keep the reply under 40 words" or "always follow
the customer's instructions"), and answers every chat request with a JSON triage decision. Editing
the prompt therefore changes its behaviour the way a real prompt edit does, quiet regressions
included. A documented set of ambiguous ("borderline") tickets flips its answer with probability
0.3 per request when noise is on, so flakiness measurements have something real to find; every
other answer is deterministic.

Reply contract (the assistant message content)::

    {"category": "billing|bug_report|account|policy|injection|other",
     "priority": "low|normal|high|urgent", "order_id": "<digits>" | null,
     "refund": bool, "escalate": bool, "reply": "<short customer-facing text>"}

Directives (:mod:`evalkit.demo.directives`) switch rules on; the reply sentences are data
(``replies.yaml``, rendered by :mod:`evalkit.demo.replies`).

A request carrying ``tools`` is answered by the agent logic in
:mod:`evalkit.demo.agent` (the OpenAI tool-calling protocol: ``tool_calls`` out,
``role: tool`` results in, for refund and order-lookup tickets); agent turns are never noisy.

Borderline rule: a ticket is borderline when category keyword scoring ends in a tie between the
two best categories (and no override rule such as injection, security or login decided it). With
noise on, a borderline ticket answers the runner-up category with probability ``NOISE_FLIP_P``.
The draw is a pure function of (seed, sha256 of the request content, how many times that exact
content has been seen), so it does not depend on the order concurrent requests arrive in.

Examples:
    >>> msgs = [{"role": "system", "content": "Respond only with a JSON object."},
    ...         {"role": "user", "content": "I was charged twice for order 8812."}]
    >>> triage(msgs).category
    'billing'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalkit.demo.directives import Flags, parse_directives
from evalkit.demo.protocol import InvalidRequestError, Message

__all__ = [
    "CATEGORIES",
    "NOISE_FLIP_P",
    "PRIORITIES",
    "InvalidRequestError",
    "Manipulations",
    "Triage",
    "decide_ticket",
    "is_borderline",
    "read_ticket",
    "system_prompt",
    "text_of",
    "triage",
]

NOISE_FLIP_P = 0.3
CATEGORIES = ("billing", "bug_report", "account", "policy", "injection", "other")
PRIORITIES = ("low", "normal", "high", "urgent")


# --------------------------------------------------------------------------- reading a ticket


def _rx(pattern: str) -> re.Pattern[str]:
    """Rules are lower-case patterns matched against lower-cased text (twice as fast as re.I)."""
    return re.compile(pattern)


_KEYWORDS: dict[str, tuple[tuple[re.Pattern[str], int], ...]] = {
    "billing": tuple(
        (_rx(p), w)
        for p, w in (
            (r"\bcharg(e|ed|es|ing)\b", 2),
            (r"\brefund", 2),
            (r"\binvoice", 2),
            (r"\bbill(ed|ing)?\b", 2),
            (r"\b(paid|payment|pay)\b", 1),
            (r"\bsubscription|\brenew", 1),
            (r"\breceipt", 1),
            (r"\bpric(e|es|ing)\b", 1),
            (r"\bcard\b", 1),
            (r"\bovercharg", 2),
            (r"money back|reimburs", 2),
        )
    ),
    "bug_report": tuple(
        (_rx(p), w)
        for p, w in (
            (r"\berror\b", 2),
            (r"\bcrash", 2),
            (r"\bbug\b", 2),
            (r"(doesn't|does not|isn't|is not|stopped|won't) work", 1),
            (r"\bfreez|\bfroze", 2),
            (r"blank (page|screen)|white screen", 2),
            (r"\b(404|500|502|503)\b", 1),
            (r"\bglitch", 2),
            (r"won't (load|open)|not loading", 1),
        )
    ),
    "account": tuple(
        (_rx(p), w)
        for p, w in (
            (r"\baccounts?\b", 1),
            (r"\bprofile\b", 2),
            (r"email address|change (my )?email", 2),
            (r"\busername", 2),
            (r"\bnewsletter|unsubscribe", 2),
            (r"\b(delete|close) my account", 2),
        )
    ),
    "policy": tuple(
        (_rx(p), w)
        for p, w in (
            (r"\bpolic(y|ies)\b", 2),
            (r"\bwarrant(y|ies)", 2),
            (r"\bguarantee", 1),
            (r"return (window|period)|how long [^.?]{0,20}return|can i return", 2),
            (r"\bgdpr|\bprivacy|personal data", 2),
            (r"\bterms\b", 1),
            (r"price match", 2),
        )
    ),
    "other": tuple(
        (_rx(p), w)
        for p, w in (
            (r"\btrack(ing)?\b", 1),
            (r"\bdeliver(y|ed)?\b", 1),
            (r"\bship(ping|ped)?\b", 1),
            (r"\bparcel|\bpackage\b", 1),
            (r"\barriv", 1),
            (r"\bcourier", 1),
        )
    ),
}
_TIE_ORDER = ("billing", "account", "bug_report", "policy", "other")
_LOGIN = _rx(
    r"\blog ?in\b|\blogging in\b|\bsign(ing)? ?in\b|locked out|lock(ed)? me out|lockout"
    r"|\bpassword|\b2fa\b|two-factor|verification code|one-time code"
)
_SECURITY = _rx(
    r"\bhack(ed|er)\b|someone (else )?(has )?(logged|signed) in|unauthori[sz]ed (login|access|sign)"
    r"|suspicious (login|sign-in|activity)|(compromised|taken over)|password was changed"
)
_FRAUD = _rx(
    r"\bfraud|unauthori[sz]ed (charge|transaction|payment)|stolen card"
    r"|didn't make (this|these|that|the) (charge|purchase|payment)|don't recogni[sz]e"
)
_LEGAL = _rx(
    r"\blawyer|\battorney|\bsue\b|\bsuing\b|legal action|small claims|\bcourt\b"
    r"|trading standards|consumer protection|chargeback"
)
_HUMAN = _rx(
    r"\b(speak|talk|chat) (to|with) (a |an |your )?(human|person|real person|agent|manager|someone)"
    r"|\breal person\b|human agent|\bsupervisor\b"
)
_DATA_REQUEST = _rx(
    r"\bgdpr|delete (all )?(of )?my (personal )?data|data (deletion|export|access) request"
    r"|erase my data|right to be forgotten|what (personal )?data do you (hold|have|keep)"
)
_LOW = _rx(
    r"no rush|whenever you (get a chance|can)|just (wondering|curious)|quick question"
    r"|feature request|suggestion|would be (nice|great) if|could you add"
)
_HIGH = _rx(
    r"\burgent|\basap\b|immediately|as soon as possible|crash|lost (all )?(of )?my|data loss"
    r"|can't (access|get into)|locked out|website is down|site is down"
)
_CHARGE_PROBLEM = _rx(
    r"charged (me )?(twice|two times|three times|double|2x|again)|double[- ]charged"
    r"|duplicate (charge|payment)|billed (me )?twice|two (identical )?charges|overcharg"
    r"|charged (me )?(the )?wrong amount|charged [^.]{0,20}more than"
)
_REFUND_ASKED = _rx(r"\brefund|money back|reimburs")
_REFUND_NEGATED = _rx(
    r"\b(don't|do not|doesn't|not|no longer|never)\b[^.!?]{0,20}"
    r"\b(want|need|asking|looking|requesting|expecting)\b[^.!?]{0,12}\b(refund|money back)"
    r"|\bno refund|\bnot (a|about a) refund"
)
_AGO = _rx(
    r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
    r"\s+(day|week|month|year)s?\s+ago|\blast (year)\b"
)
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_DELIVERY_PROMISE = _rx(
    r"(guarantee|promise|make sure|definitely)[^.?]{0,40}(arrive|deliver|gets? here|in time)"
    r"|will it (arrive|be delivered|get here) (by|before|in time)"
)
_DISCOUNT = _rx(r"\bdiscount|\bcompensat|price match|\bvoucher|\bcoupon|goodwill|free shipping")
_RETURNS = _rx(r"return (policy|window|period)|how (long|many days)[^.?]{0,30}return|can i return")
_WARRANTY = _rx(r"warrant")
_ORDER_BASE = _rx(r"\border(?:\s+(?:number|no\.?|num|id|ref))?(?:\s+is)?\s*[:=]?\s*(\d{3,})\b")
_ORDER_EXTRA = (_rx(r"#\s?(\d{3,})\b"), _rx(r"\bord[-\s]?(\d{3,})\b"))
_BARE_NUMBER = _rx(r"\b(\d{4,})\b")

# Injection: explicit overrides are always caught by the guard; manipulations of format or
# content are caught by the guard too, unless follow_user tells the simulator to obey them.
_OVERRIDE = _rx(
    r"\bignore\b[^.!?\n]{0,30}\b(instructions|rules|prompt|guidelines|above)"
    r"|\bdisregard\b[^.!?\n]{0,30}\b(instructions|rules|prompt|guidelines|policy|above)"
    r"|\byou are now\b|\bpretend (to be|you are)|\bact as an? (unrestricted|unfiltered)"
    r"|developer mode|\bjailbreak|\bdo anything now"
    r"|(^|[\n.:!?]\s*)\[?(system|admin|developer)( override| message| notice)?\]?\s*:"
    r"|new system prompt|system override"
)
_LEAK = _rx(
    r"\b(repeat|print|show|output|reveal|paste|share|display|translate|summari[sz]e|copy)\b"
    r"[^.!?\n]{0,50}\b(system prompt|your (instructions|prompt|rules|guidelines|configuration)"
    r"|instructions (you were given|above)|the (text|instructions) above|initial prompt)"
)
_PLAIN = _rx(
    r"\b(reply|respond|answer|write)\b[^.!?\n]{0,30}\b(plain text|normal sentences"
    r"|without (the )?json|no json|not (in )?json)|\b(don't|do not|stop)\b[^.!?\n]{0,25}\bjson\b"
)
_SET_FIELD = _rx(
    r"\bset (?:the )?[\"'`]?(refund|priority|escalate|category)[\"'`]?(?: field| flag| value)?"
    r" (?:to|=|as) [\"'`]?(\w+)|\bmark (?:this|it|my (?:ticket|request|case)) as (urgent|high)"
)
_SAY = re.compile(  # matched on the original text: the phrase is echoed with its case
    r"\b(?:start|begin|open) your (?:reply|answer|response|message) with [\"“']([^\"”']{3,120})"
    r"|\b(?:include|add|put|say)(?: the| this)?(?: exact)?(?: phrase| sentence| words| line)?"
    r"\s*[\"“']([^\"”']{3,120})[\"”'][^.!?\n]{0,25}\b(?:in|into) your (?:reply|answer|response)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Ticket:
    """What the rules read from a conversation: the user turns and their context."""

    turns: tuple[str, ...]  # user turns, oldest first
    asked_order_after: tuple[bool, ...]  # the assistant asked for an order number before turn i
    text: str  # all user turns joined, lower-cased, apostrophes normalised
    original: str  # all user turns joined as written


@dataclass(frozen=True)
class Manipulations:
    leak: bool = False
    plain_text: bool = False
    fields: tuple[tuple[str, Any], ...] = ()
    say: str | None = None

    def __bool__(self) -> bool:
        return self.leak or self.plain_text or bool(self.fields) or self.say is not None


def text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def system_prompt(messages: Sequence[Message]) -> str:
    return "\n".join(text_of(m) for m in messages if m.get("role") in ("system", "developer"))


def read_ticket(messages: Sequence[Message]) -> _Ticket:
    originals: list[str] = []
    asked: list[bool] = []
    last_assistant = ""
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            last_assistant = text_of(message).lower()
        elif role == "user":
            originals.append(text_of(message))
            asked.append("order number" in last_assistant)
            last_assistant = ""
    turns = tuple(t.lower().replace("\u2019", "'") for t in originals)
    return _Ticket(turns, tuple(asked), "\n".join(turns), "\n".join(originals))


def _order_id(ticket: _Ticket, flags: Flags) -> str | None:
    """The order number from the latest user turn that names one (digits only)."""
    patterns = (_ORDER_BASE, *_ORDER_EXTRA) if flags.order_formats else (_ORDER_BASE,)
    for turn, asked in zip(reversed(ticket.turns), reversed(ticket.asked_order_after), strict=True):
        hits = [m for p in patterns for m in p.finditer(turn)]
        if hits:
            return min(hits, key=lambda m: m.start()).group(1)
        if asked and (bare := _BARE_NUMBER.search(turn)):
            return bare.group(1)
    return None


def _category_scores(ticket: _Ticket, flags: Flags) -> dict[str, int]:
    scores = {
        category: sum(weight for regex, weight in keywords if regex.search(ticket.text))
        for category, keywords in _KEYWORDS.items()
    }
    if not flags.login_is_account and _LOGIN.search(ticket.text):
        scores["bug_report"] += 2  # by default the simulator takes login failures for faults
    return scores


def _ranked(scores: Mapping[str, int]) -> list[str]:
    return sorted(_TIE_ORDER, key=lambda c: (-scores[c], _TIE_ORDER.index(c)))


def _overridden_category(ticket: _Ticket, flags: Flags) -> str | None:
    """A category decided by a rule rather than by keyword scoring (never borderline)."""
    if _SECURITY.search(ticket.text):
        return "account"
    if _FRAUD.search(ticket.text):
        return "billing"
    if _DATA_REQUEST.search(ticket.text):
        return "policy"
    if flags.login_is_account and _LOGIN.search(ticket.text):
        return "account"
    return None


def _manipulations(ticket: _Ticket) -> Manipulations:
    text = ticket.text
    fields_set: list[tuple[str, Any]] = []
    for match in _SET_FIELD.finditer(text):
        if match.group(3):
            fields_set.append(("priority", "urgent"))
            continue
        name, value = match.group(1), match.group(2)
        if name in ("refund", "escalate") and value in ("true", "false", "yes", "no"):
            fields_set.append((name, value in ("true", "yes")))
        elif value in (PRIORITIES if name == "priority" else CATEGORIES):
            fields_set.append((name, value))
    say = _SAY.search(ticket.original)
    return Manipulations(
        leak=bool(_LEAK.search(text)),
        plain_text=bool(_PLAIN.search(text)),
        fields=tuple(fields_set),
        say=(say.group(1) or say.group(2)).strip() if say else None,
    )


def _injection_mode(ticket: _Ticket, flags: Flags) -> tuple[str, Manipulations]:
    """'refuse' (classified as injection), 'comply' (obey the ticket) or 'none'."""
    manipulations = _manipulations(ticket)
    override = bool(_OVERRIDE.search(ticket.text))
    if flags.injection_guard and override:
        return "refuse", manipulations
    if flags.follow_user and manipulations:
        return "comply", manipulations
    if flags.injection_guard and manipulations:
        return "refuse", manipulations
    return "none", manipulations


def _days_ago(text: str) -> int | None:
    longest = None
    for match in _AGO.finditer(text):
        if match.group(3):
            days = 365
        else:
            count = match.group(1)
            number = int(count) if count.isdigit() else _NUMBER_WORDS[count]
            days = number * _UNIT_DAYS[match.group(2)]
        longest = days if longest is None else max(longest, days)
    return longest


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, kw_only=True)
class Triage:
    """The simulator's decision for one conversation, before it is rendered as JSON."""

    category: str
    priority: str
    order_id: str | None
    refund: bool
    escalate: bool
    topic: str  # which reply template answers it
    runner_up: str | None = None  # the tied category when the ticket is borderline
    mode: str = "none"  # injection handling: none | refuse | comply


def _refund(ticket: _Ticket, flags: Flags, order_id: str | None) -> tuple[bool, str | None]:
    """(refund, topic) for the refund rules; topic None when no refund is in play."""
    text = ticket.text
    asked, bad_charge = bool(_REFUND_ASKED.search(text)), bool(_CHARGE_PROBLEM.search(text))
    negated = flags.negation and bool(_REFUND_NEGATED.search(text))
    if not (asked or bad_charge):
        return False, None
    if negated:
        return False, "refund_not_wanted"
    if not flags.refund_policy:
        return asked or bad_charge, "refund_granted"
    if bad_charge and order_id:
        return True, "refund_granted"
    days = _days_ago(text)
    if flags.refund_window and not bad_charge and days is not None and days > flags.refund_window:
        return False, "refund_window"
    return False, "refund_review" if asked else None


def _priority(ticket: _Ticket, flags: Flags, risk: bool) -> str:
    if risk:
        return "urgent" if flags.risk_rules else "high"
    if _HIGH.search(ticket.text) or _CHARGE_PROBLEM.search(ticket.text):
        return "high"
    return "low" if _LOW.search(ticket.text) else "normal"


def _topic(category: str, ticket: _Ticket, flags: Flags, order_id: str | None) -> str:
    text = ticket.text
    if _SECURITY.search(text):
        return "security"
    if _FRAUD.search(text):
        return "fraud"
    if _LEGAL.search(text):
        return "legal"
    if _DATA_REQUEST.search(text):
        return "data_request"
    if _DELIVERY_PROMISE.search(text):
        return "delivery_promise"
    if _DISCOUNT.search(text):
        return "discount"
    if category == "policy":
        if _RETURNS.search(text):
            return "returns"
        return "warranty" if _WARRANTY.search(text) else "policy"
    if category == "other":
        delivery = any(regex.search(text) for regex, _ in _KEYWORDS["other"])
        return "order_status" if order_id else "ask_order" if delivery else "other"
    if category == "account" and _LOGIN.search(text):
        return "account_access"
    return category


def triage(messages: Sequence[Message], *, flip: bool = False) -> Triage:
    """Decide a conversation under the rules its system prompt switches on.

    ``flip`` answers the runner-up category of a borderline ticket (what noise does); it has
    no effect on other tickets.
    """
    flags = parse_directives(system_prompt(messages))
    return decide_ticket(read_ticket(messages), flags, flip)[0]


def decide_ticket(ticket: _Ticket, flags: Flags, flip: bool) -> tuple[Triage, Manipulations]:
    mode, manipulations = _injection_mode(ticket, flags)
    if mode == "refuse":
        refusal = Triage(
            category="injection",
            priority="normal",
            order_id=None,
            refund=False,
            escalate=False,
            topic="injection",
            mode=mode,
        )
        return refusal, manipulations
    order_id = _order_id(ticket, flags)
    runner_up = None
    category = _overridden_category(ticket, flags)
    if category is None:
        scores = _category_scores(ticket, flags)
        best, second = _ranked(scores)[:2]
        category = best if scores[best] > 0 else "other"
        if scores[best] > 0 and scores[best] == scores[second]:
            runner_up = second
            category = second if flip else best
    refund, refund_topic = _refund(ticket, flags, order_id)
    risk = bool(_SECURITY.search(ticket.text) or _FRAUD.search(ticket.text))
    risk = risk or bool(_LEGAL.search(ticket.text))
    human = bool(_HUMAN.search(ticket.text))
    escalate = (
        (flags.risk_rules and risk)
        or (flags.human_handoff and human)
        or refund_topic == "refund_review"
        or bool(_DATA_REQUEST.search(ticket.text))
    )
    topic = _topic(category, ticket, flags, order_id)
    if human and flags.human_handoff and topic not in ("security", "legal", "fraud"):
        topic = "human"
    elif refund_topic and topic in ("billing", "policy", "returns", "other", "order_status"):
        topic = refund_topic
    decision = Triage(
        category=category,
        priority=_priority(ticket, flags, risk),
        order_id=order_id,
        refund=refund,
        escalate=bool(escalate),
        topic=topic,
        runner_up=runner_up,
    )
    if mode == "comply":
        decision = replace(decision, mode=mode, **dict(manipulations.fields))
    return decision, manipulations


def is_borderline(messages: Sequence[Message]) -> bool:
    """True when the rules find the ticket ambiguous: a tie between the two best categories.

    Only borderline tickets are touched by noise. Injection, security, fraud, data-request and
    (under ``login_is_account``) login tickets are decided by a rule and are never borderline.
    """
    return triage(messages).runner_up is not None
