"""Cases: the YAML corpus, its validation, and the canonical case hash.

A case is data, not code. Every problem in a case file is reported as one line naming the file,
the line and the case id (``cases/billing.yaml:12: case refund-017: unknown scorer 'contans'
(did you mean 'contains'?)``), and the whole corpus is validated before anything runs. An
``expect`` list's short forms and its own refusals are :mod:`~evalkit.corpus.expect_forms`'s.

Examples:
    >>> corpus = load_corpus("corpus")                       # doctest: +SKIP
    >>> corpus.cases[0].id, corpus.stats().per_tag["billing"]  # doctest: +SKIP
    ('billing-double-charge-001', 14)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from evalkit.corpus.case_scorers import DeferredScorers, PendingScorers, ScorerBinder, SharedExpect
from evalkit.corpus.case_spec import CaseSpec, describe_validation
from evalkit.corpus.expect_forms import check_expect, expand_short_forms, quoted, suggest
from evalkit.corpus.messages import template_vars
from evalkit.corpus.yaml_chunks import ChunkRefused, ListChunk, list_chunks
from evalkit.corpus.yaml_files import find_yaml_files, parse_yaml_text, read_yaml_text
from evalkit.corpus.yaml_input import YAMLInputError, paused_gc
from evalkit.corpus.yaml_nodes import (
    mapping_value,
    self_contained,
    sequence_items,
    sequence_key,
)
from evalkit.errors import CorpusError
from evalkit.records import canonical_json
from evalkit.scorers import SCORERS, Scorer

if TYPE_CHECKING:  # the index's facts: read through it by case_facts, not by a plain load
    from evalkit.corpus.case_index import CaseFacts

CASE_GLOBS = ("*.yaml", "*.yml")
#: Refused before parsing (a YAML loader holds many times a file's size in nodes, so a large
#: flat list would exhaust memory before any limit on its nodes is reached); a module setting,
#: like the YAML limits: ``evalkit.corpus.cases.MAX_CASE_FILE_BYTES = 64 << 20``.
MAX_CASE_FILE_BYTES = 20 << 20
MAX_CASES_PER_FILE = 100_000
#: A longer case file is parsed this many cases at a time, so only one chunk's YAML nodes are
#: alive (a node graph is many times its case's size; `bench/bench_corpus_memory.py` prints
#: what a loaded case holds); a module setting.
CASE_CHUNK_ITEMS = 256
MIN_CRITICAL_CASES = 8
#: How many problems ``evalkit cases lint`` reports in one pass.
MAX_LINT_ERRORS = 50


# --- the loaded case -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One validated case, bound to its scorers.

    ``hash`` is the sha256 of the canonical serialization of the case content: key order and
    YAML formatting do not change it; any content change does.

    Slotted (a corpus holds 100,000 of them: no per-case ``__dict__``); cases of one load
    share what they write alike (a tags tuple, an empty ``provenance`` or ``fixtures``, the
    scorers of an ``expect`` list), which readers never modify.
    """

    id: str
    tags: tuple[str, ...]
    criticality: str
    provenance: dict[str, Any]
    messages: tuple[dict[str, Any], ...] | None
    vars: dict[str, Any] | None
    fixtures: dict[str, Any]
    scorers: tuple[Scorer, ...] = field(repr=False)
    hash: str
    source: str  # "cases/billing.yaml:12", relative to the corpus root
    sealed: bool = False
    group: str | None = None  # the case group (incident, document, conversation), if any
    review: str = "reviewed"  # "draft": imported or sampled, never gated until reviewed

    @property
    def must_pass(self) -> bool:
        return self.criticality == "must_pass"

    def input_json(self) -> str:
        payload: dict[str, Any] = (
            {"messages": list(self.messages)} if self.messages is not None else {}
        )
        if self.vars is not None:
            payload["vars"] = self.vars
        return json.dumps(payload, sort_keys=True, default=str)


# Set after the dataclass is made (a descriptor in the class body would become its default),
# over the slot it made for the field: ``load_corpus(defer_scorers=True)`` stores pending
# scorers, built when first read.
Case.scorers = DeferredScorers(Case.__dict__["scorers"])  # type: ignore[assignment, misc]


