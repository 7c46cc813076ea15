"""What a Parquet part must be before anything trusts it: of its table's schema, with rows that
belong to the run being merged (:class:`RunKeys`); a manifest that is the run's; a cases part
that is the run's corpus. Pure checks on schemas, frames and dicts, each returning why it
refuses (``None``: nothing to refuse); reading the files is :mod:`evalkit.store.parts`'s.

Examples:
    >>> schema_problem("outputs", {**OUTPUT_SCHEMA, "replay": pl.String})
    'columns of another type: replay is String, not Int32'
    >>> manifest_problem({"run": {"run_id": "other"}}, "r1")
    'not of run r1'
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from evalkit.run_manifest import CorpusInfo
from evalkit.store.schema import (
    CASE_COLUMNS,
    OUTPUT_SCHEMA,
    SCORE_SCHEMA,
    corpus_digest,
    initial_scoring_id,
    polars_schema,
    sorted_corpus_digest,
)

#: The case parts' columns: the store's ``cases`` table (``case_group`` included).
CASE_SCHEMA = polars_schema(CASE_COLUMNS)
CACHE_SCHEMA: dict[str, pl.DataType] = {"cache_key": pl.String(), "response": pl.String()}
#: The columns every part of a table has, with their types.
PART_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "cases": CASE_SCHEMA,
    "cache": CACHE_SCHEMA,
    "scores": SCORE_SCHEMA,
    "outputs": OUTPUT_SCHEMA,
}
#: Columns a part may lack: cases parts written before cases carried their group.
OPTIONAL_COLUMNS = {"cases": ("case_group",)}
#: The columns that say whose a row is (what :class:`RunKeys` checks); never null.
KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    "cases": ("run_id", "case_id", "case_hash"),
    "cache": ("cache_key",),
    "scores": ("run_id", "scoring_id", "case_id", "replay", "scorer_index"),
    "outputs": ("run_id", "case_id", "replay"),
}


@dataclass(frozen=True)
class RunKeys:
    """What every row of a run's parts must belong to: the run, one of its cases and one of its
    replays (and a score row to the run's own scoring).

    Examples:
        >>> keys = RunKeys("r1", frozenset({"a", "b"}), replays=2)
        >>> rows = pl.DataFrame({"run_id": ["r1"] * 3, "case_id": ["a", "ghost-1", "ghost-2"],
        ...                      "replay": [0, 1, 1]})
        >>> keys.refusal("outputs", rows)
        'rows of case ids run r1 does not have: ghost-1, ghost-2'
        >>> keys.refusal("outputs", rows.head(1).with_columns(run_id=pl.lit("r2")))
        'rows of run r2, not of run r1'
    """

    run_id: str
    #: A set, or a Series (a merge's million case ids stay in Polars, not Python strings).
    case_ids: frozenset[str] | pl.Series
    replays: int

    @functools.cached_property
    def _sorted(self) -> pl.Series:
        # the case ids sorted once, each part's ids looked up by binary search: a join per part
        # would hash every case id of the run again for every part (parts x cases in all);
        # sorted when first asked (a shard with no earlier parts never asks)
        ids = self.case_ids if isinstance(self.case_ids, pl.Series) else list(self.case_ids)
        return pl.Series("case_id", ids, dtype=pl.String).drop_nulls().unique().sort()

    def unknown(self, case_ids: pl.Series) -> pl.Series:
        """Those of ``case_ids`` that are not the run's (nulls among them), in their order.

        Examples:
            >>> keys = RunKeys("r1", frozenset({"a", "c"}), replays=1)
            >>> keys.unknown(pl.Series(["c", "b", None, "z", "a"])).to_list()
            ['b', None, 'z']
        """
        known = self._sorted
        if known.is_empty():
            return case_ids
        ids = case_ids.cast(pl.String)
        at = known.search_sorted(ids, side="left").clip(0, known.len() - 1)
        found = (known.gather(at) == ids).fill_null(False)
        return case_ids.filter(~found)

    def refusal(self, table: str, rows: pl.DataFrame) -> str | None:
        """Why ``rows`` (a part of ``table``, with its :data:`KEY_COLUMNS`) are not all the
        run's; None when they are. Cache entries name no run: nothing to check."""
        if table == "cache":
            return None
        others = _distinct(rows.filter(pl.col("run_id") != self.run_id)["run_id"])
        if others:
            return f"rows of run {_listed(others)}, not of run {self.run_id}"
        if table == "cases":
            return None
        scoring = initial_scoring_id(self.run_id)
        if table == "scores":
            wrong = _distinct(rows.filter(pl.col("scoring_id") != scoring)["scoring_id"])
            if wrong:
                return f"scores of scoring {_listed(wrong)}, not of the run's own {scoring}"
        ghosts = _distinct(self.unknown(rows["case_id"]))
        if ghosts:
            return f"rows of case ids run {self.run_id} does not have: {_listed(ghosts)}"
        replays = rows["replay"].filter((rows["replay"] < 0) | (rows["replay"] >= self.replays))
        if replays.len():
            return f"rows of replay {replays[0]}; the run has replays 0 to {self.replays - 1}"
        return None


def schema_problem(table: str, found: Mapping[str, pl.DataType]) -> str | None:
    """Why a part of ``table`` whose file has the columns ``found`` is not of its schema."""
    schema = PART_SCHEMAS[table]
    optional = OPTIONAL_COLUMNS.get(table, ())
    missing = [c for c in schema if c not in found and c not in optional]
    if missing:
        return f"it lacks the columns {', '.join(missing)}"
    wrong = [
        f"{c} is {found[c]}, not {t}"
        for c, t in schema.items()
        if c in found and found[c] not in (t, pl.Null)  # Null: a column with no values
    ]
    return f"columns of another type: {'; '.join(wrong)}" if wrong else None


def manifest_problem(manifest: Any, run_id: str) -> str | None:
    """What a manifest lacks that the merge reads, or whose run it is instead."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    run, corpus = manifest.get("run"), manifest.get("corpus")
    if not isinstance(run, dict) or run.get("run_id") != run_id:
        return f"not of run {run_id}"
    corpus = corpus if isinstance(corpus, dict) else {}
    texts = {
        "config_hash": manifest.get("config_hash"),
        "run.label": run.get("label"),
        "corpus.hash": corpus.get("hash"),
    }
    counts = {"replays": manifest.get("replays"), "corpus.n_cases": corpus.get("n_cases")}
    missing = [name for name, value in texts.items() if not isinstance(value, str)]
    missing += [name for name, value in counts.items() if type(value) is not int or value < 0]
    return f"no valid {', '.join(missing)}" if missing else None


def corpus_problem(cases: pl.DataFrame, corpus: CorpusInfo) -> str | None:
    """Why a cases part is neither the ``corpus`` the run's manifest recorded nor one of the
    shares it recorded (``corpus.shares``: a ``--shard K/N`` writes the cases of its share
    alone). A part is taken only when its cases hash to exactly one of those; that the shares
    together are the corpus is checked once they are all in (:func:`cases_problem`).

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a"], "case_hash": ["h"]})
        >>> corpus = CorpusInfo(hash="x", n_cases=2)
        >>> corpus_problem(cases, corpus)
        "its 1 cases (hash 83739922c227) are not the run's corpus (2 cases, hash x)"
        >>> shares = {"count": 2, "hashes": [corpus_digest([("a", "h")]), "y"], "n_cases": [1, 1]}
        >>> corpus_problem(cases, CorpusInfo(hash="x", n_cases=2, shares=shares)) is None
        True
    """
    if cases["case_id"].n_unique() != cases.height:
        return "a case id appears twice"
    digest = corpus_digest(zip(cases["case_id"], cases["case_hash"], strict=True))
    return digest_problem(digest, cases.height, corpus)


def digest_problem(digest: str, count: int, corpus: CorpusInfo) -> str | None:
    """:func:`corpus_problem` of a cases part of ``count`` distinct case ids whose
    :func:`corpus_digest` is ``digest`` (a merge that hashed them as a stream)."""
    if count == corpus.n_cases and digest == corpus.hash:
        return None
    shares = _shares(corpus.shares)
    if (digest, count) in shares:
        return None
    of_shares = f" nor one of its {len(shares)} shards' shares" if shares else ""
    return (
        f"its {count} cases (hash {digest[:12]}) are not the run's corpus "
        f"({corpus.n_cases} cases, hash {str(corpus.hash)[:12]}){of_shares}"
    )


def cases_problem(
    pairs: Iterable[tuple[str, str]], corpus: CorpusInfo, *, presorted: bool = False
) -> str | None:
    """Why a run's cases, all of them (every share merged), are not the ``corpus`` its manifest
    hashed: the shares of a sharded run were each checked alone (:func:`corpus_problem`), their
    union is checked here. ``presorted``: the pairs come in ascending order and are read one at
    a time, never held (`sorted_corpus_digest`; out of order raises ValueError).

    Examples:
        >>> corpus = CorpusInfo(hash=corpus_digest([("a", "h")]), n_cases=1)
        >>> cases_problem([("a", "h")], corpus) is None
        True
        >>> cases_problem([("a", "h"), ("b", "g")], corpus)
        "the run's 2 cases (hash 0f011aee69e5) are not its corpus (1 cases, hash 83739922c227)"
    """
    digest, count = sorted_corpus_digest(pairs) if presorted else _digest_counted(pairs)
    if count == corpus.n_cases and digest == corpus.hash:
        return None
    return (
        f"the run's {count} cases (hash {digest[:12]}) are not its corpus "
        f"({corpus.n_cases} cases, hash {str(corpus.hash)[:12]})"
    )


def _digest_counted(pairs: Iterable[tuple[str, str]]) -> tuple[str, int]:
    held = sorted(pairs)
    return corpus_digest(held), len(held)


def _shares(shares: Any) -> set[tuple[str, int]]:
    """(hash, size) of each share a manifest recorded; none for anything malformed."""
    if not isinstance(shares, dict):
        return set()
    hashes, sizes = shares.get("hashes"), shares.get("n_cases")
    if not isinstance(hashes, list) or not isinstance(sizes, list) or len(hashes) != len(sizes):
        return set()
    return {
        (h, n) for h, n in zip(hashes, sizes, strict=True) if isinstance(h, str) and type(n) is int
    }


def first_line(exc: BaseException) -> str:
    """An exception's message as one short line (pyarrow's run over several)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _distinct(values: pl.Series) -> list[Any]:
    return values.unique(maintain_order=True).to_list()


def _listed(values: Collection[Any], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    items = [str(v) for v in list(values)[:shown]]
    more = f" and {len(values) - shown} more" if len(values) > shown else ""
    return ", ".join(items) + more
