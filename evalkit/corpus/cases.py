"""Cases: the YAML corpus, its validation, and the canonical case hash.

A case is data, not code. Every problem in a case file is reported as one line naming the file,
the line and the case id (``cases/billing.yaml:12: case refund-017: unknown scorer 'contans'
(did you mean 'contains'?)``), and the whole corpus is validated before anything runs.

Examples:
    >>> corpus = load_corpus("corpus")                       # doctest: +SKIP
    >>> corpus.cases[0].id, corpus.stats().per_tag["billing"]  # doctest: +SKIP
    ('billing-double-charge-001', 14)
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalkit.corpus.case_index import (
    CaseFacts,
    CaseIndex,
    FileFacts,
    IndexCounts,
    IndexMismatch,
    ScorerFacts,
    index_directory,
    reader_fingerprint,
)
from evalkit.corpus.case_scorers import DeferredScorers, PendingScorers, ScorerBinder, SharedExpect
from evalkit.corpus.case_spec import CaseSpec, describe_validation
from evalkit.corpus.messages import template_vars
from evalkit.corpus.yaml_input import (
    ChunkRefused,
    ListChunk,
    YAMLInputError,
    find_yaml_files,
    list_chunks,
    mapping_value,
    node_line,
    parse_yaml,
    parse_yaml_text,
    paused_gc,
    read_yaml_text,
    self_contained,
    sequence_items,
    sequence_key,
)
from evalkit.errors import CorpusError
from evalkit.records import canonical_json
from evalkit.scorers import SCORERS, Scorer
from evalkit.scorers.registry import factory_signature

CASE_GLOBS = ("*.yaml", "*.yml")
#: Refused before parsing (a 50 MB flat list grows to gigabytes in a YAML loader); a module
#: setting, like the YAML limits: ``evalkit.corpus.cases.MAX_CASE_FILE_BYTES = 64 << 20``.
MAX_CASE_FILE_BYTES = 20 << 20
MAX_CASES_PER_FILE = 100_000
#: A longer case file is parsed this many cases at a time, so only one chunk's YAML nodes are
#: alive (~17 KB per case: a whole 10,000-case file's peaked at 168 MiB); a module setting.
CASE_CHUNK_ITEMS = 256
MIN_CRITICAL_CASES = 8
#: How many problems ``evalkit cases lint`` reports in one pass.
MAX_LINT_ERRORS = 50
_EXPECT_EXAMPLE = "e.g. expect: [{contains: refund}] (`evalkit scorers` lists the scorers)"


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
        payload = {"messages": list(self.messages)} if self.messages is not None else {}
        if self.vars is not None:
            payload["vars"] = self.vars
        return json.dumps(payload, sort_keys=True, default=str)


# Set after the dataclass is made (a descriptor in the class body would become its default),
# over the slot it made for the field: ``load_corpus(defer_scorers=True)`` stores pending
# scorers, built when first read.
Case.scorers = DeferredScorers(Case.__dict__["scorers"])  # type: ignore[assignment]


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


def _corpus_digest(cases: Iterable[Case] | Iterable[CaseFacts]) -> str:
    """The corpus hash: sha256 over each case's id and hash, in id order."""
    digest = hashlib.sha256()
    for case in sorted(cases, key=lambda c: c.id):
        digest.update(f"{case.id}\0{case.hash}\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class CorpusFacts:
    """Every case of a suite as the case index says it (:func:`scan_corpus`), for a run that
    builds only some of them: ``hash``, ``file_hashes`` and each case's id, hash, tags, review
    and scorer names are a full load's, so :meth:`select`, a selection's ``apply``, the draft
    check and the run manifest read it as they read a :class:`Corpus`; :meth:`load` builds
    the cases asked for."""

    root: Path
    cases: tuple[CaseFacts, ...]
    file_hashes: dict[str, str]
    warnings: tuple[str, ...] = ()
    builder: _FactsBuilder | None = field(default=None, repr=False, compare=False)

    @property
    def hash(self) -> str:
        return _corpus_digest(self.cases)

    @property
    def counts(self) -> IndexCounts:
        """What the scan (and the loads since) did: entries used, files parsed, cases built."""
        return self.builder.index.counts if self.builder is not None else IndexCounts()

    def select(
        self,
        tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
        ids: Iterable[str] = (),
    ) -> CorpusFacts:
        """The facts :meth:`Corpus.select` would keep (no scorer is built here)."""
        chosen = _chosen(self.cases, tags, exclude_tags, ids)
        return replace(self, cases=chosen, warnings=())

    @paused_gc()  # as load_corpus: building frees nothing, collections would walk it again
    def load(self, ids: Iterable[str] | None = None) -> Corpus:
        """The cases of these facts (of ``ids`` only, when given) built from their files, each
        with the scorers its facts keep (a selection's skips) built now, as
        :meth:`Corpus.select` builds them: a bad argument stops a run before it starts.

        Raises:
            IndexMismatch: a built case disagreed with its file's entry; the entry is made
                again: scan again (:func:`load_corpus` with ``only`` does, once).
            CorpusError: a case's scorer arguments, as a full load reports them.
        """
        if self.builder is None:
            raise ValueError("these facts were not read by scan_corpus: nothing to build from")
        wanted = set(ids) if ids is not None else None
        by_file: dict[str, list[CaseFacts]] = {}
        for fact in self.cases:
            if wanted is None or fact.id in wanted:
                by_file.setdefault(fact.source.rpartition(":")[0], []).append(fact)
        cases: list[Case] = []
        for rel, facts in by_file.items():
            for fact, case in zip(facts, self.builder.build(rel, facts), strict=True):
                keep = {s.name for s in fact.scorers}
                scorers = case.scorers
                kept = tuple(s for s in scorers if s.name in keep)
                cases.append(case if len(kept) == len(scorers) else replace(case, scorers=kept))
        return Corpus(self.root, tuple(cases), self.file_hashes, self.warnings)


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
_HASH_EXCLUDES = frozenset({"review", "expect"})


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
    only: Iterable[str] | None = None,
    index_dir: str | Path | None = None,
) -> Corpus:
    """Load and validate every case file under ``root/cases`` (and ``root/sealed`` if asked).

    With ``only``, the cases of those ids alone are built (their scorers too), and the others'
    facts are read through the case index (:func:`scan_corpus`, entries under ``index_dir``):
    the checks, ``file_hashes`` and ``warnings`` are still the whole corpus's, and a file
    without a usable entry is loaded whole once.

    Each distinct built-in ``expect`` entry is built once per load and shared. With
    ``defer_scorers`` a case's scorers are built when first read (:meth:`Corpus.select` reads
    those of the cases it keeps): a run of two selected cases builds two cases' scorers, and a
    bad scorer argument in an unselected case is left to ``evalkit cases lint``.

    Raises:
        CorpusError: the first problem found, as ``file:line: case id: what is wrong``; with
            ``max_errors`` > 1, :class:`CorpusErrors` listing up to that many when there are
            several (each case is checked on its own).
    """
    if only is not None:
        wanted = set(only)
        for attempt in range(2):  # an entry found stale while building is made again: rescan
            facts = scan_corpus(
                root, sealed=sealed, case_dirs=case_dirs, user_template=user_template,
                index_dir=index_dir,
            )  # fmt: skip
            try:
                return facts.load(wanted)
            except IndexMismatch as exc:
                if attempt:
                    raise CorpusError(f"{exc}, twice: the case files changed during the load; "
                                      "load again") from None  # fmt: skip
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


