"""``evalkit runs merge``: a run's Parquet parts into the store, then the run's status and summary.

The store does the inserting (:func:`evalkit.store.merge.merge_parts`, under its writer lock);
this adds what the run layer knows: the summary a local run would have, read back from the
store, and the status: ``complete`` once every (case, replay) of the run's own cases and
replays is stored (rows of other keys never count), else ``incomplete`` (or ``running`` while a
driver still has chunks in flight).

A merge that added nothing (no new part, no new case) leaves the run as it was: its stored
status and summary stand and nothing is recomputed, so a re-merge with nothing new costs the
listing of the parts and a few small reads, however big the run. A driver's periodic merge
that did add parts grows the stored summary by the rows it wrote (:mod:`evalkit.run.merge_tally`)
when that summary counts exactly the rows the run had before it; otherwise (the run's first
merge, a driver resumed after a failure, rows a local run wrote) it summarizes the run from the
store once. It counts no case counts (a pass rate per case reads the whole run): the final
merge counts everything from the store.

A sharded run's cases come in shares (each shard writes the cases its units name, each part
checked to be one share its manifest recorded); once the run is complete, its stored cases are
checked to be exactly the manifest's corpus (ids and case hashes against the corpus hash),
before it is marked complete: a merge that finds otherwise refuses, and the run is not complete.

Examples:
    >>> with open_store("data/evalkit.duckdb", write=True) as store:     # doctest: +SKIP
    ...     merged = merge_run(store, PartsRoot("data/parts"), "nightly-42")
    >>> merged.result.complete                                            # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from evalkit.errors import StoreError
from evalkit.run.caveats import result_warnings
from evalkit.run.merge_tally import MergeTally
from evalkit.run.replicas import ReplicaCounts
from evalkit.run.summary import (
    ErrorCause,
    RunSummary,
    SessionCounts,
    summarize,
    with_case_counts,
)
from evalkit.store import Store
from evalkit.store.merge import MergeResult, merge_parts
from evalkit.store.part_checks import cases_problem
from evalkit.store.parts import PartsRoot
from evalkit.store.schema import initial_scoring_id


@dataclass(frozen=True)
class MergedRun:
    result: MergeResult
    summary: RunSummary


def merge_run(
    store: Store,
    root: PartsRoot,
    run_id: str,
    *,
    in_progress: bool = False,
    session: SessionCounts | None = None,
) -> MergedRun:
    """Merge ``run_id``'s parts and record its status and summary (``in_progress``: a driver's
    periodic merge while work is still running: the status stays ``running``, the summary
    grows by what the merge added and has no case counts: counting them reads the whole
    run)."""
    tally = MergeTally(initial_scoring_id(run_id)) if in_progress and session is None else None
    result = merge_parts(store, root, run_id, on_batch=tally.add if tally else None)
    if not result.changed and session is None:
        status = "running" if in_progress else ("complete" if result.complete else "incomplete")
        if store.run_status(run_id) == status and (kept := stored_summary(store, run_id)):
            return MergedRun(result, kept if in_progress else with_case_counts(store, kept))
    manifest = store.manifest(run_id)
    base = _running_summary(store, run_id, result) if tally is not None else None
    if tally is not None and base is not None:
        summary = tally.onto(base, expected_outputs=result.expected)
    else:
        if not in_progress and result.complete:
            pairs = _stored_pairs(store, run_id)
            problem = cases_problem(pairs, manifest.corpus, presorted=True)
            if problem:
                raise StoreError(
                    f"{root}: run {run_id}: {problem}; its shards' shares do not add up to it: "
                    "run its shards again into a new --run-id"
                )
        summary = summarize(
            store,
            run_id,
            result.label,
            result.config_hash,
            expected_outputs=result.expected,
            session=session or SessionCounts(),
        )
    before = tuple(  # what an earlier merge concluded is concluded again below
        w
        for w in manifest.warnings
        if not w.startswith("incomplete run:") and "came from the response cache" not in w
    )
    warnings = [
        *before,
        *(
            w
            for w in result_warnings(result.stored, summary.cached_outputs, result.expected)
            if w not in before
        ),
    ]
    summary = replace(summary, warnings=tuple(warnings), replays=manifest.replays)
    if not in_progress:
        store.set_warnings(run_id, warnings)
    # complete by the run's real (case, replay) keys, not by a count of rows (see MergeResult)
    status = "running" if in_progress else ("complete" if result.complete else "incomplete")
    store.finish_run(run_id, status, summary.to_dict())
    return MergedRun(result, summary if in_progress else with_case_counts(store, summary))


def _running_summary(store: Store, run_id: str, result: MergeResult) -> RunSummary | None:
    """The running run's stored summary when it counts exactly the rows the run had before
    this merge (its rows all came from merges: :attr:`MergeResult.rows_before`), so adding
    what the merge added makes it the run's; else None (the run is summarized from the
    store: a new run, a driver resumed after a failure, rows a local run wrote)."""
    if result.rows_before is None or store.run_status(run_id) != "running":
        return None
    stored = stored_summary(store, run_id)
    return stored if stored is not None and stored.outputs == result.rows_before else None


def _stored_pairs(store: Store, run_id: str) -> Iterator[tuple[str, str]]:
    """The run's stored (case id, case hash) pairs in ascending order, a record batch at a
    time (a million of them as Python dicts would not be bounded)."""
    sql = "SELECT case_id, case_hash FROM cases WHERE run_id = ? ORDER BY case_id, case_hash"
    for batch in store.record_batches(sql, [run_id]):
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)


def stored_summary(store: Store, run_id: str) -> RunSummary | None:
    """The summary the store holds for ``run_id``, or None when it holds none of this shape
    (a run stopped with an error records only why)."""
    rows = store.records("SELECT summary FROM runs WHERE run_id = ?", [run_id])
    text = rows[0]["summary"] if rows else None
    try:
        data: dict[str, Any] = json.loads(text) if text else {}
        names = {f.name for f in fields(RunSummary)}
        if not isinstance(data, dict) or not {"run_id", "outputs", "passed"} <= set(data):
            return None
        data = {k: v for k, v in data.items() if k in names}
        data["error_causes"] = tuple(ErrorCause(**c) for c in data.get("error_causes") or ())
        data["replicas"] = tuple(ReplicaCounts(**r) for r in data.get("replicas") or ())
        data["warnings"] = tuple(data.get("warnings") or ())
        data["case_counts"] = None  # counted again: a rescore may have changed them
        return RunSummary(**data)
    except (TypeError, ValueError):
        return None
