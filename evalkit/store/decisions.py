"""What people decided, recorded with who, why and when: gate overrides (each accepting named
blocking findings) and promoted baselines."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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


def _writer(who: str) -> str:
    """Who writes a decision record now, from where (`evalkit.provenance.Writer`, JSON)."""
    from evalkit.provenance import current_writer

    return current_writer(who).to_json()


class DecisionRecords:
    """Store methods for overrides and baselines (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]

    def save_override(
        self, base_run_id: str, cand_run_id: str, who: str, reason: str,
        findings: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """Record a gate override that accepts the blocking findings with these ``findings``
        keys (``Finding.key``); a written reason and a name are required."""
        who, reason = _required(who, reason, "an override")
        self._con.execute(
            "INSERT INTO overrides (base_run_id, cand_run_id, who, reason, created_at, findings, "
            "written_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [base_run_id, cand_run_id, who, reason, _now(), json.dumps(sorted(findings)),
             _writer(who)],
        )  # fmt: skip

    def overrides(self, base_run_id: str, cand_run_id: str) -> pl.DataFrame:
        """The overrides of a pair: ``who, reason, created_at, findings`` (a list of keys),
        ``written_by`` (`evalkit.provenance.Writer` JSON; null: an unknown writer)."""
        frame = self._frame(
            f"SELECT who, reason, created_at, findings, {self._written_by('overrides')} FROM "
            "overrides WHERE base_run_id = ? AND cand_run_id = ? ORDER BY created_at",
            [base_run_id, cand_run_id],
        )
        import polars as pl

        keys = [json.loads(f) if f else [] for f in frame["findings"]]
        return frame.with_columns(pl.Series("findings", keys, dtype=pl.List(pl.String)))

    def promote_baseline(
        self, suite: str, run_id: str, who: str, reason: str, tier: str | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Make ``run_id`` the baseline of ``suite`` (of its ``tier``, a named selection) from
        now on, pinning ``policy`` (the gate policy in its manifest form) when given; the
        history is kept."""
        who, reason = _required(who, reason, "promoting a baseline")
        pinned = json.dumps(dict(policy), sort_keys=True) if policy is not None else None
        self._con.execute(
            "INSERT INTO baselines (suite, run_id, who, reason, promoted_at, tier, policy, "
            "written_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [suite, run_id, who, reason, _now(), tier, pinned, _writer(who)],
        )

    def baselines(self, suite: str | None = None) -> pl.DataFrame:
        """Every promotion, newest first: ``suite, tier, run_id, who, reason, promoted_at,
        policy`` (the pinned gate policy as JSON text; null when the promotion pinned none),
        ``written_by`` (`evalkit.provenance.Writer` JSON; null: an unknown writer)."""
        where, params = ("WHERE suite = ?", [suite]) if suite else ("", [])
        policy = "policy" if self._has_policy_column() else "NULL::VARCHAR AS policy"
        return self._frame(
            f"SELECT suite, tier, run_id, who, reason, promoted_at, {policy}, "
            f"{self._written_by('baselines')} FROM baselines {where} ORDER BY promoted_at DESC",
            params,
        )

    def pinned_policy(self, run_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(the gate policy, the promotion: ``who, reason, promoted_at``) of the newest
        promotion of ``run_id`` that pinned a policy; None when none did."""
        if not self._has_policy_column():
            return None  # a read-only store from before policies were pinned
        rows = self._con.execute(
            "SELECT policy, who, reason, promoted_at FROM baselines WHERE run_id = ? AND "
            "policy IS NOT NULL ORDER BY promoted_at DESC LIMIT 1",
            [run_id],
        ).fetchall()
        if not rows:
            return None
        policy, who, reason, promoted_at = rows[0]
        return json.loads(policy), {"who": who, "reason": reason, "promoted_at": promoted_at}

    def _written_by(self, table: str) -> str:
        """The ``written_by`` column of ``table``, or NULL in an older store opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = ? "
            "AND column_name = 'written_by'",
            [table],
        ).fetchall()
        return "written_by" if rows[0][0] else "NULL::VARCHAR AS written_by"

    def _has_policy_column(self) -> bool:
        """False for a store created before promotions pinned a policy, opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'baselines' "
            "AND column_name = 'policy'"
        ).fetchall()
        return bool(rows[0][0])

    def current_baseline(self, suite: str, tier: str | None = None) -> str | None:
        """The run id promoted last for ``suite`` (and ``tier``; None = the full suite)."""
        import polars as pl

        rows = self.baselines(suite).filter(
            pl.col("tier").is_null() if tier is None else pl.col("tier") == tier
        )
        return rows["run_id"][0] if rows.height else None