# --- reading through the case index ----------------------------------------------------------


@paused_gc()
def scan_corpus(
    root: str | Path,
    *,
    sealed: bool = False,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    index_dir: str | Path | None = None,
) -> CorpusFacts:
    """Every case's facts: a file's from its entry in the case index when the entry is of the
    file's exact bytes (:mod:`evalkit.corpus.case_index`), else from the file loaded whole
    (its entry written then, its cases kept for :meth:`CorpusFacts.load`). The checks of
    :func:`load_corpus` are made on the facts, with its messages: duplicate ids, the user
    template's vars, files named by a case that are missing or outside the root.

    ``index_dir``: where the entries are (default: ``$EVALKIT_CASE_INDEX``, else
    ``<root>/.evalkit/case-index``).

    Raises:
        CorpusError: the first problem, as :func:`load_corpus` (``max_errors=1``) reports it.
    """
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise CorpusError("corpus root is not a directory", path=root)
    directory = index_directory(root_path, index_dir)
    builder = _FactsBuilder(root_path, CaseIndex(directory, _reader_fingerprint()))
    needed = template_vars(user_template) - {"documents"} if user_template is not None else set()
    facts: list[CaseFacts] = []
    seen: dict[str, str] = {}
    warnings: list[str] = []
    for folder in [*case_dirs, "sealed"] if sealed else list(case_dirs):
        for path in find_yaml_files(root_path / folder, root_path, CASE_GLOBS):
            rel = _relative(path, root_path)
            entry = builder.scan(path, rel, sealed=folder == "sealed")
            if not entry.cases:
                warnings.append(
                    f"{rel}: no cases in this file; add cases (a YAML list, each starting with "
                    "'- id:') or delete it"
                )
            for case in entry.cases:  # load_corpus's checks, in its order, with its messages
                where, _, line = case.source.rpartition(":")
                if case.id in seen:
                    raise CorpusError(
                        f"duplicate id (first defined at {seen[case.id]}); rename one",
                        path=where, line=int(line), case_id=case.id,
                    )  # fmt: skip
                seen[case.id] = case.source
                missing = needed - set(case.var_names) if case.var_names is not None else None
                if missing:
                    raise CorpusError(
                        f"input.vars lacks {sorted(missing)} used by the suite's user_template",
                        path=where, line=int(line), case_id=case.id,
                    )  # fmt: skip
                facts.append(case)
    hashes = dict(sorted(builder.binder.file_hashes.items()))
    return CorpusFacts(root_path, tuple(facts), hashes, tuple(warnings), builder)


