"""Which decision records the shared store takes and hands out (`evalkit.provenance`).

A push from an untrusted context — a pull-request job — publishes runs, never promotions,
policy promotions, flake lists or overrides; from any context, a record a pull-request job
wrote stays local, and so does the exam pinned with it (:func:`exams_of`). A pull takes the
newest *trusted* promotion: one whose writer the policy it pins trusts, from where the pull
runs, and the exams of the trusted promotions only.

Examples:
    >>> from evalkit.provenance import Writer
    >>> pr = Writer(ci="github", event="pull_request", job="1", pull_request=True)
    >>> untrusted_push(pr)
    'a pull-request job publishes runs, never promotions, flake lists, policies or overrides'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from evalkit.provenance import Writer, current_writer, trusted_rules, why_untrusted
from evalkit.store.shared.tables import arrow_frame

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


def exams_of(exams: pa.Table, promotions: pa.Table) -> pa.Table:
    """The rows of ``exams`` pinned with one of ``promotions`` (``baselines`` rows): the same
    run, promoted at the same instant (an exam is worth what its promotion is)."""
    import pyarrow as pa

    made = {(r["run_id"], r["promoted_at"]) for r in promotions.to_pylist()}
    keep = [
        (run_id, at) in made
        for run_id, at in zip(
            exams.column("run_id").to_pylist(), exams.column("promoted_at").to_pylist(), strict=True
        )
    ]
    return exams.filter(pa.array(keep, pa.bool_()))


def pulled_exams(
    read: Callable[[str, str, Iterable[str]], pa.Table], promotions: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The shared pinned exams of ``promotions`` (the trusted ones a pull takes) and their
    files, read with ``read(table, column, values)`` and verified against the seals their push
    recorded (:func:`evalkit.store.shared.verify.verify_exams`).

    Raises:
        UnverifiedRun: an exam's rows are not what its push sealed.
    """

    from evalkit.store.shared.verify import verify_exams

    runs = promotions["run_id"].unique().to_list()
    exams = exams_of(read("exams", "run_id", runs), promotions.to_arrow())
    files = read("exam_files", "exam_id", exams.column("exam_id").to_pylist())
    found = arrow_frame(exams), arrow_frame(files)
    verify_exams(*found)
    return found
