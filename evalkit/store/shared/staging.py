"""A published run's large tables on their way into a local store: read from the shared tables
batch by batch into a scratch DuckDB file (its memory limited: it spills to disk), sealed as they
come, and checked there by SQL as :func:`~evalkit.store.shared.verify.verify_run` checks frames,
so a pull of a million outputs holds one batch at a time. The local store then copies the
checked file's rows in one transaction (:meth:`evalkit.store.Store.import_staged`).

Examples:
    >>> import pyarrow as pa
    >>> with RunStage() as stage:
    ...     rows = pa.table({"run_id": ["r"], "case_id": ["a"]})
    ...     stage.add("cases", rows.to_batches(), rows.schema, "run_id")
    ...     stage.rows("SELECT count(*) FROM cases")
    1
    [(1,)]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.store.shared.seals import SCRATCH_MEMORY, SealBuilder, empty_seal
from evalkit.store.shared.verify import IDENTITY, SEALED_BY, UnverifiedRun, _seal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import duckdb
    import polars as pl
    import pyarrow as pa


class RunStage:
    """Tables staged in a scratch DuckDB file, each with the seals of its rows per group."""

    def __init__(self) -> None:
        import duckdb

        self._folder = Path(tempfile.mkdtemp(prefix="evalkit-pull-"))
        self.path = self._folder / "staged.duckdb"
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(str(self.path))
        self._con.execute(
            f"SET memory_limit = '{SCRATCH_MEMORY}'; SET threads = 1; SET TimeZone = 'UTC'; "
            f"SET temp_directory = '{self._folder}'; SET preserve_insertion_order = false"
        )
        self.seals: dict[str, dict[Any, dict[str, Any]]] = {}
        self.counts: dict[str, int] = {}
        #: The shared data files each table was staged from (``tables.planned_files``).
        self.files: dict[str, list[list[Any]]] = {}
        #: The most rows held at once while staging (one batch's).
        self.largest_batch = 0

    def add(
        self, name: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema, group: str
    ) -> int:
        """Stage ``batches`` (of ``schema``) as table ``name``, sealing them per ``group``
        value; returns the rows staged."""
        con = self._connection()
        con.register("_empty", schema.empty_table())
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _empty")
        con.unregister("_empty")
        staged = 0
        with SealBuilder(group) as seals:
            for batch in batches:
                if not batch.num_rows:
                    continue
                seals.add(batch)
                con.register("_batch", batch)
                try:
                    con.execute(f"INSERT INTO {name} SELECT * FROM _batch")
                finally:
                    con.unregister("_batch")
                staged += batch.num_rows
                self.largest_batch = max(self.largest_batch, batch.num_rows)
            self.seals[name] = seals.seals()
        self.counts[name] = staged
        return staged

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a (small) query over the staged tables."""
        return self._connection().execute(sql, list(params)).fetchall()

    def seal(self, name: str, group: Any) -> dict[str, Any]:
        """The seal of the staged rows of ``name`` in ``group`` (no rows: the empty seal)."""
        return self.seals.get(name, {}).get(group) or empty_seal()

    def finish(self) -> Path:
        """Close the scratch file for another connection to read it; returns its path."""
        if self._con is not None:
            self._con.execute("CHECKPOINT")
            self._con.close()
            self._con = None
        return self.path

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise RuntimeError("the stage is finished")
        return self._con

    def __enter__(self) -> RunStage:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        shutil.rmtree(self._folder, ignore_errors=True)


def verify_staged(run_id: str, runs: pl.DataFrame, scorings: pl.DataFrame, stage: RunStage) -> None:
    """:func:`~evalkit.store.shared.verify.verify_run` of a run whose ``runs`` and
    ``scorings`` rows are frames and whose cases, outputs, scores and scoring cases are
    staged: the same checks, in the same order, with the same messages.

    Raises:
        UnverifiedRun: the first table found not to be what the push sealed.
    """
    if runs.height != 1:
        problem = "has no row for it" if not runs.height else f"has {runs.height} rows for it"
        raise UnverifiedRun(run_id, "runs", f"{problem} (a published run has one)")
    for name in ("cases", "outputs", "scorings", "scores", "scoring_cases"):
        if name == "scorings":
            doubled = scorings.height - scorings.select("scoring_id").unique().height
        else:
            key = ", ".join(IDENTITY[name])
            ((doubled,),) = stage.rows(
                f"SELECT count(*) - (SELECT count(*) FROM (SELECT DISTINCT {key} FROM {name})) "
                f"FROM {name}"
            )
        if doubled:
            what = ", ".join(IDENTITY[name])
            raise UnverifiedRun(run_id, name, f"has {doubled} rows repeating a ({what}) of another")
    for name in ("outputs", "scores", "scoring_cases"):
        ((count, shown),) = stage.rows(
            f"SELECT count(*), list(DISTINCT t.case_id ORDER BY t.case_id)[1:3] FROM {name} t "
            "WHERE t.case_id IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM cases c WHERE c.case_id = t.case_id)"
        )
        if count:
            raise UnverifiedRun(
                run_id, name, f"has {count} rows for case ids the run does not "
                f"have (e.g. {', '.join(str(c) for c in shown or [])})"
            )  # fmt: skip
    ((orphans,),) = stage.rows(
        "SELECT count(*) FROM scores WHERE scoring_id IS NOT NULL "
        "AND NOT list_contains($1::VARCHAR[], scoring_id)",
        [scorings["scoring_id"].drop_nulls().to_list()],
    )
    if orphans:
        raise UnverifiedRun(run_id, "scores", f"has {orphans} rows of no scoring of the run")
    sealed = _seal(runs.row(0, named=True))
    if sealed is None:
        return  # pushed before seals: the checks above are all there is
    _check(run_id, sealed, {name: stage.seal(name, run_id) for name in SEALED_BY["runs"]})
    for scoring in scorings.iter_rows(named=True):
        scoring_seal = _seal(scoring)
        if scoring_seal is None:
            raise UnverifiedRun(
                run_id, "scorings", f"has scoring {scoring['scoring_id']} with no seal"
            )
        got = {name: stage.seal(name, scoring["scoring_id"]) for name in SEALED_BY["scorings"]}
        _check(run_id, scoring_seal, got)


def _check(run_id: str, seal: dict[str, Any], got: dict[str, dict[str, Any]]) -> None:
    for name, found in got.items():
        want = seal.get(name)
        if not isinstance(want, dict):
            raise UnverifiedRun(run_id, name, "is missing from the run's seal")
        if found["rows"] != want.get("rows"):
            raise UnverifiedRun(
                run_id, name, f"holds {found['rows']} rows of it where its push sealed "
                f"{want.get('rows')}"
            )  # fmt: skip
        if found["sha256"] != want.get("sha256"):
            raise UnverifiedRun(run_id, name, "holds rows whose content differs from its seal")