@dataclass(frozen=True)
class CorpusStats:
    """Counts shown by ``evalkit cases lint``."""

    n_cases: int
    per_tag: dict[str, int]
    per_criticality: dict[str, int]
    sealed: int
    thin_critical_tags: dict[str, int]  # critical tags below MIN_CRITICAL_CASES


@dataclass(frozen=True)
class Corpus:
    """All cases of a suite, validated; ``file_hashes`` covers every referenced file;
    ``warnings`` (one line each) are what ``cases lint`` reports without failing."""

    root: Path
    cases: tuple[Case, ...]
    file_hashes: dict[str, str]
    warnings: tuple[str, ...] = ()

    @property
    def hash(self) -> str:
        return _corpus_digest(self.cases)

    def select(
        self,
        tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
        ids: Iterable[str] = (),
    ) -> Corpus:
        """Cases having any of ``tags`` (all when empty), none of ``exclude_tags``."""
        chosen = _chosen(self.cases, tags, exclude_tags, ids)
        for case in chosen:  # deferred scorers: built now, so bad args stop a run before it starts
            _ = case.scorers
        return Corpus(self.root, chosen, self.file_hashes)

    def stats(self, critical_tags: Sequence[str] = ()) -> CorpusStats:
        per_tag = Counter(t for c in self.cases for t in c.tags)
        per_crit = Counter(c.criticality for c in self.cases)
        thin = {
            t: per_tag.get(t, 0) for t in critical_tags if per_tag.get(t, 0) < MIN_CRITICAL_CASES
        }
        return CorpusStats(
            n_cases=len(self.cases),
            per_tag=dict(sorted(per_tag.items())),
            per_criticality=dict(sorted(per_crit.items())),
            sealed=sum(c.sealed for c in self.cases),
            thin_critical_tags=thin,
        )


def _chosen(
    cases: Sequence[Any], tags: Iterable[str], exclude_tags: Iterable[str], ids: Iterable[str]
) -> tuple[Any, ...]:
    """The cases (or facts) having any of ``tags`` (all when empty), none of
    ``exclude_tags``, and an id among ``ids`` (any when empty), in their order."""
    want, drop, only = set(tags), set(exclude_tags), set(ids)
    return tuple(
        c
        for c in cases
        if (not want or want & set(c.tags))
        and not drop & set(c.tags)
        and (not only or c.id in only)
    )


def _corpus_digest(cases: Iterable[Case | CaseFacts]) -> str:
    """The corpus hash: sha256 over each case's id and hash, in id order."""
    digest = hashlib.sha256()
    for case in sorted(cases, key=lambda c: c.id):
        digest.update(f"{case.id}\0{case.hash}\n".encode())
    return digest.hexdigest()


# --- hashing ---------------------------------------------------------------------------------


def case_hash(spec: CaseSpec) -> str:
    """sha256 of the canonical form of a validated case (defaults dropped, short forms expanded)."""
    payload = spec.model_dump(mode="json", exclude_defaults=True, exclude={"review"})
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


#: ``canonical_json``'s layout, by the C encoder: what pydantic dumps in JSON mode is already
#: plain JSON data with string keys, so the walk of ``canonical_json`` changes only floats
#: with an integral value (1.0 is written 1), and those are written ``1.0`` or ``1e+16``.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
_MAYBE_INTEGRAL_FLOAT = re.compile(r"\.0(?![0-9])|e\+")  # also in strings: then the slow way
_HASH_EXCLUDES = {"review", "expect"}  # a set: pydantic types `exclude` as set or mapping


def _canonical(value: Any) -> str:
    """``canonical_json(value)`` of a JSON-mode dump, by the C encoder when that is the same."""
    try:
        text = _CANONICAL.encode(value)
    except (TypeError, ValueError):
        return canonical_json(value)
    return canonical_json(value) if _MAYBE_INTEGRAL_FLOAT.search(text) else text


def _case_hash(spec: CaseSpec, expect_json: str) -> tuple[str, dict[str, Any]]:
    """``case_hash(spec)`` with the ``expect`` part given (its canonical JSON, the same for
    every case sharing the list), and the dump of the rest. The canonical form of an object
    is its members in key order, so the rest is written around ``expect``'s place."""
    payload = spec.model_dump(mode="json", exclude_defaults=True, exclude=_HASH_EXCLUDES)
    head = _canonical({k: v for k, v in payload.items() if k < "expect"})[1:-1]
    tail = _canonical({k: v for k, v in payload.items() if k > "expect"})[1:-1]
    text = ",".join(part for part in (head, f'"expect":{expect_json}', tail) if part)
    return hashlib.sha256(f"{{{text}}}".encode()).hexdigest(), payload


