"""The store's tables: the DuckDB DDL, each written table's columns with their DuckDB types, and
the same as Polars schemas (``OUTPUT_SCHEMA`` ...) for the frames that read or write them.

The column types are plain strings so the run path can write without importing Polars (a
large import for a short run); the Polars schemas are built from them on first use.

Examples:
    >>> OUTPUT_COLUMNS["replay"]
    'INTEGER'
    >>> OUTPUT_SCHEMA["created_at"]
    Datetime(time_unit='us', time_zone='UTC')
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import polars as pl

#: A batch of rows, column-wise: column name -> one value per row.
Columns = dict[str, list[Any]]

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR, label VARCHAR, created_at TIMESTAMPTZ, finished_at TIMESTAMPTZ,
    config_hash VARCHAR, status VARCHAR, manifest VARCHAR, summary VARCHAR
);
CREATE TABLE IF NOT EXISTS cases (
    run_id VARCHAR, case_id VARCHAR, case_hash VARCHAR, tags VARCHAR[], criticality VARCHAR,
    sealed BOOLEAN, input VARCHAR, provenance VARCHAR, source VARCHAR
);
-- The case's group (incident, document, conversation); NULL when it has none.
ALTER TABLE cases ADD COLUMN IF NOT EXISTS case_group VARCHAR;
CREATE TABLE IF NOT EXISTS outputs (
    run_id VARCHAR, case_id VARCHAR, replay INTEGER, text VARCHAR, tool_calls VARCHAR,
    steps INTEGER, error VARCHAR, fail_reason VARCHAR, latency_ms DOUBLE, prompt_tokens BIGINT,
    completion_tokens BIGINT, cost_usd DOUBLE, cached BOOLEAN, request_hash VARCHAR,
    model VARCHAR, created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS scorings (
    scoring_id VARCHAR, run_id VARCHAR, created_at TIMESTAMPTZ, note VARCHAR
);
-- The scorer sources a rescore scored with (JSON, the manifest's ``scorer_files`` form) and the
-- evalkit version that scored; NULL for a run's own scoring (its sources are its manifest's)
-- and for rescorings made before evalkit recorded them.
ALTER TABLE scorings ADD COLUMN IF NOT EXISTS scorer_files VARCHAR;
ALTER TABLE scorings ADD COLUMN IF NOT EXISTS harness VARCHAR;
CREATE TABLE IF NOT EXISTS scores (
    run_id VARCHAR, scoring_id VARCHAR, case_id VARCHAR, replay INTEGER, scorer VARCHAR,
    scorer_index INTEGER, tier INTEGER, score DOUBLE, passed BOOLEAN, error BOOLEAN, reason VARCHAR,
    details VARCHAR
);
CREATE TABLE IF NOT EXISTS scoring_cases (
    scoring_id VARCHAR, case_id VARCHAR, case_hash VARCHAR
);
CREATE TABLE IF NOT EXISTS overrides (
    base_run_id VARCHAR, cand_run_id VARCHAR, who VARCHAR, reason VARCHAR, created_at TIMESTAMPTZ
);
-- The blocking findings (their keys, JSON list) an override accepts; it covers nothing else.
ALTER TABLE overrides ADD COLUMN IF NOT EXISTS findings VARCHAR;
CREATE TABLE IF NOT EXISTS baselines (
    suite VARCHAR, run_id VARCHAR, who VARCHAR, reason VARCHAR, promoted_at TIMESTAMPTZ
);
-- A tier (a named selection such as smoke) has its own baseline; NULL is the full suite.
ALTER TABLE baselines ADD COLUMN IF NOT EXISTS tier VARCHAR;
-- The gate policy the promotion pins (JSON, manifest form); NULL when it pinned none.
ALTER TABLE baselines ADD COLUMN IF NOT EXISTS policy VARCHAR;
-- The pinned exam of a promotion (issue 42, evalkit.store.exams): every file of the corpus as
-- promoted (case files, the files cases reference, custom scorer modules as ``module:NAME``),
-- stored so the gate can judge a candidate on it without the pull request's files.
CREATE TABLE IF NOT EXISTS exams (
    exam_id VARCHAR, run_id VARCHAR, suite VARCHAR, tier VARCHAR, who VARCHAR,
    promoted_at TIMESTAMPTZ, root VARCHAR, n_files INTEGER
);
CREATE TABLE IF NOT EXISTS exam_files (
    exam_id VARCHAR, path VARCHAR, sha256 VARCHAR, content BLOB
);
CREATE TABLE IF NOT EXISTS flakes (
    config_hash VARCHAR, measured_at TIMESTAMPTZ, case_id VARCHAR, tags VARCHAR[], runs INTEGER,
    flips INTEGER, flake_rate DOUBLE
);
-- The hash of the case version measured; NULL for measurements made before evalkit recorded it.
ALTER TABLE flakes ADD COLUMN IF NOT EXISTS case_hash VARCHAR;
-- Who wrote each decision record and from where (JSON, evalkit.provenance.Writer): the person,
-- host, git commit and branch, CI job and refs; NULL for records made before evalkit recorded
-- it (an unknown writer, which a pull-request job's gate does not trust).
ALTER TABLE overrides ADD COLUMN IF NOT EXISTS written_by VARCHAR;
ALTER TABLE baselines ADD COLUMN IF NOT EXISTS written_by VARCHAR;
ALTER TABLE flakes ADD COLUMN IF NOT EXISTS written_by VARCHAR;
CREATE TABLE IF NOT EXISTS response_cache (
    cache_key VARCHAR, response VARCHAR, created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS human_labels (
    case_id VARCHAR, output_hash VARCHAR, rater VARCHAR, label INTEGER, scorer VARCHAR,
    source VARCHAR, imported_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS calibrations (
    judge_model VARCHAR, judge_snapshot VARCHAR, rubric VARCHAR, rubric_hash VARCHAR,
    scorer VARCHAR, n INTEGER, kappa DOUBLE, kappa_lo DOUBLE, kappa_hi DOUBLE,
    weighted_kappa DOUBLE, accuracy DOUBLE, macro_f1 DOUBLE, alpha DOUBLE,
    position_consistency DOUBLE, created_at TIMESTAMPTZ, run_id VARCHAR, figures VARCHAR
);
-- The judge prompt version the calibration measured (a changed prompt needs a new one).
ALTER TABLE calibrations ADD COLUMN IF NOT EXISTS judge_prompt VARCHAR;
ALTER TABLE calibrations ADD COLUMN IF NOT EXISTS written_by VARCHAR;
CREATE TABLE IF NOT EXISTS pairwise_judgments (
    base_run_id VARCHAR, cand_run_id VARCHAR, case_id VARCHAR, rubric VARCHAR,
    rubric_hash VARCHAR, judge_model VARCHAR, order_ab INTEGER, order_ba INTEGER,
    combined INTEGER, consistent BOOLEAN, reasons VARCHAR, error VARCHAR, raw VARCHAR,
    created_at TIMESTAMPTZ
);
"""

