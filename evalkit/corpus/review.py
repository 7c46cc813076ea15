"""``evalkit cases review``: a person marks cases reviewed, in their YAML files, in place.

Only the reviewed cases' ``review:`` value and ``provenance`` change (the reviewer and the date
of the review); every other byte of the file stays: other cases, comments, key order, quoting.
The provenance splice is :mod:`evalkit.corpus.fixture_files`'s; this module adds the one
``review: draft`` → ``review: reviewed`` value splice, checked by parsing the result back.

Examples:
    >>> text = '''# sampled from traces
    ... - id: tr-1
    ...   review: draft   # set by evalkit traces sample
    ...   provenance: {date: 2026-12-01, source: "traces: prod.json"}
    ...   input: {messages: [{role: user, content: "hi"}]}
    ...   expect: [{contains: hello}]
    ... '''
    >>> print(review_text(text, ["tr-1"], "ana", "2026-12-03", "cases/t.yaml"))
    # sampled from traces
    - id: tr-1
      review: reviewed   # set by evalkit traces sample
      provenance: {date: '2026-12-03', source: 'traces: prod.json', reviewer: ana}
      input: {messages: [{role: user, content: "hi"}]}
      expect: [{contains: hello}]
    <BLANKLINE>
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalkit.corpus.cases import Case, load_corpus
from evalkit.corpus.fixture_files import CaseEdit, rewrite_text, write_atomically
from evalkit.corpus.yaml_input import compose_text, load_text
from evalkit.errors import CorpusError


@dataclass(frozen=True)
class ReviewResult:
    """What ``review_cases`` did: ``reviewed`` ids (now reviewed, with the reviewer), and
    ``unchanged`` ids that already were, with a reviewer and a date."""

    reviewed: tuple[str, ...]
    unchanged: tuple[str, ...]
    files: tuple[str, ...]


def review_cases(
    root: str | Path, ids: Sequence[str], who: str, date: dt.date | None = None
) -> ReviewResult:
    """Mark the cases ``ids`` (under ``root``'s cases/ or sealed/) reviewed by ``who`` today.

    Raises:
        CorpusError: an unknown id (with a did-you-mean), an empty ``who``, or a file whose
            layout cannot be edited safely (file:line).
    """
    who = " ".join(who.split())
    if not who:
        raise CorpusError("--who names the person who reviewed the cases; it is empty")
    when = (date or dt.date.today()).isoformat()
    corpus = load_corpus(root, sealed=True)
    by_id = {case.id: case for case in corpus.cases}
    per_file: dict[str, list[Case]] = {}
    unchanged = []
    for case_id in dict.fromkeys(ids):
        case = by_id.get(case_id)
        if case is None:
            import difflib

            close = difflib.get_close_matches(case_id, list(by_id), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CorpusError(f"no case with this id in {corpus.root}{hint}", case_id=case_id)
        provenance = case.provenance or {}
        if case.review == "reviewed" and provenance.get("reviewer") and provenance.get("date"):
            unchanged.append(case_id)
            continue
        per_file.setdefault(case.source.rpartition(":")[0], []).append(case)
    for rel, cases in per_file.items():
        path = corpus.root / rel
        text = path.read_bytes().decode("utf-8")
        new_text = review_text(text, [c.id for c in cases], who, when, rel, cases)
        write_atomically(path, new_text)
    reviewed = tuple(c.id for cases in per_file.values() for c in cases)
    return ReviewResult(reviewed, tuple(unchanged), tuple(per_file))


def review_text(
    text: str,
    ids: Sequence[str],
    who: str,
    when: str,
    rel: str,
    cases: Sequence[Case] = (),
) -> str:
    """``text`` of a case file with the cases ``ids`` marked reviewed by ``who`` on ``when``."""
    if "\r\n" in text:
        return review_text(text.replace("\r\n", "\n"), ids, who, when, rel, cases).replace(
            "\n", "\r\n"
        )
    drafts = {c.id for c in cases if c.review == "draft"} if cases else None
    new_text = _set_review(text, ids if drafts is None else [i for i in ids if i in drafts], rel)
    edits = [CaseEdit(case_id, provenance={"date": when, "reviewer": who}) for case_id in ids]
    return rewrite_text(new_text, edits, rel)


def _set_review(text: str, ids: Sequence[str], rel: str) -> str:
    """Each of ``ids``' ``review: draft`` value replaced by ``reviewed`` (a case without the key
    is reviewed already: left alone)."""
    if not ids:
        return text
    try:
        root = compose_text(text)
    except yaml.YAMLError as exc:
        raise CorpusError(f"cannot parse: {getattr(exc, 'problem', exc)}", path=rel) from None
    spans = []
    for item in getattr(root, "value", []):
        if not isinstance(item, yaml.MappingNode):
            continue
        keys = {k.value: (k, v) for k, v in item.value if isinstance(k, yaml.ScalarNode)}
        case_id = getattr(keys.get("id", (None, None))[1], "value", None)
        if case_id not in ids or "review" not in keys:
            continue
        value = keys["review"][1]
        if item.flow_style:
            raise CorpusError(
                "the case is one flow mapping ({...}); write it in block style, or set "
                "review: reviewed and provenance.reviewer by hand",
                path=rel,
                line=item.start_mark.line + 1,
                case_id=case_id,
            )
        spans.append((value.start_mark.index, value.end_mark.index))
    new_text = text
    for start, end in sorted(spans, reverse=True):
        new_text = new_text[:start] + "reviewed" + new_text[end:]
    before, after = load_text(text), load_text(new_text)
    expected = [
        {**case, "review": "reviewed"}
        if isinstance(case, dict) and case.get("id") in ids and "review" in case
        else case
        for case in before
    ]
    if after != expected:
        raise CorpusError(
            "marking the cases reviewed would change more than their review: field (an "
            "unusual layout); set review: reviewed by hand",
            path=rel,
        )
    return new_text