# --- loading ---------------------------------------------------------------------------------


@paused_gc()  # loading frees nothing: collections would only walk what it built, again
def load_corpus(
    root: str | Path,
    *,
    sealed: bool = False,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    max_errors: int = 1,
    defer_scorers: bool = False,
) -> Corpus:
    """Load and validate every case file under ``root/cases`` (and ``root/sealed`` if asked).

    To build a few cases and read the others' facts through the case index:
    :func:`evalkit.corpus.case_facts.load_chosen`.

    Each distinct built-in ``expect`` entry is built once per load and shared. With
    ``defer_scorers`` a case's scorers are built when first read (:meth:`Corpus.select` reads
    those of the cases it keeps): a run of two selected cases builds two cases' scorers, and a
    bad scorer argument in an unselected case is left to ``evalkit cases lint``.

    Raises:
        CorpusError: the first problem found, as ``file:line: case id: what is wrong``; with
            ``max_errors`` > 1, :class:`CorpusErrors` listing up to that many when there are
            several (each case is checked on its own).
    """
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise CorpusError("corpus root is not a directory", path=root)
    dirs = [*case_dirs, "sealed"] if sealed else list(case_dirs)
    cases: list[Case] = []
    seen: dict[str, str] = {}
    file_hashes: dict[str, str] = {}
    warnings: list[str] = []
    errors = _Problems(max_errors)
    binder = ScorerBinder(root_path)
    shared = _LoadShared()
    for directory in dirs:
        for path in find_yaml_files(root_path / directory, root_path, CASE_GLOBS):
            with errors.collect():
                loaded = _load_file(
                    path, root_path, sealed=directory == "sealed", errors=errors, binder=binder,
                    defer=defer_scorers, shared=shared,
                )  # fmt: skip
                if not loaded and not errors.found_in(_relative(path, root_path)):
                    warnings.append(
                        f"{_relative(path, root_path)}: no cases in this file; add cases "
                        "(a YAML list, each starting with '- id:') or delete it"
                    )
                for case in loaded:
                    try:  # each case on its own (not a with-block: this runs per case)
                        if case.id in seen:
                            raise CorpusError(
                                f"duplicate id (first defined at {seen[case.id]}); rename one",
                                path=case.source.rsplit(":", 1)[0],
                                line=int(case.source.rsplit(":", 1)[1]),
                                case_id=case.id,
                            )
                        seen[case.id] = case.source
                        if user_template is not None:
                            _check_vars(case, user_template)
                        cases.append(case)
                    except CorpusError as exc:
                        errors.add(exc)
    errors.raise_any()
    file_hashes.update(binder.file_hashes)
    return Corpus(root_path, tuple(cases), dict(sorted(file_hashes.items())), tuple(warnings))


class CorpusErrors(CorpusError):
    """Several problems found in one pass: ``errors`` (at most ``max_errors`` of them);
    ``str()`` is the first, saying how many more there are."""

    def __init__(self, errors: Sequence[CorpusError], *, truncated: bool = False) -> None:
        self.errors = list(errors)
        self.truncated = truncated
        first = self.errors[0]
        more = f"{len(self.errors) - 1}{'+' if truncated else ''}"
        super().__init__(
            f"{first.message} (and {more} more problems: `evalkit cases lint` lists them)",
            path=first.path,
            line=first.line,
            case_id=first.case_id,
            column=first.column,
        )


