"""A shard's share a chunk at a time: its cases built chunk by chunk (:class:`ShareCases`), each
chunk's written as a piece of the share (:func:`piece_name`), and which of a run's parts may hold
a shard's units (:class:`OwnParts`: a shard resumed reads its own, not every other shard's).

Examples:
    >>> piece_name("shard-2-of-4", "00ab-ff01")
    'shard-2-of-4.00ab-ff01'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from evalkit.corpus.case_facts import CorpusFacts
from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.share_builder import ShareBuilder
from evalkit.run.shards import Shard, Unit
from evalkit.store.case_pieces import piece_shard

if TYPE_CHECKING:
    import polars as pl


class ShareCases:
    """A shard's share of the corpus, built a chunk at a time (:meth:`build`): from their files
    for facts (:class:`~evalkit.corpus.share_builder.ShareBuilder`: nothing else is built),
    picked from loaded cases otherwise. ``rows``: the share as rows of the facts' columns
    (ascending), in place of ``ids`` (gathered, no id looked up)."""

    def __init__(
        self, corpus: Corpus | CorpusFacts, ids: set[str], rows: pl.Series | None = None
    ) -> None:
        self.size = len(ids) if rows is None else len(rows)
        self._builder = ShareBuilder(corpus, ids, rows) if isinstance(corpus, CorpusFacts) else None
        loaded = () if isinstance(corpus, CorpusFacts) else corpus.cases
        self._loaded = {case.id: case for case in loaded if case.id in ids}

    def build(self, ids: Iterable[str]) -> tuple[Case, ...]:
        if self._builder is not None:
            return self._builder.build(ids)
        return tuple(self._loaded[case_id] for case_id in ids)


def piece_name(writer: str, chunk_id: str) -> str:
    """The name of the cases part a shard writes for one chunk (a piece of its share), read
    back by the merge (:func:`evalkit.store.case_pieces.piece_shard`).

    Examples:
        >>> piece_name("shard-2-of-4", "00ab-ff01")
        'shard-2-of-4.00ab-ff01'
    """
    return f"{writer}.{chunk_id}"


_CHUNK_RANGE = re.compile(r"([0-9a-f]{16})r\d+-([0-9a-f]{16})r\d+")


class OwnParts:
    """Which parts may hold a shard's units (``mine``; None: every part may)."""

    def __init__(self, mine: Sequence[Unit] | None, shard: Shard | None) -> None:
        self.span = (mine[0].digest[:16], mine[-1].digest[:16]) if mine else None
        self.mine = mine is not None
        self.shard = (shard.index, shard.count) if shard is not None else None

    def chunk(self, chunk_id: str) -> bool:
        """Whether a chunk's key range may meet the shard's (a name of no range: it may)."""
        if not self.mine:
            return True
        found = _CHUNK_RANGE.fullmatch(chunk_id)
        if found is None or self.span is None:
            return found is None
        return found.group(1) <= self.span[1] and found.group(2) >= self.span[0]

    def cases(self, chunk_id: str) -> bool:
        """Whether a cases part may be the shard's: any but another shard's piece."""
        piece = piece_shard(chunk_id)
        return piece is None or self.shard is None or piece == self.shard