#: Which Parquet parts a merge has put into the store (:mod:`evalkit.store.merge`): created by
#: the first merge, so a store that never merged has no such table.
MERGED_PARTS_DDL = """
CREATE TABLE IF NOT EXISTS merged_parts (
    run_id VARCHAR, part VARCHAR, rows BIGINT, merged_at TIMESTAMPTZ
);
"""

#: The seals of each run a pull verified and copied in (:mod:`evalkit.store.shared.pulling`),
#: one JSON object per run (the ``runs`` row's seal, each scoring's): a later pull of the run
#: whose shared seals are these stages none of its rows. Created by the first pull.
PULLED_SEALS_DDL = """
CREATE TABLE IF NOT EXISTS pulled_seals (
    run_id VARCHAR, seals VARCHAR, pulled_at TIMESTAMPTZ
);
"""

#: The gate log (:mod:`evalkit.store.gate_log`): one row per gate decision taken or pulled,
#: created by the first decision a store logs or a pull brings.
GATES_DDL = """
CREATE TABLE IF NOT EXISTS gates (
    gate_id VARCHAR, decided_at TIMESTAMPTZ, command VARCHAR, base_run_id VARCHAR,
    cand_run_id VARCHAR, exam_id VARCHAR, corpus_hash VARCHAR, sealed BOOLEAN, status VARCHAR,
    n_paired BIGINT, n_verified BIGINT, n_findings BIGINT, n_stopping BIGINT
);
"""

#: The tables made by their first write rather than when a store opens to write, each with
#: its DDL, run in the transaction of that write: a store that never merged, pulled or gated
#: has none of them, and a read-only store stays as it is.
LAZY_DDL = {"merged_parts": MERGED_PARTS_DDL, "pulled_seals": PULLED_SEALS_DDL, "gates": GATES_DDL}