class _Problems:
    """Collects CorpusErrors up to a limit (1: the first one is raised at once, as before)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.errors: list[CorpusError] = []
        self.truncated = False

    @contextmanager
    def collect(self) -> Iterator[None]:
        try:
            yield
        except CorpusError as exc:
            self.add(exc)

    def add(self, exc: CorpusError) -> None:
        """Keep one problem, or raise it (the limit is 1), or raise them all (limit reached)."""
        if isinstance(exc, CorpusErrors) or self.limit == 1:
            raise exc
        self.errors.append(exc)
        if len(self.errors) >= self.limit:
            self.truncated = True
            raise CorpusErrors(self.errors, truncated=True) from None

    def found_in(self, rel: str) -> bool:
        return any(e.path == rel for e in self.errors)

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise CorpusErrors(self.errors)


def load_cases_file(path: str | Path, root: str | Path) -> list[Case]:
    """Validate a single case file (used by editors and tests)."""
    root_path = Path(root).resolve()
    return _load_file(
        Path(path).resolve(), root_path, sealed=False, binder=ScorerBinder(root_path),
        shared=_LoadShared(),
    )  # fmt: skip


class _LoadShared:
    """What the cases of one load share instead of holding a copy each: one tuple per distinct
    tags list, one empty ``provenance`` and one empty ``fixtures`` (never modified: a case is
    a frozen record, and every reader only reads them)."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.no_provenance: dict[str, Any] = {}
        self.no_fixtures: dict[str, Any] = {"tools": {}, "documents": []}

    def tags_of(self, tags: list[str]) -> tuple[str, ...]:
        key = tuple(tags)
        return self.tags.setdefault(key, key)


def _load_file(
    path: Path,
    root: Path,
    *,
    sealed: bool,
    binder: ScorerBinder,
    shared: _LoadShared,
    errors: _Problems | None = None,
    defer: bool = False,
) -> list[Case]:
    rel = _relative(path, root)
    text = read_yaml_text(path, rel, MAX_CASE_FILE_BYTES)
    chunks = list_chunks(text, MAX_CASES_PER_FILE, CASE_CHUNK_ITEMS)
    if chunks is not None:
        place = _Place(rel, binder, shared, sealed, defer, None)
        loaded = _load_chunks(chunks, place, errors)
        if loaded is not None:
            return loaded
    data, node = parse_yaml_text(text, rel)
    if data is None:
        return []
    if not isinstance(data, list):
        raise CorpusError("a case file must be a YAML list of cases", path=rel, line=1)
    if len(data) > MAX_CASES_PER_FILE:
        raise CorpusError(
            f"{len(data):,} cases in one file, more than {MAX_CASES_PER_FILE:,}; split it",
            path=rel,
            line=1,
        )
    # An expect list's source text (and column) is its key for sharing what checking it found
    # with the next case writing it alike, in a document whose nodes read from their own text.
    source = text if self_contained(text) else None
    place = _Place(rel, binder, shared, sealed, defer, source)
    cases = []
    for index, (raw, item_node) in enumerate(zip(data, node.value, strict=True)):
        line = item_node.start_mark.line + 1
        try:  # each case on its own: lint reports them all (not a with-block: per case)
            cases.append(_build_case(raw, item_node, line, index, place))
        except CorpusError as exc:
            if errors is None:
                raise
            errors.add(exc)
    return cases


def _load_chunks(
    chunks: Iterator[ListChunk], place: _Place, errors: _Problems | None
) -> list[Case] | None:
    """The cases of a file parsed chunk by chunk (:func:`list_chunks`), or None when a chunk is
    refused: the caller then loads the whole file as before (what was built here is dropped;
    the expect lists it shared read the same in any file).

    The problems found are reported only once every chunk is parsed, in their order: a YAML
    problem further down the file is then reported as the whole-file parse reports it, before
    and instead of any case's, and the errors are exactly the whole-file load's.
    """
    cases: list[Case] = []
    problems: list[CorpusError] = []
    index = 0
    try:
        for chunk in chunks:
            chunk_place = replace(place, source=chunk.text)  # a chunk is self-contained
            for raw, item_node in zip(chunk.items, chunk.nodes, strict=True):
                line = item_node.start_mark.line + 1
                try:  # each case on its own, as _load_file does
                    cases.append(_build_case(raw, item_node, line, index, chunk_place))
                except CorpusError as exc:
                    problems.append(exc)
                index += 1
            del chunk, chunk_place, raw, item_node  # one chunk's nodes alive while the next parses
    except ChunkRefused:
        return None
    except YAMLInputError as exc:  # a case too large: a YAML problem, before any case's
        raise CorpusError(exc.problem, path=place.rel, line=exc.line) from None
    for problem in problems:
        if errors is None:
            raise problem
        errors.add(problem)
    return cases


@dataclass(frozen=True, slots=True)
class _Place:
    """What every case of one file is built with."""

    rel: str
    binder: ScorerBinder
    shared: _LoadShared
    sealed: bool
    defer: bool
    source: str | None  # the file's text, when an expect list's text is its key (see above)


