"""A sampled trace as a ``review: draft`` case: PII scrubbed, tool calls frozen as fixtures.

Scrubbing is the store's (:func:`evalkit.redact.redact_secrets`: registered keys, anything
key-shaped, URL passwords) plus e-mail addresses, phone and card numbers, plus the user's own
``--redact`` patterns, applied to every string of the case: turns, answer, tool arguments and
responses. The draft expects what can be read off the trace (each tool called; a JSON answer to
stay JSON, a text answer to stay close to the observed one); a reviewer replaces that with the
properties a good answer has.

Examples:
    >>> scrub("mail kari@example.org or call +47 912 34 567 about order 8812", ())
    'mail [redacted] or call [redacted] about order 8812'
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from evalkit.corpus.file_parts import cut_into_files, numbered_path
from evalkit.corpus.json_input import loads_or_none
from evalkit.corpus.traces.records import Trace
from evalkit.redact import REDACTED, redact_secrets

#: Personal data a production trace carries that a corpus must not: e-mail addresses, phone
#: numbers (8+ digits, with + and separators) and card numbers; order ids and amounts stay.
PII_PATTERNS = (
    re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    re.compile(r"(?<![\w.])\+?\d(?:[ ()-]?\d){7,18}(?![\w.])"),
)
_NOTE_CHARS = 600


def compile_patterns(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """The user's ``--redact`` patterns, compiled.

    Raises:
        ValueError: a pattern that is not a regular expression (the message says which).
    """
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"--redact {pattern!r}: not a regular expression: {exc}") from None
    return tuple(compiled)


def scrub(value: Any, patterns: Sequence[re.Pattern[str]]) -> Any:
    """``value`` with every string scrubbed (mappings and lists walked; keys kept)."""
    if isinstance(value, str):
        text = redact_secrets(value)
        for pattern in (*PII_PATTERNS, *patterns):
            text = pattern.sub(REDACTED, text)
        return text
    if isinstance(value, list | tuple):
        return [scrub(v, patterns) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, patterns) for k, v in value.items()}
    return value


def draft_id(trace: Trace) -> str:
    """``trace-`` and 12 hex digits of the hash of the trace's user turns: stable across runs."""
    key = json.dumps(trace.user_texts(), ensure_ascii=False)
    return "trace-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def draft_case(
    trace: Trace,
    tags: Sequence[str],
    patterns: Sequence[re.Pattern[str]],
    today: dt.date | None = None,
) -> dict[str, Any]:
    """The draft case (plain data, canonical key order) for ``trace``."""
    attributes = trace.attributes
    model = attributes.get("gen_ai.request.model") or attributes.get("gen_ai.response.model")
    provider = attributes.get("gen_ai.provider.name") or attributes.get("gen_ai.system")
    seen = ", ".join(str(x) for x in (provider, model) if x)
    case: dict[str, Any] = {"id": draft_id(trace)}
    if tags:
        case["tags"] = list(dict.fromkeys(_tag(t) for t in tags))
    case["review"] = "draft"
    case["provenance"] = {
        "date": (today or dt.date.today()).isoformat(),
        "source": f"traces: {trace.source}" + (f" ({seen})" if seen else ""),
    }
    case["input"] = {"messages": scrub(list(trace.messages), patterns)}
    tools: dict[str, list[dict[str, Any]]] = {}
    for call in trace.tool_calls:
        if call.response is None:
            continue  # asked but never answered in the trace: nothing to freeze
        entry = {"args": scrub(call.args, patterns), "response": scrub(call.response, patterns)}
        if entry not in tools.setdefault(call.name, []):
            tools[call.name].append(entry)
    if tools:
        case["fixtures"] = {"tools": tools}
    output = scrub(trace.output, patterns) if trace.output else None
    expect: list[dict[str, Any]] = [
        {"scorer": "tool_called", "args": {"name": name}}
        for name in dict.fromkeys(c.name for c in trace.tool_calls)
    ]
    if output is not None and _is_json_object(output):
        expect.append({"scorer": "json_valid"})
    elif output is not None:
        expect.append({"scorer": "similar", "args": {"reference": output, "threshold": 0.6}})
    if not expect:
        expect.append({"scorer": "max_chars", "args": {"n": 4000}})
    case["expect"] = expect
    observed = (output or "(no answer in the trace)")[:_NOTE_CHARS]
    case["notes"] = (
        f"DRAFT from a production trace. Observed answer: {observed} -- replace expect with the "
        f"properties a good answer has, check the fixtures, then: evalkit cases review "
        f"{case['id']} --who NAME"
    )
    return case


def _is_json_object(text: str) -> bool:
    return isinstance(loads_or_none(text), dict)


def _tag(value: Any) -> str:
    """An attribute value as a tag: letters, digits, ``_ . : / -`` only."""
    text = re.sub(r"[^A-Za-z0-9_.:/-]+", "_", str(value)).strip("_")
    return text or "none"


def write_drafts(
    cases: Sequence[dict[str, Any]], out_dir: str | Path, today: dt.date | None = None
) -> tuple[Path, ...]:
    """Write ``cases`` as new case files in ``out_dir`` (``traces-DATE.yaml``, ``-2``… when
    taken; several files of a bounded size for many cases, :mod:`evalkit.corpus.file_parts`),
    each checked by loading it back; never overwrites a file.

    Raises:
        CorpusError: a draft that does not load (every file written is removed again).
    """
    from evalkit.corpus.cases import load_cases_file

    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"traces-{(today or dt.date.today()).isoformat()}"
    header = (
        "# Draft cases sampled from production traces by `evalkit traces sample`.\n"
        "# Drafts never gate: read each one, fix its expect, then\n"
        "#   evalkit cases review ID --who NAME\n"
    )
    texts = [_dump_case(case) for case in cases]
    written: list[Path] = []
    number = 1
    try:
        for run in cut_into_files(texts):
            path = numbered_path(directory / f"{stem}.yaml", number)
            while path.exists():
                number += 1
                path = numbered_path(directory / f"{stem}.yaml", number)
            with path.open("x", encoding="utf-8") as handle:  # "x": never another's file
                written.append(path)
                handle.write(header + "\n".join(run))
            load_cases_file(path, directory)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return tuple(written)


def _dump_case(case: dict[str, Any]) -> str:
    return yaml.dump(
        [case], Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100,
        allow_unicode=True,
    )  # fmt: skip


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key, as the corpus writes them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)
