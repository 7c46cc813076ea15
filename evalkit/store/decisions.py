"""What people decided, recorded with who, why and when: gate overrides (each accepting named
blocking findings) and promoted baselines."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evalkit.errors import StoreError

if TYPE_CHECKING:
    import duckdb
    import polars as pl


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _required(who: str, reason: str, what: str) -> tuple[str, str]:
    if not reason or not reason.strip():
        raise StoreError(f"{what} needs a written reason (--reason '...')")
    if not who or not who.strip():
        raise StoreError(f"{what} needs a name (--who NAME)")
    return who.strip(), reason.strip()


class DecisionRecords:
    """Store methods for overrides and baselines (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    _con: duckdb.DuckDBPyConnection
    _frame: Callable[..., pl.DataFrame]

    def save_override(
        self, base_run_id: str, cand_run_id: str, who: str, reason: str,
        findings: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """Record a gate override that accepts the blocking findings with these ``findings``
        keys (``Finding.key``); a written reason and a name are required."""
        who, reason = _required(who, reason, "an override")
        self._con.execute(
            "INSERT INTO overrides (base_run_id, cand_run_id, who, reason, created_at, findings) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [base_run_id, cand_run_id, who, reason, _now(), json.dumps(sorted(findings))],
        )

    def overrides(self, base_run_id: str, cand_run_id: str) -> pl.DataFrame:
        """The overrides of a pair: ``who, reason, created_at, findings`` (a list of keys)."""
        frame = self._frame(
            "SELECT who, reason, created_at, findings FROM overrides WHERE base_run_id = ? AND "
            "cand_run_id = ? ORDER BY created_at",
            [base_run_id, cand_run_id],
        )
        import polars as pl

        keys = [json.loads(f) if f else [] for f in frame["findings"]]
        return frame.with_columns(pl.Series("findings", keys, dtype=pl.List(pl.String)))

    def promote_baseline(
        self, suite: str, run_id: str, who: str, reason: str, tier: str | None = None
    ) -> None:
        """Make ``run_id`` the baseline of ``suite`` (of its ``tier``, a named selection) from
        now on; the history is kept."""
        who, reason = _required(who, reason, "promoting a baseline")
        self._con.execute(
            "INSERT INTO baselines (suite, run_id, who, reason, promoted_at, tier) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [suite, run_id, who, reason, _now(), tier],
        )

    def baselines(self, suite: str | None = None) -> pl.DataFrame:
        """Every promotion, newest first: ``suite, tier, run_id, who, reason, promoted_at``."""
        where, params = ("WHERE suite = ?", [suite]) if suite else ("", [])
        return self._frame(
            f"SELECT suite, tier, run_id, who, reason, promoted_at FROM baselines {where} "
            "ORDER BY promoted_at DESC",
            params,
        )

    def current_baseline(self, suite: str, tier: str | None = None) -> str | None:
        """The run id promoted last for ``suite`` (and ``tier``; None = the full suite)."""
        import polars as pl

        rows = self.baselines(suite).filter(
            pl.col("tier").is_null() if tier is None else pl.col("tier") == tier
        )
        return rows["run_id"][0] if rows.height else None