def _shown_id(value: Any) -> str:
    """A case id as error messages show it: one line, at most 80 characters."""
    text = " ".join(str(value).split()) or repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _build_case(raw: Any, node: Any, line: int, index: int, place: _Place) -> Case:
    rel, binder = place.rel, place.binder
    if not isinstance(raw, dict):
        raise CorpusError(
            f"case #{index + 1} must be a mapping, got {type(raw).__name__}", path=rel, line=line
        )
    case_id = raw.get("id")
    if case_id is None or case_id == "":
        raise CorpusError(f"case #{index + 1} has no id", path=rel, line=line)
    case_id = _shown_id(case_id)
    expect_node = mapping_value(node, "expect")
    key = sequence_key(expect_node, place.source)
    known = binder.known_expect(key)
    given = raw.get("expect")
    if known is not None and isinstance(given, list) and len(given) == len(known.specs):
        given = known.specs  # validated already: pydantic takes a validated entry as it is
    else:
        known = None
        given = expand_short_forms(given, rel, node, case_id)
    try:
        spec = CaseSpec.model_validate({**raw, "expect": given})
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"][:1] == ("expect",) or first["type"] == "extra_forbidden":
            check_expect(raw, node, rel, line, case_id)  # its own message, if it is that
        message, key_line = describe_validation(exc, node, line)
        raise CorpusError(message, path=rel, line=key_line, case_id=case_id) from None
    lines = _entry_lines(expect_node, len(spec.expect), line)
    if known is None:
        known = _share_expect(spec, key, lines, place, case_id)
    offsets = binder.shared_offsets(tuple(n - line for n in lines))
    pending = PendingScorers(binder, known, rel, case_id, line, offsets)
    scorers: tuple[Scorer, ...] | PendingScorers = pending if place.defer else pending.build()
    hash_, payload = _case_hash(spec, known.canonical)
    inputs = spec.input
    fixtures = spec.fixtures
    return Case(
        id=spec.id,
        tags=place.shared.tags_of(spec.tags),
        criticality=spec.criticality,
        # exclude_defaults dropped the same fields exclude_none would: all default to None
        provenance=payload.get("provenance") or place.shared.no_provenance,
        messages=tuple(payload["input"]["messages"]) if inputs.messages is not None else None,
        vars=dict(inputs.vars) if inputs.vars is not None else None,
        fixtures=fixtures.model_dump(mode="json")
        if fixtures.tools or fixtures.documents
        else place.shared.no_fixtures,
        scorers=scorers,  # type: ignore[arg-type]  # PendingScorers: Case.scorers builds them
        hash=hash_,
        source=f"{rel}:{line}",
        sealed=place.sealed,
        group=spec.group,
        review=spec.review,
    )


def _share_expect(
    spec: CaseSpec, key: tuple[int, str] | None, lines: tuple[int, ...], place: _Place, case_id: str
) -> SharedExpect:
    """The checks a new ``expect`` list gets once per load: known scorer names, files found and
    hashed, its canonical JSON."""
    for entry, entry_line in zip(spec.expect, lines, strict=True):
        if entry.scorer not in SCORERS:
            hint = suggest(entry.scorer, SCORERS)
            raise CorpusError(
                f"unknown scorer {quoted(entry.scorer)}{hint}",
                path=place.rel,
                line=entry_line,
                case_id=case_id,
            )
    dumped = [e.model_dump(mode="json", exclude_defaults=True) for e in spec.expect]
    return place.binder.share_expect(
        key, spec.expect, canonical_json(dumped), lines, place.rel, case_id
    )


def _entry_lines(expect_node: Any, count: int, line: int) -> tuple[int, ...]:
    """The line of each expect entry (the case's line for one whose node is not found, as when
    ``expect`` comes from a merge key)."""
    items = sequence_items(expect_node)
    return tuple(items[i].start_mark.line + 1 if i < len(items) else line for i in range(count))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _check_vars(case: Case, user_template: str) -> None:
    if case.vars is None:
        return
    missing = template_vars(user_template) - set(case.vars) - {"documents"}
    if missing:
        path, line = case.source.rsplit(":", 1)
        raise CorpusError(
            f"input.vars lacks {sorted(missing)} used by the suite's user_template",
            path=path,
            line=int(line),
            case_id=case.id,
        )
