"""Every case's facts as columns (:class:`FactRows`): what a ``--shard K/N`` or the Ray driver
reads of a corpus of a million cases without holding a million
:class:`~evalkit.corpus.case_index.CaseFacts` (about 0.6 KB each as Python objects).

A :class:`FactRows` is a sequence of facts, so whatever iterates ``CorpusFacts.cases`` still
reads them (each made when it is reached, never kept); what a run does with every case (the
corpus hash, a selection, the tag counts, the draft check, the manifest's scorers, the order
of the units) asks the columns instead, and only the facts a shard builds are made
(``IndexCounts.facts_made`` counts them). The columns come from the corpus summary
(:mod:`evalkit.corpus.case_summary`).

Small sets are kept once and named by their position: the tag lists, the ``input.vars`` key
lists and the scorer lists of the corpus (a handful, where the cases are a million).

Examples:
    >>> import polars as pl
    >>> from evalkit.corpus.case_index import IndexCounts
    >>> rows = FactRows.of_columns(
    ...     {"id": ["b", "a"], "hash": ["h2", "h1"], "tags": [0, 1], "file": [0, 0],
    ...      "line": [1, 2]},
    ...     FactTables(files=(FileInfo("cases/t.yaml", "00", False, False, 2),),
    ...                tag_sets=(("x",), ("y",))),
    ...     IndexCounts())
    >>> len(rows), rows.select(["y"], [], []).ids().to_list()
    (2, ['a'])
    >>> [fact.source for fact in rows]
    ['cases/t.yaml:1', 'cases/t.yaml:2']
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:  # polars and the index's records: imported by what makes the columns (the
    # summary), not here: a plain run checks "is this FactRows?" and imports neither
    import polars as pl

    from evalkit.corpus.case_index import CaseFacts, FileFacts, IndexCounts, ScorerFacts

#: Rows made into facts at a time when the whole sequence is iterated.
_BATCH = 10_000


@dataclass(frozen=True)
class FileInfo:
    """One case file of the columns: its path, the sha256 of its bytes, whether it is sealed,
    whether its items parse one by one (``sliceable``) and how many cases it has."""

    rel: str
    sha256: str
    sealed: bool
    sliceable: bool
    n_cases: int


@dataclass(frozen=True)
class FactTables:
    """The small tables the columns name by position: files, tag lists, ``input.vars`` key
    lists and scorer lists (their file hashes those of this load)."""

    files: tuple[FileInfo, ...] = ()
    tag_sets: tuple[tuple[str, ...], ...] = ((),)
    var_sets: tuple[tuple[str, ...], ...] = ()
    scorer_sets: tuple[tuple[ScorerFacts, ...], ...] = ((),)


#: The columns, in order: id, case hash, sha256 of the id (the units' order), tag list,
#: criticality, review state, file, line, sealed, input.vars key list (null: messages),
#: scorer list, and the item's span in its file's text (null: not sliceable).
COLUMNS = ("id", "hash", "digest", "tags", "criticality", "review", "file", "line", "sealed",
           "vars", "scorers", "span_start", "span_end", "span_line")  # fmt: skip


class FactRows(Sequence["CaseFacts"]):
    """Cases' facts as columns (``frame``, one row a case, in corpus order) and the tables
    they name (``tables``); a sequence of :class:`CaseFacts`, each made when read."""

    def __init__(self, frame: pl.DataFrame, tables: FactTables, counts: IndexCounts) -> None:
        self.frame = frame
        self.tables = tables
        self.counts = counts  # facts_made: how many facts were made from the columns
        self._digest: str | None = None

    @classmethod
    def of_columns(
        cls, columns: Mapping[str, Sequence[Any]], tables: FactTables, counts: IndexCounts
    ) -> FactRows:
        """Rows from lists (a column left out: its default), for tests and examples."""
        import polars as pl

        n = len(columns["id"])
        defaults: dict[str, Any] = {
            "criticality": "normal", "review": "reviewed", "file": 0, "line": 1,
            "sealed": False, "tags": 0, "scorers": 0,
        }  # fmt: skip
        data = {
            name: list(columns[name]) if name in columns else [defaults.get(name)] * n
            for name in COLUMNS
        }
        if "digest" not in columns:
            data["digest"] = [hashlib.sha256(str(i).encode()).hexdigest() for i in data["id"]]
        return cls(pl.DataFrame(data, schema=schema()), tables, counts)

    def _with(self, frame: pl.DataFrame, tables: FactTables | None = None) -> FactRows:
        return FactRows(frame, tables or self.tables, self.counts)

    # --- the sequence ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.frame.height

    @overload
    def __getitem__(self, index: int) -> CaseFacts: ...
    @overload
    def __getitem__(self, index: slice) -> FactRows: ...
    def __getitem__(self, index: int | slice) -> CaseFacts | FactRows:
        if isinstance(index, slice):
            return self._with(self.frame[index])
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._made(self.frame.slice(index, 1))[0]

    def __iter__(self) -> Iterator[CaseFacts]:
        for start in range(0, len(self), _BATCH):
            yield from self._made(self.frame.slice(start, _BATCH))

    def at(self, positions: Sequence[int]) -> list[CaseFacts]:
        """The facts of the rows at ``positions``, in that order."""
        return self._made(self.frame[list(positions)])

    def _made(self, frame: pl.DataFrame) -> list[CaseFacts]:
        from evalkit.corpus.case_index import CaseFacts

        files, tags, var_sets, scorers = (
            self.tables.files, self.tables.tag_sets, self.tables.var_sets,
            self.tables.scorer_sets,
        )  # fmt: skip
        made = [
            CaseFacts(
                id=case_id,
                hash=case_hash,
                tags=tags[tag],
                criticality=crit,
                review=review,
                source=f"{files[file].rel}:{line}",
                sealed=sealed,
                var_names=None if names is None else var_sets[names],
                scorers=scorers[scorer],
                span=None if start is None else (start, end, first),
            )
            for case_id, case_hash, _, tag, crit, review, file, line, sealed, names, scorer,
            start, end, first in frame.iter_rows()
        ]  # fmt: skip
        self.counts.facts_made += len(made)
        return made

    # --- what a run asks of every case --------------------------------------------------------

    def ids(self) -> pl.Series:
        return self.frame.get_column("id")

    def digest(self) -> str:
        """The corpus hash of these cases: sha256 over each one's ``id\\0hash\\n``, in id
        order (as :func:`~evalkit.corpus.cases._corpus_digest`), a batch of lines at a time."""
        if self._digest is None:
            import polars as pl

            order = self.frame.get_column("id").arg_sort()  # the order alone, then batches
            pairs = self.frame.select("id", "hash")
            digest = hashlib.sha256()
            for start in range(0, len(order), _BATCH):
                batch = pairs[order.slice(start, _BATCH)]
                lines = batch.select(pl.concat_str("id", pl.lit("\0"), "hash", pl.lit("\n")))
                digest.update("".join(lines.to_series().to_list()).encode())
            self._digest = digest.hexdigest()
        return self._digest

    def select(
        self, tags: Iterable[str], exclude_tags: Iterable[str], ids: Iterable[str]
    ) -> FactRows:
        """The rows :func:`~evalkit.corpus.cases._chosen` keeps, in their order."""
        import polars as pl

        want, drop, only = set(tags), set(exclude_tags), list(dict.fromkeys(ids))
        sets = self.tables.tag_sets
        kept = [i for i, t in enumerate(sets) if (not want or want & set(t)) and not drop & set(t)]
        keep = pl.col("tags").is_in(kept)
        if only:
            keep = keep & pl.col("id").is_in(only)
        if len(kept) == len(sets) and not only:
            return self
        return self._with(self.frame.filter(keep))

    def keep_scorers(self, keep: Callable[[ScorerFacts], bool]) -> FactRows:
        """Each row's scorers without those ``keep`` refuses; rows left with none dropped (as
        :meth:`~evalkit.corpus.selection.Selection.apply` does case by case)."""
        import polars as pl

        sets = list(self.tables.scorer_sets)
        position = {s: i for i, s in enumerate(sets)}
        mapping: dict[int, int | None] = {}
        for i, scorers in enumerate(self.tables.scorer_sets):
            kept = tuple(s for s in scorers if keep(s))
            if kept and kept not in position:
                position[kept] = len(sets)
                sets.append(kept)
            mapping[i] = position[kept] if kept else None
        if all(mapping[i] == i for i in mapping):
            return self
        frame = self.frame.with_columns(
            pl.col("scorers").replace_strict(mapping, return_dtype=pl.UInt32)
        ).filter(pl.col("scorers").is_not_null())
        tables = FactTables(self.tables.files, self.tables.tag_sets, self.tables.var_sets,
                            tuple(sets))  # fmt: skip
        return self._with(frame, tables)

    def tag_counts(self, sealed: bool = False) -> dict[str, int]:
        """Rows per tag (sealed rows only when ``sealed``), as a Counter over their tags."""
        import polars as pl

        rows = self.frame if sealed else self.frame.filter(~pl.col("sealed"))
        counted: Counter[str] = Counter()
        for tag_set, n in rows.group_by("tags").len().iter_rows():
            for tag in self.tables.tag_sets[tag_set]:
                counted[tag] += n
        return dict(counted)

    def known_tags(self) -> set[str]:
        """Every tag of these rows."""
        used = self.frame.get_column("tags").unique().to_list()
        return {tag for i in used for tag in self.tables.tag_sets[i]}

    def where_review(self, state: str, sealed: bool | None = None) -> list[CaseFacts]:
        """The facts of the rows in review ``state`` (of ``sealed`` rows only, when given)."""
        import polars as pl

        keep = pl.col("review") == state
        if sealed is not None:
            keep = keep & (pl.col("sealed") == sealed)
        return self._made(self.frame.filter(keep))

    def scorer_lists(self) -> list[tuple[ScorerFacts, ...]]:
        """The distinct scorer lists of these rows (what the manifest reads of every case)."""
        used = sorted(self.frame.get_column("scorers").unique().to_list())
        return [self.tables.scorer_sets[i] for i in used]

    def of_ids(self, ids: Iterable[str]) -> FactRows:
        """The rows of ``ids``, in corpus order."""
        import polars as pl

        return self._with(self.frame.filter(pl.col("id").is_in(list(ids))))

    def file_info(self, rel: str) -> FileFacts:
        """The entry of file ``rel`` without its cases' facts (what building a case from its
        item reads: path, sha256, sealed, sliceable)."""
        from evalkit.corpus.case_index import FileFacts

        info = self._file_positions()[rel][1]
        return FileFacts(info.rel, info.sha256, info.sealed, info.sliceable, ())

    def file_facts(self, rel: str) -> FileFacts:
        """The entry of file ``rel`` with every case's facts (a file made again is checked
        against it), made from the columns."""
        import polars as pl

        from evalkit.corpus.case_index import FileFacts

        at, info = self._file_positions()[rel]
        cases = self._made(self.frame.filter(pl.col("file") == at))
        return FileFacts(info.rel, info.sha256, info.sealed, info.sliceable, tuple(cases))

    def _file_positions(self) -> dict[str, tuple[int, FileInfo]]:
        found = getattr(self, "_files", None)
        if found is None:
            found = self._files = {f.rel: (i, f) for i, f in enumerate(self.tables.files)}
        return found


class LazyFiles(dict[str, "FileFacts"]):
    """A scan's entries by file made from the columns when first asked for (a shard's
    building asks for the few files it rebuilds; most are never made)."""

    def __init__(self, rows: FactRows) -> None:
        super().__init__()
        self._rows = rows

    def __missing__(self, rel: str) -> FileFacts:
        facts = self[rel] = self._rows.file_facts(rel)
        return facts


def schema() -> dict[str, Any]:
    """The columns' types."""
    import polars as pl

    text, count, line = pl.String, pl.UInt32, pl.Int64
    return {"id": text, "hash": text, "digest": text, "tags": count, "criticality": text,
            "review": text, "file": count, "line": line, "sealed": pl.Boolean, "vars": count,
            "scorers": count, "span_start": line, "span_end": line, "span_line": line}  # fmt: skip
