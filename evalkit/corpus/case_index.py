"""The case index: what each case file says, kept beside the corpus so a run that needs a few
cases (one ``--shard K/N``) builds only those and reads the rest's facts from here.

A case file's entry holds, for each case, what the corpus hash, a selection (``--tag``,
``--tier``, sealed), the draft and policy checks and the run manifest read: its id, case hash,
tags, criticality, review state, line, the names of its ``input.vars``, its scorers' names and
the files they name; and where its item is in the file's text, so the case alone can be parsed
again (:func:`evalkit.corpus.case_facts.scan_corpus`). It is a cache of what the files say, never a
source of truth:

- an entry is used only for the exact bytes it was made from (their sha256 is checked at every
  load, the file read whole), and only under the same reader (:func:`reader_fingerprint`: the
  evalkit version, the loader's own source, the libraries and the scorer registry it reads
  with), so an edited case file, a new evalkit or another scorer module reads the file again;
- the files a case names (schemas, rubrics) are hashed again at every load, never taken from
  here, so an edited schema is what the run's manifest records;
- an entry carries the sha256 of its own text: a truncated, corrupted or foreign entry is
  ignored and made again, never read;
- every case built from an entry is checked against it (id, hash, line, review): an entry that
  disagrees with its file is made again from the file (:class:`IndexMismatch`).

Entries live in ``<corpus root>/.evalkit/case-index/`` (or ``$EVALKIT_CASE_INDEX``: a CI cache
keeps a matrix's index warm), one JSON file per case file (named by the digest of its path,
replaced when the file changes, so the directory never grows past the corpus), written
atomically (a temporary file, then a rename); the directory ignores itself for git (a
``.gitignore`` of ``*``, as ``.pytest_cache`` does). An entry's list of cases is not derived
again from its file, so a directory git tracks a file in (entries committed by a pull request)
is never read: :mod:`evalkit.corpus.index_trust` gives the scan a private one instead.

Processes that find no usable entry for a file at the same time (the cold shards of one CI
matrix started together on one machine or a shared directory) make it once between them: each
takes the file's claim (:meth:`CaseIndex.claim`, an ``flock`` on ``<entry>.lock``) before
making its entry, and one that finds the claim held makes the next file instead, then reads
the entries the others wrote (:func:`claim_each`). A claim only saves work: whoever holds it,
an entry is trusted by the checks above alone, and a claim not free within
:data:`CLAIM_WAIT_S` (or not to be had: no ``fcntl``, a read-only directory) is done without.

Examples:
    >>> facts = ScorerFacts("json_schema", ("schemas/reply.json",), {"schemas/reply.json": "ab"})
    >>> facts.tier, facts.file_hashes
    (0, {'schemas/reply.json': 'ab'})
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from evalkit.scorers import SCORERS
from evalkit.scorers.registry import factory_signature
from evalkit.version import __version__

#: The layout of an entry; part of the reader fingerprint.
INDEX_FORMAT = 1
#: Where entries go, under the corpus root.
INDEX_DIR = Path(".evalkit") / "case-index"
#: Another directory for one corpus's entries (a CI cache, a test's temporary directory).
INDEX_ENV = "EVALKIT_CASE_INDEX"
#: How long a scan waits for a file's claim held by another process before making the entry
#: itself (the work done twice, the entry the same); a module setting.
CLAIM_WAIT_S = 600.0


def index_directory(root: Path, given: str | Path | None = None) -> Path:
    """Where the corpus at ``root`` keeps its entries: ``given``, else ``$EVALKIT_CASE_INDEX``,
    else ``<root>/.evalkit/case-index``.

    Examples:
        >>> index_directory(Path("/suite"), "/tmp/idx")
        PosixPath('/tmp/idx')
    """
    if given is not None:
        return Path(given)
    return Path(os.environ.get(INDEX_ENV) or root / INDEX_DIR)


class IndexMismatch(Exception):
    """A case built from its file disagreed with the index entry the load had read: the entry
    has been made again from the file; read the corpus again (a caller retries once)."""


@dataclass(frozen=True, slots=True)
class ScorerFacts:
    """One ``expect`` entry as a selection and the manifest read it: the scorer's name, the
    files it names (as the case writes them) and their sha256 (hashed at this load)."""

    name: str
    files: tuple[str, ...]
    file_hashes: dict[str, str] = field(compare=False)

    @property
    def tier(self) -> int:
        return SCORERS[self.name].tier


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseFacts:
    """What a case says, short of building it: the fields a :class:`~evalkit.corpus.cases.Case`
    shares with it read the same (``id``, ``hash``, ``tags``, ``criticality``, ``review``,
    ``source``, ``sealed``; ``scorers`` as :class:`ScorerFacts`), so a selection, the draft
    check and the manifest take either."""

    id: str
    hash: str
    tags: tuple[str, ...]
    criticality: str
    review: str
    source: str  # "cases/billing.yaml:12"
    sealed: bool
    var_names: tuple[str, ...] | None  # the keys of input.vars (None: messages)
    scorers: tuple[ScorerFacts, ...]
    span: tuple[int, int, int] | None  # its item's (start, end) in the text and its first line

    @property
    def must_pass(self) -> bool:
        return self.criticality == "must_pass"


@dataclass(frozen=True)
class FileFacts:
    """One case file's entry: its path, the sha256 of its bytes, whether its items can be
    parsed one by one (``sliceable``), and its cases' facts in file order."""

    rel: str
    sha256: str
    sealed: bool
    sliceable: bool
    cases: tuple[CaseFacts, ...]


