"""Case facts: every case of a suite as the case index says it, for a run that builds only
some of its cases (one ``--shard K/N``). :func:`scan_corpus` reads each case file's facts from
its entry in the case index (:mod:`evalkit.corpus.case_index`) when the entry is of the file's
exact bytes, else loads the file whole as :func:`~evalkit.corpus.cases.load_corpus` does and
writes its entry; :meth:`CorpusFacts.load` then builds the cases asked for from the text of
their items alone.

Examples:
    >>> from evalkit.corpus.cases import load_corpus
    >>> facts = scan_corpus("corpus")                        # doctest: +SKIP
    >>> facts.hash == load_corpus("corpus").hash             # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Generator, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalkit.corpus import cases as _cases
from evalkit.corpus.case_index import (
    CaseFacts,
    CaseIndex,
    FileFacts,
    IndexCounts,
    IndexMismatch,
    NamesOnly,
    ScorerFacts,
    claim_each,
    loader_modules,
    reader_fingerprint,
)
from evalkit.corpus.case_scorers import PendingScorers, ScorerBinder
from evalkit.corpus.cases import (
    CASE_GLOBS,
    Case,
    Corpus,
    _build_case,
    _chosen,
    _corpus_digest,
    _load_file,
    _LoadShared,
    _Place,
    _relative,
)
from evalkit.corpus.fact_rows import FactRows
from evalkit.corpus.index_trust import trusted_index_directory
from evalkit.corpus.messages import template_vars
from evalkit.corpus.yaml_chunks import item_spans
from evalkit.corpus.yaml_files import find_yaml_files
from evalkit.corpus.yaml_input import YAMLInputError, parse_yaml, paused_gc
from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS


@dataclass(frozen=True)
class CorpusFacts:
    """Every case of a suite as the case index says it (:func:`scan_corpus`), for a run that
    builds only some of them: ``hash``, ``file_hashes`` and each case's id, hash, tags, review
    and scorer names are a full load's, so :meth:`select`, a selection's ``apply``, the draft
    check and the run manifest read it as they read a :class:`Corpus`; :meth:`load` builds
    the cases asked for."""

    root: Path
    cases: Sequence[CaseFacts]  # a tuple, or columns (FactRows: from the corpus summary)
    file_hashes: dict[str, str]
    warnings: tuple[str, ...] = ()
    builder: _FactsBuilder | None = field(default=None, repr=False, compare=False)

    @property
    def hash(self) -> str:
        if isinstance(self.cases, FactRows):
            return self.cases.digest()
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
        if isinstance(self.cases, FactRows):
            return replace(self, cases=self.cases.select(tags, exclude_tags, ids), warnings=())
        chosen = _chosen(self.cases, tags, exclude_tags, ids)
        return replace(self, cases=chosen, warnings=())

    @paused_gc()  # as load_corpus: building frees nothing, collections would walk it again
    def load(self, ids: Iterable[str] | None = None) -> Corpus:
        """The cases of these facts (of ``ids`` only, when given) built from their files, each
        with the scorers its facts keep (a selection's skips) built now, as
        :meth:`Corpus.select` builds them: a bad argument stops a run before it starts.

        Raises:
            IndexMismatch: a built case disagreed with its file's entry; the entry is made
                again: scan again (:func:`load_chosen` does, once).
            CorpusError: a case's scorer arguments, as a full load reports them.
        """
        if self.builder is None:
            raise ValueError("these facts were not read by scan_corpus: nothing to build from")
        wanted = set(ids) if ids is not None else None
        chosen = self.cases
        if isinstance(chosen, FactRows) and wanted is not None:
            chosen = chosen.of_ids(wanted)  # only these made into facts
        by_file: dict[str, list[CaseFacts]] = {}
        for fact in chosen:
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


# --- reading through the case index ----------------------------------------------------------


@paused_gc()
def scan_corpus(
    root: str | Path,
    *,
    sealed: bool = False,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    index_dir: str | Path | None = None,
    workers: int | None = 1,
    index_only: bool = False,
    keep_facts: bool = True,
) -> CorpusFacts:
    """Every case's facts: a file's from its entry in the case index when the entry is of the
    file's exact bytes (:mod:`evalkit.corpus.case_index`), else from the file loaded whole
    (its entry written then, its cases kept for :meth:`CorpusFacts.load`). The checks of
    :func:`load_corpus` are made on the facts, with its messages: duplicate ids, the user
    template's vars, files named by a case that are missing or outside the root.

    ``index_dir``: where the entries are (default: ``$EVALKIT_CASE_INDEX``, else
    ``<root>/.evalkit/case-index``). ``workers``: how many processes load the files that have
    no usable entry (1, the default: this one, which then keeps the cases it built, so a cold
    shard has its share built already; None: one per core this process may use, once those
    files are several and hold :data:`PARALLEL_MIN_BYTES`, as ``evalkit cases index`` does).
    Workers are forked, and only from a process with one thread; the entry a worker writes is
    the one this process would write, byte for byte, and is read back from there (a file a
    worker loaded has its cases built again from their items' text by :meth:`CorpusFacts.load`).

    ``index_only``: a file without a usable entry is loaded only to make its entry (its cases
    counted as ``cases_indexed``, not kept; a cold shard then builds just its share), under its
    claim (:func:`~evalkit.corpus.case_index.claim_each`; ``workers`` not used): scans of one
    index directory at once load each file once between them.

    ``keep_facts`` False: each file's facts checked, counted (``counts.cases_read``) and let go
    (``cases`` empty, nothing to build): a refresh of the index holds one file's at a time.

    Raises:
        CorpusError: the first problem, as :func:`load_corpus` (``max_errors=1``) reports it.
    """
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise CorpusError("corpus root is not a directory", path=root)
    directory = trusted_index_directory(root_path, index_dir)
    index = CaseIndex(directory, _reader_fingerprint())
    builder = _FactsBuilder(root_path, index, index_only, keep_facts)
    needed = template_vars(user_template) - {"documents"} if user_template is not None else set()
    facts: list[CaseFacts] = []
    seen: dict[str, str] = {}
    warnings: list[str] = []
    for folder in [*case_dirs, "sealed"] if sealed else list(case_dirs):
        paths = find_yaml_files(root_path / folder, root_path, CASE_GLOBS)
        files = [(path, _relative(path, root_path), folder == "sealed") for path in paths]
        with closing(builder.scan_files(files, workers)) as scanned:  # a raise stops the pool
            for rel, entry in scanned:
                builder.counts.cases_read += len(entry.cases)
                if not entry.cases:
                    warnings.append(
                        f"{rel}: no cases in this file; add cases (a YAML list, each starting "
                        "with '- id:') or delete it"
                    )
                for case in entry.cases:  # load_corpus's checks, in its order, its messages
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
                            f"input.vars lacks {sorted(missing)} used by the suite's "
                            "user_template",
                            path=where, line=int(line), case_id=case.id,
                        )  # fmt: skip
                    if keep_facts:
                        facts.append(case)
    hashes = dict(sorted(builder.binder.file_hashes.items()))
    return CorpusFacts(root_path, tuple(facts), hashes, tuple(warnings), builder)


def load_chosen(
    root: str | Path,
    ids: Iterable[str],
    *,
    sealed: bool = False,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    index_dir: str | Path | None = None,
) -> Corpus:
    """The cases of ``ids`` alone built (their scorers too), the others' facts read through
    the case index (:func:`scan_corpus`, entries under ``index_dir``): the checks,
    ``file_hashes`` and ``warnings`` are still the whole corpus's, and a file without a
    usable entry is loaded whole once.

    Raises:
        CorpusError: as :func:`scan_corpus`; or an entry found stale twice in a row (the case
            files changed during the load).
    """
    wanted = set(ids)
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
    raise AssertionError("unreachable")  # pragma: no cover


def _reader_fingerprint() -> str:
    """What an index entry must have been written under (see :func:`reader_fingerprint`): this
    loader's modules (found from its imports: :func:`loader_modules`) and its limits as set
    now (module settings a user may change)."""
    yaml_limits = sys.modules["evalkit.corpus.yaml_input"]
    limits = (_cases.MAX_CASE_FILE_BYTES, _cases.MAX_CASES_PER_FILE, yaml_limits.MAX_YAML_NODES,
              yaml_limits.MAX_YAML_DEPTH)  # fmt: skip
    return reader_fingerprint(loader_modules(__name__), limits)


class _SliceRefused(Exception):
    """Cases parsed one by one did not read as the entry says: load the file whole."""


class _FactsBuilder:
    """One scan's reading of the case files: entries taken, files loaded whole (their cases kept
    for :meth:`build`), and the building of the cases a caller asks for, one by one, from the
    text of their items (each checked against its facts)."""

    def __init__(self, root: Path, index: CaseIndex, index_only: bool = False, keep: bool = True):
        self.root = root
        self.index = index
        self.index_only = index_only
        self.counts = index.counts
        self.binder = ScorerBinder(root)
        self.shared = _LoadShared()
        self.files: dict[str, FileFacts] = {} if keep else NamesOnly()
        self.keep = keep  # False: no file's facts or cases held past its scan
        self.whole: dict[str, dict[str, Case]] = {}  # the files this scan loaded whole
        self._scorers: dict[tuple[str, tuple[str, ...]], ScorerFacts] = {}

    def scan_files(
        self, files: Sequence[tuple[Path, str, bool]], workers: int | None
    ) -> Generator[tuple[str, FileFacts]]:
        """Each file's facts, in order: from its entry when that is of these bytes, else loaded
        whole, here or (several such files, see :func:`scan_corpus`) in worker processes
        started at once and taken in file order, so the first problem raised is the one a
        serial scan raises. Close the iterator to stop the workers."""
        read = [self._entry(path, rel, sealed) for path, rel, sealed in files]
        cold = [i for i, (entry, _) in enumerate(read) if entry is None]
        if self.index_only and cold:  # each made under its claim, here or by another scan
            claimed = claim_each(self.index, [files[i][1] for i in cold],
                                 lambda n: self._claimed(*files[cold[n]]))  # fmt: skip
            made = dict(zip(cold, claimed.values(), strict=True))
            read, cold = [(made.get(i, e), data) for i, (e, data) in enumerate(read)], []
        processes = _processes(workers, [len(read[i][1] or b"") for i in cold])
        pool, pending = None, {}
        if processes > 1:
            import multiprocessing  # here: a run that scans in one process never imports it
            from concurrent.futures import ProcessPoolExecutor

            pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"))
            index = (self.index.directory, self.index.fingerprint)
            pending = {i: pool.submit(_load_apart, self.root, index, *files[i], read[i][1])
                       for i in cold}  # fmt: skip
        try:
            for i, (path, rel, sealed) in enumerate(files):
                (entry, data), read[i] = read[i], (None, None)  # let go as it is taken
                if entry is not None:
                    self.counts.entries_used += rel not in self.files  # not one made here
                    self.files[rel] = entry
                elif i in pending:
                    entry = self._taken(pending.pop(i).result(), path, rel, sealed, data)
                else:
                    entry = self._load_whole(path, rel, sealed, data, keep=self.keep)
                yield rel, entry
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _entry(self, path: Path, rel: str, sealed: bool) -> tuple[FileFacts | None, bytes | None]:
        """The file's entry when it is of the file's bytes (and its named files hash now), and
        the bytes (None: too large or unreadable; the load says why, as load_corpus does)."""
        try:
            small = path.stat().st_size <= _cases.MAX_CASE_FILE_BYTES
            data = path.read_bytes() if small else None  # a large file: refused by the load
        except OSError:
            data = None
        entry = None
        if data is not None:
            entry = self.index.read(rel, hashlib.sha256(data).hexdigest(), sealed)
        if entry is not None and self._files_hashed(entry):
            return entry, data
        return None, data

    def _claimed(self, path: Path, rel: str, sealed: bool) -> FileFacts:
        """Under the file's claim: the entry another process made meanwhile, else made here."""
        refused = self.counts.entries_refused  # a stale entry counts once, at the first read
        entry, data = self._entry(path, rel, sealed)
        self.counts.entries_refused = refused
        return entry or self._load_whole(path, rel, sealed, data, keep=False)

    def _taken(
        self, result: _Apart, path: Path, rel: str, sealed: bool, data: bytes | None
    ) -> FileFacts:
        """A worker's load of one file, read back from the entry it wrote (its cases are not
        kept: the ones asked for are built from the entry's spans); loaded here when there is
        no such entry (not written: the file changed, or the directory cannot be written)."""
        if result.error is not None:
            raise CorpusError(**result.error)
        self.counts.files_parsed += 1
        self.counts.files_in_workers += 1
        self.counts.cases_built += result.cases
        self.counts.entries_written += result.written
        facts = None
        if result.written and data is not None:
            facts = self.index.read(rel, hashlib.sha256(data).hexdigest(), sealed)
        if facts is None or not self._files_hashed(facts):
            return self._load_whole(path, rel, sealed, data)  # it says why, if it cannot
        self.files[rel] = facts
        return facts

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
        self, path: Path, rel: str, sealed: bool, data: bytes | None, sliceable: bool = True,
        keep: bool = True,
    ) -> FileFacts:  # fmt: skip
        """The file loaded as load_corpus loads it (scorers deferred), its cases kept (or, not
        ``keep``, counted as indexed), its entry written (if its bytes held during the load)."""
        cases = _load_file(
            path, self.root, sealed=sealed, binder=self.binder, shared=self.shared, defer=True
        )
        self.counts.files_parsed += 1
        after = path.read_bytes()
        facts = self._facts_of(rel, sealed, after, cases, sliceable)
        if data is None or data == after:
            self.index.write(facts)
        self.files[rel] = facts
        if keep:
            self.counts.cases_built += len(cases)
            self.whole[rel] = {case.id: case for case in cases}
        else:
            self.counts.cases_indexed += len(cases)
        return facts

    def _facts_of(
        self, rel: str, sealed: bool, data: bytes, cases: list[Case], sliceable: bool
    ) -> FileFacts:
        text = data.decode("utf-8")
        lines = [int(case.source.rpartition(":")[2]) for case in cases] if sliceable else []
        spans = item_spans(text, lines) if sliceable else None
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
        held = Case.scorers.stored(case)  # type: ignore[attr-defined, misc]  # the descriptor
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
                text = data.decode("utf-8")
                return self._slices(lambda f: text[f.span[0] : f.span[1]], entry, wanted)
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

    def _slices(self, item: Any, entry: FileFacts, wanted: Sequence[CaseFacts]) -> list[Case]:
        """The wanted cases parsed from their items' text (``item(fact)``), a few hundred at a
        time, led by newlines for the items left out (every mark is the file's); each checked.

        Raises:
            _SliceRefused: a run that does not read as the facts say.
        """
        place = _Place(entry.rel, self.binder, self.shared, entry.sealed, True, None)
        built: list[Case] = []
        step = _cases.CASE_CHUNK_ITEMS  # a module setting, read now
        for first in range(0, len(wanted), step):
            group = wanted[first : first + step]
            pieces, line = [], 1
            for fact in group:
                text, item_line = item(fact), fact.span[2] if fact.span else line
                pieces += ["\n" * (item_line - line), text]
                line = item_line + text.count("\n")
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


