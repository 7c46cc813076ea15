"""``evalkit merge``: a run's Parquet parts into the store, then the run's status and summary.

The store does the inserting (:func:`evalkit.store.merge.merge_parts`, under its writer lock);
this adds what the run layer knows: the summary a local run would have, read back from the
store, and the status: ``complete`` once every (case, replay) of the run's own cases and
replays is stored (rows of other keys never count), else ``incomplete`` (or ``running`` while a
driver still has chunks in flight).

Examples:
    >>> with open_store("data/evalkit.duckdb") as store:                 # doctest: +SKIP
    ...     merged = merge_run(store, PartsRoot("data/parts"), "nightly-42")
    >>> merged.result.complete                                            # doctest: +SKIP
    True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from evalkit.run.caveats import result_warnings
from evalkit.run.summary import RunSummary, SessionCounts, summarize
from evalkit.store import Store
from evalkit.store.merge import MergeResult, merge_parts
from evalkit.store.parts import PartsRoot


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
    periodic merge while work is still running: the status stays ``running``)."""
    result = merge_parts(store, root, run_id)
    manifest = store.manifest(run_id)
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
        for w in manifest.get("warnings") or ()
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
    summary = replace(summary, warnings=tuple(warnings))
    if not in_progress:
        store.set_warnings(run_id, warnings)
    # complete by the run's real (case, replay) keys, not by a count of rows (see MergeResult)
    status = "running" if in_progress else ("complete" if result.complete else "incomplete")
    store.finish_run(run_id, status, summary.to_dict())
    return MergedRun(result, summary)