@dataclass(kw_only=True)
class IndexCounts:
    """What one load did with the index (tests count with it, never with a timer)."""

    entries_used: int = 0  # files whose facts came from their entry
    entries_refused: int = 0  # entries present but not used (corrupt, foreign, stale)
    entries_written: int = 0
    files_parsed: int = 0  # case files parsed whole
    files_in_workers: int = 0  # of those, parsed in worker processes (a parallel cold scan)
    cases_built: int = 0  # cases built from their files (whole or one by one) and kept
    cases_indexed: int = 0  # cases built only to make their file's entry, not kept
    claims_waited: int = 0  # files whose claim another process held when first asked
    cases_read: int = 0  # cases whose facts a scan read and checked (kept or not)
    summary_used: int = 0  # corpus summaries read and used (evalkit.corpus.case_summary)
    summary_refused: int = 0  # corpus summaries present but not used (corrupt, stale, foreign)
    summary_written: int = 0
    facts_made: int = 0  # cases' facts made from a summary's columns


class NamesOnly(dict[str, Any]):
    """A dict that keeps its keys alone (each value stored as None): the case files a scan
    that keeps no facts has read (:func:`~evalkit.corpus.case_facts.scan_corpus`).

    Examples:
        >>> seen = NamesOnly()
        >>> seen["cases/a.yaml"] = object()
        >>> seen
        {'cases/a.yaml': None}
    """

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, None)


#: The evalkit package's directory: a module name resolves to a file under it.
_PACKAGE = Path(__file__).resolve().parents[1]
#: An ``import evalkit...`` or ``from evalkit... import ...`` at any indentation (a function's
#: imports run when it does); a ``from`` import's names may be modules of that package.
_EVALKIT_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(evalkit(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)"
    r"|import[ \t]+(evalkit(?:\.\w+)*))",
    re.MULTILINE,
)
#: Never followed: the scorer registry is fingerprinted by what it registers (names, tiers,
#: signatures), and the root package is the lazy public facade over every stage.
_NOT_FOLLOWED = ("evalkit.scorers",)


@functools.cache
def loader_modules(start: str) -> tuple[Path, ...]:
    """The source files of module ``start`` and of every evalkit module it imports,
    transitively (leaving out the scorer registry and the root package), sorted.

    Read from the source text, not by importing, so the list follows the code: a module split
    in two or a new helper the loader imports is in the fingerprint without a list to edit.

    Examples:
        >>> names = [p.stem for p in loader_modules("evalkit.corpus.case_facts")]
        >>> {"case_facts", "cases", "case_index", "yaml_input", "records"} <= set(names)
        True
        >>> any(p.parent.name == "scorers" for p in loader_modules("evalkit.corpus.case_facts"))
        False
    """
    found: dict[str, Path] = {}
    pending = [start]
    while pending:
        name = pending.pop()
        path = _module_path(name)
        if name in found or path is None or _not_followed(name):
            continue
        found[name] = path
        for match in _EVALKIT_IMPORT.finditer(path.read_text(encoding="utf-8")):
            package, names, plain = match.groups()
            if plain:
                pending.append(plain)
                continue
            for imported in re.sub(r"#[^\n]*", "", names).strip("() \n").split(","):
                word = imported.split()[0] if imported.split() else ""
                submodule = f"{package}.{word}"
                pending.append(submodule if word and _module_path(submodule) else package)
    return tuple(found[name] for name in sorted(found))


