"""Production traces become draft cases (``evalkit traces sample``).

Readers turn OpenTelemetry GenAI spans (:mod:`.otlp`) and OpenAI-format request/response logs
(:mod:`.openai_log`) into :class:`~.records.Trace` values; :mod:`.sampler` picks which to keep
(stratified by what the corpus lacks, deduplicated against it) and :mod:`.drafting` writes them
as ``review: draft`` cases with PII scrubbed and the observed tool calls as fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalkit.corpus.json_input import MAX_DOCUMENT_BYTES, loads_or_none, text_lines
from evalkit.corpus.traces.openai_log import read_openai_log
from evalkit.corpus.traces.otlp import is_otlp, read_otlp
from evalkit.corpus.traces.records import Trace
from evalkit.errors import CorpusError


@dataclass(frozen=True)
class ReadTraces:
    """Every trace read, and per file how many it skipped (no GenAI chat span, no user turn)."""

    traces: tuple[Trace, ...]
    skipped: dict[str, int]


def read_traces(paths: Sequence[str | Path]) -> ReadTraces:
    """Read each file as OTLP/JSON (first JSON value has ``resourceSpans``) or an OpenAI log.

    Raises:
        CorpusError: a missing file, or a line neither reader understands (``file:line``).
    """
    traces: list[Trace] = []
    skipped: dict[str, int] = {}
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise CorpusError("trace file not found", path=path)
        reader = read_otlp if is_otlp(_first_value(path)) else read_openai_log
        found, missed = reader(path)
        traces.extend(found)
        skipped[str(path)] = missed
    return ReadTraces(tuple(traces), skipped)


def _first_value(path: Path) -> object:
    """The file's first JSON value: its first non-blank line's, else (a document spread over
    many lines, no larger than one may be) the whole file's."""
    for _, text in text_lines(path):
        if text.strip():
            value = loads_or_none(text)
            if value is not None:
                return value
            break
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        return None
    return loads_or_none(path.read_bytes().decode("utf-8", "replace"))
