"""A shard's share of the corpus built a chunk at a time: the cases a chunk names, from the
text of their items alone, so a shard builds its first chunk (and starts its requests) before
the rest of its share, and holds one chunk's cases at a time.

The share of a ``--shard K/N`` is spread over every case file (units are ordered by the digest
of their case id), so each chunk names cases of many files. Each file is read whole once, the
first time a chunk needs it: its bytes checked against its index entry (sha256) and where the
share's items are in them noted as byte spans; a later chunk reads just its items' bytes
(``os.pread``), after checking by ``fstat`` that the file is the one read (same size,
modification time and inode). Every case built is checked against its facts, as
:meth:`~evalkit.corpus.case_facts.CorpusFacts.load` checks it, so a file changed since reads
as :class:`~evalkit.corpus.case_index.IndexMismatch`, never as another case.

Examples:
    >>> facts = scan_corpus("corpus")                                    # doctest: +SKIP
    >>> share = ShareBuilder(facts, {"refund-017", "refund-018"})        # doctest: +SKIP
    >>> [case.id for case in share.build(["refund-018"])]                # doctest: +SKIP
    ['refund-018']
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from evalkit.corpus.case_facts import CorpusFacts, _SliceRefused
from evalkit.corpus.case_index import CaseFacts, FileFacts, IndexCounts
from evalkit.corpus.cases import Case
from evalkit.corpus.fact_rows import FactRows

if TYPE_CHECKING:
    import polars as pl

#: A file as it was read: size, modification time (ns) and inode.
_Identity = tuple[int, int, int]


class ShareBuilder:
    """The cases of ``ids`` (a share of ``facts``), built by :meth:`build` a chunk at a time.

    ``files_read`` counts the case files read whole here (each at most once, tests count
    with it); the facts' own counters (``counts``) keep counting cases built and files parsed.
    """

    def __init__(
        self, facts: CorpusFacts, ids: Collection[str], rows: pl.Series | None = None
    ) -> None:
        if facts.builder is None:
            raise ValueError("these facts were not read by scan_corpus: nothing to build from")
        self._facts = facts
        self._builder = facts.builder
        self._rows: FactRows | None = None
        self._wanted: dict[str, CaseFacts] = {}
        # case id -> its row (facts as columns): made at the second chunk, the first's rows
        # found by a scan, so the first chunk's requests wait for no lookup of the whole share
        self._at: dict[str, int] | None = None
        self.builds = 0  # chunks built (tests count with it, and with ``rows_indexed``)
        self.rows_indexed = 0
        if isinstance(facts.cases, FactRows):  # the share's facts made a chunk at a time
            share = facts.cases
            # the rows gathered (ascending: corpus order, as of_ids keeps them), or looked up
            gathered = (
                None if rows is None else FactRows(share.frame[rows], share.tables, share.counts)
            )
            self._rows = share.of_ids(ids) if gathered is None else gathered
            self._of_file: _Spans = _ShareSpans(self._rows)
        else:
            self._wanted = {f.id: f for f in facts.cases if f.id in ids}
            spans: dict[str, list[tuple[str, int, int]]] = {}
            self._of_file = spans
            for fact in sorted(self._wanted.values(), key=_line_of):  # file order in a file
                spans.setdefault(_file_of(fact), []).append((fact.id, *_span_of(fact)))
        self._spans: dict[str, tuple[int, int]] = {}  # case id -> its item's bytes
        self._read: dict[str, _Identity] = {}  # files read whole here, as they were
        self._ascii: set[str] = set()  # of those, files whose characters are their bytes
        self.files_read = 0
        self.items_cut = 0  # items' texts cut from files read whole (tests count with it)

    @property
    def counts(self) -> IndexCounts:
        return self._facts.counts

    def build(self, ids: Iterable[str]) -> tuple[Case, ...]:
        """The cases of ``ids`` (of the share), built from their files, in the order asked,
        each with the scorers its facts keep (as :meth:`CorpusFacts.load` builds them).

        Raises:
            IndexMismatch: a case did not read as its entry says (the entry is made again).
            CorpusError: a case's scorer arguments, as a full load reports them.
        """
        order = list(dict.fromkeys(ids))
        if self._rows is not None:
            facts = self._rows.at(self._positions(self._rows, order))
        else:
            facts = [self._wanted[case_id] for case_id in order]
        self.builds += 1
        by_file: dict[str, list[CaseFacts]] = {}
        for fact in facts:
            by_file.setdefault(_file_of(fact), []).append(fact)
        built: dict[str, Case] = {}
        for rel, facts in by_file.items():
            facts.sort(key=_line_of)
            for fact, case in zip(facts, self._file_cases(rel, facts), strict=True):
                keep = {s.name for s in fact.scorers}
                kept = tuple(s for s in case.scorers if s.name in keep)
                built[fact.id] = (
                    case if len(kept) == len(case.scorers) else replace(case, scorers=kept)
                )
        return tuple(built[case_id] for case_id in order)

    def _positions(self, rows: FactRows, ids: Sequence[str]) -> list[int]:
        """The rows of ``ids`` in the share's columns: looked up, or for the first chunk found
        by a scan of the ids (the lookup of every share id made at the next chunk)."""
        if self._at is None and self.builds == 0:
            import polars as pl

            found = rows.frame.select("id").with_row_index("row").filter(pl.col("id").is_in(ids))
            at = dict(zip(found.get_column("id").to_list(), found.get_column("row").to_list(),
                          strict=True))  # fmt: skip
            return [at[case_id] for case_id in ids]
        if self._at is None:
            share_ids = rows.ids().to_list()
            self._at = dict(zip(share_ids, range(len(share_ids)), strict=True))
            self.rows_indexed = len(share_ids)
        return [self._at[case_id] for case_id in ids]

    def _file_cases(self, rel: str, facts: Sequence[CaseFacts]) -> list[Case]:
        """``facts``' cases (of file ``rel``, in file order): from the items' bytes when the
        file is the one read, else as :meth:`CorpusFacts.load` builds them (the file loaded
        whole when it is not sliceable or has changed: then it says why)."""
        builder = self._builder
        entry = self._entry(rel)
        if rel in builder.whole or not entry.sliceable:
            return builder.build(rel, facts)
        path = builder.root / rel
        try:
            with open(path, "rb") as file:
                identity = _identity(os.fstat(file.fileno()))
                if rel not in self._read:
                    items = self._first_read(rel, file.read(), identity, facts)
                elif self._read[rel] == identity:
                    fd, ascii_text = file.fileno(), rel in self._ascii
                    items = {}
                    for fact in facts:
                        start, end = _span_of(fact) if ascii_text else self._spans[fact.id]
                        items[fact.id] = os.pread(fd, end - start, start).decode("utf-8")
                else:
                    items = None
        except (OSError, UnicodeDecodeError):
            items = None
        if items is None:  # changed or unreadable since: the whole file, which says why
            return builder.build(rel, facts)
        texts = items
        try:
            return builder._slices(lambda fact: texts[fact.id], entry, facts)
        except _SliceRefused:  # checked against the whole entry (made from the columns)
            return builder._rebuilt(path, builder.files[rel], facts, sliceable=False)

    def _first_read(
        self, rel: str, data: bytes, identity: _Identity, facts: Sequence[CaseFacts]
    ) -> dict[str, str] | None:
        """The file's bytes checked against its entry; the text of ``facts``' items (None: not
        the entry's bytes). An ASCII file's items are later read at their facts' spans; in
        another, where each share item's bytes are is noted now (characters and bytes differ).
        """
        self.files_read += 1
        if hashlib.sha256(data).hexdigest() != self._entry(rel).sha256:
            return None
        text = data.decode("utf-8")
        self._read[rel] = identity
        if len(text) == len(data):  # ASCII: a span in characters is one in bytes
            self._ascii.add(rel)
            self.items_cut += len(facts)
            return {fact.id: text[slice(*_span_of(fact))] for fact in facts}
        items: dict[str, str] = {}
        at_char = at_byte = 0
        for case_id, start, end in self._of_file.get(rel, []):  # in line order
            item = text[start:end]
            at_byte += len(text[at_char:start].encode("utf-8"))
            at_char = end
            first, at_byte = at_byte, at_byte + len(item.encode("utf-8"))
            self._spans[case_id] = (first, at_byte)
            items[case_id] = item
        self.items_cut += len(items)
        return items

    def _entry(self, rel: str) -> FileFacts:
        """File ``rel``'s entry as building reads it (from the columns: without its facts)."""
        if self._rows is not None and rel not in self._builder.whole:
            return self._rows.file_info(rel)
        return self._builder.files[rel]


class _Spans(Protocol):
    def get(self, rel: str, default: list[tuple[str, int, int]], /) -> list[tuple[str, int, int]]:
        """(id, start, end) of the share's items in file ``rel``, in line order."""
        ...


class _ShareSpans:
    """The share's items by file (id and span), kept as columns and made into tuples when the
    file is first read (a quarter of a million tuples held from the start cost more)."""

    def __init__(self, rows: FactRows) -> None:
        self._rows: FactRows | None = rows
        self._at: dict[str, int] = {}
        self._frames: dict[Any, pl.DataFrame] = {}

    def get(self, rel: str, default: list[tuple[str, int, int]], /) -> list[tuple[str, int, int]]:
        if self._rows is not None:  # cut by file when first asked: an ASCII corpus never asks
            rows, self._rows = self._rows, None
            self._at = {f.rel: i for i, f in enumerate(rows.tables.files)}
            columns = rows.frame.select("file", "line", "id", "span_start", "span_end")
            self._frames = columns.partition_by("file", as_dict=True)
        frame = self._frames.pop((self._at.get(rel),), None)  # read once: let go then
        if frame is None:
            return default
        return frame.sort("line").select("id", "span_start", "span_end").rows()


def _identity(stat: os.stat_result) -> _Identity:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _span_of(fact: CaseFacts) -> tuple[int, int]:
    """Where a fact's item is in its file's text (read only in a sliceable file, which has it)."""
    start, end, _ = fact.span or (0, 0, 0)
    return start, end


def _file_of(fact: CaseFacts) -> str:
    return fact.source.rpartition(":")[0]


def _line_of(fact: CaseFacts) -> int:
    return int(fact.source.rpartition(":")[2])