def _reader_fingerprint() -> str:
    """What an index entry must have been written under (see :func:`reader_fingerprint`): this
    loader's modules and its limits as set now (module settings a user may change)."""
    modules = (__name__, "evalkit.corpus.case_spec", "evalkit.corpus.case_scorers",
               "evalkit.corpus.yaml_input", "evalkit.corpus.messages", "evalkit.records",
               "evalkit.corpus.case_index")  # fmt: skip
    yaml_limits = sys.modules["evalkit.corpus.yaml_input"]
    limits = (MAX_CASE_FILE_BYTES, MAX_CASES_PER_FILE, yaml_limits.MAX_YAML_NODES,
              yaml_limits.MAX_YAML_DEPTH)  # fmt: skip
    return reader_fingerprint((Path(str(sys.modules[m].__file__)) for m in modules), limits)


class _SliceRefused(Exception):
    """Cases parsed one by one did not read as the entry says: load the file whole."""


#: A column-0 ``-`` opening an item of the root list (after a line break), as list_chunks cuts.
_ITEM_START = re.compile(r"\n-(?=[ \r\n]|\Z)")
_FIRST_ITEM = re.compile(r"-(?=[ \r\n]|\Z)")


class _FactsBuilder:
    """One scan's reading of the case files: entries taken, files loaded whole (their cases kept
    for :meth:`build`), and the building of the cases a caller asks for, one by one, from the
    text of their items (each checked against its facts)."""

    def __init__(self, root: Path, index: CaseIndex) -> None:
        self.root = root
        self.index = index
        self.counts = index.counts
        self.binder = ScorerBinder(root)
        self.shared = _LoadShared()
        self.files: dict[str, FileFacts] = {}
        self.whole: dict[str, dict[str, Case]] = {}  # the files this scan loaded whole
        self._scorers: dict[tuple[str, tuple[str, ...]], ScorerFacts] = {}

    def scan(self, path: Path, rel: str, *, sealed: bool) -> FileFacts:
        """The file's facts: from its entry when that is of these bytes, else loaded whole."""
        try:
            small = path.stat().st_size <= MAX_CASE_FILE_BYTES
            data = path.read_bytes() if small else None  # a large file: refused by the load
        except OSError:
            data = None  # the load says why, as load_corpus does
        entry = None
        if data is not None:
            entry = self.index.read(rel, hashlib.sha256(data).hexdigest(), sealed)
        if entry is not None and self._files_hashed(entry):
            self.counts.entries_used += 1
            self.files[rel] = entry
            return entry
        return self._load_whole(path, rel, sealed, data)

    def _files_hashed(self, entry: FileFacts) -> bool:
        """The files the entry's scorers name, resolved and hashed now (never taken from the
        entry); False when one cannot be (missing, outside the root) or a scorer is unknown:
        the file is then loaded whole, which reports it at its case's line."""
        for case in entry.cases:
            for scorer in case.scorers:
                if scorer.name not in SCORERS:
                    return False
                for name in scorer.files:
                    if name not in self.binder.file_hashes:
                        try:
                            data = self.binder.resolve(name).read_bytes()
                        except (CorpusError, OSError):
                            return False
                        self.binder.file_hashes[name] = hashlib.sha256(data).hexdigest()
                    scorer.file_hashes[name] = self.binder.file_hashes[name]
        return True

    def _load_whole(
        self, path: Path, rel: str, sealed: bool, data: bytes | None, sliceable: bool = True
    ) -> FileFacts:
        """The file loaded as load_corpus loads it (scorers deferred), its cases kept and its
        entry written (when its bytes did not change under the load)."""
        cases = _load_file(
            path, self.root, sealed=sealed, binder=self.binder, shared=self.shared, defer=True
        )
        self.counts.files_parsed += 1
        self.counts.cases_built += len(cases)
        after = path.read_bytes()
        facts = self._facts_of(rel, sealed, after, cases, sliceable)
        if data is None or data == after:
            self.index.write(facts)
        self.files[rel] = facts
        self.whole[rel] = {case.id: case for case in cases}
        return facts

    def _facts_of(
        self, rel: str, sealed: bool, data: bytes, cases: list[Case], sliceable: bool
    ) -> FileFacts:
        text = data.decode("utf-8")
        spans = _item_spans(text, cases) if sliceable else None
        facts = tuple(
            CaseFacts(
                id=case.id,
                hash=case.hash,
                tags=case.tags,
                criticality=case.criticality,
                review=case.review,
                source=case.source,
                sealed=sealed,
                var_names=tuple(case.vars) if case.vars is not None else None,
                scorers=self._scorer_facts(case),
                span=spans[i] if spans is not None else None,
            )
            for i, case in enumerate(cases)
        )
        return FileFacts(rel, hashlib.sha256(data).hexdigest(), sealed, spans is not None, facts)

    def _scorer_facts(self, case: Case) -> tuple[ScorerFacts, ...]:
        held = Case.scorers.stored(case)  # type: ignore[attr-defined]  # the descriptor
        if isinstance(held, PendingScorers):
            entries = [(name, args) for name, args, _ in held.shared.entries]
        else:
            entries = [(s.name, s.args) for s in held]
        facts = []
        for name, args in entries:
            files = tuple(str(args[a]) for a in SCORERS[name].files if args.get(a) is not None)
            shared = self._scorers.get((name, files))
            if shared is None:
                hashes = {f: self.binder.file_hashes[f] for f in files}
                shared = self._scorers[(name, files)] = ScorerFacts(name, files, hashes)
            facts.append(shared)
        return tuple(facts)

    def build(self, rel: str, wanted: Sequence[CaseFacts]) -> list[Case]:
        """The cases of ``wanted`` (facts of the file ``rel``, in file order), built.

        Raises:
            IndexMismatch: the file did not read as its entry says (entry made again).
        """
        if rel in self.whole:
            return [self.whole[rel][fact.id] for fact in wanted]
        entry = self.files[rel]
        path = self.root / rel
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == entry.sha256 and entry.sliceable:
            try:
                return self._slices(data.decode("utf-8"), entry, wanted)
            except _SliceRefused:
                return self._rebuilt(path, entry, wanted, sliceable=False)
        return self._rebuilt(path, entry, wanted)

    def _rebuilt(
        self, path: Path, entry: FileFacts, wanted: Sequence[CaseFacts], sliceable: bool = True
    ) -> list[Case]:
        """The file loaded whole and its entry made again; the cases asked for, when the file
        says what the entry said (else :class:`IndexMismatch`: the scan read wrong facts)."""
        fresh = self._load_whole(path, entry.rel, entry.sealed, None, sliceable)
        if _fact_keys(fresh.cases) != _fact_keys(entry.cases):
            raise IndexMismatch(f"{entry.rel}: its case index entry was stale; made again")
        return [self.whole[entry.rel][fact.id] for fact in wanted]

    def _slices(self, text: str, entry: FileFacts, wanted: Sequence[CaseFacts]) -> list[Case]:
        """The wanted cases parsed from their items' text alone, a few hundred at a time: each
        run of items led by newlines in place of the items left out, so every mark (line,
        column) is the file's. Each built case is checked against its facts.

        Raises:
            _SliceRefused: a run that does not read as the facts say.
        """
        place = _Place(entry.rel, self.binder, self.shared, entry.sealed, True, None)
        built: list[Case] = []
        for first in range(0, len(wanted), CASE_CHUNK_ITEMS):
            group = wanted[first : first + CASE_CHUNK_ITEMS]
            pieces, line = [], 1
            for fact in group:
                start, end, item_line = fact.span or (0, 0, line)
                pieces += ["\n" * (item_line - line), text[start:end]]
                line = item_line + text.count("\n", start, end)
            chunk = "".join(pieces)
            try:
                data, node = parse_yaml(chunk)
            except YAMLInputError:
                raise _SliceRefused from None
            if not isinstance(data, list) or len(data) != len(group):
                raise _SliceRefused
            chunk_place = replace(place, source=chunk)
            for raw, item_node, fact in zip(data, node.value, group, strict=True):
                try:
                    line = item_node.start_mark.line + 1
                    case = _build_case(raw, item_node, line, 0, chunk_place)
                except CorpusError:
                    raise _SliceRefused from None
                if _case_key(case) != _case_key(fact):
                    raise _SliceRefused
                built.append(case)
            self.counts.cases_built += len(group)
        return built


