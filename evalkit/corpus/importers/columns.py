"""``evalkit cases import jsonl|csv``: rows become cases through a column mapping.

``--map TARGET=FIELD`` says which field of a row fills what: ``input`` (the user message),
``vars.NAME`` (a template variable), ``expect.SCORER`` (the scorer's main argument, e.g.
``expect.contains=answer``), ``tags`` (split on ``,``/``;``/``|``), ``id``, ``notes`` and
``messages`` (an OpenAI chat ``messages`` array, read by :mod:`.openai_chat`). A JSONL row with
a ``messages`` array needs no mapping. FIELD may be dotted for nested JSON (``meta.category``).

Examples:
    >>> parse_mapping(["input=question", "expect.contains=answer", "tags=category"])
    {'input': 'question', 'expect.contains': 'answer', 'tags': 'category'}
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.corpus.importers.draft_cases import DraftCase, ImportResult
from evalkit.corpus.importers.openai_chat import WHY, read_chat
from evalkit.corpus.json_input import csv_records, json_lines
from evalkit.errors import ConfigError, CorpusError
from evalkit.scorers import SCORERS

_TARGETS = ("input", "messages", "id", "tags", "notes")
_MISSING = object()
_WHY = {
    **WHY,
    "tools (function schemas)": "offer them with system.tools (a JSON file) in evalkit.yaml",
    "row with nothing to check": "no expect.* field (nor a final answer) had a value; skipped",
}


def parse_mapping(items: Sequence[str]) -> dict[str, str]:
    """``["TARGET=FIELD", ...]`` as a mapping, each target checked.

    Raises:
        ConfigError: an item without ``=``, an unknown target, or an unknown scorer.
    """
    mapping: dict[str, str] = {}
    for item in items:
        target, sep, source = item.partition("=")
        target, source = target.strip(), source.strip()
        if not sep or not target or not source:
            raise ConfigError(f"--map {item!r}: expected TARGET=FIELD, e.g. input=question")
        if target.startswith("expect."):
            name = target.removeprefix("expect.")
            if name not in SCORERS or SCORERS[name].primary is None:
                usable = sorted(n for n, d in SCORERS.items() if d.primary)
                raise ConfigError(
                    f"--map {item!r}: {name!r} is not a scorer with a main argument "
                    f"(one of: {', '.join(usable)})"
                )
        elif not target.startswith("vars.") and target not in _TARGETS:
            raise ConfigError(
                f"--map {item!r}: unknown target {target!r} (input, messages, vars.NAME, "
                "expect.SCORER, tags, id, notes)"
            )
        mapping[target] = source
    return mapping


def import_rows(path: str | Path, mapping: Mapping[str, str], fmt: str) -> ImportResult:
    """Read ``path`` (``fmt`` is ``jsonl`` or ``csv``) into draft cases through ``mapping``.

    Raises:
        CorpusError: a row that is not an object, has no input, or a malformed field
            (``file:line: what``).
    """
    path = Path(path)
    rows = _jsonl_rows(path) if fmt == "jsonl" else _csv_rows(path)
    if fmt == "csv" and "input" not in mapping and "messages" not in mapping:
        raise ConfigError(f"{path}: a CSV import needs --map input=COLUMN (the user message)")
    cases = []
    mapped: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    for line, row in rows:
        try:
            case = _row_case(row, mapping, f"{path.name}:{line}", mapped, unmapped)
        except CorpusError as exc:  # raised naming the row; the user wants the file's path
            raise CorpusError(exc.message, path=path, line=line) from None
        if case is None:
            unmapped["row with nothing to check"] += 1
            continue
        cases.append(case)
    return ImportResult(
        format=fmt,
        source=path,
        cases=tuple(cases),
        mapped=dict(mapped),
        unmapped=dict(unmapped),
        why=_WHY,
    )


def _row_case(
    row: Mapping[str, Any],
    mapping: Mapping[str, str],
    where: str,
    mapped: Counter,
    unmapped: Counter,
) -> DraftCase | None:
    used = set(mapping.values())
    expect: list[dict[str, Any]] = []
    fixtures: dict[str, Any] = {}
    messages_field = mapping.get("messages", "messages" if "input" not in mapping else None)
    chat_turns = _field(row, messages_field) if messages_field else _MISSING
    if chat_turns is not _MISSING and chat_turns is not None:
        if not isinstance(chat_turns, list):
            raise CorpusError(f"field {messages_field!r} is not a messages array", path=where)
        try:
            chat = read_chat(chat_turns)
        except ValueError as exc:
            raise CorpusError(str(exc), path=where) from None
        used.add(str(messages_field))
        case_input: dict[str, Any] = {"messages": chat.messages}
        fixtures, expect = chat.fixtures, list(chat.expect)
        mapped["messages -> input.messages"] += 1
        mapped.update(
            {"tool call -> fixtures + tool_called": chat.tool_calls} if chat.tool_calls else {}
        )
        unmapped.update(chat.dropped)
        if row.get("tools"):
            used.add("tools")
            unmapped["tools (function schemas)"] += 1
    elif "input" in mapping:
        text = _field(row, mapping["input"])
        if text is _MISSING or text in (None, ""):
            raise CorpusError(f"no value for input field {mapping['input']!r}", path=where)
        case_input = {"messages": [{"role": "user", "content": str(text)}]}
        mapped[f"{mapping['input']} -> input"] += 1
    elif any(t.startswith("vars.") for t in mapping):
        case_input = {"vars": {}}
    else:
        raise CorpusError(
            "no 'messages' array in this row; map the user message with --map input=FIELD",
            path=where,
        )
    for target, source in mapping.items():
        value = _field(row, source)
        if target.startswith("vars.") and value is not _MISSING:
            case_input.setdefault("vars", {})[target.removeprefix("vars.")] = value
            mapped[f"{source} -> {target}"] += 1
        elif target.startswith("expect.") and value not in (_MISSING, None, ""):
            name = target.removeprefix("expect.")
            expect.append({"scorer": name, "args": {SCORERS[name].primary: value}})
            mapped[f"{source} -> {target}"] += 1
    if "vars" in case_input and "messages" in case_input:
        raise CorpusError("map either input/messages or vars.*, not both", path=where)
    if not expect:
        return None
    tags = _tags(_field(row, mapping["tags"])) if "tags" in mapping else ()
    for extra in row:
        if extra not in used and extra.split(".")[0] not in {u.split(".")[0] for u in used}:
            unmapped[f"field {extra!r}"] += 1
    notes = _field(row, mapping["notes"]) if "notes" in mapping else None
    source_id = _field(row, mapping["id"]) if "id" in mapping else None
    return DraftCase(
        input=case_input,
        expect=tuple(expect),
        source=where,
        source_id=None if source_id in (_MISSING, None, "") else str(source_id),
        tags=tags,
        fixtures=fixtures,
        notes=None if notes in (_MISSING, None, "") else str(notes),
    )


def _field(row: Mapping[str, Any], dotted: str | None) -> Any:
    if dotted is None:
        return _MISSING
    if dotted in row:
        return row[dotted]
    value: Any = row
    for part in dotted.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdecimal() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _tags(value: Any) -> tuple[str, ...]:
    if value in (_MISSING, None, ""):
        return ()
    items = value if isinstance(value, list) else re.split(r"[,;|]", str(value))
    return tuple(t for t in (slug_tag(str(i)) for i in items) if t)


def slug_tag(text: str) -> str:
    """A tag from free text: ``"Billing / Refunds"`` becomes ``billing_refunds``."""
    return "_".join(re.findall(r"[a-z0-9]+", text.casefold()))


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, row in json_lines(path):
        if not isinstance(row, dict):
            raise CorpusError("each line must be a JSON object", path=path, line=line)
        yield line, row


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    yield from csv_records(path)
