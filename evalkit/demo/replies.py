"""The simulator's reply: a triage decision written the way the prompt's directives ask (JSON
envelope, greeting and sign-off or a word limit, markdown), from the sentences in
``replies.yaml``."""

from __future__ import annotations

import json
from dataclasses import fields
from importlib import resources

import yaml

from evalkit.demo.directives import Flags
from evalkit.demo.triage import Manipulations, Triage

__all__ = ["render", "render_decision"]


_REPLIES = yaml.safe_load(resources.files("evalkit.demo").joinpath("replies.yaml").read_text())
_OPENER: str = _REPLIES["opener"]
_CLOSER: str = _REPLIES["closer"]
_CORE: dict[str, str] = _REPLIES["core"]
_CORE_PROMISING: dict[str, str] = _REPLIES["core_promising"]
_CORE_CAREFUL: dict[str, str] = _REPLIES["core_careful"]


def _core(decision: Triage, flags: Flags) -> str:
    if decision.topic in _CORE_PROMISING:
        table = _CORE_CAREFUL if flags.no_promises else _CORE_PROMISING
        return table[decision.topic]
    oid = decision.order_id
    order = (f"order {oid}" if flags.no_markdown else f"**order {oid}**") if oid else ""
    return _CORE[decision.topic].format(
        on_order=f" on {order}" if oid else "",
        for_order=f" for {order}" if oid else "",
        about_order=f" about {order}" if oid else "",
        the_order=f" {order}" if oid else " your order",
        window=flags.refund_window or 30,
    )


def _reply(
    decision: Triage, flags: Flags, manipulations: Manipulations, core: str | None = None
) -> str:
    core = _core(decision, flags) if core is None else core
    if decision.mode == "comply" and manipulations.leak:
        core = "Of course, here are my instructions: " + " ".join(flags.prompt.split())
    if decision.mode == "comply" and manipulations.say:
        core = f"{manipulations.say}. {core}"
    if flags.max_words is None:
        company = f"{flags.company} " if flags.company else ""
        return f"{_OPENER.format(company=company)} {core} {_CLOSER}"
    words = core.split()
    return " ".join(words[: flags.max_words])


def render(
    decision: Triage, flags: Flags, manipulations: Manipulations, core: str | None = None
) -> str:
    reply = _reply(decision, flags, manipulations, core)
    if decision.mode == "comply" and manipulations.plain_text:
        return reply
    body = {f.name: getattr(decision, f.name) for f in fields(Triage)[:5]}
    content = json.dumps({**body, "reply": reply}, ensure_ascii=False)
    if flags.json_only:
        return content
    return f"Here is the triage for this ticket:\n```json\n{content}\n```"


def render_decision(decision: Triage, flags: Flags, core: str | None = None) -> str:
    """The assistant content for ``decision``, written the way the prompt's flags ask (JSON
    envelope, greeting and sign-off or word limit, markdown); ``core`` replaces the topic's core
    sentence. The agent logic (:mod:`evalkit.demo.agent`) answers through it.

    Examples:
        >>> decision = Triage(category="other", priority="normal", order_id="58120",
        ...     refund=False, escalate=False, topic="order_status")
        >>> from evalkit.demo.directives import parse_directives
        >>> flags = parse_directives("Respond only with a JSON object. Do not use markdown.")
        >>> json.loads(render_decision(decision, flags, core="It shipped."))["reply"][-12:]
        'gladly help.'
    """
    return render(decision, flags, Manipulations(), core)
