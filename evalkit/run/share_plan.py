"""A ``--shard K/N``'s plan from its cases' columns: every unit of the run ordered by its case
id's digest (:func:`digest_order`), cut into N shares, each share's hash, and this shard's own
units and case rows (:func:`plan_shares`), with no case's facts made.

Sorting a million 64-character hex strings is slow beside sorting a million integers, so the
digests are ordered by an integer of their first 15 hex digits (60 bits: two of a million ids
share one about once in two million corpora), and only when two do share it, or a digest is
not lowercase hex, are the strings themselves sorted. Either way the order is the strings'
(:func:`~evalkit.run.shards.order_units`'s).

Examples:
    >>> import polars as pl
    >>> digest_order(pl.Series(["b" * 64, "a" * 64, "0" * 64])).to_list()
    [2, 1, 0]
    >>> digest_order(pl.Series(["d2", "d10"])).to_list()  # not hex digests: the strings'
    [1, 0]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Any

import polars as pl
import pyarrow as pa

from evalkit.run.shards import Shard, Unit

#: Hex digits of a digest's integer key: 60 bits, within a signed 64-bit integer.
_KEY_DIGITS = 15
#: Lines hashed at a time by :func:`pairs_digest`.
_LINES = 20_000


def digest_order(digests: pl.Series) -> pl.Series:
    """The positions of ``digests`` (those of distinct case ids) in ascending order, as
    sorting the strings orders them (code points and UTF-8 bytes compare alike)."""
    keys = digests.str.slice(0, _KEY_DIGITS).str.to_integer(base=16, strict=False)
    order = keys.arg_sort()
    ordered = keys.gather(order)
    hex_keys = digests.str.contains(f"^[0-9a-f]{{{_KEY_DIGITS}}}").all()
    if hex_keys and ordered.null_count() == 0 and (ordered.diff().slice(1) > 0).all():
        return order  # every key its own: the keys' order is the strings'
    return digests.arg_sort()


@dataclass(frozen=True)
class SharePlan:
    """What a shard plans: the manifest's ``corpus.shares`` (``count``, ``hashes`` and
    ``n_cases`` of each share), its own units in order and the rows of its cases in the
    corpus columns (ascending: corpus order)."""

    shares: dict[str, Any]
    units: list[Unit]
    rows: pl.Series


def plan_shares(pairs: pl.DataFrame, replays: int, shard: Shard) -> SharePlan:
    """Shard ``shard``'s plan of a run of ``replays`` of each case of ``pairs`` (columns
    ``case_id``, ``hash`` and ``digest``, one row a case, ids distinct): unit ``p`` of the run is
    replay ``p % replays`` of the ``p // replays``-th case in digest order, as
    :func:`~evalkit.run.shards.order_units` orders them, and share K is the K-th of N
    contiguous slices of the units (:func:`~evalkit.run.shards.shard_units`); a case whose
    replays straddle two shares is in both."""
    order = digest_order(pairs.get_column("digest"))
    total, count = pairs.height * replays, shard.count
    hashes, sizes = [], []
    units: list[Unit] = []
    own = pl.Series("rows", [], dtype=order.dtype)
    for k in range(1, count + 1):
        start, stop = (k - 1) * total // count, k * total // count
        first, last = start // replays, (stop - 1) // replays + 1
        rows = order.slice(first, last - first) if start < stop else order.clear()
        if k == shard.index:
            ids = pairs.get_column("case_id").gather(rows).to_list()
            digests = pairs.get_column("digest").gather(rows).to_list()
            units = _units(digests, ids, replays, start - first * replays, stop - start)
            del ids, digests
        # in corpus order first: a corpus kept in id order then sorts by id at once
        ascending = rows.sort()
        if k == shard.index:
            own = ascending
        share = pairs.select("case_id", "hash")[ascending]
        hashes.append(pairs_digest(share))
        sizes.append(share.height)
    return SharePlan({"count": count, "hashes": hashes, "n_cases": sizes}, units, own)


def _units(digests: list[str], ids: list[str], replays: int, skip: int, n: int) -> list[Unit]:
    """``n`` units from the ``skip``-th on of each case's ``replays`` in turn, made as tuples
    (``tuple.__new__``: a named tuple's own constructor is a Python call a unit)."""
    if replays > 1:
        digests = [d for d in digests for _ in range(replays)]
        ids = [i for i in ids for _ in range(replays)]
        numbers: Iterable[int] = (r for _ in range(len(ids) // replays) for r in range(replays))
    else:
        numbers = repeat(0)
    made = map(tuple.__new__, repeat(Unit), zip(digests, numbers, ids, strict=False))
    return list(islice(made, skip, skip + n))


def pairs_digest(pairs: pl.DataFrame) -> str:
    """sha256 over ``case_id\\0hash\\n`` of each pair in id order (a share's hash, as
    :func:`~evalkit.store.schema.corpus_digest` makes it): the lines' bytes hashed where Arrow
    holds them, no Python string made a line (a batch of lines at a time otherwise).

    Examples:
        >>> from evalkit.store.schema import corpus_digest
        >>> frame = pl.DataFrame({"case_id": ["b", "a"], "hash": ["h2", "h1"]})
        >>> pairs_digest(frame) == corpus_digest([("a", "h1"), ("b", "h2")])
        True
    """
    line = pl.concat_str("case_id", pl.lit("\0"), "hash", pl.lit("\n"))
    lines = pairs.sort("case_id").select(line).to_series().to_arrow()
    digest = hashlib.sha256()
    if lines.type == pa.large_string() and lines.null_count == 0:
        # the lines' bytes as Arrow holds them, end to end: hashed where they are
        offsets = lines.buffers()[1]
        ends = pa.Array.from_buffers(pa.int64(), len(lines) + 1, [None, offsets], 0, lines.offset)
        data = lines.buffers()[2]
        if data is not None:
            first, last = ends[0].as_py(), ends[-1].as_py()
            digest.update(memoryview(data)[first:last])
        return digest.hexdigest()
    for start in range(0, len(lines), _LINES):
        digest.update("".join(lines.slice(start, _LINES).to_pylist()).encode())
    return digest.hexdigest()
