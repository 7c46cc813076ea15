"""``evalkit cases convert``: the seed articles' case spelling, rewritten in the canonical form.

The articles write a case as ``input: "…"`` (one user message), ``expected: {…}`` with
``scorer: exact_match`` (each field equal after normalizing case and whitespace), put
``must_pass`` in ``tags``, and sometimes name ``reviewer`` and ``provenance_date`` at the top.
The canonical form is ``input.messages``, ``expect: [{scorer: json_fields, args: {fields}}]``,
``criticality: must_pass`` and ``provenance: {reviewer, date}``. Only the cases written the old
way are rewritten (their own lines); comments between cases and canonical cases stay as they are.

Examples:
    >>> text = '''# triage
    ... - id: extraction_001
    ...   input: "My card was charged twice, order number 88213."
    ...   expected:
    ...     category: "billing"
    ...     order_id: "88213"
    ...   scorer: exact_match
    ... '''
    >>> print(convert_text(text, "cases/triage.yaml").text)
    # triage
    - id: extraction_001
      input:
        messages:
          - {role: user, content: 'My card was charged twice, order number 88213.'}
      expect:
        - scorer: json_fields
          args:
            fields: {category: billing, order_id: '88213'}
    <BLANKLINE>
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evalkit.corpus.case_spec import CaseSpec
from evalkit.corpus.fixture_files import compose_cases, content_end
from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS

#: Top-level keys that only the old spelling uses.
_OLD_KEYS = {"expected", "scorer", "reviewer", "provenance_date", "rubric_tags"}
_ORDER = ("id", "tags", "criticality", "provenance", "review", "group", "input", "fixtures")


@dataclass(frozen=True)
class Conversion:
    """A converted file's ``text``, the ids it rewrote and kept, and one note per mapping."""

    text: str
    converted: tuple[str, ...]
    kept: tuple[str, ...]
    notes: tuple[str, ...]


def convert_file(path: str | Path, out: str | Path | None = None) -> Conversion:
    """Convert the case file ``path`` and write it to ``out`` (default: in place).

    Raises:
        CorpusError: a case this cannot convert (an unknown old scorer, an inline schema),
            naming the file, the line and the case id; nothing is written then.
    """
    source = Path(path)
    if not source.is_file():
        raise CorpusError("case file not found", path=source)
    result = convert_text(source.read_text(encoding="utf-8"), str(source))
    Path(out or source).write_text(result.text, encoding="utf-8")
    return result


def convert_text(text: str, rel: str) -> Conversion:
    """``text`` with each case in the old spelling rewritten canonically (see the module)."""
    root = compose_cases(text, rel)
    splices: list[tuple[int, int, str]] = []
    converted: list[str] = []
    kept: list[str] = []
    notes: list[str] = []
    for item, raw in zip(root.value, yaml.safe_load(text), strict=True):
        line = item.start_mark.line + 1
        case_id = str(raw.get("id")) if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not _is_old(raw):
            kept.append(case_id or f"#{len(kept) + len(converted) + 1}")
            continue
        case, note = _canonical(raw, rel, line, case_id or "?")
        try:
            CaseSpec.model_validate(case)
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise CorpusError(
                f"converted case is not valid: {message}", path=rel, line=line, case_id=case_id
            ) from None
        splices.append((item.start_mark.index, content_end(text, item), _render(case, item)))
        converted.append(case["id"])
        notes.append(f"{rel}:{line}: {case['id']}: {note}")
    new_text = text
    for start, end, block in sorted(splices, reverse=True):
        new_text = new_text[:start] + block + new_text[end:]
    return Conversion(new_text, tuple(converted), tuple(kept), tuple(notes))


def _is_old(raw: dict[str, Any]) -> bool:
    return (
        bool(_OLD_KEYS & set(raw))
        or isinstance(raw.get("input"), str)
        or "must_pass" in (raw.get("tags") or [])
    )


def _canonical(raw: dict[str, Any], rel: str, line: int, case_id: str) -> tuple[dict, str]:
    """The canonical case for an old-spelling one, and what was mapped (one line)."""
    case = {k: v for k, v in raw.items() if k not in _OLD_KEYS}
    done = []
    if isinstance(raw.get("input"), str):
        case["input"] = {"messages": [{"role": "user", "content": raw["input"]}]}
        done.append("input → input.messages")
    tags = list(raw.get("tags") or []) + list(raw.get("rubric_tags") or [])
    if "must_pass" in tags:
        case["criticality"] = "must_pass"
        done.append("tag must_pass → criticality: must_pass")
    tags = [t for t in dict.fromkeys(tags) if t != "must_pass"]
    if tags:
        case["tags"] = tags
    if "reviewer" in raw or "provenance_date" in raw:
        provenance = dict(case.get("provenance") or {})
        provenance.setdefault("reviewer", raw.get("reviewer"))
        provenance.setdefault("date", raw.get("provenance_date"))
        case["provenance"] = {k: v for k, v in provenance.items() if v is not None}
        done.append("reviewer/provenance_date → provenance")
    if "scorer" in raw or "expected" in raw:
        entry = _scorer(raw.get("scorer"), raw.get("expected"), rel, line, case_id)
        case["expect"] = [*list(case.get("expect") or []), entry]
        done.append(f"scorer {raw.get('scorer')} + expected → {entry['scorer']}")
    ordered = {k: case[k] for k in _ORDER if k in case}
    ordered.update({k: v for k, v in case.items() if k not in ordered})
    return ordered, "; ".join(done)


def _scorer(name: Any, expected: Any, rel: str, line: int, case_id: str) -> dict[str, Any]:
    """The canonical ``expect`` entry for the articles' ``scorer`` and ``expected``."""
    if name in (None, "exact_match") and isinstance(expected, dict) and expected:
        return {"scorer": "json_fields", "args": {"fields": expected}}
    if name in (None, "exact_match") and isinstance(expected, str | int | float | bool):
        return {"scorer": "normalized_match", "args": {"text": str(expected)}}
    if name == "schema_check" and isinstance(expected, str):
        return {"scorer": "json_schema", "args": {"schema": expected}}
    if isinstance(name, str) and name in SCORERS and isinstance(expected, dict):
        return {"scorer": name, "args": expected}  # already an evalkit scorer and its args
    what = {
        "schema_check": "an inline schema: save it under schemas/ and name the file",
        "llm_judge": "write the rubric to rubrics/NAME.md and use {scorer: judge, args: "
        "{rubric: rubrics/NAME.md}}",
    }.get(str(name), "no evalkit scorer matches; write expect: by hand (`evalkit scorers list`)")
    raise CorpusError(
        f"cannot convert scorer {name!r} with expected {type(expected).__name__}: {what}",
        path=rel,
        line=line,
        case_id=case_id,
    )


def _render(case: dict[str, Any], item: yaml.Node) -> str:
    """``case`` as block YAML starting where the old mapping did, indented to its column."""
    dumped = yaml.dump(
        [case], Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100,
        allow_unicode=True,
    )  # fmt: skip
    lines = dumped.rstrip("\n").split("\n")
    pad = " " * max(0, item.start_mark.column - 2)
    return "\n".join([lines[0][2:], *(pad + line if line else line for line in lines[1:])])


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key, as the corpus writes them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)
