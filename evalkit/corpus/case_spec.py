"""The case format as strict models: ``extra="forbid"`` is the typo guard, so a misspelled key
is an error naming the key (and the loader adds the file, line and case id).

Examples:
    >>> CaseSpec.model_validate({"id": "a-1", "input": {"messages": [{"role": "user",
    ...     "content": "hi"}]}, "expect": [{"scorer": "contains", "args": {"text": "x"}}]}).id
    'a-1'
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    reviewer: str
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
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*", value):
            raise ValueError("id may use letters, digits and _ . : / - only")
        return value
