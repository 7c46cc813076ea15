"""The measured flake lists: each measurement of which cases change verdict when nothing
changed, per configuration (mixed into :class:`evalkit.store.Store`; `evalkit flakes measure`
writes them, the gate reads them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import polars as pl


class FlakeRecords:
    """Store methods for flake measurements (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]
    _append: Callable[[str, pl.DataFrame], None]
    _transaction: Callable[[], Any]
    _has_column: Callable[[str, str], bool]

    def save_flakes(self, config_hash: str, flakes: pl.DataFrame) -> None:
        """Store one flake measurement (columns case_id, tags, runs, flips, flake_rate, and
        case_hash: the hash of each case version measured; NULL when the frame has none)."""
        import polars as pl

        from evalkit.provenance import current_writer

        case_hash = pl.col("case_hash") if "case_hash" in flakes.columns else pl.lit(None)
        written_by = current_writer().to_json()
        frame = flakes.select(
            pl.lit(config_hash).alias("config_hash"),
            pl.lit(dt.datetime.now(dt.UTC)).dt.cast_time_unit("us").alias("measured_at"),
            "case_id",
            pl.col("tags").cast(pl.List(pl.String)),
            pl.col("runs").cast(pl.Int32),
            pl.col("flips").cast(pl.Int32),
            pl.col("flake_rate").cast(pl.Float64),
            case_hash.cast(pl.String).alias("case_hash"),
            pl.lit(written_by, pl.String).alias("written_by"),
        )
        with self._transaction():
            self._append("flakes", frame)

    def latest_flakes(self, config_hash: str) -> pl.DataFrame:
        """The newest flake measurement of a configuration (``case_hash`` NULL where it was
        measured before evalkit recorded one)."""
        return self._frame(
            f"SELECT case_id, tags, runs, flips, flake_rate, measured_at, {self._flake_hash()} "
            "FROM flakes WHERE config_hash = ? AND measured_at = (SELECT max(measured_at) "
            "FROM flakes WHERE config_hash = ?) ORDER BY case_id",
            [config_hash, config_hash],
        )

    def flake_measurements(self, config_hashes: Sequence[str]) -> pl.DataFrame:
        """Every stored flake row of these configurations, newest first, with columns
        ``config_hash, measured_at, case_id, case_hash, runs, flips, flake_rate, written_by``
        (``case_hash`` NULL where it was measured before evalkit recorded one; ``written_by``,
        `evalkit.provenance.Writer` JSON, NULL where it was measured before evalkit recorded
        who measured it)."""
        written_by = (
            "written_by"
            if self._has_column("flakes", "written_by")
            else "CAST(NULL AS VARCHAR) AS written_by"
        )
        return self._frame(
            f"SELECT config_hash, measured_at, case_id, {self._flake_hash()}, runs, flips, "
            f"flake_rate, {written_by} FROM flakes "
            "WHERE config_hash IN (SELECT UNNEST(?::VARCHAR[])) "
            "ORDER BY measured_at DESC, config_hash, case_id",
            [list(config_hashes)],
        )

    def _flake_hash(self) -> str:
        """The flakes' ``case_hash`` column, or NULL in an older store opened read-only."""
        if self._has_column("flakes", "case_hash"):
            return "case_hash"
        return "CAST(NULL AS VARCHAR) AS case_hash"
