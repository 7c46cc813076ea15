"""The DuckDB store: schema, batched writes, and read helpers that return Polars frames.

Only this module writes SQL. Writes are batched (one Arrow append per table per flush, inside one
transaction), so a crash loses at most the batch in flight and never leaves half a batch behind.

One writer, many readers: a writing store holds an exclusive lock on ``<db>.lock`` for its whole
life, so a second writer gets a clear :class:`StoreError` (or waits ``wait_s`` for it). DuckDB
itself lets a file be open either by one read-write process or by many read-only ones, so the
runner closes the DuckDB file between batches (:meth:`Store.release`): a notebook can open the
store read-only (retrying for a few seconds) while a run writes; the next batch waits for it.

Examples:
    >>> store = open_store("data/evalkit.duckdb")          # doctest: +SKIP
    >>> store.runs().select("run_id", "label").head(2)      # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import json
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import duckdb
import numpy as np
import polars as pl

from evalkit.errors import StoreError
from evalkit.redact import has_secrets, redact_known, redact_secrets
from evalkit.store.decisions import DecisionRecords
from evalkit.store.lock import WriterLock, connect_duckdb
from evalkit.store.schema import (
    CALIBRATION_SCHEMA,
    DDL,
    HUMAN_LABEL_SCHEMA,
    OUTPUT_SCHEMA,
    PAIRWISE_SCHEMA,
    SCORE_SCHEMA,
)

DEFAULT_DB = Path("data/evalkit.duckdb")
#: A read-only open retries this long at least: a running writer holds the file only while it
#: appends a batch (a fraction of a second).
READ_RETRY_S = 5.0
#: How long a writer that released the file waits for readers to let go before it gives up.
REOPEN_WAIT_S = 60.0

#: ``json.dumps(x, sort_keys=True)`` without building an encoder per call (a third faster).
_SORTED_JSON = json.JSONEncoder(sort_keys=True)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id() -> str:
    """A sortable, unique run id such as ``20261130T041502-3f9a1c``."""
    return f"{_now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


class StoredCase(Protocol):
    """What the store records of a case (``evalkit.corpus.cases.Case`` has it): the store knows
    no case model, only these fields."""

    id: str
    hash: str
    tags: tuple[str, ...]
    criticality: str
    sealed: bool
    provenance: dict[str, Any]
    source: str

    def input_json(self) -> str: ...


@dataclass(frozen=True)
class RunRef:
    run_id: str
    label: str
    config_hash: str
    status: str


def open_store(
    path: str | Path = DEFAULT_DB, *, read_only: bool = False, wait_s: float = 0.0
) -> Store:
    """Open (creating if needed) the DuckDB file at ``path``.

    Args:
        read_only: open for reading only (no schema creation).
        wait_s: how long to wait for another process's write lock before failing.

    Raises:
        StoreError: the file is locked by another writer, or it is not a DuckDB database.
    """
    db_path = Path(path)
    if read_only and not db_path.exists():
        raise StoreError(f"{db_path}: no evalkit store here (run `evalkit run` first)")
    if read_only:
        return Store(db_path, connect_duckdb(db_path, True, max(wait_s, READ_RETRY_S)), True)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    lock = WriterLock.acquire(db_path, wait_s)
    try:
        return Store(
            db_path, connect_duckdb(db_path, False, max(wait_s, READ_RETRY_S)), False, lock
        )
    except BaseException:
        lock.release()
        raise


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _serialized(
    method: Callable[Concatenate[Store, _P], _R],
) -> Callable[Concatenate[Store, _P], _R]:
    """Run ``method`` holding the store's lock: the runner writes batches from a worker thread
    (so the event loop keeps serving requests) while the loop may read the response cache."""

    @functools.wraps(method)
    def locked(self: Store, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Store(DecisionRecords):
    """A DuckDB-backed results store. Use :func:`open_store` to get one."""

    def __init__(
        self,
        path: Path,
        con: duckdb.DuckDBPyConnection,
        read_only: bool,
        writer_lock: WriterLock | None = None,
    ) -> None:
        self.path = path
        self._conn: duckdb.DuckDBPyConnection | None = con
        self.read_only = read_only
        self._writer_lock = writer_lock
        self._lock = threading.RLock()  # see _serialized
        con.execute("SET TimeZone = 'UTC'")
        if not read_only:
            con.execute(DDL)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The connection, reopened (waiting up to ``REOPEN_WAIT_S`` for readers) if released."""
        if self._conn is None:
            self.reopen(REOPEN_WAIT_S)
        assert self._conn is not None
        return self._conn

    @_serialized
    def release(self) -> None:
        """Close the DuckDB file but keep the writer lock: readers may open it until the next
        use of this store reopens it. Cheap to call when already released."""
        if self._conn is not None and not self.read_only:
            con, self._conn = self._conn, None
            con.close()

    @_serialized
    def reopen(self, wait_s: float = 0.0) -> bool:
        """Reopen a released store; False when readers still hold the file after ``wait_s``
        (``wait_s`` 0: one try, for a caller that can try again later)."""
        if self._conn is not None:
            return True
        try:
            con = connect_duckdb(self.path, self.read_only, wait_s)
        except StoreError:
            if wait_s > 0:
                raise
            return False
        con.execute("SET TimeZone = 'UTC'")
        self._conn = con
        return True

    @_serialized
    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._writer_lock is not None:
            self._writer_lock.release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def create_run(self, manifest: dict[str, Any], cases: Sequence[StoredCase]) -> str:
        """Record a run's manifest and the cases it will execute; returns the run id."""
        run = manifest["run"]
        run_id = run["run_id"]
        case_frame = pl.DataFrame(
            {
                "run_id": [run_id] * len(cases),
                "case_id": [c.id for c in cases],
                "case_hash": [c.hash for c in cases],
                "tags": _string_lists([c.tags for c in cases]),
                "criticality": [c.criticality for c in cases],
                "sealed": [c.sealed for c in cases],
                "input": [c.input_json() for c in cases],
                "provenance": [_SORTED_JSON.encode(c.provenance) for c in cases],
                "source": [c.source for c in cases],
            },
        )
        with self._transaction():
            self._con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, 'running', ?, NULL)",
                [
                    run_id,
                    run["label"],
                    _now(),
                    manifest["config_hash"],
                    redact_known(json.dumps(manifest)),
                ],
            )
            self._append("cases", case_frame)
            self._con.execute(
                "INSERT INTO scorings VALUES (?, ?, ?, 'run')",
                [initial_scoring_id(run_id), run_id, _now()],
            )
        return run_id

    @_serialized
    def write_results(self, outputs: pl.DataFrame, scores: pl.DataFrame) -> None:
        """Append a batch of outputs and their scores atomically (both or neither)."""
        if outputs.is_empty() and scores.is_empty():
            return
        outputs, scores = _scrub_outputs(outputs), _scrub_scores(scores)
        with self._transaction():
            if not outputs.is_empty():
                self._append("outputs", outputs.select(list(OUTPUT_SCHEMA)))
            if not scores.is_empty():
                self._append("scores", scores.select(list(SCORE_SCHEMA)))

    def write_scoring(
        self, run_id: str, note: str, scores: pl.DataFrame, case_hashes: dict[str, str]
    ) -> str:
        """Store a new scoring of a run's outputs, atomically; older scorings stay."""
        scores = _scrub_scores(scores)
        with self._transaction():
            count = self._con.execute(
                "SELECT count(*) FROM scorings WHERE run_id = ?", [run_id]
            ).fetchall()[0][0]
            scoring_id = f"{run_id}/s{count}"
            self._con.execute(
                "INSERT INTO scorings VALUES (?, ?, ?, ?)", [scoring_id, run_id, _now(), note]
            )
            frame = scores.select(list(SCORE_SCHEMA)).with_columns(
                pl.lit(scoring_id).alias("scoring_id")
            )
            self._append("scores", frame)
            hashes = pl.DataFrame(
                {
                    "scoring_id": [scoring_id] * len(case_hashes),
                    "case_id": list(case_hashes),
                    "case_hash": list(case_hashes.values()),
                },
                schema={"scoring_id": pl.String, "case_id": pl.String, "case_hash": pl.String},
            )
            self._append("scoring_cases", hashes)
        return scoring_id

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        self._con.execute(
            "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE run_id = ?",
            [status, _now(), json.dumps(summary), run_id],
        )

    def set_warnings(self, run_id: str, warnings: Sequence[str]) -> None:
        """Replace ``manifest["warnings"]`` of a run (the config hash does not cover them)."""
        manifest = self.manifest(run_id)
        manifest["warnings"] = list(warnings)
        self._con.execute(
            "UPDATE runs SET manifest = ? WHERE run_id = ?", [json.dumps(manifest), run_id]
        )

    def drop_errored_outputs(self, run_id: str) -> int:
        """Delete a run's errored outputs (and any scores of them), atomically, so a resume
        asks those requests again (``--retry-errors``); returns how many were dropped."""
        with self._transaction():
            keys = "SELECT case_id, replay FROM outputs WHERE run_id = ? AND error IS NOT NULL"
            (count,) = self._con.execute(f"SELECT count(*) FROM ({keys})", [run_id]).fetchone()
            self._con.execute(
                f"DELETE FROM scores WHERE run_id = ? AND (case_id, replay) IN ({keys})",
                [run_id, run_id],
            )
            self._con.execute(
                "DELETE FROM outputs WHERE run_id = ? AND error IS NOT NULL", [run_id]
            )
        return int(count)

    def save_flakes(self, config_hash: str, flakes: pl.DataFrame) -> None:
        """Store one flake measurement (columns case_id, tags, runs, flips, flake_rate)."""
        frame = flakes.select(
            pl.lit(config_hash).alias("config_hash"),
            pl.lit(_now()).dt.cast_time_unit("us").alias("measured_at"),
            "case_id",
            pl.col("tags").cast(pl.List(pl.String)),
            pl.col("runs").cast(pl.Int32),
            pl.col("flips").cast(pl.Int32),
            pl.col("flake_rate").cast(pl.Float64),
        )
        with self._transaction():
            self._append("flakes", frame)

    # -- cache (keyed by provider, model, rendered request, sampling and replay index) --------

    @_serialized
    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        frame = pl.DataFrame({"cache_key": wanted})
        self._con.register("_wanted", frame.to_arrow())
        try:
            rows = self._con.execute(
                "SELECT c.cache_key, c.response FROM response_cache c "
                "JOIN _wanted w USING (cache_key)"
            ).fetchall()
        finally:
            self._con.unregister("_wanted")
        return dict(rows)

    @_serialized
    def cache_put(self, entries: dict[str, str]) -> None:
        if not entries:
            return
        frame = pl.DataFrame(
            {
                "cache_key": list(entries),
                "response": [_scrub_json(v) for v in entries.values()],
                "created_at": [_now()] * len(entries),
            }
        )
        with self._transaction():
            self._append("response_cache", frame)

    # -- reads ------------------------------------------------------------------------------

    def runs(self) -> pl.DataFrame:
        return self._frame(
            "SELECT run_id, label, created_at, finished_at, config_hash, status, manifest, summary "
            "FROM runs ORDER BY created_at"
        )

    def resolve_run(self, ref: str) -> str:
        """A run id from an id, a unique id prefix, a label that names one run, or
        ``label@latest`` (the newest run with that label).

        Raises:
            StoreError: no such run, or a label or prefix that names several runs (listed).
        """
        label, latest = (ref[: -len("@latest")], True) if ref.endswith("@latest") else (ref, False)
        exact = self._con.execute("SELECT run_id FROM runs WHERE run_id = ?", [ref]).fetchall()
        if exact:
            return exact[0][0]
        rows = self._con.execute(
            "SELECT run_id, created_at FROM runs WHERE label = ? ORDER BY created_at DESC",
            [label],
        ).fetchall()
        if len(rows) > 1 and not latest:
            listed = ", ".join(f"{r[0]} ({str(r[1])[:19]})" for r in rows[:5])
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise StoreError(
                f"label {label!r} names {len(rows)} runs: {listed}{more}; pass a run id, or "
                f"{label}@latest for the newest"
            )
        if not rows:
            rows = self._con.execute(
                "SELECT run_id FROM runs WHERE run_id LIKE ? ORDER BY created_at DESC", [f"{ref}%"]
            ).fetchall()
            if len(rows) > 1:
                raise StoreError(f"run {ref!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
        if not rows:
            labels = [
                r[0]
                for r in self._con.execute(
                    "SELECT DISTINCT label FROM runs ORDER BY label"
                ).fetchall()
            ]
            hint = difflib.get_close_matches(label, labels, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            known = f"; labels: {', '.join(labels[:20])}" if labels else "; the store has no runs"
            raise StoreError(f"{self.path}: no run with id or label {ref!r}{suggestion}{known}")
        return rows[0][0]

    def manifest(self, run_id: str) -> dict[str, Any]:
        rows = self._con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return json.loads(rows[0][0])

    def run_status(self, run_id: str) -> str:
        rows = self._con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return rows[0][0]

    def cases(self, run_id: str) -> pl.DataFrame:
        """The cases a run executed. After a rescore against edited expectations, ``case_hash``
        is the hash the newest scoring scored against (the stored outputs are unchanged)."""
        scoring_id = self.latest_scoring(run_id)
        return self._frame(
            "SELECT c.* REPLACE (coalesce(s.case_hash, c.case_hash) AS case_hash) FROM cases c "
            "LEFT JOIN scoring_cases s ON s.scoring_id = ? AND s.case_id = c.case_id "
            "WHERE c.run_id = ? ORDER BY c.case_id",
            [scoring_id, run_id],
        )

    def outputs(self, run_id: str, *, ordered: bool = True) -> pl.DataFrame:
        """A run's outputs by (case_id, replay); ``ordered=False``: in the order they were
        written, skipping a sort that costs more than the read at a million rows (the
        analysis groups them itself)."""
        order = " ORDER BY case_id, replay" if ordered else ""
        return self._frame(f"SELECT * FROM outputs WHERE run_id = ?{order}", [run_id])

    def scores(
        self, run_id: str, scoring_id: str | None = None, *, ordered: bool = True
    ) -> pl.DataFrame:
        """Long scores of a run: the newest scoring unless ``scoring_id`` is given, by
        (case_id, replay, scorer_index); ``ordered=False``: in the order they were written."""
        scoring_id = scoring_id or self.latest_scoring(run_id)
        order = " ORDER BY case_id, replay, scorer_index" if ordered else ""
        return self._frame(
            f"SELECT * FROM scores WHERE run_id = ? AND scoring_id = ?{order}",
            [run_id, scoring_id],
        )

    def latest_scoring(self, run_id: str) -> str:
        rows = self._con.execute(
            "SELECT scoring_id FROM scorings WHERE run_id = ? ORDER BY created_at DESC, scoring_id "
            "DESC LIMIT 1",
            [run_id],
        ).fetchall()
        return rows[0][0] if rows else initial_scoring_id(run_id)

    def scorings(self, run_id: str) -> pl.DataFrame:
        return self._frame("SELECT * FROM scorings WHERE run_id = ? ORDER BY created_at", [run_id])

    def completed(self, run_id: str) -> set[tuple[str, int]]:
        """(case_id, replay) pairs already stored for a run (what --resume skips)."""
        rows = self._con.execute(
            "SELECT case_id, replay FROM outputs WHERE run_id = ?", [run_id]
        ).fetchall()
        return {(c, int(r)) for c, r in rows}

    def latest_flakes(self, config_hash: str) -> pl.DataFrame:
        return self._frame(
            "SELECT case_id, tags, runs, flips, flake_rate, measured_at FROM flakes "
            "WHERE config_hash = ? AND measured_at = (SELECT max(measured_at) FROM flakes "
            "WHERE config_hash = ?) ORDER BY case_id",
            [config_hash, config_hash],
        )

    def query(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        """Run a read-only SQL query and return a Polars frame (for notebooks)."""
        return self._frame(sql, list(params))

    # -- judges: human labels, calibration records, pairwise judgments -----------------------

    def save_human_labels(self, labels: pl.DataFrame) -> int:
        """Store human labels (the :data:`HUMAN_LABEL_SCHEMA` columns but ``imported_at``);
        returns how many stored labels they replaced.

        A label replaces a stored one with the same (case_id, output_hash, rater, scorer), so
        importing a file twice stores each label once (the newer value wins).
        """
        columns = [c for c in HUMAN_LABEL_SCHEMA if c != "imported_at"]
        frame = labels.select(
            *(pl.col(c).cast(HUMAN_LABEL_SCHEMA[c]) for c in columns),
            pl.lit(_now()).dt.cast_time_unit("us").alias("imported_at"),
        )
        same = (
            "coalesce(h.case_id, '') = coalesce(b.case_id, '') AND coalesce(h.output_hash, '') "
            "= coalesce(b.output_hash, '') AND h.rater = b.rater AND h.scorer = b.scorer"
        )
        with self._transaction():
            self._con.register("_new_labels", frame.to_arrow())
            try:
                where = f"WHERE EXISTS (SELECT 1 FROM _new_labels b WHERE {same})"
                replaced = self._con.execute(
                    f"SELECT count(*) FROM human_labels h {where}"
                ).fetchall()[0][0]
                self._con.execute(f"DELETE FROM human_labels h {where}")
            finally:
                self._con.unregister("_new_labels")
            self._append("human_labels", frame)
        return int(replaced)

    def human_labels(self, scorer: str | None = None) -> pl.DataFrame:
        """Stored human labels (only ``scorer``'s when given), in import order."""
        if not self._has_table("human_labels"):
            return pl.DataFrame(schema=HUMAN_LABEL_SCHEMA)
        where, params = ("WHERE scorer = ?", [scorer]) if scorer else ("", [])
        return self._frame(
            f"SELECT * FROM human_labels {where} "
            "ORDER BY imported_at, source, rater, case_id, output_hash",
            params,
        )

    def save_calibration(self, row: dict[str, Any]) -> None:
        """Store a judge calibration row (``Calibration.to_row()``, the CALIBRATION_SCHEMA
        columns)."""
        frame = pl.DataFrame([row], schema=CALIBRATION_SCHEMA)
        with self._transaction():
            self._append("calibrations", frame)

    def calibrations(self) -> pl.DataFrame:
        """Every calibration record, oldest first (the gate uses the latest per judge+rubric)."""
        if not self._has_table("calibrations"):
            return pl.DataFrame(schema=CALIBRATION_SCHEMA)
        return self._frame("SELECT * FROM calibrations ORDER BY created_at")

    def latest_calibration_row(self, judge_model: str, rubric_hash: str) -> dict[str, Any] | None:
        """The newest calibration row of a judge model with a rubric, or None (the judges layer
        turns it into a record: :func:`evalkit.judges.calibration.latest_calibration`)."""
        if not self._has_table("calibrations"):
            return None
        rows = self._frame(
            "SELECT * FROM calibrations WHERE judge_model = ? AND rubric_hash = ? "
            "ORDER BY created_at DESC LIMIT 1",
            [judge_model, rubric_hash],
        )
        return rows.row(0, named=True) if rows.height else None

    def save_pairwise_judgments(self, judgments: pl.DataFrame) -> None:
        """Store pairwise judge verdicts (the :data:`PAIRWISE_SCHEMA` columns). They replace the
        stored ones of the same (base run, candidate run, judge model, rubric hash)."""
        frame = judgments.select(
            [pl.col(c).cast(t) for c, t in PAIRWISE_SCHEMA.items() if c != "created_at"]
        ).with_columns(pl.lit(_now()).dt.cast_time_unit("us").alias("created_at"))
        keys = frame.select("base_run_id", "cand_run_id", "judge_model", "rubric_hash").unique()
        with self._transaction():
            for base, cand, model, rubric_hash in keys.rows():
                self._con.execute(
                    "DELETE FROM pairwise_judgments WHERE base_run_id = ? AND cand_run_id = ? "
                    "AND judge_model = ? AND rubric_hash = ?",
                    [base, cand, model, rubric_hash],
                )
            self._append("pairwise_judgments", frame)

    def pairwise_judgments(
        self,
        base_run_id: str | None = None,
        cand_run_id: str | None = None,
        *,
        judge_model: str | None = None,
        rubric_hash: str | None = None,
    ) -> pl.DataFrame:
        """Stored pairwise verdicts, filtered by whichever arguments are given."""
        if not self._has_table("pairwise_judgments"):
            return pl.DataFrame(schema=PAIRWISE_SCHEMA)
        filters = {
            "base_run_id": base_run_id,
            "cand_run_id": cand_run_id,
            "judge_model": judge_model,
            "rubric_hash": rubric_hash,
        }
        given = {k: v for k, v in filters.items() if v is not None}
        where = " AND ".join(f"{k} = ?" for k in given)
        return self._frame(
            f"SELECT * FROM pairwise_judgments {'WHERE ' + where if where else ''} "
            "ORDER BY base_run_id, cand_run_id, case_id",
            list(given.values()),
        )

    def _has_table(self, name: str) -> bool:
        """False for a store created before the table existed and opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()
        return bool(rows[0][0])

    # -- internals --------------------------------------------------------------------------

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        return self._con.sql(sql, params=list(params or [])).pl()

    def _append(self, table: str, frame: pl.DataFrame) -> None:
        name = f"_batch_{table}"
        self._con.register(name, frame.to_arrow())
        try:
            columns = ", ".join(frame.columns)
            self._con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {name}")
        finally:
            self._con.unregister(name)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._con)


class _Transaction:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def __enter__(self) -> None:
        self._con.execute("BEGIN TRANSACTION")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._con.execute("ROLLBACK" if exc_type else "COMMIT")


def _string_lists(values: Sequence[Sequence[str]]) -> pl.Series:
    """A ``list[str]`` Series named ``tags``, built by grouping the flattened strings: built
    from Python lists, Polars makes one Series per row (1-3 s for 100k cases; this takes 0.1 s).

    Examples:
        >>> _string_lists([("a", "b"), (), ("c",)]).to_list()
        [['a', 'b'], [], ['c']]
    """
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    flat = pl.Series("tags", [x for v in values for x in v], dtype=pl.String)
    rows = pl.Series("row", np.repeat(np.arange(len(values)), lengths))
    grouped = pl.DataFrame([rows, flat]).group_by("row", maintain_order=True).agg("tags")
    every = pl.DataFrame({"row": np.arange(len(values))})  # rows without strings: empty lists
    lists = every.join(grouped, on="row", how="left", maintain_order="left")["tags"]
    return lists.fill_null(pl.lit([], pl.List(pl.String)))


def initial_scoring_id(run_id: str) -> str:
    return f"{run_id}/s0"


# -- the storage boundary: registered secrets are never written ----------------------------------


def _scrub(frame: pl.DataFrame, columns: dict[str, Callable[[str], str]]) -> pl.DataFrame:
    """``frame`` with each named string column passed through its redaction (a no-op when no
    secret is registered)."""
    if frame.is_empty() or not has_secrets():
        return frame
    return frame.with_columns(
        pl.col(name).map_elements(fn, return_dtype=pl.String, skip_nulls=True)
        for name, fn in columns.items()
        if name in frame.columns and frame.schema[name] == pl.String
    )


def _scrub_outputs(frame: pl.DataFrame) -> pl.DataFrame:
    # Output text keeps every byte but a registered key; errors lose anything key-shaped.
    return _scrub(
        frame,
        {"text": redact_known, "tool_calls": _scrub_json, "error": redact_secrets,
         "fail_reason": redact_secrets},
    )  # fmt: skip


def _scrub_scores(frame: pl.DataFrame) -> pl.DataFrame:
    return _scrub(frame, {"reason": redact_secrets, "details": _scrub_json})


def _scrub_json(text: str) -> str:
    """A JSON document without registered keys: scrubbed value by value, so the result is still
    valid JSON (a key inside an escaped string is found after decoding)."""
    if not has_secrets() or (redact_known(text) == text and "\\u" not in text):
        return text  # keys are plain ASCII: one hidden in the JSON would need a \u escape
    try:
        value = json.loads(text)
    except ValueError:
        return redact_known(text)
    cleaned = _scrub_value(value)
    return text if cleaned == value else json.dumps(cleaned, ensure_ascii=False)


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_known(value)
    if isinstance(value, list):
        return [_scrub_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    return value