def _module_path(name: str) -> Path | None:
    """The source file of evalkit module ``name`` (a package's ``__init__.py``), or None."""
    return _package_modules().get(name)


@functools.cache
def _package_modules() -> dict[str, Path]:
    """``evalkit.a.b`` -> its source file, for every module of the package: one walk of its
    directories, where asking the file system name by name costs a call per imported name."""
    modules = {}
    for folder, folders, files in os.walk(_PACKAGE):
        folders[:] = [name for name in folders if name != "__pycache__"]
        package = ["evalkit", *Path(folder).relative_to(_PACKAGE).parts]
        for file in files:
            if file.endswith(".py"):
                parts = package if file == "__init__.py" else [*package, file[:-3]]
                modules[".".join(parts)] = Path(folder, file)
    return modules


def _not_followed(name: str) -> bool:
    return name == "evalkit" or any(
        name == prefix or name.startswith(prefix + ".") for prefix in _NOT_FOLLOWED
    )


def reader_fingerprint(module_files: Iterable[Path], limits: Sequence[int]) -> str:
    """The sha256 of everything that changes how a case file reads: the index format, evalkit's
    version and the source of the loader's modules, pydantic's and PyYAML's versions (and
    whether libyaml is there), the loader's limits and the scorer registry (names, tiers, file
    arguments, short forms, factory signatures: a short form expands by them)."""
    import yaml

    digest = hashlib.sha256()
    versions = [INDEX_FORMAT, __version__, _version("pydantic"), _version("PyYAML")]
    parts: list[Any] = [*versions, hasattr(yaml, "CSafeLoader"), list(limits)]
    digest.update(json.dumps(parts).encode())
    for path in module_files:
        digest.update(b"\0" + Path(path).read_bytes())
    for name in sorted(SCORERS):
        definition = SCORERS[name]
        factory = definition.factory
        described = [
            name,
            definition.tier,
            list(definition.files),
            definition.primary,
            f"{factory.__module__}.{factory.__qualname__}",
            str(factory_signature(factory)),
        ]
        digest.update(json.dumps(described, default=str).encode())
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


