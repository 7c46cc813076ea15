"""The case format as strict models: ``extra="forbid"`` is the typo guard, so a misspelled key
is an error naming the key (and the loader adds the file, line and case id).

Examples:
    >>> CaseSpec.model_validate({"id": "a-1", "input": {"messages": [{"role": "user",
    ...     "content": "hi"}]}, "expect": [{"scorer": "contains", "args": {"text": "x"}}]}).id
    'a-1'
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalkit.corpus.yaml_nodes import node_line


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")


class MessageSpec(_Strict):
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    name: str | None = None


class InputSpec(_Strict):
    messages: list[MessageSpec] | None = None
    vars: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> InputSpec:
        if (self.messages is None) == (self.vars is None):
            raise ValueError("input needs exactly one of 'messages' or 'vars'")
        if self.messages is not None and not self.messages:
            raise ValueError("input.messages is empty")
        return self


class FixtureSpec(_Strict):
    tools: dict[str, Any] = Field(default_factory=dict)
    documents: list[Any] = Field(default_factory=list)


class ProvenanceSpec(_Strict):
    # A draft (imported, sampled from traces) has no reviewer yet; `evalkit cases review` adds one.
    reviewer: str | None = None
    date: dt.date | str
    source: str | None = None
    note: str | None = None


class ScorerSpec(_Strict):
    scorer: str
    args: dict[str, Any] = Field(default_factory=dict)


class CaseSpec(_Strict):
    id: str = Field(min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list)
    criticality: Literal["must_pass", "normal"] = "normal"
    provenance: ProvenanceSpec | None = None
    # Importers and trace sampling write `review: draft`; a draft is never gated until a person
    # reviews it. Left out of the case hash: reviewing a case does not change what it asks.
    review: Literal["draft", "reviewed"] = "reviewed"
    input: InputSpec
    fixtures: FixtureSpec = Field(default_factory=FixtureSpec)
    expect: list[ScorerSpec] = Field(min_length=1)
    notes: str | None = None
    # Cases from one incident, document or conversation: slice intervals cluster over groups.
    # Unset, it is left out of the case hash (exclude_defaults), so existing hashes stand.
    group: str | None = Field(None, min_length=1, max_length=200)

    @field_validator("tags")
    @classmethod
    def _criticality_is_not_a_tag(cls, value: list[str]) -> list[str]:
        # The seed articles write `tags: [..., must_pass]`; loaded as a tag it would silently
        # make a frozen incident a normal case that never blocks.
        if "must_pass" in value:
            raise ValueError(
                "'must_pass' is a criticality, not a tag: remove it from tags and write "
                "`criticality: must_pass` (as a tag the case would never block)"
            )
        return value

    @field_validator("id")
    @classmethod
    def _id_chars(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError("id may use letters, digits and _ . : / - only")
        return value


def describe_validation(exc: ValidationError, node: Any, case_line: int) -> tuple[str, int]:
    """A case's first validation error as (one-line message, the line it points at)."""
    error = exc.errors()[0]
    loc = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    dotted = ".".join(str(p) for p in loc) or "case"
    dotted = dotted if len(dotted) <= 80 else dotted[:77] + "..."
    line = node_line(node, loc) or case_line
    if error["type"] == "extra_forbidden":
        parent = _model_for(loc[:-1])
        hint = suggest(str(loc[-1]), parent.model_fields if parent else {})
        return f"unknown field {dotted!r}{hint}", line
    if error["type"] == "missing":
        return f"missing required field {dotted!r}", line
    message = error["msg"].removeprefix("Value error, ")
    return f"invalid {dotted}: {message}", line


def _model_for(loc: Sequence[Any]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = CaseSpec
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        annotation = model.model_fields.get(str(part))
        if annotation is None:
            return None
        model = _first_model(annotation.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
