"""OpenTelemetry GenAI spans (OTLP/JSON, as the collector's file exporter writes it) as traces.

A file holds one ``ExportTraceServiceRequest`` per line (or one JSON document): ``resourceSpans``
→ ``scopeSpans`` → ``spans``, each span's ``attributes`` a list of ``{key, value: {stringValue |
intValue | doubleValue | boolValue | arrayValue | kvlistValue}}``. Spans are grouped by
``traceId``. The GenAI semantic conventions give what a case needs:

* a chat span (``gen_ai.operation.name: chat``) carries ``gen_ai.input.messages`` and
  ``gen_ai.output.messages`` (JSON: ``[{role, parts: [{type: text, content} | {type: tool_call,
  id, name, arguments} | {type: tool_call_response, id, response}]}]``), ``gen_ai.provider.name``
  (formerly ``gen_ai.system``) and ``gen_ai.request.model``; the trace's last chat span holds
  the whole conversation and the final answer;
* an ``execute_tool`` span carries ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``.

Messages are on spans only when the instrumentation captures content (for the Python
instrumentations: ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` and
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``); traces without them are
counted as skipped, never guessed at.

Examples:
    >>> attribute_value({"arrayValue": {"values": [{"stringValue": "stop"}]}})
    ['stop']
    >>> attribute_value({"intValue": "390"})
    390
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.corpus.json_input import MAX_DOCUMENT_BYTES, json_lines, loads_or_none
from evalkit.corpus.traces.records import (
    ToolCall,
    Trace,
    conversation_turns,
    parse_arguments,
    parse_response,
)
from evalkit.errors import CorpusError

_CHAT_OPERATIONS = {"chat", "text_completion", "generate_content"}
#: Spans one file may hold: they are grouped by trace before any is drafted, so all are held.
MAX_SPANS = 100_000


@dataclass(frozen=True)
class _Span:
    trace_id: str
    name: str
    start: int
    attributes: dict[str, Any]
    line: int


def attribute_value(value: dict[str, Any]) -> Any:
    """One OTLP/JSON ``AnyValue`` as a Python value (64-bit integers arrive as strings)."""
    if not isinstance(value, dict) or not value:
        return None
    kind, raw = next(iter(value.items()))
    if kind == "intValue":
        return int(raw)
    if kind == "doubleValue":
        return float(raw)
    if kind == "arrayValue":
        return [attribute_value(v) for v in (raw or {}).get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: attribute_value(kv.get("value", {})) for kv in raw.get("values", [])}
    return raw


def _attributes(items: Any) -> dict[str, Any]:
    return {a["key"]: attribute_value(a.get("value", {})) for a in items or [] if "key" in a}


def is_otlp(first: Any) -> bool:
    """Whether a file's first JSON value is an OTLP trace export."""
    return isinstance(first, dict) and "resourceSpans" in first


def read_otlp(path: str | Path) -> tuple[list[Trace], int]:
    """The traces of an OTLP/JSON file with a GenAI chat span, and how many traces had none.

    Raises:
        CorpusError: a line that is not JSON, or not a trace export (``file:line``).
    """
    path = Path(path)
    by_trace: dict[str, list[_Span]] = {}
    resources: dict[str, dict[str, Any]] = {}
    spans = 0
    for line, export in _exports(path):
        for resource_spans in _objects(export.get("resourceSpans"), path, line):
            resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
            for scope_spans in _objects(resource_spans.get("scopeSpans"), path, line):
                for span in scope_spans.get("spans") or []:
                    spans += 1
                    if spans > MAX_SPANS:
                        raise CorpusError(
                            f"more than {MAX_SPANS:,} spans in one file; split the export",
                            path=path, line=line,
                        )  # fmt: skip
                    if not isinstance(span, dict):
                        raise CorpusError("a span is not a JSON object", path=path, line=line)
                    trace_id = str(span.get("traceId") or "")
                    by_trace.setdefault(trace_id, []).append(
                        _Span(trace_id, str(span.get("name", "")),
                              int(span.get("startTimeUnixNano") or 0),
                              _attributes(span.get("attributes")), line)
                    )  # fmt: skip
                    resources.setdefault(trace_id, resource)
    traces, skipped = [], 0
    for trace_id, trace_spans in by_trace.items():
        ordered = sorted(trace_spans, key=lambda s: s.start)
        found = _trace(path, trace_id, ordered, resources[trace_id])
        if found is None:
            skipped += 1
        else:
            traces.append(found)
    return traces, skipped


