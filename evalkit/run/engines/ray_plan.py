"""What the Ray driver sends out, share by share: it never holds every case of a run.

Given the corpus as facts read through the case index
(:class:`~evalkit.corpus.case_facts.CorpusFacts`, as columns from the corpus summary:
:class:`~evalkit.corpus.fact_rows.FactRows`), the driver orders the units from the ids and
their digests alone (:func:`order_corpus_units`, no case's facts made) and cuts them into
shares of at most ``SHARE_UNITS`` units, as ``--shard K/N`` cuts a run
(:func:`~evalkit.run.shards.shard_units`): the manifest records each share's hash
(``corpus.shares``). A chunk's cases are built from their files when it goes out (a
:class:`~evalkit.run.share_chunks.ShareCases` per share, as a ``--shard`` builds its share),
written first as a piece of its share (``driver-K-of-N.<chunk id>``, checked by the merge as
a shard's pieces are: :mod:`evalkit.store.case_pieces`), and let go when the chunk is done:
the driver holds the cases of its chunks in flight, whatever the corpus. A run of one share
records no shares: its pieces (``driver-1-of-1.<chunk id>``) are checked against the corpus.
An earlier driver recorded whole shares (``driver-K-of-N``, ``driver``): a run of those
resumed writes no piece of them.

Examples:
    >>> share_count(45_000), share_count(0)
    (3, 1)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from evalkit.corpus.case_facts import CorpusFacts
from evalkit.corpus.case_index import IndexMismatch
from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.errors import EvalkitError
from evalkit.run.sharded import corpus_shares, record_run
from evalkit.run.shards import (
    DEFAULT_CHUNK_SIZE,
    Chunk,
    Shard,
    Unit,
    make_chunks,
    order_units,
    remaining,
    shard_units,
)
from evalkit.run.share_chunks import ShareCases, piece_name
from evalkit.run_manifest import RunManifest
from evalkit.store.parts import PartsRoot

#: At most this many (case, replay) units in one share of a Ray run (a module setting).
SHARE_UNITS = 20_000
#: About this many units' cases in one cases part (a piece) of a Ray run: whole chunks, at
#: least one (a module setting). Each part costs every later merge a file to list and read.
PIECE_UNITS = 2_000


def share_count(units: int) -> int:
    """How many shares a run of ``units`` units is cut into (at least one)."""
    return max(1, -(-units // SHARE_UNITS))


def order_corpus_units(corpus: Corpus | CorpusFacts, replays: int) -> list[Unit]:
    """Every unit of the run, ordered as :func:`~evalkit.run.shards.order_units` orders them:
    from the ids and their digests as columns when the facts are (no fact made)."""
    if not isinstance(corpus.cases, FactRows):
        return order_units((case.id for case in corpus.cases), replays)
    pairs = corpus.cases.frame.select("digest", "id").unique("id").sort("digest", "id")
    return sorted(
        Unit(digest, replay, case_id)
        for digest, case_id in pairs.iter_rows()
        for replay in range(replays)
    )


def plan_shares(
    manifest: RunManifest, corpus: Corpus | CorpusFacts, units: Sequence[Unit]
) -> tuple[RunManifest, int]:
    """``manifest`` with the shares of a run of ``units`` recorded (``corpus.shares``, only
    when there are several), and how many there are."""
    count = share_count(len(units))
    if count > 1:
        manifest = manifest.with_corpus(shares=corpus_shares(corpus.cases, units, count))
    return manifest, count


@dataclass(kw_only=True)
class ShareFeed:
    """The run's chunks in share order, each with its cases (:meth:`take`). A share's chunks
    go in pieces of ``PIECE_UNITS`` units (whole chunks, cut from the share's full chunk list,
    so a resumed run finds the same pieces): the cases of a piece are built from their files
    when its first chunk is taken (a :class:`~evalkit.run.share_chunks.ShareCases` per share),
    written as a piece of its share, and let go when its last is; a chunk's cases are held
    until it is done (:meth:`release`). A run of one share is one share of one.

    ``built`` counts the cases built here, ``held`` the cases of the open piece and of the
    chunks taken and not released, ``peak`` the most held at once: counters for the tests,
    not timers."""

    corpus: Corpus | CorpusFacts
    root: PartsRoot
    manifest: RunManifest
    units: Sequence[Unit]
    count: int
    chunk_size: int = DEFAULT_CHUNK_SIZE
    built: int = 0
    held: int = 0
    peak: int = 0
    skipped: int = 0
    _pending: deque[tuple[int, _Piece, Chunk]] = field(default_factory=deque)
    _share: int = 0
    _share_cases: ShareCases | None = None
    _piece: _Piece | None = None  # the piece of the chunks being taken
    _piece_cases: dict[str, Case] | None = None  # its cases, when it was built whole here
    _out: dict[str, int] = field(default_factory=dict)  # chunk id -> its cases held
    _recorded: set[str] | None = None  # cases parts under the run (listed once)

    def record(self) -> None:
        """Write the run's manifest and a first cases part (the merge wants one from the
        start): the first piece of the first share (the others are written as their first
        chunks go out)."""
        record_run(self.root, self.manifest, "driver", (), with_cases=False)
        self._open(1, self._pieces(1)[0])

    def plan(self, done: set[tuple[str, int]]) -> None:
        """Cut each share's units into chunks of ``chunk_size``, without the units in
        ``done``."""
        for k in range(1, self.count + 1):
            for piece in self._pieces(k):
                todo = remaining(piece.chunks, done)
                self.skipped += sum(len(c.units) for c in piece.chunks)
                self.skipped -= sum(len(c.units) for c in todo)
                piece.left = len(todo)
                self._pending.extend((k, piece, chunk) for chunk in todo)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(self) -> tuple[Chunk, dict[str, Case]]:
        """The next chunk and its cases (its piece built and recorded first when it is new
        and not already recorded); held until :meth:`release`."""
        k, piece, chunk = self._pending.popleft()
        if self._piece is None or piece.name != self._piece.name:
            self._open(k, piece)
        ids = _ids(chunk.units)
        if self._piece_cases is not None:
            cases = {case_id: self._piece_cases[case_id] for case_id in ids}
        else:  # its piece was recorded before: the chunk's cases alone
            assert self._share_cases is not None
            cases = {case.id: case for case in self._build(self._share_cases, ids)}
        piece.left -= 1
        if piece.left == 0:
            self._close()
        self._out[chunk.chunk_id] = len(cases)
        self.held += len(cases)
        self.peak = max(self.peak, self.held)
        return chunk, cases

    def release(self, chunk: Chunk) -> None:
        """``chunk`` is done: its cases are no longer held for it."""
        self.held -= self._out.pop(chunk.chunk_id, 0)

    def _pieces(self, k: int) -> list[_Piece]:
        """Share ``k``'s full chunks in pieces of about ``PIECE_UNITS`` units."""
        chunks = make_chunks(self._share_units(k), self.chunk_size)
        per = max(1, PIECE_UNITS // self.chunk_size)
        writer = f"driver-{k}-of-{self.count}"
        return [
            _Piece(piece_name(writer, chunks[at].chunk_id), tuple(chunks[at : at + per]))
            for at in range(0, len(chunks), per)
        ]

    def _open(self, k: int, piece: _Piece) -> None:
        """``piece`` (of share ``k``) is the one chunks are taken from: built and recorded
        unless it (or its whole share, recorded by an earlier driver) is."""
        self._close()
        if k != self._share or self._share_cases is None:
            self._share, self._share_cases = k, None  # the share before: its builder goes
            self._share_cases = ShareCases(self.corpus, set(_ids(self._share_units(k))))
        self._piece = piece
        run_id = self.manifest.run.run_id
        if self._recorded is None:
            self._recorded = {part.chunk_id for part in self.root.parts(run_id, "cases")}
        whole = f"driver-{k}-of-{self.count}" if self.count > 1 else "driver"
        if whole in self._recorded or piece.name in self._recorded:
            return
        units = [unit for chunk in piece.chunks for unit in chunk.units]
        cases = self._build(self._share_cases, _ids(units))
        self.root.write_cases(run_id, piece.name, cases)
        self._recorded.add(piece.name)
        self._piece_cases = {case.id: case for case in cases}
        self.held += len(cases)
        self.peak = max(self.peak, self.held)

    def _close(self) -> None:
        """The open piece's cases let go (its chunks taken hold their own)."""
        if self._piece_cases is not None:
            self.held -= len(self._piece_cases)
        self._piece, self._piece_cases = None, None

    def _share_units(self, k: int) -> Sequence[Unit]:
        return shard_units(self.units, Shard(k, self.count)) if self.count > 1 else self.units

    def _build(self, share: ShareCases, ids: Iterable[str]) -> tuple[Case, ...]:
        try:
            cases = share.build(ids)
        except IndexMismatch as stale:
            run_id = self.manifest.run.run_id
            raise EvalkitError(
                f"{stale}; the corpus changed under the run: resume it with "
                f"evalkit run --engine ray --resume {run_id}"
            ) from None
        self.built += len(cases)
        return cases


@dataclass
class _Piece:
    """Consecutive chunks of a share recorded as one cases part (``name``); ``left``: how many
    of them are still to be taken."""

    name: str
    chunks: tuple[Chunk, ...]
    left: int = 0


def stored_share_count(manifest: RunManifest) -> int:
    """How many shares a recorded run was cut into (1: none recorded)."""
    return int((manifest.corpus.shares or {}).get("count") or 1)


def _ids(units: Sequence[Unit]) -> dict[str, None]:
    return dict.fromkeys(unit.case_id for unit in units)
