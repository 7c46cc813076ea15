"""A shard's cases in pieces: a ``--shard K/N`` writes the cases of each chunk as its own cases
part (``shard-K-of-N.<chunk id>``) just before the chunk's requests, so it never holds its
whole share. No piece is the share its manifest recorded, so a piece is checked with the other
pieces of its shard (:func:`pieces_problem`): once they hold as many cases as the share, they
must be exactly the share (its hash); fewer (a shard stopped part way) are checked with the
run's corpus once the run is complete (:func:`evalkit.store.part_checks.cases_problem`), as the
union of whole shares is. A piece that goes missing leaves its chunk's outputs naming cases the
merge does not have, which it refuses. The Ray driver records a share the same way, its
pieces named ``driver-K-of-N.<chunk id>``.

Examples:
    >>> piece_shard("shard-2-of-4.00ab-ff01"), piece_shard("shard-2-of-4"), piece_shard("driver")
    ((2, 4), None, None)
    >>> piece_shard("driver-3-of-5.00ab-ff01"), piece_shard("driver-3-of-5")
    ((3, 5), None)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.run_manifest import CorpusInfo
from evalkit.store.schema import batch_pairs, sorted_corpus_digest

if TYPE_CHECKING:
    import duckdb

_PIECE = re.compile(r"(?:shard|driver)-(\d+)-of-(\d+)\.(.+)")
#: Pairs hashed per record batch read back from the staged pieces.
_BATCH_ROWS = 50_000


def piece_shard(chunk_id: str) -> tuple[int, int] | None:
    """(K, N) of a cases part named as a piece of share K of N (a ``--shard K/N``'s or the
    Ray driver's), else None."""
    match = _PIECE.fullmatch(chunk_id)
    return (int(match.group(1)), int(match.group(2))) if match else None


def piece_problem(cases: pl.DataFrame) -> str | None:
    """Why one piece, alone, cannot be a piece of a share (its shard's pieces together are
    checked by :func:`pieces_problem`)."""
    if cases["case_id"].n_unique() != cases.height:
        return "a case id appears twice"
    return None


def pieces_problem(
    con: duckdb.DuckDBPyConnection,
    table: str,
    parts: Sequence[int],
    shard: tuple[int, int],
    corpus: CorpusInfo,
) -> str | None:
    """Why the pieces staged in ``table`` (rows tagged ``_part`` in ``parts``) of shard
    ``(K, N)`` are not its share as the manifest recorded it; None when they are, or are fewer
    than it (then checked with the run's corpus once the run is complete)."""
    k, n = shard
    marks = ", ".join("?" * len(parts))
    where = f"FROM {table} WHERE _part IN ({marks})"
    ((repeated,),) = con.execute(
        f"SELECT count(*) FROM (SELECT _part {where} GROUP BY _part "
        "HAVING count(*) <> count(DISTINCT case_id))",
        list(parts),
    ).fetchall()
    if repeated:
        return "a case id appears twice"
    ((ids, pairs),) = con.execute(
        f"SELECT count(DISTINCT case_id), count(DISTINCT (case_id, case_hash)) {where}",
        list(parts),
    ).fetchall()
    if ids != pairs:
        return f"shard {k}/{n}'s pieces give a case two hashes"
    share = _share(corpus, k, n)
    if share is None:
        return f"a piece of shard {k}/{n}, but the run's manifest records no such shares"
    digest, size = share
    if ids < size:
        return None
    reader = con.sql(
        f"SELECT DISTINCT case_id, case_hash {where} ORDER BY case_id, case_hash",
        params=list(parts),
    ).to_arrow_reader(_BATCH_ROWS)
    found, count = sorted_corpus_digest(batch_pairs(reader))
    if count == size and found == digest:
        return None
    return (
        f"shard {k}/{n}'s pieces hold {count} cases (hash {found[:12]}), not its share "
        f"({size} cases, hash {digest[:12]}) nor one of its {n} shards' shares"
    )


def _share(corpus: CorpusInfo, k: int, n: int) -> tuple[str, int] | None:
    """(hash, size) of share ``k`` of ``n`` as the manifest recorded it (the one share of a run
    not cut: its corpus), or None."""
    shares: Any = corpus.shares
    if shares is None and k == n == 1 and corpus.hash is not None:
        return corpus.hash, corpus.n_cases
    if not isinstance(shares, dict) or shares.get("count") != n:
        return None
    hashes, sizes = shares.get("hashes"), shares.get("n_cases")
    if not isinstance(hashes, list) or not isinstance(sizes, list) or not 1 <= k <= len(hashes):
        return None
    if len(sizes) != len(hashes) or not isinstance(hashes[k - 1], str):
        return None
    return hashes[k - 1], int(sizes[k - 1])