class CaseIndex:
    """The entries of one corpus under ``directory`` read and written for one ``fingerprint``.

    ``read`` returns an entry only when it is intact (its own sha256), of this reader, of this
    path and of these exact bytes; anything else counts as refused and is made again by the
    caller. ``write`` never fails a load: a directory that cannot be written leaves the corpus
    read the slow way next time.
    """

    def __init__(self, directory: Path, fingerprint: str) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self.counts = IndexCounts()

    def entry_path(self, rel: str) -> Path:
        return self.directory / f"{hashlib.sha256(rel.encode()).hexdigest()[:40]}.json"

    def read(self, rel: str, sha256: str, sealed: bool) -> FileFacts | None:
        path = self.entry_path(rel)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        facts = self._decode(data, rel, sha256, sealed)
        if facts is None:
            self.counts.entries_refused += 1
        return facts

    def write(self, facts: FileFacts) -> None:
        body = json.dumps(_encode(facts, self.fingerprint), separators=(",", ":")).encode()
        data = hashlib.sha256(body).hexdigest().encode() + b"\n" + body
        path = self.entry_path(facts.rel)
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            self._prepare()
            temp.write_bytes(data)
            os.replace(temp, path)  # atomic: a reader sees the old entry or the new, whole
        except OSError:
            with contextlib.suppress(OSError):  # a full disk leaves no half-written temporary
                temp.unlink(missing_ok=True)
            return
        self.counts.entries_written += 1

    def prune(self, rels: Iterable[str]) -> int:
        """Remove the entries (and claim files) of files other than ``rels`` (files gone from
        the corpus); how many entries. Only names an entry or a claim has are touched (a
        temporary file is a writer's)."""
        keep = {self.entry_path(rel).stem for rel in rels}
        try:
            found = [p for p in self.directory.iterdir() if _ENTRY_NAME.fullmatch(p.name)]
        except OSError:
            return 0
        removed = 0
        for path in found:
            if path.stem not in keep:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += path.suffix == ".json"
        return removed

    @contextlib.contextmanager
    def claim(self, rel: str, *, wait: bool) -> Iterator[bool]:
        """Hold the claim on ``rel``'s entry while the block runs (True). Without ``wait``,
        False at once when another process holds it; with ``wait``, True once it is free or
        after :data:`CLAIM_WAIT_S` (then held by no one here: the caller makes the entry as
        if there were no claims). True, holding nothing, where no claim can be taken."""
        with self.claim_file(self.entry_path(rel).with_suffix(".lock"), wait=wait) as held:
            yield held

    @contextlib.contextmanager
    def claim_file(self, lock: Path, *, wait: bool) -> Iterator[bool]:
        """:meth:`claim` on any lock file of this directory (the corpus summary's too)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: every process makes its own entries
            yield True
            return
        try:
            self._prepare()
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a directory that cannot be written: no entries will be either
            yield True
            return
        try:
            yield _flock(fd, fcntl, CLAIM_WAIT_S if wait else 0.0)
        finally:
            os.close(fd)  # closing the descriptor drops the flock (a dead process's too)

    def _prepare(self) -> None:
        """The directory, holding a ``.gitignore`` of ``*`` (git then sees nothing in it)."""
        if self.directory.is_dir():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        ignore = self.directory / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# evalkit's case index (a cache): never committed\n*\n")

    def _decode(self, data: bytes, rel: str, sha256: str, sealed: bool) -> FileFacts | None:
        """The entry's facts, or None for anything short of an intact entry of this file."""
        head, _, body = data.partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != head:
            return None
        try:
            entry = json.loads(body)
            if (
                entry.get("format") != INDEX_FORMAT
                or entry.get("fingerprint") != self.fingerprint
                or entry.get("rel") != rel
                or entry.get("sha256") != sha256
                or entry.get("sealed") is not sealed
            ):
                return None
            return _decode_cases(entry, rel, sha256, sealed)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None


def _flock(fd: int, fcntl: Any, wait_s: float) -> bool:
    """Whether an exclusive ``flock`` on ``fd`` was taken within ``wait_s`` (0: at once);
    True also when locks are not supported there (nothing to wait for)."""
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not wait_s:
                return False
            if time.monotonic() >= deadline:
                return True  # held too long: make the entry anyway (it is the same entry)
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        except OSError:  # a file system without locks
            return True


T = TypeVar("T")


def claim_each(index: CaseIndex, rels: Sequence[str], make: Callable[[int], T]) -> dict[int, T]:
    """``make(i)`` for each of ``rels`` (by position), each under its file's claim: first the
    files no other process is making, in order, then the others as their claims come free
    (``make`` then finds their entries written). A problem ``make`` raises stops it there.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     index = CaseIndex(Path(folder), "fingerprint")
        ...     claim_each(index, ["a.yaml", "b.yaml"], lambda i: i * 10)
        {0: 0, 1: 10}
    """
    made: dict[int, T] = {}
    waiting = []
    for i, rel in enumerate(rels):
        with index.claim(rel, wait=False) as held:
            if held:
                made[i] = make(i)
            else:
                waiting.append(i)
    index.counts.claims_waited += len(waiting)
    for i in waiting:
        with index.claim(rels[i], wait=True):
            made[i] = make(i)
    return dict(sorted(made.items()))


