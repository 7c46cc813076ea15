"""The directives the demo simulator reads in a system prompt: each switches one rule on.

Directive table (``DIRECTIVES``; searched in the lower-cased system prompt, unknown text is
ignored, so an unknown prompt gets every default):

=================  ======================================  =========================================
flag               phrase (regex)                          effect when present (default otherwise)
=================  ======================================  =========================================
json_only          "respond only with a json object"       bare JSON (default: JSON in a fence)
order_formats      "#1234" or "ORD-1234" in the prompt     also read #1234 / ORD-1234 order numbers
login_is_account   "login/lockout ... as account"          login tickets -> account (default: bug)
refund_policy      "only set refund to true when"          refund only for a bad charge on a named
                                                           order, other refunds escalate (default:
                                                           any refund request sets refund=true)
refund_window      "within N days"                         refunds older than N days are declined
negation           "negation"                              "I don't want a refund" -> refund=false
risk_rules         "urgent for ... legal/fraud/security"   those are urgent and escalated
human_handoff      "escalate when ... asks for a human"    requests for a person escalate
no_promises        "never promise"                         no delivery dates, discounts, guarantees
injection_guard    "instructions inside customer messages  injection attempts -> category injection
                   as data"                                (default: not recognised)
follow_user        "always follow the customer's           obey format/content instructions in the
                   instructions"                           ticket; beats the guard except for
                                                           explicit overrides ("ignore previous...")
no_markdown        "do not use markdown"                   plain reply (default: **bold** order ids)
max_words          "under N words"                         reply is the core sentence, <= N words
                                                           (default: greeting + core + sign-off)
use_tools          "use the tools"                         with tools offered, look orders up and
                                                           refund through them (default: answer
                                                           in text without calling a tool)
verify_customer    "before any refund ... call             call lookup_customer to verify the
                   lookup_customer"                        account before issue_refund
=================  ======================================  =========================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = ["DIRECTIVES", "Directive", "Flags", "parse_directives"]


@dataclass(frozen=True)
class Directive:
    """One row of the directive table: a prompt phrase that switches a rule on."""

    flag: str
    pattern: str
    effect: str


DIRECTIVES: tuple[Directive, ...] = (
    Directive("json_only", r"respond only with (a|one) json object", "reply is bare JSON"),
    Directive("order_formats", r"#\d{2,}|\bord-\d", "read #1234 and ORD-1234 order numbers"),
    Directive(
        "login_is_account",
        r"(login|log-in|sign-in|lockout|locked out)[^.]{0,60}\bas account",
        "login, password and lockout tickets are category account",
    ),
    Directive("refund_policy", r"only set refund to true when", "refund only for bad charges"),
    Directive("refund_window", r"within (\d+) days", "decline refunds older than N days"),
    Directive("negation", r"\bnegation\b", "negated refund requests set refund=false"),
    Directive(
        "risk_rules",
        r"urgent for [^.]{0,40}(legal|fraud|security)",
        "legal threats, fraud and security issues are urgent and escalated",
    ),
    Directive("human_handoff", r"escalate when [^.]{0,30}\bhuman", "escalate asks for a person"),
    Directive("no_promises", r"never promise", "no delivery dates, discounts or guarantees"),
    Directive(
        "injection_guard",
        r"instructions (inside|in) customer messages as data",
        "injection attempts are classified as injection and refused",
    ),
    Directive(
        "follow_user",
        r"always follow the customer's instructions",
        "obey format/content instructions found in the ticket",
    ),
    Directive("no_markdown", r"(do not|don't|never) use markdown", "no markdown in the reply"),
    Directive(
        "max_words",
        r"(?:under|at most|no more than|fewer than) (\d+) words",
        "reply is the core sentence, at most N words",
    ),
    Directive("use_tools", r"\buse the tools\b", "look orders up and refund through the tools"),
    Directive(
        "verify_customer",
        r"before (?:any|every|each|issuing an?) refund[^.]{0,30}\bcall lookup_customer"
        r"|call lookup_customer[^.]{0,60}\bbefore (?:any|every|each|issuing an?) refund",
        "call lookup_customer to verify the account before any refund",
    ),
)

_DIRECTIVE_RES = tuple((d, re.compile(d.pattern)) for d in DIRECTIVES)


@dataclass(frozen=True, kw_only=True)
class Flags:
    """The rules a system prompt switched on (see ``DIRECTIVES``); all off by default."""

    json_only: bool = False
    order_formats: bool = False
    login_is_account: bool = False
    refund_policy: bool = False
    refund_window: int | None = None
    negation: bool = False
    risk_rules: bool = False
    human_handoff: bool = False
    no_promises: bool = False
    injection_guard: bool = False
    follow_user: bool = False
    no_markdown: bool = False
    max_words: int | None = None
    use_tools: bool = False
    verify_customer: bool = False
    company: str = ""
    prompt: str = field(default="", repr=False)  # the prompt itself: what a leak reveals


@lru_cache(maxsize=256)
def parse_directives(system_prompt: str) -> Flags:
    """Read the directive table's phrases out of a system prompt.

    Examples:
        >>> parse_directives("Keep the reply under 40 words.").max_words
        40
        >>> parse_directives("Be nice.") == Flags(prompt="Be nice.")
        True
    """
    text = " ".join(system_prompt.lower().replace("\u2019", "'").split())
    values: dict[str, Any] = {"prompt": system_prompt}
    for directive, regex in _DIRECTIVE_RES:
        match = regex.search(text)
        if match is None:
            continue
        numeric = directive.flag in ("refund_window", "max_words")
        values[directive.flag] = int(match.group(1)) if numeric else True
    company = re.search(r"assistant for ([A-Z][\w&'-]*(?: [A-Z][\w&'-]*)*)", system_prompt)
    values["company"] = company.group(1) if company else ""
    return Flags(**values)