def _objects(items: Any, path: Path, line: int) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise CorpusError("not an OTLP trace export (a list of objects expected)", path=path,
                          line=line)  # fmt: skip
    return items


def _exports(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each export of the file: the whole file as one JSON document when it is one (and no
    larger than a document may be), else one per line, streamed."""
    try:
        small = path.stat().st_size <= MAX_DOCUMENT_BYTES
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if small:
        whole = loads_or_none(path.read_bytes().decode("utf-8", "replace"))
        if isinstance(whole, dict):
            if not is_otlp(whole):
                raise CorpusError("not an OTLP trace export (no resourceSpans)", path=path)
            yield 1, whole
            return
    for number, export in json_lines(path, invalid="not JSON"):
        if not is_otlp(export):
            raise CorpusError("not an OTLP trace export (no resourceSpans)", path=path, line=number)
        yield number, export


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        value = loads_or_none(value)
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _text(message: dict[str, Any]) -> str:
    parts = message.get("parts") or []
    texts = [
        str(p.get("content", ""))
        for p in parts
        if isinstance(p, dict) and p.get("type", "text") == "text" and p.get("content")
    ]
    return "\n".join(texts)


def _trace(path: Path, trace_id: str, spans: list[_Span], resource: dict) -> Trace | None:
    chats = [
        s
        for s in spans
        if s.attributes.get("gen_ai.operation.name") in _CHAT_OPERATIONS
        and "gen_ai.input.messages" in s.attributes
    ]
    if not chats:
        return None
    final = chats[-1]
    conversation = _messages(final.attributes.get("gen_ai.input.messages"))
    turns = conversation_turns(conversation, _text)
    if turns is None:
        return None
    outputs = _messages(final.attributes.get("gen_ai.output.messages"))
    output = "\n".join(t for m in outputs if (t := _text(m))) or None
    calls: dict[str, dict[str, Any]] = {}
    for chat in chats:  # tool traffic the model saw, in the order it happened
        for message in [*_messages(chat.attributes.get("gen_ai.input.messages")),
                        *_messages(chat.attributes.get("gen_ai.output.messages"))]:  # fmt: skip
            for part in message.get("parts") or []:
                if not isinstance(part, dict) or not part.get("id"):
                    continue
                entry = calls.setdefault(str(part["id"]), {})
                if part.get("type") == "tool_call":
                    entry.update(name=part.get("name"), args=part.get("arguments"))
                elif part.get("type") == "tool_call_response":
                    entry["response"] = part.get("response")
    for span in spans:  # the app's own execute_tool spans: what the tool really returned
        attributes = span.attributes
        if attributes.get("gen_ai.operation.name") != "execute_tool":
            continue
        key = str(attributes.get("gen_ai.tool.call.id") or f"{span.name}@{span.start}")
        entry = calls.setdefault(key, {})
        entry.setdefault("name", attributes.get("gen_ai.tool.name"))
        entry.setdefault("args", attributes.get("gen_ai.tool.call.arguments"))
        if "gen_ai.tool.call.result" in attributes:
            entry["response"] = attributes["gen_ai.tool.call.result"]
    tool_calls = tuple(
        ToolCall(str(e["name"]), parse_arguments(e.get("args")),
                 parse_response(e.get("response")), call_id)
        for call_id, e in calls.items()
        if e.get("name")
    )  # fmt: skip
    merged = dict(resource)
    for span in spans:
        merged.update(span.attributes)
    merged.update(final.attributes)  # the answering span's own attributes win
    for noisy in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"):
        merged.pop(noisy, None)
    return Trace(
        source=f"{path.name}:{final.line} trace {trace_id[:16]}",
        messages=turns,
        output=output,
        tool_calls=tool_calls,
        attributes=merged,
    )
