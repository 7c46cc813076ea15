"""What every importer produces, and the one writer that turns it into canonical case YAML.

An importer reads its source into :class:`ImportResult`: the draft cases, what it mapped and what
it could not (counted by kind, with why), and any side files (prompts, rubrics, schemas) the
cases refer to. :func:`write_import` writes the cases as ``review: draft`` with provenance (the
source, the date, the importer's note), ids stable across imports: the source's own id where it
has one, else one derived from the content. It never overwrites a file without ``force``.

Examples:
    >>> case = DraftCase(input={"messages": [{"role": "user", "content": "Where is order 77?"}]},
    ...     expect=({"scorer": "contains", "args": {"text": "77"}},), source="rows.jsonl:1")
    >>> stable_id("jsonl", case)
    'jsonl-where-is-order-77-9bec22e3'
    >>> stable_id("inspect", case, source_id="Sample 3")
    'inspect-sample-3'
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evalkit.corpus.case_spec import CaseSpec
from evalkit.corpus.file_parts import cut_into_files, later_parts, numbered_path
from evalkit.errors import CorpusError
from evalkit.records import canonical_json

_SLUG_WORDS = 4


@dataclass(frozen=True, kw_only=True)
class DraftCase:
    """One case as an importer read it; ``source`` says where (``tests.yaml#2``, ``rows.csv:7``,
    ``run.eval sample 3``)."""

    input: Mapping[str, Any]  # {"messages": [...]} or {"vars": {...}}
    expect: tuple[Mapping[str, Any], ...]  # canonical {scorer, args}
    source: str
    source_id: str | None = None  # the source's own id, when it has one
    tags: tuple[str, ...] = ()
    fixtures: Mapping[str, Any] = field(default_factory=dict)
    notes: str | None = None
    title: str | None = None  # words for a content-derived id (a test's description)


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    """An importer's reading of one source, before anything is written.

    ``mapped`` counts what became evalkit (``"contains -> contains": 3``); ``unmapped`` counts
    what did not, by kind (``"javascript": 1``), and ``why`` says why for each unmapped kind.
    ``files`` are side files keyed by their path relative to the corpus root.
    """

    format: str
    source: Path
    cases: tuple[DraftCase, ...]
    mapped: Mapping[str, int] = field(default_factory=dict)
    unmapped: Mapping[str, int] = field(default_factory=dict)
    why: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    provenance_note: str | None = None
    name: str | None = None  # the case file's name after the format (default: the source's)


@dataclass(frozen=True, kw_only=True)
class WrittenImport:
    """Where :func:`write_import` put things: the (first) case file, its ids, the side files,
    and every case file written (several for a large import, :mod:`evalkit.corpus.file_parts`)
    and the earlier ones of the same name removed (``force`` only)."""

    path: Path
    ids: tuple[str, ...]
    files: tuple[Path, ...]
    duplicates: int  # cases identical to an earlier one of the same source, written once
    case_files: tuple[Path, ...] = ()
    removed: tuple[Path, ...] = ()


def slug(text: str, words: int = _SLUG_WORDS) -> str:
    """Lowercase words joined by ``-``: ``slug("Where is order #77?")`` is ``where-is-order-77``."""
    parts = re.findall(r"[a-z0-9]+", str(text).casefold())
    return "-".join(parts[:words])[:60].strip("-")


def content_hash(case: DraftCase) -> str:
    """Hex digest of what the case asks and expects: the same content, the same id."""
    payload = {"input": case.input, "expect": list(case.expect), "fixtures": case.fixtures}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def stable_id(prefix: str, case: DraftCase, source_id: str | None = None) -> str:
    """``prefix-<source id>`` when the source names the case, else ``prefix-<words>-<hash8>``."""
    if source_id is not None and slug(source_id, words=12):
        return f"{prefix}-{slug(source_id, words=12)}"[:200]
    words = slug(case.title or _first_text(case.input))
    return "-".join(p for p in (prefix, words, content_hash(case)[:8]) if p)


def _first_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if value.get("messages"):
            users = [m for m in value["messages"] if m.get("role") == "user"]
            return _first_text((users or value["messages"])[-1].get("content", ""))
        return next((_first_text(v) for v in value.values() if _first_text(v)), "")
    if isinstance(value, list):
        return next((_first_text(v) for v in value if _first_text(v)), "")
    return ""


def write_import(
    result: ImportResult,
    cases_dir: str | Path,
    corpus_root: str | Path,
    *,
    force: bool = False,
    today: dt.date | None = None,
) -> WrittenImport:
    """Write ``result`` as ``cases_dir/<format>_<name>.yaml`` plus its side files (``name``:
    the result's, else the source file's stem); a large import as several case files of a
    bounded size, numbered from the second (:func:`write_case_files`).

    Raises:
        CorpusError: no case to write; a file to write exists and ``force`` is not set (nothing
            is written); or a case would not validate (the message names the source).
    """
    if not result.cases:
        skipped = ", ".join(f"{kind} ({n})" for kind, n in sorted(result.unmapped.items()))
        raise CorpusError(
            f"nothing to import: no case with a check evalkit can score ({skipped or 'empty'})",
            path=result.source,
        )
    today = today or dt.datetime.now(dt.UTC).date()
    name = slug(result.name or result.source.stem, words=8) or "cases"
    path = Path(cases_dir) / f"{result.format}_{name}.yaml"
    side = {Path(corpus_root) / rel: text for rel, text in sorted(result.files.items())}
    if not force:
        for target in (path, *later_parts(path, 1), *side):
            if target.exists():
                raise CorpusError(
                    "exists; pass --force to overwrite it (or --out DIR to write elsewhere)",
                    path=target,
                )
    records, ids, seen = [], [], set()
    for case in result.cases:
        case_id = stable_id(result.format, case, case.source_id)
        if case_id in seen:
            continue
        seen.add(case_id)
        record = _record(case, case_id, result, today)
        try:
            CaseSpec.model_validate(record)
        except ValidationError as exc:
            raise CorpusError(
                f"imported case does not validate: {exc.errors()[0]['msg']}",
                path=case.source,
                case_id=case_id,
            ) from exc
        records.append(record)
        ids.append(case_id)
    written, removed = write_case_files(path, records, result, today)
    for target, text in side.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return WrittenImport(
        path=path,
        ids=tuple(ids),
        files=tuple(side),
        duplicates=len(result.cases) - len(ids),
        case_files=written,
        removed=removed,
    )


def write_case_files(
    path: Path, records: list[dict], result: ImportResult, today: dt.date
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The records written at ``path`` and, past the bounds of one file
    (:func:`~evalkit.corpus.file_parts.cut_into_files`), at ``<stem>-2.yaml`` and on; files
    of an earlier import of the same name numbered past the new last one are removed (an
    import overwrites only with ``force``, checked before). Returns (written, removed)."""
    runs = cut_into_files([_dump_case(record) for record in records])
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for number, run in enumerate(runs, 1):
        target = numbered_path(path, number)
        part = f" (file {number} of {len(runs)})" if len(runs) > 1 else ""
        target.write_text(_header(result, today, part) + "\n".join(run), encoding="utf-8")
        written.append(target)
    removed = []
    for stale in later_parts(path, len(runs)):
        with stale.open(encoding="utf-8", errors="replace") as handle:
            if not handle.readline().startswith((_HEADER_START, _OLD_HEADER_START)):
                continue  # not an import's file: left alone
        stale.unlink()
        removed.append(stale)
    return tuple(written), tuple(removed)


