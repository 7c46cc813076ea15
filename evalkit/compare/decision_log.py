"""Logging each gate decision taken (`evalkit.store.gate_log`): what ``evalkit gate``,
``evalkit compare`` and ``evalkit.Project.gate`` / ``.compare`` call once they have decided, so
``evalkit history`` counts how often each baseline's exam has been consulted.

The decision is taken on a store opened for reading (a notebook never locks it); the row is
appended afterwards with the store opened for writing. Logging never changes a decision: when
the store cannot be written (another writer holds it past ``wait_s``, a read-only file system,
a pull-request job reading main's store) the decision stands and :func:`log_decision` returns
the one-line reason, which the caller shows as a note.

Examples:
    >>> note = log_decision("data/evalkit.duckdb", "gate", "base", "cand", decision.to_dict())
    ... # doctest: +SKIP
    >>> note is None                                                             # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalkit.compare.decision import STOPPING
from evalkit.errors import EvalkitError
from evalkit.store.gate_log import GateRecord

if TYPE_CHECKING:
    from evalkit.store import Store


def gate_record(
    store: Store, command: str, base_run_id: str, cand_run_id: str, decision: Mapping[str, Any]
) -> GateRecord:
    """The log's row for ``decision`` (`GateDecision.to_dict` form, as ``decision.json``
    holds it): the baseline's newest pinned exam and corpus hash, whether the candidate ran
    the sealed slice, the status and the counts."""
    base, cand = store.manifest(base_run_id), store.manifest(cand_run_id)
    exam = (
        store.records(
            "SELECT exam_id FROM exams WHERE run_id = ? ORDER BY promoted_at DESC LIMIT 1",
            [base_run_id],
        )
        if store.has_table("exams")
        else []
    )
    findings = decision.get("findings") or []
    return GateRecord(
        command=command,
        base_run_id=base_run_id,
        cand_run_id=cand_run_id,
        status=str(decision["status"]),
        exam_id=exam[0]["exam_id"] if exam else None,
        corpus_hash=(base.get("corpus") or {}).get("hash"),
        sealed=bool((cand.get("selection") or {}).get("sealed")),
        n_paired=int(decision.get("n_paired") or 0),
        n_verified=int(decision.get("n_verified") or 0),
        n_findings=len(findings),
        n_stopping=sum(f.get("severity") in STOPPING for f in findings),
    )


def log_decision(
    db: str,
    command: str,
    base_run_id: str,
    cand_run_id: str,
    decision: Mapping[str, Any],
    *,
    wait_s: float = 10.0,
) -> str | None:
    """Append ``decision`` to the gate log of the store at ``db``; None when logged, else why
    it was not (the decision stands either way)."""
    from evalkit.store import open_store

    try:
        with open_store(db, write=True, wait_s=wait_s) as store:
            store.log_gate(gate_record(store, command, base_run_id, cand_run_id, decision))
    except EvalkitError as exc:
        return f"the gate decision was not logged for `evalkit history`: {exc}"
    return None