def _encode(facts: FileFacts, fingerprint: str) -> dict[str, Any]:
    """An entry as JSON data: columns, with tag lists and scorer lists written once each."""
    tag_sets: dict[tuple[str, ...], int] = {}
    scorer_sets: dict[tuple[tuple[str, tuple[str, ...]], ...], int] = {}
    columns: dict[str, list[Any]] = {
        k: []
        for k in ("id", "hash", "tags", "criticality", "review", "line", "vars", "scorers", "span")
    }
    for case in facts.cases:
        scorers = tuple((s.name, s.files) for s in case.scorers)
        columns["id"].append(case.id)
        columns["hash"].append(case.hash)
        columns["tags"].append(tag_sets.setdefault(case.tags, len(tag_sets)))
        columns["criticality"].append(case.criticality)
        columns["review"].append(case.review)
        columns["line"].append(int(case.source.rpartition(":")[2]))
        columns["vars"].append(None if case.var_names is None else list(case.var_names))
        columns["scorers"].append(scorer_sets.setdefault(scorers, len(scorer_sets)))
        columns["span"].append(None if case.span is None else list(case.span))
    return {
        "format": INDEX_FORMAT,
        "fingerprint": fingerprint,
        "rel": facts.rel,
        "sha256": facts.sha256,
        "sealed": facts.sealed,
        "sliceable": facts.sliceable,
        "tag_sets": [list(tags) for tags in tag_sets],
        "scorer_sets": [[[name, list(files)] for name, files in s] for s in scorer_sets],
        "cases": columns,
    }


def _decode_cases(entry: dict[str, Any], rel: str, sha256: str, sealed: bool) -> FileFacts | None:
    """The facts of a well-formed entry (every value of its type, every column as long), or
    None. Checked column by column (a warm load reads every case's entry: per-case checks
    were most of its cost). ``ScorerFacts.file_hashes`` is left empty here: the load fills it
    from the files."""
    tag_sets = [_strings(tags) for tags in entry["tag_sets"]]
    scorer_sets = [
        tuple(ScorerFacts(_string(name), _strings(files), {}) for name, files in scorers)
        for scorers in entry["scorer_sets"]
    ]
    columns = entry["cases"]
    ids, hashes, tags, criticality, review, lines, names, scorers, spans = (
        columns[key] for key in _COLUMNS
    )
    n = len(ids)
    sliceable = entry["sliceable"] is True
    if not (
        all(isinstance(c, list) and len(c) == n for c in (hashes, tags, criticality, review,
                                                            lines, names, scorers, spans))
        and all(type(v) is str for column in (ids, criticality, review) for v in column)
        and all(type(h) is str and len(h) == 64 for h in hashes)
        and _HEX.fullmatch("".join(hashes))
        and all(type(v) is int and v >= 1 for v in lines)
        and _indices(tags, len(tag_sets))
        and _indices(scorers, len(scorer_sets))
        and all(v is None or _span(v) for v in spans)
        and not (sliceable and None in spans)
    ):  # fmt: skip
        return None
    cases = [
        CaseFacts(
            id=case_id,
            hash=case_hash,
            tags=tag_sets[tag],
            criticality=_WORDS.setdefault(crit, crit),  # one string for each word, not each case
            review=_WORDS.setdefault(state, state),
            source=f"{rel}:{line}",
            sealed=sealed,
            var_names=None if var_names is None else _strings(var_names),
            scorers=scorer_sets[scorer],
            span=None if span is None else (span[0], span[1], span[2]),
        )
        for case_id, case_hash, tag, crit, state, line, var_names, scorer, span in zip(
            ids, hashes, tags, criticality, review, lines, names, scorers, spans, strict=True
        )
    ]
    return FileFacts(rel, sha256, sealed, sliceable, tuple(cases))


#: The criticality and review words read so far, each held once (a million cases' facts would
#: otherwise hold two strings each of a handful of words).
_WORDS: dict[str, str] = {}
_COLUMNS = ("id", "hash", "tags", "criticality", "review", "line", "vars", "scorers", "span")
_HEX = re.compile(r"[0-9a-f]*")
_ENTRY_NAME = re.compile(r"[0-9a-f]{40}\.(json|lock)")


def _indices(values: list[Any], size: int) -> bool:
    return all(type(v) is int and 0 <= v < size for v in values)


def _span(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 3
        and all(type(v) is int and v >= 0 for v in value)
        and value[0] < value[1]
    )


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _strings(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise TypeError("not a list")
    return tuple(_string(v) for v in values)