#: Each complete run's history counts (:mod:`evalkit.store.history_queries`), written when the
#: run finishes or is rescored, so `evalkit history` over a thousand runs reads a few thousand
#: rows instead of re-deciding ten million outputs; derived data (a store without them, or a run
#: missing from them, is counted from its outputs), created by the first run that writes them.
HISTORY_DDL = """
CREATE TABLE IF NOT EXISTS history_counts (
    run_id VARCHAR, scoring_id VARCHAR, tag VARCHAR, cases BIGINT, decided BIGINT,
    passed BIGINT, errored BIGINT, unstable BIGINT
);
CREATE TABLE IF NOT EXISTS history_rules (
    run_id VARCHAR, scoring_id VARCHAR, pass_rules VARCHAR
);
CREATE TABLE IF NOT EXISTS history_usage (
    run_id VARCHAR, model VARCHAR, outputs BIGINT, cached BIGINT, timed BIGINT,
    latency_ms DOUBLE, cost_usd DOUBLE, total_tokens BIGINT, steps BIGINT
);
"""

#: How ``information_schema`` names a type the DDL spells otherwise.
_TYPE_NAMES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}
_CREATE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\);", re.M | re.S)
_ALTER = re.compile(r"^ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+) (\S+);", re.M)


@functools.cache
def known_tables() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Each table evalkit makes, read from its DDL: the columns its ``CREATE`` makes and those
    an ``ALTER`` added since (a store from before the ``ALTER`` lacks them), each with the type
    name ``information_schema`` reports. What tells an evalkit store from another DuckDB file.

    Examples:
        >>> created, added = known_tables()["cases"]
        >>> created["tags"], added
        ('VARCHAR[]', {'case_group': 'VARCHAR'})
    """
    tables: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for name, body in _CREATE.findall(DDL + HISTORY_DDL + "".join(LAZY_DDL.values())):
        columns = (c.split() for c in body.split(","))  # "name TYPE", types without spaces
        tables[name] = ({c: _TYPE_NAMES.get(t, t) for c, t in columns}, {})
    for name, column, sql_type in _ALTER.findall(DDL):
        tables[name][1][column] = _TYPE_NAMES.get(sql_type, sql_type)
    return tables


def writer_schema_current(found: dict[str, dict[str, str]]) -> bool:
    """Whether tables ``found`` ({table: {column: type}}, as ``information_schema`` lists them)
    already hold every table and column a store opened to write makes (``DDL`` and
    ``HISTORY_DDL``, every ``ALTER`` included): then opening it to write runs no DDL.

    Examples:
        >>> full = {t: {**made, **added} for t, (made, added) in known_tables().items()}
        >>> writer_schema_current(full)
        True
        >>> del full["cases"]["case_group"]  # a store from before that ALTER
        >>> writer_schema_current(full)
        False
    """
    tables = known_tables()
    for name, _ in _CREATE.findall(DDL + HISTORY_DDL):
        created, added = tables[name]
        columns = found.get(name)
        if columns is None or any(c not in columns for c in (*created, *added)):
            return False
    return True


#: The cases a run executes (written once, when the run starts).
CASE_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "case_id": "VARCHAR",
    "case_hash": "VARCHAR",
    "tags": "VARCHAR[]",
    "criticality": "VARCHAR",
    "sealed": "BOOLEAN",
    "input": "VARCHAR",
    "provenance": "VARCHAR",  # JSON
    "source": "VARCHAR",  # file:line
    "case_group": "VARCHAR",
}


class StoredCase(Protocol):
    """What the store records of a case (``evalkit.corpus.cases.Case`` has it): the store knows
    no case model, only these fields (and ``group``, when a case has one)."""

    @property
    def id(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def criticality(self) -> str: ...
    @property
    def sealed(self) -> bool: ...
    @property
    def provenance(self) -> dict[str, Any]: ...
    @property
    def source(self) -> str: ...
    def input_json(self) -> str: ...


def initial_scoring_id(run_id: str) -> str:
    """The id of a run's own scoring (the one its run wrote; rescorings come after it).

    Examples:
        >>> initial_scoring_id("nightly-42")
        'nightly-42/s0'
    """
    return f"{run_id}/s0"


def corpus_digest(cases: Iterable[tuple[str, str]]) -> str:
    """The corpus hash a manifest records (``Corpus.hash``), from (case id, case hash) pairs:
    what a merge checks a run's cases parts against.

    Examples:
        >>> corpus_digest([("b", "h2"), ("a", "h1")]) == corpus_digest([("a", "h1"), ("b", "h2")])
        True
    """
    digest = hashlib.sha256()
    held = sorted(cases)
    for first in range(0, len(held), _DIGEST_BATCH):  # one update per batch, not per case
        batch = held[first : first + _DIGEST_BATCH]
        digest.update("".join(f"{case_id}\0{case_hash}\n" for case_id, case_hash in batch).encode())
    return digest.hexdigest()


#: Pairs hashed per update by :func:`corpus_digest` (the same digest as one at a time).
_DIGEST_BATCH = 10_000


def sorted_corpus_digest(cases: Iterable[tuple[str, str]]) -> tuple[str, int]:
    """:func:`corpus_digest` of pairs given already sorted, read one at a time (a million
    cases streamed from the store are never held), and how many there were.

    Raises:
        ValueError: the pairs are not in ascending order (the digest would differ).

    Examples:
        >>> pairs = [("a", "h1"), ("b", "h2")]
        >>> sorted_corpus_digest(iter(pairs)) == (corpus_digest(pairs), 2)
        True
    """
    digest = hashlib.sha256()
    last: tuple[str, str] | None = None
    count = 0
    for pair in cases:
        if last is not None and pair < last:
            raise ValueError(f"cases out of order: {pair[0]!r} after {last[0]!r}")
        digest.update(f"{pair[0]}\0{pair[1]}\n".encode())
        last, count = pair, count + 1
    return digest.hexdigest(), count


def batch_pairs(batches: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """The rows of Arrow record batches of two columns (an ``ORDER BY case_id, case_hash``
    read), one pair at a time, for :func:`sorted_corpus_digest`."""
    for batch in batches:
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)


#: ``json.dumps(x, sort_keys=True)`` without building an encoder per call (a third faster).
_SORTED_JSON = json.JSONEncoder(sort_keys=True)


def case_columns(run_id: str, cases: Sequence[StoredCase]) -> Columns:
    """The :data:`CASE_COLUMNS` of ``cases`` for ``run_id``: what the store and a sharded
    run's case parts record.

    Examples:
        >>> class Case:
        ...     id, hash, tags, criticality, sealed = "a", "h", ("x",), "normal", False
        ...     provenance, source, group = {"by": "ana"}, "cases/a.yaml:1", "inc-1"
        ...     def input_json(self): return "{}"
        >>> columns = case_columns("r1", [Case()])
        >>> columns["tags"], columns["provenance"], columns["case_group"]
        ([['x']], ['{"by": "ana"}'], ['inc-1'])
    """
    return {
        "run_id": [run_id] * len(cases),
        "case_id": [c.id for c in cases],
        "case_hash": [c.hash for c in cases],
        "tags": [list(c.tags) for c in cases],
        "criticality": [c.criticality for c in cases],
        "sealed": [c.sealed for c in cases],
        "input": [c.input_json() for c in cases],
        "provenance": [_SORTED_JSON.encode(c.provenance) for c in cases],
        "source": [c.source for c in cases],
        "case_group": [getattr(c, "group", None) for c in cases],  # optional
    }


CACHE_COLUMNS: dict[str, str] = {
    "cache_key": "VARCHAR",
    "response": "VARCHAR",
    "created_at": "TIMESTAMPTZ",
}
OUTPUT_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "case_id": "VARCHAR",
    "replay": "INTEGER",
    "text": "VARCHAR",
    "tool_calls": "VARCHAR",
    "steps": "INTEGER",
    "error": "VARCHAR",
    "fail_reason": "VARCHAR",
    "latency_ms": "DOUBLE",
    "prompt_tokens": "BIGINT",
    "completion_tokens": "BIGINT",
    "cost_usd": "DOUBLE",
    "cached": "BOOLEAN",
    "request_hash": "VARCHAR",
    "model": "VARCHAR",
    "created_at": "TIMESTAMPTZ",
}
SCORE_COLUMNS: dict[str, str] = {
    "run_id": "VARCHAR",
    "scoring_id": "VARCHAR",
    "case_id": "VARCHAR",
    "replay": "INTEGER",
    "scorer": "VARCHAR",
    "scorer_index": "INTEGER",
    "tier": "INTEGER",
    "score": "DOUBLE",
    "passed": "BOOLEAN",
    "error": "BOOLEAN",
    "reason": "VARCHAR",
    "details": "VARCHAR",  # JSON: judge reason/raw text, rubric hash, pairwise orders, ...
}
#: Human labels (evalkit.judges.labels): one per (case_id or output_hash, rater, scorer).
HUMAN_LABEL_COLUMNS: dict[str, str] = {
    "case_id": "VARCHAR",
    "output_hash": "VARCHAR",
    "rater": "VARCHAR",
    "label": "INTEGER",
    "scorer": "VARCHAR",
    "source": "VARCHAR",
    "imported_at": "TIMESTAMPTZ",
}
#: Judge calibration records (evalkit.judges.calibration): what lets a judge gate.
CALIBRATION_COLUMNS: dict[str, str] = {
    "judge_model": "VARCHAR",
    "judge_snapshot": "VARCHAR",
    "rubric": "VARCHAR",
    "rubric_hash": "VARCHAR",
    "scorer": "VARCHAR",
    "n": "INTEGER",
    "kappa": "DOUBLE",
    "kappa_lo": "DOUBLE",
    "kappa_hi": "DOUBLE",
    "weighted_kappa": "DOUBLE",
    "accuracy": "DOUBLE",
    "macro_f1": "DOUBLE",
    "alpha": "DOUBLE",
    "position_consistency": "DOUBLE",
    "created_at": "TIMESTAMPTZ",
    "run_id": "VARCHAR",
    "figures": "VARCHAR",  # JSON: intervals, per-class report, confusion matrix, length bias
    "judge_prompt": "VARCHAR",
    "written_by": "VARCHAR",  # JSON, evalkit.provenance.Writer: who recorded it, from where
}
#: Pairwise judge verdicts (evalkit.judges.pairwise): 1 = base better, 2 = candidate better, 0 =
#: tie.
PAIRWISE_COLUMNS: dict[str, str] = {
    "base_run_id": "VARCHAR",
    "cand_run_id": "VARCHAR",
    "case_id": "VARCHAR",
    "rubric": "VARCHAR",
    "rubric_hash": "VARCHAR",
    "judge_model": "VARCHAR",
    "order_ab": "INTEGER",
    "order_ba": "INTEGER",
    "combined": "INTEGER",
    "consistent": "BOOLEAN",
    "reasons": "VARCHAR",  # JSON {"ab": ..., "ba": ...}
    "error": "VARCHAR",  # why there is no verdict (malformed judge output, provider failure)
    "raw": "VARCHAR",  # the malformed judge answer, kept verbatim
    "created_at": "TIMESTAMPTZ",
}

#: The Polars schema named like each ``*_COLUMNS`` table (``OUTPUT_SCHEMA`` ...), built on first
#: use by :func:`__getattr__`.
POLARS_SCHEMAS: dict[str, dict[str, str]] = {
    "OUTPUT_SCHEMA": OUTPUT_COLUMNS,
    "SCORE_SCHEMA": SCORE_COLUMNS,
    "HUMAN_LABEL_SCHEMA": HUMAN_LABEL_COLUMNS,
    "CALIBRATION_SCHEMA": CALIBRATION_COLUMNS,
    "PAIRWISE_SCHEMA": PAIRWISE_COLUMNS,
}


def polars_schema(columns: dict[str, str]) -> dict[str, pl.DataType]:
    """The Polars types of DuckDB columns (only the types the tables use).

    Examples:
        >>> polars_schema({"n": "INTEGER", "tags": "VARCHAR[]"})
        {'n': Int32, 'tags': List(String)}
    """
    import polars as pl

    types: dict[str, Any] = {
        "VARCHAR": pl.String,
        "INTEGER": pl.Int32,
        "BIGINT": pl.Int64,
        "DOUBLE": pl.Float64,
        "BOOLEAN": pl.Boolean,
        "TIMESTAMPTZ": pl.Datetime("us", "UTC"),
        "VARCHAR[]": pl.List(pl.String),
    }
    return {name: types[sql_type] for name, sql_type in columns.items()}


def __getattr__(name: str) -> dict[str, pl.DataType]:
    columns = POLARS_SCHEMAS.get(name)
    if columns is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    schema = globals()[name] = polars_schema(columns)
    return schema
