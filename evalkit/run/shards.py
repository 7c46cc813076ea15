"""Stable partitioning of a run's work: (case, replay) units ordered by sha256 of the case id.

The unit of work is (run, case, replay). Units are ordered by the sha256 of the case id (never
Python's ``hash()``, which is salted per process), then by replay, and cut into chunks of
``chunk_size`` units. A chunk's id is its key range, so every process computes the same chunks
for the same selection, today and on a resume. ``--shard K/N`` takes the K-th of N contiguous,
equal slices of the ordered units (sizes differ by at most one unit); the union of the N shards
is exactly the run, with no overlap.

Examples:
    >>> units = order_units(["b", "a", "c"], replays=2)
    >>> len(units), sorted({u.case_id for u in units})
    (6, ['a', 'b', 'c'])
    >>> [len(shard_units(units, Shard(k, 3))) for k in (1, 2, 3)]
    [2, 2, 2]
    >>> parse_shard("2/4")
    Shard(index=2, count=4)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from evalkit.errors import ConfigError

#: Units per chunk unless told otherwise: a chunk is one Ray task and one set of Parquet parts,
#: and a lost worker loses at most the chunks it had in flight.
DEFAULT_CHUNK_SIZE = 200


def case_digest(case_id: str) -> str:
    """The sha256 hex digest of a case id: the sort key of its units.

    Examples:
        >>> case_digest("refund-017")[:12]
        'c48320d6fd35'
    """
    return hashlib.sha256(case_id.encode("utf-8")).hexdigest()


class Unit(NamedTuple):
    """One (case, replay) of a run, ordered by the digest of its case id (a named tuple: a
    run's million units are made and sorted as tuples, at a tuple's cost)."""

    digest: str
    replay: int
    case_id: str

    @property
    def key(self) -> tuple[str, int]:
        return self.case_id, self.replay


@dataclass(frozen=True)
class Chunk:
    """Consecutive units; ``chunk_id`` names their key range (first and last unit)."""

    chunk_id: str
    units: tuple[Unit, ...]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``, 1-based as in ``--shard 2/4``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ConfigError(f"--shard {self.index}/{self.count}: expected K/N with 1 <= K <= N")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"K/N"`` -> :class:`Shard`; a one-line error otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ConfigError(f"--shard {text!r}: expected K/N, e.g. --shard 2/4")
    return Shard(int(match.group(1)), int(match.group(2)))


def order_units(case_ids: Iterable[str], replays: int) -> list[Unit]:
    """Every (case, replay) unit, in the stable order every process agrees on."""
    return sorted(
        Unit(case_digest(case_id), replay, case_id)
        for case_id in dict.fromkeys(case_ids)
        for replay in range(replays)
    )


def shard_units(units: Sequence[Unit], shard: Shard) -> list[Unit]:
    """The K-th of N contiguous slices of ordered ``units`` (sizes differ by at most one)."""
    start = (shard.index - 1) * len(units) // shard.count
    stop = shard.index * len(units) // shard.count
    return list(units[start:stop])


def chunk_id(first: Unit, last: Unit) -> str:
    """A chunk's id from its key range: digest prefix and replay of its first and last unit."""
    return f"{first.digest[:16]}r{first.replay}-{last.digest[:16]}r{last.replay}"


def make_chunks(units: Sequence[Unit], chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[Chunk]:
    """Cut ordered ``units`` into chunks of ``chunk_size`` (the last may be smaller)."""
    if chunk_size < 1:
        raise ConfigError(f"--chunk-size {chunk_size}: must be at least 1")
    chunks = []
    for start in range(0, len(units), chunk_size):
        part = tuple(units[start : start + chunk_size])
        chunks.append(Chunk(chunk_id(part[0], part[-1]), part))
    return chunks


def remaining(chunks: Sequence[Chunk], done: set[tuple[str, int]]) -> list[Chunk]:
    """The chunks with work left, each without its done units; ids stay those of the full
    chunk, so a resumed chunk keeps its name (its parts get the next attempt number)."""
    if not done:  # a fresh run: nothing to look up for each of a share's units
        return list(chunks)
    left = []
    for chunk in chunks:
        todo = tuple(u for u in chunk.units if u.key not in done)
        if todo:
            left.append(Chunk(chunk.chunk_id, todo))
    return left


@dataclass(frozen=True)
class ShardRate:
    """One shard's share of the endpoint's ``rate_limit``: the shards of one run are N
    processes against one endpoint, so by default each gets ``1/N`` of requests/min and
    tokens/min (``split=False``: each keeps the whole limit, N times the rate in total).

    Examples:
        >>> rate = ShardRate.of(600.0, None, Shard(2, 4))
        >>> rate.requests_per_minute, rate.note
        (150.0, 'rate limit split over 4 shards: 150 requests/min in this shard (600 in all)')
        >>> ShardRate.of(600.0, None, Shard(2, 4), split=False).note
        'rate limit not split: each of 4 shards may send 600 requests/min (2400 in all)'
        >>> ShardRate.of(None, None, Shard(1, 2)).note
        ''
    """

    requests_per_minute: float | None
    tokens_per_minute: float | None
    note: str  # what the shard's summary states ('' without a limit or with one shard)

    @staticmethod
    def of(rpm: float | None, tpm: float | None, shard: Shard, split: bool = True) -> ShardRate:
        n = shard.count
        if (rpm is None and tpm is None) or n == 1:
            return ShardRate(rpm, tpm, "")

        def shown(div: int, mul: int) -> tuple[str, str]:
            kinds = ((rpm, "requests/min"), (tpm, "tokens/min"))
            mine = ", ".join(f"{v / div:g} {what}" for v, what in kinds if v)
            return mine, ", ".join(f"{v * mul:g}" for v, _ in kinds if v)

        if not split:
            mine, total = shown(1, n)
            return ShardRate(rpm, tpm, f"rate limit not split: each of {n} shards may send "
                             f"{mine} ({total} in all)")  # fmt: skip
        mine, total = shown(n, 1)
        note = f"rate limit split over {n} shards: {mine} in this shard ({total} in all)"
        return ShardRate(rpm / n if rpm else None, tpm / n if tpm else None, note)
