"""What a case sends: the suite's system prompt, the case's turns (or ``vars`` through the user
template), and its frozen documents placed where the prompt asks for ``{{documents}}``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from evalkit.fixtures import DOCUMENTS_HEADING, render_documents

_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class RenderedCase(Protocol):
    """What rendering reads of a case (``evalkit.corpus.cases.Case`` has it)."""

    @property
    def messages(self) -> Sequence[dict[str, Any]] | None: ...
    @property
    def vars(self) -> dict[str, Any] | None: ...
    @property
    def fixtures(self) -> dict[str, Any]: ...


def template_vars(template: str) -> set[str]:
    """Names used as ``{{name}}`` in a template."""
    return set(_VAR.findall(template))


def render_template(template: str, variables: dict[str, Any]) -> str:
    """Substitute ``{{name}}`` placeholders; a missing variable raises KeyError.

    Examples:
        >>> render_template("Customer message: {{message}}", {"message": "hi"})
        'Customer message: hi'
    """
    return _VAR.sub(lambda m: str(variables[m.group(1)]), template)


def render_messages(
    case: RenderedCase, system_prompt: str | None, user_template: str | None
) -> list[dict[str, Any]]:
    """The chat messages sent for ``case``: the suite's system prompt, then the case's turns.

    ``fixtures.documents`` fill ``{{documents}}`` in the system prompt or the user template;
    when neither uses it, they go at the end of the system message (one is added if the suite
    has no system prompt) under ``Reference documents:``, numbered ``[1] ...``.
    """
    documents = render_documents(case.fixtures.get("documents"))
    variables = {"documents": documents, **(case.vars or {})}
    messages: list[dict[str, Any]] = []
    placed = "documents" in template_vars(system_prompt or "") or (
        case.messages is None and "documents" in template_vars(user_template or "{{message}}")
    )
    system = render_template(system_prompt, variables) if system_prompt else None
    if documents and not placed:
        block = f"{DOCUMENTS_HEADING}\n{documents}"
        system = f"{system}\n\n{block}" if system else block
    if system:
        messages.append({"role": "system", "content": system})
    if case.messages is not None:
        messages.extend(dict(m) for m in case.messages)
    else:
        template = user_template or "{{message}}"
        messages.append({"role": "user", "content": render_template(template, variables)})
    return messages