def _case_key(case: Case | CaseFacts) -> tuple[Any, ...]:
    return case.id, case.hash, case.source, case.review, case.tags, case.criticality


def _fact_keys(facts: Sequence[CaseFacts]) -> list[tuple[Any, ...]]:
    """What a scan read of each case (not where its item is)."""
    return [
        (*_case_key(f), f.var_names, tuple((s.name, s.files) for s in f.scorers)) for f in facts
    ]


def _item_spans(text: str, cases: Sequence[Case]) -> list[tuple[int, int, int]] | None:
    """Each case's item as (start, end, first line) in ``text``, or None when the items cannot
    be parsed one by one as the whole file reads (what :func:`list_chunks` refuses to cut: an
    anchor or directive, a document marker, a tab, other line breaks than ``\\n`` and
    ``\\r\\n``) or the cuts are not one per case, each holding its case's line."""
    if (
        not self_contained(text)
        or "\t" in text
        or text.startswith(("---", "..."))
        or "\n---" in text
        or "\n..." in text
        or any(mark in text for mark in ("\x85", "\u2028", "\u2029"))
        or text.count("\r") != text.count("\r\n")
    ):
        return None
    starts = [0] if _FIRST_ITEM.match(text) else []
    starts += [match.start() + 1 for match in _ITEM_START.finditer(text)]
    if len(starts) != len(cases):
        return None
    spans, line, previous = [], 1, 0
    for case, start, end in zip(cases, starts, [*starts[1:], len(text)], strict=True):
        line += text.count("\n", previous, start)
        previous = start
        case_line = int(case.source.rpartition(":")[2])
        if not line <= case_line <= line + text.count("\n", start, end):
            return None
        spans.append((start, end, line))
    return spans


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
    for exc in problems:
        if errors is None:
            raise exc
        errors.add(exc)
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


