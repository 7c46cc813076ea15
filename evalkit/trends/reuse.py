"""Adaptive reuse, counted: per baseline and pinned exam, the gate decisions taken against it.

Every gate decision against a baseline is another query to the same cases, and a team that
reads the verdict and changes the candidate is using them adaptively: a holdout queried that
way stops telling how the system generalises (seed 003; Dwork et al., "The reusable holdout",
NIPS 2015). Replications found the effect milder in practice than in theory (Recht et al.,
2018–2019), which argues for counting the looks and rotating on a schedule rather than for
alarm. Runs alone do not measure it — a run nobody gated consults nothing — so the count is of
the decisions the gate log holds (`evalkit.store.gate_log`).

Examples:
    >>> reuse = gate_reuse(store)                        # doctest: +SKIP
    >>> reuse[0].base_run_id, reuse[0].gates              # doctest: +SKIP
    ('20261207-base', 2)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.trends.values import GateReuse

if TYPE_CHECKING:
    from evalkit.store import Store

#: The statuses that stopped a candidate.
_STOPPED = ("BLOCKED", "UNVERIFIED")


def gate_reuse(store: Store) -> tuple[GateReuse, ...]:
    """Per (baseline, pinned exam) in the gate log, and per promoted baseline's newest exam
    (0 when no decision was logged against it): the decisions and when. Most recently
    consulted first, the never-consulted last."""
    log = store.gate_log()
    found: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in log.iter_rows(named=True):
        key = (row["base_run_id"], row["exam_id"])
        entry = found.setdefault(key, {"corpus": row["corpus_hash"], "gates": 0, "stopped": 0,
                                       "sealed": 0, "first": row["decided_at"]})  # fmt: skip
        entry["gates"] += 1
        entry["stopped"] += row["status"] in _STOPPED
        entry["sealed"] += bool(row["sealed"])
        entry["last"] = row["decided_at"]
    for run_id, exam_id in _promoted(store):
        found.setdefault((run_id, exam_id), {"corpus": None, "gates": 0, "stopped": 0,
                                             "sealed": 0, "first": None, "last": None})  # fmt: skip
    manifests = _manifests(store, {run_id for run_id, _ in found})
    rows = []
    for (run_id, exam_id), v in found.items():
        corpus = (manifests.get(run_id) or {}).get("corpus") or {}
        rows.append(GateReuse(
            run_id, exam_id, v["corpus"] or corpus.get("hash"), corpus.get("n_cases"),
            v["gates"], v["stopped"], v["sealed"], v["first"], v["last"],
        ))  # fmt: skip
    return tuple(sorted(rows, key=lambda r: (r.last_at is not None, r.last_at), reverse=True))


def _manifests(store: Store, run_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The manifests of ``run_ids`` (the baselines counted), parsed."""
    runs = store.runs().filter(pl.col("run_id").is_in(sorted(run_ids))).select("run_id", "manifest")
    return {run_id: json.loads(m) if m else {} for run_id, m in runs.iter_rows()}


def _promoted(store: Store) -> list[tuple[str, str | None]]:
    """Each promoted baseline with its newest pinned exam (None: promoted without one)."""
    promoted = store.baselines()["run_id"].unique(maintain_order=True).to_list()
    if not promoted:
        return []
    exams: dict[str, str] = {}
    if store.has_table("exams"):
        newest = store.query(
            "SELECT run_id, arg_max(exam_id, promoted_at) AS exam_id FROM exams "
            "WHERE list_contains(?::VARCHAR[], run_id) GROUP BY run_id",
            [promoted],
        )
        exams = dict(newest.select(pl.col("run_id", "exam_id")).iter_rows())
    return [(run_id, exams.get(run_id)) for run_id in promoted]
