"""Reading a run back: the runs, a run reference resolved, and a run's manifest, cases, outputs,
scores and scorings as Polars frames (mixed into :class:`evalkit.store.Store`).

Every per-run frame takes a run id or a label (:meth:`RunReads.resolve_run`); an unknown one
is an error naming the labels the store has, never an empty frame.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import StoreError
from evalkit.run_manifest import RunManifest
from evalkit.store.arrow_stream import ArrowStream
from evalkit.store.schema import initial_scoring_id

if TYPE_CHECKING:
    import duckdb
    import polars as pl


class RunReads:
    """Store methods that read runs (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    path: Path
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]

    def runs(self) -> pl.DataFrame:
        return self._frame(
            "SELECT run_id, label, created_at, finished_at, config_hash, status, manifest, summary "
            "FROM runs ORDER BY created_at"
        )

    def resolve_run(self, ref: str) -> str:
        """A run id from an id, a unique id prefix, a label that names one run, or
        ``label@latest`` (the newest run with that label). A label that several runs carry
        resolves to its one *complete* run when exactly one is complete: a run that failed or
        was killed does not capture the label of the run it was meant to replace.

        Raises:
            StoreError: no such run, or a label or prefix that names several runs (listed).
        """
        label, latest = (ref[: -len("@latest")], True) if ref.endswith("@latest") else (ref, False)
        exact = self._con.execute("SELECT run_id FROM runs WHERE run_id = ?", [ref]).fetchall()
        if exact:
            return exact[0][0]
        rows = self._con.execute(
            "SELECT run_id, created_at, status FROM runs WHERE label = ? ORDER BY created_at DESC",
            [label],
        ).fetchall()
        complete = [r for r in rows if r[2] == "complete"]
        if len(rows) > 1 and not latest and len(complete) == 1:
            return complete[0][0]
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

    def manifest(self, run_id: str) -> RunManifest:
        """The run's manifest, migrated from whichever evalkit version stored it.

        Raises:
            StoreError: no such run, or a manifest a newer evalkit wrote (one line).
        """
        rows = self._con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return RunManifest.from_stored(json.loads(rows[0][0]), source=f"{self.path}: run {run_id}")

    def run_status(self, run_id: str) -> str:
        rows = self._con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise StoreError(f"{self.path}: no run {run_id!r}")
        return rows[0][0]

    def cases(
        self,
        run_id: str,
        *,
        without: Sequence[str] = (),
        case_ids: Sequence[str] | None = None,
        scoring_id: str | None = None,
        column: str | None = None,
    ) -> pl.DataFrame:
        """The cases a run executed. After a rescore against edited expectations, ``case_hash``
        is the hash the newest scoring (or ``scoring_id``) scored against (the stored outputs
        are unchanged). ``run_id`` may be a label (`resolve_run`), as for every per-run frame.
        ``without``: columns left out (the gate leaves each case's ``input`` in the store);
        ``case_ids``: only these cases; ``column``: only ``case_id`` and this column (the gate
        reads a run's cases a column at a time: `evalkit.compare.case_columns`)."""
        run_id = self.resolve_run(run_id)
        scoring_id = scoring_id or self.latest_scoring(run_id)
        columns = _columns("c.*", without, {"input", "provenance", "source"})
        params: list[Any] = [scoring_id, run_id]
        where = _only_cases("c.case_id", case_ids, params)
        rescored = self._con.execute(
            "SELECT count(*) FROM scoring_cases WHERE scoring_id = ?", [scoring_id]
        ).fetchall()[0][0]
        if rescored:
            select = (
                f"SELECT {columns} REPLACE (coalesce(s.case_hash, c.case_hash) AS case_hash) "
                "FROM cases c LEFT JOIN scoring_cases s ON s.scoring_id = ? "
                "AND s.case_id = c.case_id"
            )
        else:  # no hash of its own: the rows as stored, in the order they were written
            select, params = f"SELECT {columns} FROM cases c", params[1:]
        select = f"{select} WHERE c.run_id = ?{where}"
        if column is not None:  # a name of the table's (the read's own columns): no injection
            if column not in self._frame(f"SELECT * FROM ({select}) LIMIT 0", params).columns:
                raise ValueError(f"no case column {column!r}")
            read = "case_id" if column == "case_id" else f"case_id, {column}"
            select = f"SELECT {read} FROM ({select})"
        frame = self._frame(select, params)
        # ordered by Polars, not DuckDB, and only when the rows were not written in order:
        # what DuckDB's sort of a million rows took stayed in the process
        ids = frame["case_id"]
        return frame if ids.is_sorted() else frame.sort("case_id", maintain_order=True)

    def outputs(
        self,
        run_id: str,
        *,
        ordered: bool = True,
        without: Sequence[str] = (),
        case_ids: Sequence[str] | None = None,
        case_range: tuple[str | None, str | None] = (None, None),
    ) -> pl.DataFrame:
        """A run's outputs by (case_id, replay); ``ordered=False``: in the order they were
        written, skipping a sort that costs more than the read at a million rows (the
        analysis groups them itself). ``without``: columns left out (the gate leaves the
        answers' text in the store); ``case_ids``: only these cases' rows; ``case_range``: only
        case ids from its first (inclusive) up to its second (exclusive), None: unbounded (the
        gate reads the usage figures a range of cases at a time, as it does `scores`).
        ``run_id`` may be a label: an unknown one is an error, never an empty frame."""
        run_id = self.resolve_run(run_id)
        order = " ORDER BY case_id, replay" if ordered else ""
        known = {"text", "tool_calls", "request_hash", "model", "fail_reason", "error"}
        known |= {"steps", "latency_ms", "prompt_tokens", "completion_tokens", "cost_usd"}
        columns = _columns("*", without, known | {"created_at"})
        params: list[Any] = [run_id]
        where = _only_cases("case_id", case_ids, params)
        for value, clause in zip(case_range, ("case_id >=", "case_id <"), strict=True):
            if value is not None:
                where += f" AND {clause} ?"
                params.append(value)
        return self._frame(f"SELECT {columns} FROM outputs WHERE run_id = ?{where}{order}", params)

    def scores(
        self,
        run_id: str,
        scoring_id: str | None = None,
        *,
        ordered: bool = True,
        without: Sequence[str] = (),
        case_ids: Sequence[str] | None = None,
        tier: int | None = None,
        case_range: tuple[str | None, str | None] = (None, None),
    ) -> pl.DataFrame:
        """Long scores of a run: the newest scoring unless ``scoring_id`` is given, by
        (case_id, replay, scorer_index); ``ordered=False``: in the order they were written.
        ``without``: columns left out (the gate leaves the scorers' reasons in the store);
        ``case_ids``: only these cases' rows; ``tier``: only this tier's rows (the gate holds
        the judges' alone); ``case_range``: only case ids from its first (inclusive) up to its
        second (exclusive), None: unbounded (the gate decides a range of cases at a time)."""
        run_id = self.resolve_run(run_id)
        scoring_id = scoring_id or self.latest_scoring(run_id)
        order = " ORDER BY case_id, replay, scorer_index" if ordered else ""
        columns = _columns("*", without, {"reason", "scoring_id"})
        params: list[Any] = [run_id, scoring_id]
        where = _only_cases("case_id", case_ids, params)
        bounds = zip((tier, *case_range), ("tier =", "case_id >=", "case_id <"), strict=True)
        for value, clause in bounds:
            if value is not None:
                where += f" AND {clause} ?"
                params.append(value)
        return self._frame(
            f"SELECT {columns} FROM scores WHERE run_id = ? AND scoring_id = ?{where}{order}",
            params,
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

    def query(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        """Run a read-only SQL query and return a Polars frame (for notebooks)."""
        return self._frame(sql, list(params))

    def query_with(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        one_thread: bool = False,
        **frames: pl.DataFrame,
    ) -> pl.DataFrame:
        """`query` with ``frames`` readable as tables by their names: DuckDB scans them through
        their Arrow C stream (no Python list of their values, no pyarrow). The gate joins a
        million case ids so; a name shadows a store table for this query alone.
        ``one_thread``: DuckDB runs it on one thread (each thread's scan buffers and partial
        groups are its own: a grouping over a million cases' score rows held 29 MiB less).

        Examples:
            >>> ids = pl.DataFrame({"case_id": ["a", "b"]})                # doctest: +SKIP
            >>> store.query_with("SELECT count(*) AS n FROM ids", ids=ids)  # doctest: +SKIP
        """
        for name, frame in frames.items():
            self._con.register(name, ArrowStream(frame))
        if one_thread:
            self._con.execute("SET threads = 1")
        try:
            return self._frame(sql, list(params))
        finally:
            if one_thread:
                self._con.execute("RESET threads")
            for name in frames:
                self._con.unregister(name)

    def records(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query and return its rows as dicts, without Polars (the run
        path's summary uses it).

        Examples:
            >>> store.records("SELECT count(*) AS n FROM runs")  # doctest: +SKIP
            [{'n': 2}]
        """
        result = self._con.execute(sql, list(params))
        names = [column[0] for column in result.description]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]

    def _has_column(self, table: str, column: str) -> bool:
        """False for a store created before the column existed and opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = ? "
            "AND column_name = ?",
            [table, column],
        ).fetchall()
        return bool(rows[0][0])

    def has_table(self, name: str) -> bool:
        """Whether the store has table ``name`` (a store of an older evalkit may lack one)."""
        return self._has_table(name)

    def _has_table(self, name: str) -> bool:
        """False for a store created before the table existed and opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()
        return bool(rows[0][0])


def _only_cases(column: str, case_ids: Sequence[str] | None, params: list[Any]) -> str:
    """The ``AND`` clause keeping only ``case_ids`` (none: every case), its parameter appended
    to ``params``."""
    if case_ids is None:
        return ""
    params.append(list(case_ids))
    return f" AND {column} IN (SELECT UNNEST(?::VARCHAR[]))"


def _columns(star: str, without: Sequence[str], known: set[str]) -> str:
    """``star`` less the ``without`` columns, each one of ``known`` (named in SQL: only known
    column names).

    Examples:
        >>> _columns("c.*", ["input"], {"input"})
        'c.* EXCLUDE (input)'
    """
    if not set(without) <= known:
        raise ValueError(f"unknown columns {sorted(set(without) - known)}")
    return f"{star} EXCLUDE ({', '.join(without)})" if without else star
