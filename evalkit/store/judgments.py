"""What the store keeps for model judges: human labels, calibration rows and pairwise
judgments (mixed into :class:`evalkit.store.Store`; the judges layer gives them meaning)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evalkit.store import schema
from evalkit.store.arrow_stream import ArrowStream

if TYPE_CHECKING:
    import duckdb
    import polars as pl


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class JudgmentRecords:
    """Store methods for judge evidence (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]
    _append: Callable[[str, pl.DataFrame], None]
    _transaction: Callable[[], Any]
    _has_table: Callable[[str], bool]
    records: Callable[..., list[dict[str, Any]]]

    def save_human_labels(self, labels: pl.DataFrame) -> int:
        """Store human labels (the :data:`HUMAN_LABEL_SCHEMA` columns but ``imported_at``);
        returns how many stored labels they replaced.

        A label replaces a stored one with the same (case_id, output_hash, rater, scorer), so
        importing a file twice stores each label once (the newer value wins).
        """
        import polars as pl

        columns = [c for c in schema.HUMAN_LABEL_SCHEMA if c != "imported_at"]
        frame = labels.select(
            *(pl.col(c).cast(schema.HUMAN_LABEL_SCHEMA[c]) for c in columns),
            pl.lit(_now()).dt.cast_time_unit("us").alias("imported_at"),
        )
        same = (
            "coalesce(h.case_id, '') = coalesce(b.case_id, '') AND coalesce(h.output_hash, '') "
            "= coalesce(b.output_hash, '') AND h.rater = b.rater AND h.scorer = b.scorer"
        )
        with self._transaction():
            # the Arrow C stream, as Store._append: no pyarrow (an optional extra) needed
            self._con.register("_new_labels", ArrowStream(frame))
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
        import polars as pl

        if not self._has_table("human_labels"):
            return pl.DataFrame(schema=schema.HUMAN_LABEL_SCHEMA)
        where, params = ("WHERE scorer = ?", [scorer]) if scorer else ("", [])
        return self._frame(
            f"SELECT * FROM human_labels {where} "
            "ORDER BY imported_at, source, rater, case_id, output_hash",
            params,
        )

    def save_calibration(self, row: dict[str, Any]) -> None:
        """Store a judge calibration row (``Calibration.to_row()``, the CALIBRATION_SCHEMA
        columns)."""
        import polars as pl

        from evalkit.provenance import current_writer

        row = {"written_by": current_writer().to_json(), **row}
        frame = pl.DataFrame([row], schema=schema.CALIBRATION_SCHEMA)
        with self._transaction():
            self._append("calibrations", frame)

    def calibrations(self) -> pl.DataFrame:
        """Every calibration record, oldest first (the gate uses the latest per judge+rubric)."""
        import polars as pl

        if not self._has_table("calibrations"):
            return pl.DataFrame(schema=schema.CALIBRATION_SCHEMA)
        return self._frame("SELECT * FROM calibrations ORDER BY created_at")

    def latest_calibration_row(self, judge_model: str, rubric_hash: str) -> dict[str, Any] | None:
        """The newest calibration row of a judge model with a rubric, or None (the judges layer
        turns it into a record: :func:`evalkit.judges.calibration.latest_calibration`)."""
        if not self._has_table("calibrations"):
            return None
        rows = self.records(
            "SELECT * FROM calibrations WHERE judge_model = ? AND rubric_hash = ? "
            "ORDER BY created_at DESC LIMIT 1",
            [judge_model, rubric_hash],
        )
        return rows[0] if rows else None

    def save_pairwise_judgments(self, judgments: pl.DataFrame) -> None:
        """Store pairwise judge verdicts (the :data:`PAIRWISE_SCHEMA` columns). They replace the
        stored ones of the same (base run, candidate run, judge model, rubric hash)."""
        import polars as pl

        frame = judgments.select(
            [pl.col(c).cast(t) for c, t in schema.PAIRWISE_SCHEMA.items() if c != "created_at"]
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
        import polars as pl

        if not self._has_table("pairwise_judgments"):
            return pl.DataFrame(schema=schema.PAIRWISE_SCHEMA)
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
