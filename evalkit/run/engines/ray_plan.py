"""What the Ray driver sends out, share by share: it never holds every case of a run.

Given the corpus as facts read through the case index
(:class:`~evalkit.corpus.case_facts.CorpusFacts`), the driver orders the units from the ids
alone and cuts them into shares of at most ``SHARE_UNITS`` units, as ``--shard K/N`` cuts a
run (:func:`~evalkit.run.shards.shard_units`): the manifest records each share's hash
(``corpus.shares``), and a share's cases are built from their files when its first chunk goes
out, written as that share's cases part, and dropped once its last chunk is out. The driver's
memory is one share's cases, whatever the corpus. A run of one share (or loaded cases) records
its cases as before: one part of them all.

Examples:
    >>> share_count(45_000), share_count(0)
    (3, 1)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from evalkit.corpus.case_facts import CorpusFacts
from evalkit.corpus.case_index import IndexMismatch
from evalkit.corpus.cases import Case, Corpus
from evalkit.errors import EvalkitError
from evalkit.run.sharded import corpus_shares, record_run, share_cases
from evalkit.run.shards import Chunk, Shard, Unit, make_chunks, remaining, shard_units
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
    """The run's chunks in share order, each with its cases (:meth:`take`): a share's cases
    are built and recorded when its first chunk is taken, and let go with its last.

    ``built`` counts the cases built (or picked from loaded cases) here, ``peak`` the most
    held at once: counters for the tests, not timers."""

    corpus: Corpus | CorpusFacts
    root: PartsRoot
    manifest: RunManifest
    units: Sequence[Unit]
    count: int
    built: int = 0
    peak: int = 0
    skipped: int = 0
    _pending: deque[tuple[int, Chunk]] = field(default_factory=deque)
    _share: int = 0
    _cases: dict[str, Case] = field(default_factory=dict)

    def record(self) -> None:
        """Write the run's manifest and the cases part of the first share (with one share: of
        all the cases, as a run without shares does; the merge wants a cases part from the
        start); a run of several shares records each other share's cases when its first chunk
        goes out."""
        if self.count == 1:
            cases = self._load(set(_ids(self.units)))
            record_run(self.root, self.manifest, "driver", cases)
            self._hold(1, cases)
            return
        record_run(self.root, self.manifest, "driver", (), with_cases=False)
        self._open_share(1)

    def _open_share(self, k: int) -> None:
        """Share ``k``'s cases built, recorded as its cases part (once) and held."""
        self._cases = {}  # the share before it is all out: its cases go first
        cases = self._load(set(_ids(self._share_units(k))))
        writer = f"driver-{k}-of-{self.count}"
        run_id = self.manifest.run.run_id
        if not any(p.chunk_id == writer for p in self.root.parts(run_id, "cases")):
            self.root.write_cases(run_id, writer, cases)
        self._hold(k, cases)

    def plan(self, chunk_size: int, done: set[tuple[str, int]]) -> None:
        """Cut each share's units into chunks, without the units in ``done``."""
        for k in range(1, self.count + 1):
            share = self._share_units(k)
            todo = remaining(make_chunks(share, chunk_size), done)
            self.skipped += len(share) - sum(len(c.units) for c in todo)
            self._pending.extend((k, chunk) for chunk in todo)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(self) -> tuple[Chunk, dict[str, Case]]:
        """The next chunk and the cases of its share (built and recorded when it is new)."""
        k, chunk = self._pending.popleft()
        if k != self._share:
            if self.count > 1:
                self._open_share(k)
            else:
                self._hold(k, self._load(set(_ids(self.units))))
        return chunk, self._cases

    def _share_units(self, k: int) -> Sequence[Unit]:
        return shard_units(self.units, Shard(k, self.count)) if self.count > 1 else self.units

    def _hold(self, k: int, cases: Sequence[Case]) -> None:
        self._share = k
        self._cases = {case.id: case for case in cases}
        self.peak = max(self.peak, len(self._cases))

    def _load(self, ids: set[str]) -> tuple[Case, ...]:
        try:
            cases = share_cases(self.corpus, ids)
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
