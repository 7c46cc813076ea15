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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

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
from evalkit.run.share_plan import digest_order
from evalkit.run_manifest import RunManifest
from evalkit.store.parts import PartsRoot
from evalkit.store.schema import corpus_digest

if TYPE_CHECKING:  # imported by what makes the columns (the corpus summary), not here
    import polars as pl

#: At most this many (case, replay) units in one share of a Ray run (a module setting).
SHARE_UNITS = 20_000
#: About this many units' cases in one cases part (a piece) of a Ray run: whole chunks, at
#: least one (a module setting). Each part costs every later merge a file to list and read.
PIECE_UNITS = 2_000


def share_count(units: int) -> int:
    """How many shares a run of ``units`` units is cut into (at least one)."""
    return max(1, -(-units // SHARE_UNITS))


def order_corpus_units(corpus: Corpus | CorpusFacts, replays: int) -> Sequence[Unit]:
    """Every unit of the run, ordered as :func:`~evalkit.run.shards.order_units` orders them:
    from the ids and their digests as columns when the facts are (no fact made, no unit made
    until it is read: a :class:`UnitPlan`)."""
    if not isinstance(corpus.cases, FactRows):
        return order_units((case.id for case in corpus.cases), replays)
    return UnitPlan.of(corpus.cases.frame, replays)


class UnitPlan(Sequence[Unit]):
    """A run's units in order, as the row positions (``rows``) of its cases in the corpus
    columns sorted by their id's digest: unit ``p`` is replay ``p % replays`` of the case at
    ``rows[p // replays]`` (a case's replays are neighbours, its digest being its own). A
    :class:`~evalkit.run.shards.Unit` is made only when read (a slice makes a list of them):
    the driver holds 4 bytes a case for the run's order, not a tuple a unit. ``made`` counts
    the units made, for the tests.

    Examples:
        >>> import polars as pl
        >>> frame = pl.DataFrame({"id": ["a", "b"], "digest": ["d2", "d1"], "hash": ["x", "y"]})
        >>> plan = UnitPlan.of(frame, 2)
        >>> len(plan), [(u.case_id, u.replay) for u in plan[1:3]], plan.made
        (4, [('b', 1), ('a', 0)], 2)
    """

    def __init__(self, frame: pl.DataFrame, rows: pl.Series, replays: int) -> None:
        # the corpus's own columns (no copy), gathered a slice at a time
        self._ids, self._digests = frame.get_column("id"), frame.get_column("digest")
        self._hashes = frame.get_column("hash")
        self.rows, self.replays, self.made = rows, replays, 0

    @classmethod
    def of(cls, frame: pl.DataFrame, replays: int) -> UnitPlan:
        """The plan of ``replays`` runs of each case of ``frame`` (an id twice: its last row,
        the one whose hash :func:`~evalkit.run.sharded.corpus_shares` takes)."""
        if frame.get_column("id").n_unique() == frame.height:
            rows = digest_order(frame.get_column("digest"))  # a digest per id: no tie to break
        else:
            pairs = frame.select("digest", "id").with_row_index("row")
            rows = pairs.unique("id", keep="last").sort("digest", "id").get_column("row")
        return cls(frame, rows, replays)

    def __len__(self) -> int:
        return len(self.rows) * self.replays

    @overload
    def __getitem__(self, at: int) -> Unit: ...
    @overload
    def __getitem__(self, at: slice) -> list[Unit]: ...
    def __getitem__(self, at: int | slice) -> Unit | list[Unit]:
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self))
            if step != 1:
                return [self[p] for p in range(start, stop, step)]
            return self._units(start, stop)
        if not -len(self) <= at < len(self):
            raise IndexError(at)
        at %= len(self)
        return self._units(at, at + 1)[0]

    def __iter__(self) -> Iterator[Unit]:
        step = 10_000 * self.replays  # a batch of units made at a time, never the run's
        for start in range(0, len(self), step):
            yield from self._units(start, min(start + step, len(self)))

    def _units(self, start: int, stop: int) -> list[Unit]:
        if start >= stop:
            return []
        first, last = start // self.replays, (stop - 1) // self.replays + 1
        rows = self.rows[first:last]
        digests, ids = self._digests.gather(rows).to_list(), self._ids.gather(rows).to_list()
        r = self.replays
        self.made += stop - start
        return [
            Unit(digests[p // r - first], p % r, ids[p // r - first]) for p in range(start, stop)
        ]

    def shares(self, count: int) -> dict[str, object]:
        """:func:`~evalkit.run.sharded.corpus_shares` of this plan cut in ``count``, from the
        columns: each share's ids and hashes gathered, no unit made."""
        digests, sizes = [], []
        for k in range(1, count + 1):
            start = (k - 1) * len(self) // count
            stop = k * len(self) // count
            if start >= stop:
                digests.append(corpus_digest(()))
                sizes.append(0)
                continue
            rows = self.rows[start // self.replays : (stop - 1) // self.replays + 1]
            ids, hashes = self._ids.gather(rows).to_list(), self._hashes.gather(rows).to_list()
            digests.append(corpus_digest(zip(ids, hashes, strict=True)))
            sizes.append(len(rows))
        return {"count": count, "hashes": digests, "n_cases": sizes}


def plan_shares(
    manifest: RunManifest, corpus: Corpus | CorpusFacts, units: Sequence[Unit]
) -> tuple[RunManifest, int]:
    """``manifest`` with the shares of a run of ``units`` recorded (``corpus.shares``, only
    when there are several), and how many there are."""
    count = share_count(len(units))
    if count > 1 and isinstance(units, UnitPlan):
        manifest = manifest.with_corpus(shares=units.shares(count))
    elif count > 1:
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

    A share's chunks are cut when its first is taken (:meth:`plan` counts what is left of each
    and keeps none), so the units made and waiting are one share's, whatever the run.

    ``built`` counts the cases built here, ``held`` the cases of the open piece and of the
    chunks taken and not released, ``peak`` the most held at once, ``waiting_peak`` the most
    units cut into chunks and not yet taken: counters for the tests, not timers."""

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
    waiting_peak: int = 0
    _pending: deque[tuple[int, _Piece, Chunk]] = field(default_factory=deque)
    _done: set[tuple[str, int]] = field(default_factory=set)
    _next: int = 0  # the share to cut next (0: not planned; past ``count``: none left)
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
        """Count the units in ``done`` (``skipped``); each share's chunks of ``chunk_size``,
        without the units in ``done``, are cut when the share comes up."""
        for k in range(1, self.count + 1 if done else 1):  # a new run: none done, none cut
            for piece in self._pieces(k):
                planned = sum(len(c.units) for c in piece.chunks)
                self.skipped += planned - sum(len(c.units) for c in remaining(piece.chunks, done))
        self._done, self._next = done, 1

    def _cut(self) -> None:
        """Cut the next shares with work left into chunks until one has (or none is left)."""
        while not self._pending and 0 < self._next <= self.count:
            k, self._next = self._next, self._next + 1
            for piece in self._pieces(k):
                todo = remaining(piece.chunks, self._done)
                piece.left = len(todo)
                self._pending.extend((k, piece, chunk) for chunk in todo)
            waiting = sum(len(chunk.units) for _, _, chunk in self._pending)
            self.waiting_peak = max(self.waiting_peak, waiting)

    def __bool__(self) -> bool:
        self._cut()
        return bool(self._pending)

    def take(self) -> tuple[Chunk, dict[str, Case]]:
        """The next chunk and its cases (its piece built and recorded first when it is new
        and not already recorded); held until :meth:`release`."""
        self._cut()
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