def _quoted(value: Any) -> str:
    """``repr`` of a name for an error message, clipped to stay readable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
        given = _expand_short_forms(given, rel, node, case_id)
    try:
        spec = CaseSpec.model_validate({**raw, "expect": given})
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"][:1] == ("expect",) or first["type"] == "extra_forbidden":
            _check_expect(raw, node, rel, line, case_id)  # its own message, if it is that
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
            hint = _suggest(entry.scorer, SCORERS)
            raise CorpusError(
                f"unknown scorer {_quoted(entry.scorer)}{hint}",
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


def _check_expect(raw: dict[str, Any], node: Any, rel: str, line: int, case_id: str) -> None:
    """A missing, misspelled or empty ``expect`` gets its own message (a case without one
    checks nothing)."""
    expect = raw.get("expect")
    if "expect" not in raw:
        unknown = [str(k) for k in raw if k not in CaseSpec.model_fields]
        typo = difflib.get_close_matches("expect", unknown, n=1, cutoff=0.6)
        if typo:
            raise CorpusError(
                f"{typo[0]!r} is not a field: did you mean 'expect'? Rename it; expect lists "
                "the properties the reply must have",
                path=rel,
                line=node_line(node, [typo[0]]) or line,
                case_id=case_id,
            )
        raise CorpusError(
            f"no expect: a case must say what the reply must have, {_EXPECT_EXAMPLE}",
            path=rel,
            line=line,
            case_id=case_id,
        )
    if expect is None or expect == []:
        raise CorpusError(
            f"expect is empty: list at least one scorer, {_EXPECT_EXAMPLE}",
            path=rel,
            line=node_line(node, ["expect"]) or line,
            case_id=case_id,
        )


def _expand_short_forms(expect: Any, rel: str, node: Any, case_id: str) -> Any:
    """``- contains: refund`` → ``{scorer: contains, args: {text: refund}}``."""
    if not isinstance(expect, list):
        return expect
    expanded = []
    for position, entry in enumerate(expect):
        if isinstance(entry, str):
            entry = {entry: {}}
        if isinstance(entry, dict) and "scorer" not in entry and len(entry) == 1:
            name, value = next(iter(entry.items()))
            definition = SCORERS.get(name)
            if definition is None:
                line = _seq_item_line(node, "expect", position)
                hint = _suggest(str(name), SCORERS)
                raise CorpusError(
                    f"unknown scorer {_quoted(name)}{hint}", path=rel, line=line, case_id=case_id
                )
            if isinstance(value, dict) and (
                definition.primary is None or _accepts_all(definition.factory, value)
            ):
                entry = {"scorer": name, "args": value}
            elif value is None:
                entry = {"scorer": name}
            elif definition.primary is None:
                line = _seq_item_line(node, "expect", position)
                raise CorpusError(
                    f"scorer {name!r} has no short form; write {{scorer: {name}, args: {{...}}}}",
                    path=rel,
                    line=line,
                    case_id=case_id,
                )
            else:
                entry = {"scorer": name, "args": {definition.primary: value}}
        expanded.append(entry)
    return expanded


def _accepts_all(factory: Any, keys: Iterable[str]) -> bool:
    """Whether every key is an argument of the factory (any key, if it takes ``**kwargs``)."""
    params = factory_signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return set(keys) <= set(params)


def _seq_item_line(node: Any, key: str, position: int) -> int | None:
    return node_line(node, [key, position])


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