def _record(case: DraftCase, case_id: str, result: ImportResult, today: dt.date) -> dict:
    provenance: dict[str, Any] = {
        "date": today,
        "source": f"{result.format}: {case.source}",
    }
    if result.provenance_note:
        provenance["note"] = result.provenance_note
    record: dict[str, Any] = {"id": case_id}
    if case.tags:
        record["tags"] = list(dict.fromkeys(case.tags))
    record["review"] = "draft"
    record["provenance"] = provenance
    record["input"] = dict(case.input)
    if case.fixtures:
        record["fixtures"] = dict(case.fixtures)
    record["expect"] = [dict(e) for e in case.expect]
    if case.notes:
        record["notes"] = case.notes
    return record


def render_cases(records: list[dict], result: ImportResult, today: dt.date) -> str:
    """The case file's text: a header saying where the drafts came from, then one case each."""
    return _header(result, today, "") + "\n".join(_dump_case(record) for record in records)


_HEADER_START = "# Imported by `evalkit cases import "
#: How files written before ``import`` moved under ``cases`` begin: still an import's own file.
_OLD_HEADER_START = "# Imported by `evalkit import "


def _header(result: ImportResult, today: dt.date, part: str) -> str:
    return (
        f"{_HEADER_START}{result.format}` from {result.source.name} on {today}{part}.\n"
        "# Drafts: read each, then mark it reviewed: evalkit cases review ID --who NAME\n"
    )


def _dump_case(record: dict) -> str:
    return yaml.dump(
        [record], Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True,
        default_flow_style=None,
    )  # fmt: skip


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key; multi-line text as ``|`` blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a case file spells every value out: no &id001 anchors


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
