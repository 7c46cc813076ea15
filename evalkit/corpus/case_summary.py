"""The corpus summary: every case's facts as columns, one file per corpus version beside the
case index's entries, so a ``--shard K/N`` or the Ray driver reads a million cases' facts in
one read and makes :class:`~evalkit.corpus.case_index.CaseFacts` only for the cases it builds
(:class:`~evalkit.corpus.fact_rows.FactRows`).

:func:`read_run_facts` lists and hashes the case files (of the case folders and ``sealed/``,
whatever the run selects), and takes the summary when it was made from exactly those files'
bytes by this reader: its key is the sha256 of the summary format, the reader fingerprint (the
loader's and this module's source, the libraries, the limits, the scorer registry), the case
folders and each file's path, sha256 and sealed flag. Anything else (a changed, added or
removed file, another evalkit, a corrupt or foreign summary: it carries the sha256 of its own
bytes) is refused, and the summary is made again from the per-file entries
(:func:`~evalkit.corpus.case_facts.scan_corpus`'s reading, files without an entry loaded under
their claims), under the summary's own claim (an ``flock`` on ``<summary>.lock``): shards
started together make it once. It is written (a temporary file, then a rename) only when no
two cases share an id; the checks a run makes on the facts (``input.vars`` against the
suite's user template, the files the scorers name, hashed again at every read) are made at
every read. When a summary cannot be had (a duplicate id, a bad case file, a large file), the
corpus is read as :func:`~evalkit.corpus.case_facts.scan_corpus` reads it, which says why.

One summary per set of case folders is kept (``corpus-<digest of the folders>.facts``),
replaced when the corpus changes: the directory holds at most one per set, beside the entries.

Examples:
    >>> facts = read_run_facts("corpus")                      # doctest: +SKIP
    >>> facts.hash == load_corpus("corpus").hash              # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import polars as pl

from evalkit.corpus import cases as _cases
from evalkit.corpus.case_facts import CorpusFacts, _FactsBuilder, _reader_fingerprint, scan_corpus
from evalkit.corpus.case_index import (
    CaseIndex,
    FileFacts,
    IndexCounts,
    ScorerFacts,
    loader_modules,
)
from evalkit.corpus.cases import CASE_GLOBS, _relative
from evalkit.corpus.fact_rows import COLUMNS, FactRows, FactTables, FileInfo, LazyFiles, schema
from evalkit.corpus.index_trust import trusted_index_directory
from evalkit.corpus.messages import template_vars
from evalkit.corpus.yaml_files import find_yaml_files
from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS

#: The layout of a summary; part of its key.
SUMMARY_FORMAT = 1
#: Case files whose entries a build reads at a time (it holds their facts, not every file's).
_BUILD_FILES = 16

_Listed = tuple[str, str, bool]  # a case file: its path under the root, sha256, sealed


def summary_path(directory: Path, case_dirs: Sequence[str]) -> Path:
    """The summary of the corpus of ``case_dirs`` (and ``sealed/``) under ``directory``."""
    named = hashlib.sha256(json.dumps(list(case_dirs)).encode()).hexdigest()[:16]
    return Path(directory) / f"corpus-{named}.facts"


def drop_summary(
    root: str | Path, *, case_dirs: Sequence[str] = ("cases",), index_dir: str | Path | None = None
) -> None:
    """Remove the corpus summary: a case built from it proved an entry wrong (the entry is
    made again), so the next read makes the summary again from the entries even when no case
    file changed."""
    root_path = Path(root).resolve()
    directory = trusted_index_directory(root_path, index_dir)
    with contextlib.suppress(OSError):
        summary_path(directory, case_dirs).unlink()


def read_run_facts(
    root: str | Path,
    *,
    sealed: bool = False,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    index_dir: str | Path | None = None,
) -> CorpusFacts:
    """Every case's facts as :func:`~evalkit.corpus.case_facts.scan_corpus` (``index_only``)
    reads them, from the corpus summary (made first when it is missing or stale): ``cases``
    is then a :class:`~evalkit.corpus.fact_rows.FactRows`, ``hash``, ``file_hashes`` and
    ``warnings`` read the same, and what is built is built as from the entries.

    Raises:
        CorpusError: the first problem, as :func:`~evalkit.corpus.case_facts.scan_corpus`
            reports it.
    """
    root_path = Path(root).resolve()
    if root_path.is_dir():
        directory = trusted_index_directory(root_path, index_dir)
        index = CaseIndex(directory, _reader_fingerprint())
        facts = _summary_facts(root_path, index, sealed, tuple(case_dirs), user_template)
        if facts is not None:
            return facts
    return scan_corpus(
        root, sealed=sealed, case_dirs=case_dirs, user_template=user_template,
        index_dir=index_dir, index_only=True,
    )  # fmt: skip


def refresh_summary(
    root: str | Path, *, case_dirs: Sequence[str] = ("cases",), index_dir: str | Path | None = None
) -> IndexCounts:
    """The corpus summary made current (what ``evalkit cases index`` does after the entries):
    a summary of these files' bytes is checked (its key and its sha256, read a block at a
    time) and left as it is, never decoded; another one is made again. What was done, counted.
    """
    root_path = Path(root).resolve()
    directory = trusted_index_directory(root_path, index_dir)
    index = CaseIndex(directory, _reader_fingerprint())
    try:
        listed = _list_files(root_path, case_dirs)
    except (CorpusError, OSError):
        return index.counts
    if listed is not None:
        fingerprint = _summary_fingerprint(index.fingerprint)
        key = _key(fingerprint, case_dirs, listed)
        path = summary_path(directory, case_dirs)
        if _intact(path, key):
            index.counts.summary_used += 1
        else:
            index.counts.summary_refused += path.exists()
            _made_once(root_path, index, path, key, fingerprint, case_dirs)
    return index.counts


def _intact(path: Path, key: str) -> bool:
    """Whether the summary at ``path`` is whole and of ``key`` (its table never decoded)."""
    try:
        with open(path, "rb") as file:
            head, text = file.readline(), file.readline()
            if json.loads(text).get("key") != key:
                return False
            digest = hashlib.sha256(text)
            while block := file.read(1 << 20):
                digest.update(block)
    except (OSError, ValueError, AttributeError):
        return False
    return digest.hexdigest().encode() + b"\n" == head


def _summary_facts(
    root: Path, index: CaseIndex, sealed: bool, case_dirs: tuple[str, ...], template: str | None
) -> CorpusFacts | None:
    """The facts from the summary (made when missing or stale), or None: read the slow way."""
    try:
        listed = _list_files(root, case_dirs)
    except (CorpusError, OSError):
        return None
    if listed is None:
        return None
    fingerprint = _summary_fingerprint(index.fingerprint)
    key = _key(fingerprint, case_dirs, listed)
    path = summary_path(index.directory, case_dirs)
    found = _read(path, key, index)
    if found is None:
        found = _made_once(root, index, path, key, fingerprint, case_dirs)
    if found is None:
        return None
    rows, header = found
    return _view(root, index, rows, header, sealed, template)


def _list_files(root: Path, case_dirs: Sequence[str]) -> list[_Listed] | None:
    """Every case file of ``case_dirs`` and ``sealed/`` with the sha256 of its bytes (None: a
    file too large to be a case file; the slow way refuses it)."""
    listed = []
    for folder in [*case_dirs, "sealed"]:
        for path in find_yaml_files(root / folder, root, CASE_GLOBS):
            if path.stat().st_size > _cases.MAX_CASE_FILE_BYTES:
                return None
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            listed.append((_relative(path, root), digest, folder == "sealed"))
    return listed


def _summary_fingerprint(entries: str) -> str:
    """The entries' reader fingerprint and this module's own source (and what it imports)."""
    digest = hashlib.sha256(entries.encode())
    for module in loader_modules(__name__):
        digest.update(b"\0" + module.read_bytes())
    return digest.hexdigest()


def _key(fingerprint: str, case_dirs: Sequence[str], listed: Sequence[_Listed]) -> str:
    parts = [SUMMARY_FORMAT, fingerprint, list(case_dirs), [list(f) for f in listed]]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


# --- reading -----------------------------------------------------------------------------------


def _read(
    path: Path, key: str, index: CaseIndex, count: bool = True
) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """The summary's rows and header when it is intact and of ``key``, else None (counted as
    refused when a file was there and ``count``)."""
    try:
        with open(path, "rb") as file:  # read in parts: a million cases' columns copied once
            head, text, table = file.readline(), file.readline(), file.read()
    except OSError:
        return None
    found = _decode(head, text, table, key)
    if found is None:
        index.counts.summary_refused += count
    else:
        index.counts.summary_used += 1
    return found


def _decode(
    head: bytes, text: bytes, table: bytes, key: str
) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """The rows and header of a summary's three parts: the sha256 of the rest (a line), the
    header (a line of JSON) and the Parquet table; None unless intact and of ``key``."""
    digest = hashlib.sha256(text)
    digest.update(table)
    if digest.hexdigest().encode() + b"\n" != head:
        return None
    try:
        header = json.loads(text)
        if header.get("format") != SUMMARY_FORMAT or header.get("key") != key:
            return None
        frame = pl.read_parquet(table)
        if frame.schema != pl.Schema(schema()) or frame.height != header["rows"]:
            return None
        sizes = {"tags": len(header["tag_sets"]), "vars": len(header["var_sets"]),
                 "scorers": len(header["scorer_sets"]), "file": len(header["files"])}  # fmt: skip
        for column, size in sizes.items():
            top = frame.get_column(column).max()
            if top is not None and not 0 <= int(top) < size:  # type: ignore[arg-type]
                return None
        if sum(f[4] for f in header["files"]) != frame.height:
            return None
        return frame, header
    except (ValueError, TypeError, KeyError, IndexError, OSError, pl.exceptions.PolarsError):
        return None


# --- making it -----------------------------------------------------------------------------------


def _made_once(
    root: Path, index: CaseIndex, path: Path, key: str, fingerprint: str, case_dirs: Sequence[str]
) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """The summary made and written under its claim, or the one another process made while
    this one waited for the claim; None when it cannot be made (read the slow way)."""
    for wait in (False, True):
        with index.claim_file(path.with_name(path.name + ".lock"), wait=wait) as held:
            if not held:
                index.counts.claims_waited += 1
                continue
            found = _read(path, key, index, count=False) if wait else None
            return found or _make(root, index, path, fingerprint, case_dirs)
    return None  # pragma: no cover - the second pass always holds (or waited out) the claim


def _make(
    root: Path, index: CaseIndex, path: Path, fingerprint: str, case_dirs: Sequence[str]
) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """Every file's facts from its entry (made when missing, under its claim), a few files at
    a time, into columns; written when no two cases share an id (else None: the slow way says
    which)."""
    builder = _FactsBuilder(root, index, index_only=True, keep=False)
    columns = _Columns()
    try:
        for folder in [*case_dirs, "sealed"]:
            paths = find_yaml_files(root / folder, root, CASE_GLOBS)
            files = [(p, _relative(p, root), folder == "sealed") for p in paths]
            for at in range(0, len(files), _BUILD_FILES):
                with closing(builder.scan_files(files[at : at + _BUILD_FILES], 1)) as scanned:
                    for _, entry in scanned:
                        columns.add(entry)
    except CorpusError:
        return None
    frame = columns.frame()
    if frame.select(pl.col("id").is_duplicated().any()).item():
        return None
    listed = [(f.rel, f.sha256, f.sealed) for f in columns.files]
    header = columns.header(_key(fingerprint, case_dirs, listed), frame)
    _write(path, header, frame, index)
    return frame, header


class _Columns:
    """Entries' facts gathered as columns, a file at a time."""

    def __init__(self) -> None:
        self.files: list[FileInfo] = []
        self.frames: list[pl.DataFrame] = []
        self.tag_sets: dict[tuple[str, ...], int] = {}
        self.var_sets: dict[tuple[str, ...], int] = {}
        self.scorer_sets: dict[tuple[tuple[str, tuple[str, ...]], ...], int] = {}

    def add(self, entry: FileFacts) -> None:
        at = len(self.files)
        self.files.append(FileInfo(entry.rel, entry.sha256, entry.sealed, entry.sliceable,
                                   len(entry.cases)))  # fmt: skip
        rows: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        for case in entry.cases:
            scorers = tuple((s.name, s.files) for s in case.scorers)
            span = case.span or (None, None, None)
            values = (
                case.id, case.hash, hashlib.sha256(case.id.encode()).hexdigest(),
                self.tag_sets.setdefault(case.tags, len(self.tag_sets)), case.criticality,
                case.review, at, int(case.source.rpartition(":")[2]), case.sealed,
                None if case.var_names is None
                else self.var_sets.setdefault(case.var_names, len(self.var_sets)),
                self.scorer_sets.setdefault(scorers, len(self.scorer_sets)), *span,
            )  # fmt: skip
            for name, value in zip(COLUMNS, values, strict=True):
                rows[name].append(value)
        if entry.cases:
            self.frames.append(pl.DataFrame(rows, schema=schema()))

    def frame(self) -> pl.DataFrame:
        # not rechunked: the files' chunks kept as they are (a copy of a million rows saved)
        frame = pl.concat([pl.DataFrame(schema=schema()), *self.frames], rechunk=False)
        self.frames.clear()
        return frame

    def header(self, key: str, frame: pl.DataFrame) -> dict[str, Any]:
        tables = FactTables(tag_sets=tuple(self.tag_sets))
        digest = FactRows(frame, tables, _NO_COUNTS).digest()
        return {
            "format": SUMMARY_FORMAT,
            "key": key,
            "rows": frame.height,
            "hash": digest,
            "files": [[f.rel, f.sha256, f.sealed, f.sliceable, f.n_cases] for f in self.files],
            "tag_sets": [list(t) for t in self.tag_sets],
            "var_sets": [list(v) for v in self.var_sets],
            "scorer_sets": [[[n, list(f)] for n, f in s] for s in self.scorer_sets],
        }


