"""What the Ray driver sends out, share by share: it never holds every case of a run.

Given the corpus as facts read through the case index
(:class:`~evalkit.corpus.case_facts.CorpusFacts`), the driver orders the units from the ids
alone and cuts them into shares of at most ``SHARE_UNITS`` units, as ``--shard K/N`` cuts a
run (:func:`~evalkit.run.shards.shard_units`): the manifest records each share's hash
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
from evalkit.errors import EvalkitError
from evalkit.run.sharded import corpus_shares, record_run
from evalkit.run.shards import (
    DEFAULT_CHUNK_SIZE,
    Chunk,
    Shard,
    Unit,
    make_chunks,
    remaining,
    shard_units,
)
from evalkit.run.share_chunks import ShareCases, piece_name
from evalkit.run_manifest import RunManifest
from evalkit.store.parts import PartsRoot

#: At most this many (case, replay) units in one share of a Ray run (a module setting).
SHARE_UNITS = 20_000


def share_count(units: int) -> int:
    """How many shares a run of ``units`` units is cut into (at least one)."""
    return max(1, -(-units // SHARE_UNITS))


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
    """The run's chunks in share order, each with its cases (:meth:`take`): built when it is
    taken (from their files: a :class:`~evalkit.run.share_chunks.ShareCases` per share) and
    written as a piece of its share before it is handed out; the driver lets them go when
    the chunk is done (:meth:`release`). A run of one share is one share of one.

    ``built`` counts the cases built (or picked from loaded cases) here, ``held`` the cases
    of the chunks taken and not released, ``peak`` the most held at once: counters for the
    tests, not timers."""

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
    _pending: deque[tuple[int, Chunk]] = field(default_factory=deque)
    _share: int = 0
    _share_cases: ShareCases | None = None
    _out: dict[str, int] = field(default_factory=dict)  # chunk id -> its cases held
    _recorded: set[str] | None = None  # cases parts under the run (listed once)
    _early: tuple[str, tuple[Case, ...]] | None = None  # the piece record() wrote

    def record(self) -> None:
        """Write the run's manifest and a first cases part (the merge wants one from the
        start): the piece of the first chunk of the first share (the other pieces are written
        as their chunks go out)."""
        record_run(self.root, self.manifest, "driver", (), with_cases=False)
        first = make_chunks(self._share_units(1), self.chunk_size)[0]
        self._early = (first.chunk_id, self._piece(1, first))  # handed out by its take

    def plan(self, done: set[tuple[str, int]]) -> None:
        """Cut each share's units into chunks of ``chunk_size``, without the units in
        ``done``."""
        for k in range(1, self.count + 1):
            share = self._share_units(k)
            todo = remaining(make_chunks(share, self.chunk_size), done)
            self.skipped += len(share) - sum(len(c.units) for c in todo)
            self._pending.extend((k, chunk) for chunk in todo)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(self) -> tuple[Chunk, dict[str, Case]]:
        """The next chunk and its cases (with several shares: built, and recorded as a piece
        of its share unless the share or the piece is already recorded); held until
        :meth:`release`."""
        k, chunk = self._pending.popleft()
        cases = self._piece(k, chunk)
        self._out[chunk.chunk_id] = len(cases)
        self.held += len(cases)
        self.peak = max(self.peak, self.held)
        return chunk, {case.id: case for case in cases}

    def release(self, chunk: Chunk) -> None:
        """``chunk`` is done: its cases are no longer held for it."""
        self.held -= self._out.pop(chunk.chunk_id, 0)

    def _piece(self, k: int, chunk: Chunk) -> tuple[Case, ...]:
        """The cases of ``chunk`` (of share ``k``), built and recorded as a piece of the
        share unless the share (a run recorded whole shares before) or the piece is."""
        if k != self._share or self._share_cases is None:
            self._share, self._share_cases = k, None  # the share before: its builder goes
            self._share_cases = ShareCases(self.corpus, set(_ids(self._share_units(k))))
        if self._early is not None and self._early[0] == chunk.chunk_id:
            cases, self._early = self._early[1], None
        else:
            cases = self._build(self._share_cases, _ids(chunk.units))
        run_id = self.manifest.run.run_id
        if self._recorded is None:
            self._recorded = {part.chunk_id for part in self.root.parts(run_id, "cases")}
        writer = f"driver-{k}-of-{self.count}" if self.count > 1 else "driver"
        piece = piece_name(f"driver-{k}-of-{self.count}", chunk.chunk_id)
        if writer not in self._recorded and piece not in self._recorded:
            self.root.write_cases(run_id, piece, cases)
            self._recorded.add(piece)
        return cases

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


def stored_share_count(manifest: RunManifest) -> int:
    """How many shares a recorded run was cut into (1: none recorded)."""
    return int((manifest.corpus.shares or {}).get("count") or 1)


def _ids(units: Sequence[Unit]) -> dict[str, None]:
    return dict.fromkeys(unit.case_id for unit in units)