#: Worker processes load the files without an entry only when those hold this many bytes
#: (about 10,000 cases; starting the processes and sending the facts back cost more on fewer)
#: and are two files or more; a module setting.
PARALLEL_MIN_BYTES = 2 << 20


def _processes(workers: int | None, sizes: Sequence[int]) -> int:
    """How many processes load the files of these sizes: 1 (here) unless there are several,
    enough bytes (when ``workers`` is not given), more than one core and a way to fork this
    process safely (``fork`` exists, this process has one thread: a fork copies only the
    calling thread, and a lock another thread held would never be released in the copy)."""
    if len(sizes) < 2:
        return 1
    if workers is None:
        if sum(sizes) < PARALLEL_MIN_BYTES:
            return 1
        workers = _usable_cores()
    import multiprocessing

    if (
        workers < 2
        or "fork" not in multiprocessing.get_all_start_methods()
        or threading.active_count() > 1
    ):
        return 1
    return min(workers, len(sizes))


def _usable_cores() -> int:
    """The cores this process may run on (``os.process_cpu_count`` from Python 3.13)."""
    counted = getattr(os, "process_cpu_count", None)
    if counted is not None:
        return counted() or 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class _Apart:
    """One file loaded by a worker: how many cases it has and whether its entry was written
    (the facts come back through the entry: reading one costs far less than pickling the
    facts), or the first problem found, as the keyword arguments of a :class:`CorpusError`."""

    cases: int = 0
    written: bool = False
    error: dict[str, Any] | None = None


def _load_apart(
    root: Path, index: tuple[Path, str], path: Path, rel: str, sealed: bool, data: bytes | None
) -> _Apart:
    """In a worker: the file loaded whole and its entry written, as :class:`_FactsBuilder`
    does (forked: the module settings are this process's parent's)."""
    builder = _FactsBuilder(root, CaseIndex(*index))
    try:
        facts = builder._load_whole(path, rel, sealed, data)
    except CorpusError as exc:
        where = {"path": exc.path, "line": exc.line, "case_id": exc.case_id, "column": exc.column}
        return _Apart(error={"message": exc.message, **where})
    return _Apart(len(facts.cases), builder.counts.entries_written > 0)


def _case_key(case: Case | CaseFacts) -> tuple[Any, ...]:
    return case.id, case.hash, case.source, case.review, case.tags, case.criticality


def _fact_keys(facts: Sequence[CaseFacts]) -> list[tuple[Any, ...]]:
    """What a scan read of each case (not where its item is)."""
    return [
        (*_case_key(f), f.var_names, tuple((s.name, s.files) for s in f.scorers)) for f in facts
    ]
