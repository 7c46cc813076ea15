"""Which decision records the shared store takes and hands out (`evalkit.provenance`).

A push from an untrusted context — a pull-request job — publishes runs, never promotions,
policy promotions, flake lists or overrides; from any context, a record a pull-request job
wrote stays local. A pull takes the newest *trusted* promotion: one whose writer the policy it
pins trusts, from where the pull runs.

Examples:
    >>> from evalkit.provenance import Writer
    >>> pr = Writer(ci="github", event="pull_request", job="1", pull_request=True)
    >>> untrusted_push(pr)
    'a pull-request job publishes runs, never promotions, flake lists, policies or overrides'
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from evalkit.provenance import Writer, current_writer, trusted_rules, why_untrusted

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

#: The shared tables that hold decision records (with a ``written_by`` column).
DECISION_TABLES = ("overrides", "flakes", "baselines")


def untrusted_push(context: Writer) -> str | None:
    """Why a push from ``context`` publishes no decision record (None: it may)."""
    if context.pull_request:
        return (
            "a pull-request job publishes runs, never promotions, flake lists, policies or "
            "overrides"
        )
    return None


def publishable(name: str, rows: pa.Table, context: Writer | None = None) -> pa.Table:
    """The rows of shared table ``name`` a push from ``context`` may publish: all of a run's
    table; of a decision table none from a pull-request job, and never one a pull-request job
    wrote."""
    import pyarrow as pa

    if name not in DECISION_TABLES or "written_by" not in rows.column_names:
        return rows
    context = context or current_writer()
    if untrusted_push(context):
        return rows.slice(0, 0)
    keep = [
        not ((w := Writer.from_json(text)) is not None and w.pull_request)
        for text in rows.column("written_by").to_pylist()
    ]
    return rows.filter(pa.array(keep, pa.bool_()))


def trusted_promotions(rows: pl.DataFrame, context: Writer | None = None) -> pl.DataFrame:
    """The promotions of ``rows`` (newest first) a gate running in ``context`` trusts, each
    under the writers its own pinned policy names."""
    import polars as pl

    if "written_by" not in rows.columns:
        rows = rows.with_columns(written_by=pl.lit(None, pl.String))
    context = context or current_writer()
    keep = []
    for row in rows.iter_rows(named=True):
        policy = json.loads(row["policy"]) if row.get("policy") else None
        writer = Writer.from_json(row.get("written_by"))
        keep.append(why_untrusted(writer, context, trusted_rules(policy)) is None)
    return rows.filter(pl.Series(keep, dtype=pl.Boolean))