def _write(path: Path, header: dict[str, Any], frame: pl.DataFrame, index: CaseIndex) -> None:
    """Written atomically (a temporary file, then a rename); never fails a run. The table goes
    straight to the file and is hashed back from it a block at a time (never held in bytes);
    the head line, of a fixed length, is written last."""
    text = json.dumps(header, separators=(",", ":")).encode() + b"\n"
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        index._prepare()
        with open(temp, "w+b") as file:
            file.write(b"0" * 64 + b"\n" + text)
            frame.write_parquet(file, compression="lz4", statistics=False)
            file.seek(65)
            digest = hashlib.sha256()
            while block := file.read(1 << 20):
                digest.update(block)
            file.seek(0)
            file.write(digest.hexdigest().encode())
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        return
    index.counts.summary_written += 1


# --- the run's view -----------------------------------------------------------------------------


def _view(
    root: Path,
    index: CaseIndex,
    frame: pl.DataFrame,
    header: dict[str, Any],
    sealed: bool,
    template: str | None,
) -> CorpusFacts | None:
    """The facts a scan of ``sealed`` (or not) reads, checked as it checks them: the files the
    scorers name hashed now (None when one cannot be: the slow way reports it at its case),
    ``input.vars`` against the user template."""
    files = tuple(FileInfo(*f) for f in header["files"])
    whole = sealed or not any(f.sealed for f in files)
    if not whole:
        frame = frame.filter(~pl.col("sealed"))
    builder = _FactsBuilder(root, index, index_only=True)
    used = set(frame.get_column("scorers").unique().to_list())
    scorer_sets = []
    for at, listed in enumerate(header["scorer_sets"]):
        scorers = []
        for name, named in listed:
            hashes = {}
            if at in used:
                if name not in SCORERS:
                    return None
                for file in named:
                    try:
                        data = builder.binder.resolve(file).read_bytes()
                    except (CorpusError, OSError):
                        return None
                    hashes[file] = builder.binder.file_hashes.setdefault(
                        file, hashlib.sha256(data).hexdigest()
                    )
            scorers.append(ScorerFacts(name, tuple(named), hashes))
        scorer_sets.append(tuple(scorers))
    tables = FactTables(
        files,
        tuple(tuple(t) for t in header["tag_sets"]),
        tuple(tuple(v) for v in header["var_sets"]),
        tuple(scorer_sets),
    )
    rows = FactRows(frame, tables, index.counts)
    if whole:
        rows._digest = header["hash"]
    _check_vars(rows, template)
    builder.files = LazyFiles(rows)
    warnings = tuple(
        f"{f.rel}: no cases in this file; add cases (a YAML list, each starting with '- id:') "
        "or delete it"
        for f in files
        if f.n_cases == 0 and (sealed or not f.sealed)
    )
    hashes = dict(sorted(builder.binder.file_hashes.items()))
    return CorpusFacts(root, rows, hashes, warnings, builder)


def _check_vars(rows: FactRows, template: str | None) -> None:
    """The first case (in corpus order) whose ``input.vars`` lack a name the user template
    uses, refused as :func:`~evalkit.corpus.case_facts.scan_corpus` refuses it."""
    needed = template_vars(template) - {"documents"} if template is not None else set()
    if not needed:
        return
    lacking = [i for i, names in enumerate(rows.tables.var_sets) if needed - set(names)]
    if not lacking:
        return
    first = rows.frame.filter(pl.col("vars").is_in(lacking)).head(1)
    if first.height:
        fact = FactRows(first, rows.tables, rows.counts)[0]
        where, _, line = fact.source.rpartition(":")
        missing = needed - set(fact.var_names or ())
        raise CorpusError(
            f"input.vars lacks {sorted(missing)} used by the suite's user_template",
            path=where, line=int(line), case_id=fact.id,
        )  # fmt: skip


class _Uncounted:
    facts_made = 0


_NO_COUNTS: Any = _Uncounted()
